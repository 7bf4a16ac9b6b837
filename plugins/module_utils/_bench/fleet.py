# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The fleet views of a bench through a router: per concurrency level, each worker's row, the
fleet total merged from the workers' raw per-request records, and the row of each router.

Why from records: percentiles cannot be averaged and rates of sweeps that did not run at the
same time cannot be added blindly. Every row here (a worker's, the merge, a router's) is
computed from the sweeps' ``records`` by the same rule, so the three views are comparable and
the merge is reproducible from the report's JSON files:

- output tok/s = tokens of the completed requests (ok or short, as the sweep counts them) / the
  window (first send to last finish); req/s = ok requests / the window;
- TTFT and e2e percentiles over all ok requests (the sweep's own rank rule, ``_sweep.percentile``);
  ITL mean = the per-request ITL means weighted by their token gaps.

Putting several workers' records on one time line (``align``):
- ``clock``: the workers' level windows overlapped on the wall clock (sweeps run at the same
  time: other hosts, or parallel instances), using each sweep's ``records_t0_unix``; the union
  window is what the fleet delivered;
- ``aligned``: they did not (instances of a host swept one after another): each worker's level
  is shifted to start at 0, i.e. the fleet as if every worker ran that level at the same time.
  Sound for workers that share no GPU; an estimate, said so in the report.

Used by ``_report`` on the controller; no Ansible import.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench.stats import percentile

ROUTER_ROLE = "router"
CLOCK = "clock"
ALIGNED = "aligned"
COMPLETED_KINDS = (None, "short")

# fleet.csv columns, in order (also the keys of a row)
ROW_FIELDS: tuple[str, ...] = (
    "concurrency", "view", "label", "in_flight", "sources", "alignment", "requests", "ok", "err",
    "output_tokens", "window_s", "output_tok_s", "req_s", "ttft_p50_ms", "ttft_p99_ms",
    "itl_mean_ms", "e2e_p50_s", "e2e_p99_s", "time_base", "records_missing", "not_measurable",
)
# row statistic -> (point quantity, statistic) of the sweep's latency_unmeasurable
_LATENCY_STATS: dict[str, tuple[str, str]] = {
    "ttft_p50_ms": ("ttft_ms", "p50"),
    "ttft_p99_ms": ("ttft_ms", "p99"),
    "itl_mean_ms": ("itl_ms", "mean"),
    "e2e_p50_s": ("e2e_s", "p50"),
    "e2e_p99_s": ("e2e_s", "p99"),
}


def is_router(item: dict[str, Any]) -> bool:
    return (item.get("meta") or {}).get("role") == ROUTER_ROLE


def has_router(items: Sequence[dict[str, Any]]) -> bool:
    return any(is_router(i) for i in items)


def router_meta(host: str, url: str, workers: Sequence[dict[str, Any]],
                down: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """A router sweep's report meta. Profile and release are the workers' when they agree (a
    router has none of its own; a different one would start a profile comparison).
    ``workers_down``: the workers that were down when the bench began (server_status with
    probe: host, name, url, health, process), not swept, reported as down beside the others."""
    def agreed(key: str) -> Any:
        values = {str((w.get("meta") or {}).get(key)) for w in workers if (w.get("meta") or {}).get(key)}
        return values.pop() if len(values) == 1 else None

    gone = [{"host": d.get("host"), "instance": d.get("name") or d.get("instance"), "url": d.get("url"),
             "health": d.get("health"), "process": d.get("process")} for d in down]
    return {"host": host, "instance": ROUTER_ROLE, "role": ROUTER_ROLE, "profile": agreed("profile"),
            "release": agreed("release"), "engine": "sglang-router", "gpus": [], "url": url, "workers_down": gone}


def workers_down(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The workers the routers' metas list as down, once each (host/instance)."""
    seen: dict[tuple[Any, Any], dict[str, Any]] = {}
    for item in items:
        for gone in (item.get("meta") or {}).get("workers_down") or [] if is_router(item) else []:
            seen.setdefault((gone.get("host"), gone.get("instance")), dict(gone))
    return list(seen.values())


def down_reason(gone: dict[str, Any]) -> str:
    """Why a worker counts as down, from its probe: /health's answer and its process."""
    health = gone.get("health")
    return (f"/health {'no answer' if not health else health}, process {gone.get('process') or 'unknown'}")


def point_at(sweep: dict[str, Any], concurrency: Any) -> dict[str, Any] | None:
    for point in sweep.get("points") or []:
        if point.get("concurrency") == concurrency:
            return point
    return None


def level_records(sweep: dict[str, Any], concurrency: Any) -> list[dict[str, Any]]:
    """The sweep's measured requests at one level (warm-ups are never in ``records``)."""
    return [r for r in sweep.get("records") or [] if r.get("concurrency") == concurrency]


def counted_tokens(record: dict[str, Any]) -> int:
    """Tokens a request adds to its level's output, as the sweep counts them
    (``Trace.counted_tokens``): a completed (ok or short) request's tokens, 0 for a failed one."""
    tokens = record.get("output_tokens")
    if record.get("error_kind") in COMPLETED_KINDS and isinstance(tokens, (int, float)):
        return int(tokens)
    return 0


def _scale(sweep: dict[str, Any]) -> float:
    """Wall seconds per record second: the time scale for a sweep in modelled time, else 1."""
    scale = (sweep.get("server") or {}).get("time_scale")
    if sweep.get("time_base") == "model" and isinstance(scale, (int, float)) and scale > 0:
        return float(scale)
    return 1.0


def _span(records: Sequence[dict[str, Any]]) -> tuple[float, float]:
    return min(float(r["start_s"]) for r in records), max(float(r["end_s"]) for r in records)


def align(parts: Sequence[tuple[dict[str, Any], list[dict[str, Any]]]]) -> tuple[list[tuple[float, float]], str]:
    """(sweep, its level's records) per worker -> (each worker's level window on one time line,
    ``clock`` or ``aligned``); see the module docstring."""
    spans = [_span(records) for _, records in parts]
    scales = {_scale(sweep) for sweep, _ in parts}
    raw = [sweep.get("records_t0_unix") for sweep, _ in parts]
    origins = [float(o) for o in raw if finite(o)]
    if len(parts) > 1 and len(scales) == 1 and len(origins) == len(parts):
        scale = scales.pop()
        # the origins are wall seconds; the records are in the sweep's time base
        shifts = [(o - min(origins)) / scale for o in origins]
        on_clock = [(s + d, e + d) for (s, e), d in zip(spans, shifts, strict=True)]
        if max(s for s, _ in on_clock) < min(e for _, e in on_clock):
            return on_clock, CLOCK
    return [(0.0, e - s) for s, e in spans], ALIGNED


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _itl_mean(ok: Sequence[dict[str, Any]]) -> float | None:
    """Token-level ITL mean from per-request means, each weighted by its token gaps."""
    total = weight = 0.0
    for rec in ok:
        mean, tokens = rec.get("itl_ms_mean"), rec.get("output_tokens")
        if isinstance(mean, (int, float)) and isinstance(tokens, (int, float)) and tokens > 1:
            total += float(mean) * (tokens - 1)
            weight += tokens - 1
    return total / weight if weight else None


def stats(records: Sequence[dict[str, Any]], window: tuple[float, float] | None) -> dict[str, Any]:
    """The row's numbers from records and their window (first send to last finish)."""
    ok = [r for r in records if r.get("ok")]
    tokens = sum(counted_tokens(r) for r in records)
    width = max(window[1] - window[0], 0.0) if window else 0.0
    ttft = [float(r["ttft_ms"]) for r in ok if isinstance(r.get("ttft_ms"), (int, float))]
    e2e = [float(r["e2e_s"]) for r in ok if isinstance(r.get("e2e_s"), (int, float))]
    return {
        "requests": len(records),
        "ok": len(ok),
        "err": len(records) - len(ok),
        "output_tokens": tokens,
        "window_s": round(width, 4),
        "output_tok_s": round(tokens / width, 3) if width > 0 else None,
        "req_s": round(len(ok) / width, 4) if width > 0 else None,
        "ttft_p50_ms": _round(percentile(ttft, 50), 3),
        "ttft_p99_ms": _round(percentile(ttft, 99), 3),
        "itl_mean_ms": _round(_itl_mean(ok), 4),
        "e2e_p50_s": _round(percentile(e2e, 50), 4),
        "e2e_p99_s": _round(percentile(e2e, 99), 4),
    }


def _not_measurable(points: Sequence[dict[str, Any] | None]) -> list[str]:
    """Row statistics that one of the contributing points marked not measurable (the
    time-scaled engine): printed n/m, never as a number."""
    marked = []
    for name, (quantity, stat) in _LATENCY_STATS.items():
        for point in points:
            bad = (point or {}).get("latency_unmeasurable") or {}
            if stat in (bad.get(quantity) or []):
                marked.append(name)
                break
    return marked


def _row(concurrency: Any, view: str, label: str, in_flight: Any, sweeps: Sequence[dict[str, Any]],
         numbers: dict[str, Any] | None, alignment: str | None) -> dict[str, Any]:
    bases = sorted({str(s.get("time_base") or "wall") for s in sweeps})
    row: dict[str, Any] = {key: None for key in ROW_FIELDS}
    row.update(numbers or {})
    row.update({
        "concurrency": concurrency, "view": view, "label": label, "in_flight": in_flight,
        "sources": len(sweeps), "alignment": alignment, "time_base": "+".join(bases),
        "records_missing": numbers is None,
        "not_measurable": _not_measurable([point_at(s, concurrency) for s in sweeps]),
    })
    return row


def single_row(item: dict[str, Any], concurrency: Any, view: str, label: str) -> dict[str, Any]:
    """One sweep's level, from its own records."""
    sweep = item["sweep"]
    records = level_records(sweep, concurrency)
    numbers = stats(records, _span(records)) if records else None
    return _row(concurrency, view, label, concurrency, [sweep], numbers, None)


def merged_row(items: Sequence[dict[str, Any]], concurrency: Any, down: Sequence[str] = ()) -> dict[str, Any]:
    """The fleet total at one level: every worker's records at it, on one time line (``down``:
    the workers that were down, named in the label; the total is the ones that were up)."""
    sweeps = [i["sweep"] for i in items]
    parts = [(s, level_records(s, concurrency)) for s in sweeps]
    in_flight = sum(int(concurrency) for _ in items)
    label = f"fleet total ({len(items)} worker{'s' if len(items) != 1 else ''}, merged)"
    if down:
        label = (f"fleet total ({len(items)} of {len(items) + len(down)} workers, merged; "
                 f"down: {', '.join(down)})")
    if not parts or any(not records for _, records in parts):
        return _row(concurrency, "fleet", label, in_flight, sweeps, None, None)
    windows, alignment = align(parts)
    shifted: list[dict[str, Any]] = []
    for (_, records), (start, _end) in zip(parts, windows, strict=True):
        offset = start - _span(records)[0]
        shifted.extend(dict(r, start_s=float(r["start_s"]) + offset, end_s=float(r["end_s"]) + offset)
                       for r in records)
    window = (min(s for s, _ in windows), max(e for _, e in windows))
    return _row(concurrency, "fleet", label, in_flight, sweeps, stats(shifted, window), alignment)


def down_row(gone: dict[str, Any], concurrency: Any, sweeps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A worker that was down at the bench's start: no numbers, the reason in its label (view
    ``down``); the time base is the swept workers', so that it never reads as a different one."""
    label = f"{gone.get('host') or '?'}/{gone.get('instance') or '?'} DOWN, not swept ({down_reason(gone)})"
    row = _row(concurrency, "down", label, 0, sweeps, {}, None)
    row.update(sources=0, records_missing=False, not_measurable=[])
    return row


def _levels(items: Sequence[dict[str, Any]]) -> list[Any]:
    found = {p.get("concurrency") for i in items for p in i["sweep"].get("points") or []}
    return sorted((c for c in found if isinstance(c, (int, float)) and not isinstance(c, bool)), key=float)


def side_by_side(items: Sequence[dict[str, Any]], label_of: Any = None) -> list[dict[str, Any]]:
    """Rows per level: each worker that swept it, the fleet total (when every worker did), each
    router that swept it. ``items`` are the report's {meta, sweep}; a router's meta has
    ``role: router``. ``label_of(meta)`` names a row (default host/instance)."""
    name = label_of or (lambda meta: f"{meta.get('host') or '?'}/{meta.get('instance') or '?'}")
    workers = [i for i in items if not is_router(i)]
    routers = [i for i in items if is_router(i)]
    down = workers_down(items)
    down_names = [f"{d.get('host') or '?'}/{d.get('instance') or '?'}" for d in down]
    rows: list[dict[str, Any]] = []
    for level in _levels(items):
        swept = [w for w in workers if point_at(w["sweep"], level) is not None]
        rows.extend(single_row(w, level, "worker", name(w["meta"])) for w in swept)
        rows.extend(down_row(d, level, [w["sweep"] for w in workers]) for d in down)
        if swept and len(swept) == len(workers):
            rows.append(merged_row(workers, level, down_names))
        rows.extend(single_row(r, level, "router", name(r["meta"])) for r in routers
                    if point_at(r["sweep"], level) is not None)
    return rows


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
