# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Benchmark report writer, run on the controller.

Input: one item per server instance, ``{"meta": {...}, "sweep": <sglang_sweep fact>}`` where
``meta`` comes from the deployment manifest (host, instance, profile, release, engine, gpus,
url) and ``sweep`` is the ``ansible_facts.sglang_sweep`` that ``throughput_sweep`` returned
(schema_version 1). Output, in one folder (``reports/<UTC timestamp>/``):

- ``<host>_<instance>_<profile>.json``: the full sweep (raw records included) plus meta;
- ``summary.csv``: one row per instance x concurrency level, scalar fields flattened;
- ``summary.md``: per instance the seed-style table, peak/knee line, profile comparison;
- ``throughput.png``, ``latency.png`` and, with several profiles, ``profiles.png``;
- with a router's sweep among the items (``meta.role: router``): ``fleet.csv`` and
  ``fleet.json``, the side-by-side rows of ``_fleet`` (per worker, fleet total merged from the
  raw records, through the router), also a section of ``summary.md``;

and a relative ``latest`` symlink beside the folder. Every field of the sweep is optional
here: a missing value is shown as ``-`` and never stops the report.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils import _fleet

MISSING = "-"
NOT_MEASURABLE = "n/m"
DRIFT_MARK = "~"
ERROR_MARK = "!"
LATEST_NAME = "latest"
ERROR_KINDS = ("http", "stream", "timeout", "connection", "short")

# summary.csv columns: (column name, path into the point, or a meta key prefixed with "meta.").
CSV_COLUMNS: tuple[tuple[str, str], ...] = (
    ("host", "meta.host"),
    ("instance", "meta.instance"),
    ("profile", "meta.profile"),
    ("release", "meta.release"),
    ("engine", "meta.engine"),
    ("gpus", "meta.gpus"),
    ("concurrency", "concurrency"),
    ("requests", "requests"),
    ("ok", "ok"),
    ("err", "errors.total"),
    ("err_http", "errors.http"),
    ("err_stream", "errors.stream"),
    ("err_timeout", "errors.timeout"),
    ("err_connection", "errors.connection"),
    ("err_short", "errors.short"),
    ("error_rate", "error_rate"),
    ("status", "status"),
    ("output_tokens", "output_tokens"),
    ("output_tok_s", "output_tok_s"),
    ("steady_output_tok_s", "steady_output_tok_s"),
    ("avg_out", "avg_output_tokens"),
    ("wall_s", "duration_s"),
    ("req_s", "req_s"),
    ("ttft_mean_ms", "ttft_ms.mean"),
    ("ttft_p50_ms", "ttft_ms.p50"),
    ("ttft_p90_ms", "ttft_ms.p90"),
    ("ttft_p99_ms", "ttft_ms.p99"),
    ("itl_mean_ms", "itl_ms.mean"),
    ("itl_p50_ms", "itl_ms.p50"),
    ("itl_p90_ms", "itl_ms.p90"),
    ("itl_p99_ms", "itl_ms.p99"),
    ("tpot_mean_ms", "tpot_ms.mean"),
    ("tpot_p50_ms", "tpot_ms.p50"),
    ("tpot_p90_ms", "tpot_ms.p90"),
    ("tpot_p99_ms", "tpot_ms.p99"),
    ("e2e_mean_s", "e2e_s.mean"),
    ("e2e_p50_s", "e2e_s.p50"),
    ("e2e_p90_s", "e2e_s.p90"),
    ("e2e_p99_s", "e2e_s.p99"),
    ("achieved_concurrency", "achieved_concurrency"),
    ("client_limited", "client_limited"),
    ("client_loop_lag_ms_p99", "client.loop_lag_ms_p99"),
    ("client_cpu_util", "client.cpu_util"),
    ("latency_measurable", "latency_measurable"),
    ("server_requests", "server.requests"),
    ("server_ttft_mean_ms", "server.ttft_ms_mean"),
    ("server_itl_mean_ms", "server.itl_ms_mean"),
    ("server_e2e_mean_s", "server.e2e_s_mean"),
    ("server_running_mean", "server_metrics.running_mean"),
    ("server_running_max", "server_metrics.running_max"),
    ("server_queued_mean", "server_metrics.queued_mean"),
    ("server_queued_max", "server_metrics.queued_max"),
    ("server_token_usage_max", "server_metrics.token_usage_max"),
    ("server_spec_accept_length", "server_metrics.spec_accept_length"),
    ("server_spec_accept_rate", "server_metrics.spec_accept_rate"),
    ("server_cache_hit_rate", "server_metrics.cache_hit_rate"),
    ("server_cache_hit_rate_device", "server_metrics.cache_hit_rate_device"),
    ("server_cache_hit_rate_host", "server_metrics.cache_hit_rate_host"),
    ("server_retracted_max", "server_metrics.retracted_max"),
    ("drift_first_half_tok_s", "drift.first_half_tok_s"),
    ("drift_second_half_tok_s", "drift.second_half_tok_s"),
    ("drift_ratio", "drift.ratio"),
    ("drift_flagged", "drift.flagged"),
    ("warmup_requests", "level_warmup.requests"),
    ("warmup_errors", "level_warmup.errors.total"),
    ("warmup_s", "level_warmup.seconds"),
    ("is_peak", "@peak"),
    ("is_knee", "@knee"),
)
CSV_HEADER: tuple[str, ...] = tuple(name for name, _ in CSV_COLUMNS)

# summary.md per-instance table: the seed's seven columns, then latency.
TABLE_HEADER: tuple[str, ...] = (
    "C", "n", "ok", "err", "output tok/s", "avg_out", "wall s",
    "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms",
)


FLEET_FILES = ("fleet.csv", "fleet.json")
# summary.md fleet table: (header, row key, decimals; None = a count)
FLEET_COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("in flight", "in_flight", None),
    ("n", "requests", None),
    ("ok", "ok", None),
    ("err", "err", None),
    ("output tok/s", "output_tok_s", 1),
    ("req/s", "req_s", 2),
    ("window s", "window_s", 1),
    ("TTFT p50 ms", "ttft_p50_ms", 1),
    ("TTFT p99 ms", "ttft_p99_ms", 1),
    ("ITL mean ms", "itl_mean_ms", 2),
    ("e2e p50 s", "e2e_p50_s", 2),
    ("e2e p99 s", "e2e_p99_s", 2),
)


# --------------------------------------------------------------------------- small helpers
def _dig(data: Any, path: str) -> Any:
    """``data['a']['b']`` for path ``a.b``; None where any step is missing."""
    cur = data
    for key in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur


def _num(value: Any) -> float | None:
    """A finite float, or None (bools, strings and NaN are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _fmt(value: Any, decimals: int = 1) -> str:
    number = _num(value)
    if number is None:
        return MISSING
    return f"{number:.{decimals}f}"


def _fmt_count(value: Any) -> str:
    """Integers as integers; a non-integral value (an average) with one decimal."""
    number = _num(value)
    if number is None:
        return MISSING
    if number == int(number):
        return str(int(number))
    return f"{number:.1f}"


def _unmeasurable(point: dict[str, Any], path: str) -> bool:
    """Whether the statistic at ``path`` (e.g. ``itl_ms.p50``) was marked not measurable by the
    sweep (``latency_unmeasurable``: a time-scaled run where the client could not time it)."""
    key, _, stat = path.partition(".")
    marks = point.get("latency_unmeasurable")
    return isinstance(marks, dict) and isinstance(marks.get(key), list) and stat in marks[key]


def _latency(point: dict[str, Any], path: str, decimals: int = 1) -> str:
    """A latency cell: ``n/m`` where the sweep found the value not measurable."""
    return NOT_MEASURABLE if _unmeasurable(point, path) else _fmt(_dig(point, path), decimals)


def _failed(point: dict[str, Any]) -> bool:
    """The sweep marked the level as having failed requests (``status`` errors or
    no_requests_ok). Points of sweeps made before ``status`` existed are not marked."""
    status = point.get("status")
    return isinstance(status, str) and status != "ok"


def error_text(point: dict[str, Any]) -> str:
    """``C=4 (8 of 8 failed: 100%, connection 8)`` for one level."""
    errors = point.get("errors") if isinstance(point.get("errors"), dict) else {}
    parts = [f"{_fmt_count(_err_total(point))} of {_fmt_count(point.get('requests'))} failed"]
    rate = _num(point.get("error_rate"))
    details = ([f"{rate * 100:.0f}%"] if rate is not None else []) + [
        f"{kind} {_fmt_count(errors.get(kind))}" for kind in ERROR_KINDS if (_num(errors.get(kind)) or 0) > 0]
    text = parts[0] + (": " + ", ".join(details) if details else "")
    return f"C={_fmt_count(point.get('concurrency'))} ({text})"


def failed_levels(items: Sequence[dict[str, Any]]) -> list[str]:
    """One line per instance whose sweep had levels with failed requests:
    ``host/instance (profile): C=4 (8 of 8 failed: 100%, connection 8), C=8 (...)``."""
    lines = []
    for item in items:
        bad = [p for p in _points(item["sweep"]) if _failed(p)]
        if bad:
            lines.append(f"{_label(item['meta'])}: " + ", ".join(error_text(p) for p in bad))
    return lines


def _drift_flagged(point: dict[str, Any]) -> bool:
    """The sweep flagged the level's throughput as drifting. A level with failed requests is not
    marked: its failures explain the drift, and it is already left out of peak and knee."""
    drift = point.get("drift")
    return isinstance(drift, dict) and drift.get("flagged") is True and not _failed(point)


def _err_total(point: dict[str, Any]) -> float | None:
    """errors.total; else the sum of the kinds; else requests - ok."""
    errors = point.get("errors")
    if isinstance(errors, dict):
        total = _num(errors.get("total"))
        if total is not None:
            return total
        kinds = [_num(errors.get(kind)) for kind in ERROR_KINDS]
        if any(k is not None for k in kinds):
            return sum(k for k in kinds if k is not None)
    requests, ok = _num(point.get("requests")), _num(point.get("ok"))
    if requests is not None and ok is not None:
        return max(requests - ok, 0.0)
    return None


def _points(sweep: dict[str, Any]) -> list[dict[str, Any]]:
    """The sweep's points that carry a concurrency, sorted by it."""
    points = [p for p in sweep.get("points") or [] if isinstance(p, dict)]
    with_c = [p for p in points if _num(p.get("concurrency")) is not None]
    return sorted(with_c, key=lambda p: float(p["concurrency"]))


def peak_of(sweep: dict[str, Any]) -> dict[str, Any] | None:
    """The sweep's peak {concurrency, output_tok_s}; computed from the points (levels without
    failed requests) when the sweep has no ``peak`` field. A sweep whose peak is null (no level
    ran without errors) has none."""
    peak = sweep.get("peak")
    if isinstance(peak, dict) and _num(peak.get("output_tok_s")) is not None:
        return peak
    if "peak" in sweep and any(_failed(p) for p in _points(sweep)):
        return None  # the sweep found none: every level that had throughput had failed requests
    best: dict[str, Any] | None = None
    for point in _points(sweep):
        if _failed(point):
            continue
        tok_s = _num(point.get("output_tok_s"))
        if tok_s is not None and (best is None or tok_s > best["output_tok_s"]):
            best = {"concurrency": point["concurrency"], "output_tok_s": tok_s}
    return best


def knee_of(sweep: dict[str, Any]) -> dict[str, Any] | None:
    """The sweep's knee, or None when the sweep found none (never guessed here)."""
    knee = sweep.get("knee")
    if isinstance(knee, dict) and _num(knee.get("concurrency")) is not None:
        return knee
    return None


def _same_c(a: Any, b: Any) -> bool:
    x, y = _num(a), _num(b)
    return x is not None and y is not None and x == y


def _safe(part: Any) -> str:
    text = str(part) if part not in (None, "") else "unknown"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "unknown"


def _label(meta: dict[str, Any]) -> str:
    host = meta.get("host") or "?"
    instance = meta.get("instance") or "?"
    profile = meta.get("profile") or "?"
    return f"{host}/{instance} ({profile})"


def normalize(results: Iterable[Any]) -> list[dict[str, Any]]:
    """Each item as {"meta": dict, "sweep": dict}.

    A bare sweep (an item with ``points`` and no ``sweep`` key) is accepted too; its meta is
    then only its url. Items that are neither are rejected with ValueError.
    """
    items: list[dict[str, Any]] = []
    for index, item in enumerate(results):
        if not isinstance(item, dict):
            raise ValueError(f"results[{index}] is a {type(item).__name__}, expected a dict")
        if isinstance(item.get("sweep"), dict):
            meta = item.get("meta") if isinstance(item.get("meta"), dict) else {}
            sweep = item["sweep"]
        elif "points" in item:
            meta, sweep = {}, item
        else:
            raise ValueError(
                f"results[{index}] has no 'sweep' (expected {{meta: ..., sweep: <sglang_sweep>}})"
            )
        meta = dict(meta)
        if not meta.get("url") and sweep.get("url"):
            meta["url"] = sweep["url"]
        items.append({"meta": meta, "sweep": sweep})
    return items


def profiles_in_order(items: Sequence[dict[str, Any]]) -> list[str]:
    """Distinct profiles in the order they first appear (the first is the baseline)."""
    seen: list[str] = []
    for item in items:
        profile = str(item["meta"].get("profile") or "unknown")
        if profile not in seen:
            seen.append(profile)
    return seen


# --------------------------------------------------------------------------- markdown
def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_table(sweep: dict[str, Any]) -> str:
    """The seed-style Markdown table for one sweep (no trailing newline).

    Columns: C, n, ok, err, output tok/s, avg_out, wall s (as in the seed), then TTFT p50/p99
    and ITL p50/p99 in ms. A level with failed requests has its C marked with ``!``, a
    client-limited level with ``*``, a level whose throughput drifted within its window with ``~``. A latency the sweep found not measurable
    (time-scaled engine, client disagreeing with the model) reads ``n/m``.
    """
    lines = [_row(TABLE_HEADER), _row(["---"] * len(TABLE_HEADER))]
    for point in _points(sweep):
        c_cell = _fmt_count(point.get("concurrency"))
        if _failed(point):
            c_cell += ERROR_MARK
        if point.get("client_limited") is True:
            c_cell += "*"
        if _drift_flagged(point):
            c_cell += DRIFT_MARK
        lines.append(_row([
            c_cell,
            _fmt_count(point.get("requests")),
            _fmt_count(point.get("ok")),
            _fmt_count(_err_total(point)),
            _fmt(point.get("output_tok_s")),
            _fmt_count(point.get("avg_output_tokens")),
            _fmt(point.get("duration_s")),
            _latency(point, "ttft_ms.p50"),
            _latency(point, "ttft_ms.p99"),
            _latency(point, "itl_ms.p50", 2),
            _latency(point, "itl_ms.p99", 2),
        ]))
    return "\n".join(lines)


def _range_text(bounds: Any, decimals: int) -> str:
    """A server-side percentile range [lo, hi] as ``lo-hi`` (``>lo`` for the +Inf bucket)."""
    if not isinstance(bounds, list | tuple) or len(bounds) != 2 or _num(bounds[0]) is None:
        return MISSING
    if _num(bounds[1]) is None:
        return f">{_fmt(bounds[0], decimals)}"
    return f"{_fmt(bounds[0], decimals)}-{_fmt(bounds[1], decimals)}"


SERVER_TABLE_HEADER: tuple[str, ...] = (
    "C", "requests", "TTFT mean ms", "TTFT p50 ms", "ITL mean ms", "ITL p50 ms", "e2e mean s",
)


def render_server_table(sweep: dict[str, Any]) -> str | None:
    """The server's own latency per level (from its /metrics histograms), or None when no level
    has it. Means from the histograms' sums and counts; p50 as the bucket range it lies in."""
    points = [p for p in _points(sweep) if isinstance(p.get("server"), dict)]
    if not points:
        return None
    lines = [_row(SERVER_TABLE_HEADER), _row(["---"] * len(SERVER_TABLE_HEADER))]
    for point in points:
        server = point["server"]
        lines.append(_row([
            _fmt_count(point.get("concurrency")),
            _fmt_count(server.get("requests")),
            _fmt(server.get("ttft_ms_mean")),
            _range_text(_dig(server, "ttft_ms_range.p50"), 0),
            _fmt(server.get("itl_ms_mean"), 2),
            _range_text(_dig(server, "itl_ms_range.p50"), 0),
            _fmt(server.get("e2e_s_mean"), 2),
        ]))
    return "\n".join(lines)


SERVER_METRICS_HEADER: tuple[str, ...] = (
    "C", "output tok/s", "running mean/max", "queued mean/max", "token usage max", "accept length",
    "accept rate", "cache hit (device/host)", "retracted max",
)


def _pair(metrics: dict[str, Any], first: str, second: str, decimals: int = 1) -> str:
    a, b = metrics.get(first), metrics.get(second)
    return "-" if a is None and b is None else f"{_fmt(a, decimals)} / {_fmt(b, 0 if second.endswith('max') else decimals)}"


def render_server_metrics_table(sweep: dict[str, Any]) -> tuple[str, list[str]] | None:
    """"Server during each level": what the server's /metrics said beside the client's tok/s
    (running and queued requests sampled while the level ran, KV usage, accept length, cache
    hits, retractions), and one line per field the release did not report. None when no level
    has it."""
    points = [p for p in _points(sweep) if isinstance(p.get("server_metrics"), dict)]
    if not points:
        return None
    lines = [_row(SERVER_METRICS_HEADER), _row(["---"] * len(SERVER_METRICS_HEADER))]
    reasons: dict[str, set[str]] = {}
    for point in points:
        m = point["server_metrics"]
        for key, why in (m.get("notes") or {}).items():
            reasons.setdefault(why, set()).add(key)
        lines.append(_row([
            _fmt_count(point.get("concurrency")) + (f" {ERROR_MARK}" if _failed(point) else ""),
            _fmt(point.get("output_tok_s")),
            _pair(m, "running_mean", "running_max"),
            _pair(m, "queued_mean", "queued_max"),
            _fmt(m.get("token_usage_max"), 3),
            _fmt(m.get("spec_accept_length"), 2),
            _fmt(m.get("spec_accept_rate"), 2),
            _pair(m, "cache_hit_rate_device", "cache_hit_rate_host", 2).replace(" / ", "/")
            if m.get("cache_hit_rate_device") is not None or m.get("cache_hit_rate_host") is not None
            else _fmt(m.get("cache_hit_rate"), 2),
            _fmt_count(m.get("retracted_max")),
        ]))
    notes = [f"{', '.join(sorted(keys))}: {why}." for why, keys in sorted(reasons.items())]
    return "\n".join(lines), notes


def render_notes(sweep: dict[str, Any]) -> list[str]:
    """Lines under the findings: failed requests, level warm-up, drift, and what ``n/m``
    stands for."""
    points = _points(sweep)
    notes: list[str] = []
    failed = [p for p in points if _failed(p)]
    if failed:
        first = next((m[0] for p in failed for m in [p.get("error_messages")] if isinstance(m, list) and m), None)
        notes.append(
            f"Requests failed (marked {ERROR_MARK}): "
            + "; ".join(error_text(p) for p in failed)
            + ". Their throughput and latencies mix the server's work with failures (a server that died, "
            "restarted or refused requests): they are left out of peak, knee and plateau."
            + (f" First error: {first}" if first else "")
        )
    warmed = [p["level_warmup"] for p in points if isinstance(p.get("level_warmup"), dict)]
    if warmed:
        failed = [
            f"C={_fmt_count(p.get('concurrency'))} ({_fmt_count(_dig(p, 'level_warmup.errors.total'))} of "
            f"{_fmt_count(_dig(p, 'level_warmup.requests'))})"
            for p in points if (_num(_dig(p, "level_warmup.errors.total")) or 0) > 0
        ]
        tokens = _fmt_count(warmed[0].get("max_tokens"))
        notes.append(
            f"Each level was warmed by max(C, prompts) requests of {tokens}+ tokens (staggered) at its "
            "concurrency (not measured); "
            + ("warm-up errors: " + ", ".join(failed) + "." if failed else "no warm-up errors.")
        )
    drifted = [p for p in points if _drift_flagged(p)]
    short = [p for p in points if isinstance(p.get("drift"), dict) and p["drift"].get("checked") is False]
    if drifted or short:
        parts = []
        if drifted:
            parts.append(
                f"throughput drifted within the level (marked {DRIFT_MARK}: second half of its window vs the "
                "first beyond "
                + f"{(_num(drifted[0]['drift'].get('threshold')) or 0.15) * 100:.0f}%): "
                + ", ".join(f"C={_fmt_count(p.get('concurrency'))} (x{_fmt(p['drift'].get('ratio'), 2)})" for p in drifted)
            )
        if short:
            parts.append("too short to check for drift: C=" + ", ".join(_fmt_count(p.get("concurrency")) for p in short))
        text = "; ".join(parts)
        notes.append(text[0].upper() + text[1:] + ".")
    elif any(isinstance(p.get("drift"), dict) for p in points):
        notes.append("No drift within levels.")
    marked = [p for p in points if isinstance(p.get("latency_unmeasurable"), dict) and p["latency_unmeasurable"]]
    if marked:
        scale = _dig(sweep, "server.time_scale")
        at = f" at time scale {_fmt_count(scale) if _num(scale) is None else f'{float(scale):g}'}" if scale else ""
        tolerance = _num(_dig(marked[0], "latency_check.tolerance")) or 0.25
        levels = "; ".join(
            f"C={_fmt_count(p.get('concurrency'))} "
            + ", ".join(f"{k.split('_')[0].upper() if k != 'e2e_s' else 'e2e'} {'/'.join(v)}"
                        for k, v in p["latency_unmeasurable"].items())
            for p in marked
        )
        notes.append(
            f"n/m = not measurable{at}: the client's value disagrees with the engine's model by more than "
            f"{tolerance * 100:.0f}% (modelled gaps this short are below the client's timing jitter once scaled to "
            f"wall time); the model's own values are in the server-side table. Not measurable: {levels}. "
            "Reasons per level in the JSON (latency_check)."
        )
    return notes


def render_findings(sweep: dict[str, Any]) -> str:
    """One line naming peak and knee and flagging client-limited levels."""
    peak = peak_of(sweep)
    failed = [p for p in _points(sweep) if _failed(p)]
    if peak is None:
        parts = ["Peak: none (no level ran without failed requests)" if failed else "Peak: none (no level completed)"]
    else:
        parts = [f"Peak: {_fmt(peak.get('output_tok_s'))} tok/s at C={_fmt_count(peak.get('concurrency'))}"]
    knee = knee_of(sweep)
    if knee is None:
        parts.append("knee: not found")
    else:
        share = _num(knee.get("share_of_peak"))
        share_text = f", {share * 100:.0f}% of peak" if share is not None else ""
        parts.append(
            f"knee: C={_fmt_count(knee.get('concurrency'))} "
            f"({_fmt(knee.get('output_tok_s'))} tok/s{share_text})"
        )
    limited = [_fmt_count(p.get("concurrency")) for p in _points(sweep) if p.get("client_limited") is True]
    if limited:
        parts.append(
            "client-limited (marked *, the client not the server set the number): C="
            + ", ".join(limited)
        )
    else:
        parts.append("client-limited levels: none")
    if failed:
        parts.append(
            f"levels with failed requests (marked {ERROR_MARK}, left out of peak and knee): C="
            + ", ".join(_fmt_count(p.get("concurrency")) for p in failed)
        )
    if sweep.get("stopped_on_plateau") is True:
        parts.append("stopped on plateau")
    return "; ".join(parts) + "."


def _server_line(meta: dict[str, Any], sweep: dict[str, Any]) -> str:
    server = sweep.get("server") if isinstance(sweep.get("server"), dict) else {}
    bits = []
    for label, value in (
        ("release", meta.get("release")),
        ("engine", meta.get("engine")),
        ("server version", server.get("version")),
        ("model", sweep.get("model")),
        ("api", sweep.get("api")),
        ("max_running_requests", server.get("max_running_requests")),
        ("spec accept length", server.get("avg_spec_accept_length_after")),
        ("gpus", meta.get("gpus")),
        ("url", meta.get("url") or sweep.get("url")),
    ):
        if value in (None, "", []):
            continue
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        elif isinstance(value, float):
            value = f"{value:.2f}"
        bits.append(f"{label} {value}")
    window = ""
    if sweep.get("started") or sweep.get("finished"):
        window = f" Run {sweep.get('started') or '?'} to {sweep.get('finished') or '?'}."
    return ("; ".join(bits) + "." if bits else "") + window


def render_instance(meta: dict[str, Any], sweep: dict[str, Any]) -> str:
    """Heading, server line, table and findings for one instance."""
    header = f"### {_label(meta)}"
    parts = [header]
    server_line = _server_line(meta, sweep).strip()
    if server_line:
        parts.append(server_line)
    parts.append(render_table(sweep))
    parts.append(render_findings(sweep))
    server = render_server_table(sweep)
    if server is not None:
        modelled = sweep.get("time_base") == "model"
        parts.append(
            "Server-side latency (the server's /metrics histograms over each level"
            + (", in the GPU time the engine models" if modelled else ", as the server timed it") + "):"
        )
        parts.append(server)
    during = render_server_metrics_table(sweep)
    if during is not None:
        parts.append(
            "Server during each level (its /metrics: running and queued requests sampled while the level "
            "ran, mean / max; KV token usage; speculative accept length and rate; prefix-cache hits; "
            "retractions):"
        )
        parts.append(during[0])
        if during[1]:
            parts.append("Not shown: " + " ".join(during[1]))
    parts.extend(render_notes(sweep))
    return "\n\n".join(parts)


def _fleet_label(meta: dict[str, Any]) -> str:
    if meta.get("role") == _fleet.ROUTER_ROLE:
        return f"router {meta.get('host') or '?'}"
    return f"{meta.get('host') or '?'}/{meta.get('instance') or '?'}"


def fleet_rows(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The side-by-side rows (``_fleet.side_by_side``), labelled as in summary.md."""
    return _fleet.side_by_side(items, _fleet_label)


def _fleet_cell(row: dict[str, Any], key: str, decimals: int | None) -> str:
    if key in (row.get("not_measurable") or []):
        return NOT_MEASURABLE
    return _fmt_count(row.get(key)) if decimals is None else _fmt(row.get(key), decimals)


def _fleet_view(row: dict[str, Any]) -> str:
    text = str(row.get("label"))
    if row.get("view") == "fleet" and row.get("alignment"):
        text += f" [{row['alignment']}]"
    if row.get("records_missing"):
        text += " (no records)"
    return text


def render_fleet_table(rows: Sequence[dict[str, Any]]) -> str:
    """One line per row: C (``!`` where requests failed), the view, then FLEET_COLUMNS."""
    header = ["C", "view"] + [name for name, _, _ in FLEET_COLUMNS]
    lines = [_row(header), _row(["---"] * len(header))]
    for row in rows:
        c_cell = _fmt_count(row.get("concurrency")) + (ERROR_MARK if (_num(row.get("err")) or 0) > 0 else "")
        view = _fleet_view(row)
        if row.get("view") == "fleet":
            view = f"**{view}**"
        lines.append(_row([c_cell, view] + [_fleet_cell(row, k, d) for _, k, d in FLEET_COLUMNS]))
    return "\n".join(lines)


def _fleet_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    notes = []
    modes = {r.get("alignment") for r in rows if r.get("view") == "fleet"}
    if _fleet.ALIGNED in modes:
        notes.append(
            "[aligned]: the workers were swept one after another; each worker's level is shifted to "
            "start at 0, so the fleet total is the fleet as if every worker ran that level at the same "
            "time (sound for workers that share no GPU)."
        )
    if _fleet.CLOCK in modes:
        notes.append("[clock]: the workers' levels ran at the same time; the window is their union on the wall clock.")
    bases = {r.get("time_base") for r in rows}
    if len(bases) > 1:
        notes.append(f"Time bases differ ({', '.join(sorted(str(b) for b in bases))}): these rows are not comparable.")
    if any(r.get("records_missing") for r in rows):
        notes.append("(no records): the sweep kept no per-request records (return_records: false).")
    return notes


def render_fleet(items: Sequence[dict[str, Any]]) -> str:
    """The summary.md section: per worker, fleet total (merged) and through the router."""
    rows = fleet_rows(items)
    intro = (
        "Per level C: each worker swept at C, the fleet total merged from all the workers' "
        "per-request records at C (N x C requests in flight), and each router swept at C (C in "
        "flight, spread over its workers). Every row is computed from the raw records by one rule: "
        "output tok/s = output tokens of completed requests / window (first send to last finish), "
        "percentiles over all ok requests, ITL mean weighted by tokens. To compare the router with "
        "the fleet at the same load, read the router at N x C beside the fleet total at C."
    )
    parts = ["### Fleet: per worker, fleet total (merged), through the router", intro, render_fleet_table(rows)]
    parts.extend(_fleet_notes(rows))
    return "\n\n".join(parts)


def fleet_csv_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """fleet.csv: the rows' fields (``_fleet.ROW_FIELDS``), a not measurable value left empty."""
    out = []
    for row in rows:
        marked = row.get("not_measurable") or []
        out.append({k: _csv_value(None if k in marked else row.get(k)) for k in _fleet.ROW_FIELDS})
    return out


def profile_summary(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per profile (first seen first): instances, best peak and its ratio to the baseline."""
    rows: list[dict[str, Any]] = []
    for profile in profiles_in_order(items):
        members = [i for i in items if str(i["meta"].get("profile") or "unknown") == profile]
        peaks = [(peak_of(i["sweep"]), i) for i in members]
        valid = [(p, i) for p, i in peaks if p is not None and _num(p.get("output_tok_s")) is not None]
        best = max(valid, key=lambda pi: float(pi[0]["output_tok_s"]), default=None)
        knees = [knee_of(i["sweep"]) for i in members]
        rows.append({
            "profile": profile,
            "instances": len(members),
            "peak_output_tok_s": float(best[0]["output_tok_s"]) if best else None,
            "peak_concurrency": best[0].get("concurrency") if best else None,
            "peak_instance": _label(best[1]["meta"]) if best else None,
            "mean_peak_output_tok_s": (
                sum(float(p["output_tok_s"]) for p, _ in valid) / len(valid) if valid else None
            ),
            "knee_concurrency": sorted({k["concurrency"] for k in knees if k is not None}),
        })
    base = rows[0]["peak_output_tok_s"] if rows else None
    for row in rows:
        peak = row["peak_output_tok_s"]
        row["ratio"] = peak / base if peak is not None and base else None
    return rows


def render_profiles(items: Sequence[dict[str, Any]]) -> str:
    """The profile comparison table (baseline: the first profile)."""
    rows = profile_summary(items)
    header = ("profile", "instances", "peak tok/s", "at C", "mean peak tok/s", "knee C", "vs baseline")
    lines = [_row(header), _row(["---"] * len(header))]
    for index, row in enumerate(rows):
        ratio = row["ratio"]
        if index == 0:
            ratio_text = "1.00x (baseline)"
        elif ratio is None:
            ratio_text = MISSING
        else:
            ratio_text = f"{ratio:.2f}x ({(ratio - 1) * 100:+.0f}%)"
        knees = ", ".join(_fmt_count(k) for k in row["knee_concurrency"]) or MISSING
        lines.append(_row([
            row["profile"],
            str(row["instances"]),
            _fmt(row["peak_output_tok_s"]),
            _fmt_count(row["peak_concurrency"]),
            _fmt(row["mean_peak_output_tok_s"]),
            knees,
            ratio_text,
        ]))
    return "\n".join(lines)


def render_markdown(items: Sequence[dict[str, Any]], title: str | None = None) -> tuple[str, str]:
    """(the whole summary.md, the part to print: instance tables and the profile table)."""
    sections = [render_instance(i["meta"], i["sweep"]) for i in items]
    if len(profiles_in_order(items)) > 1:
        sections.append("### Profiles (peak output tok/s, baseline = first profile)\n\n" + render_profiles(items))
    if _fleet.has_router(items):
        sections.append(render_fleet(items))
    body = "\n\n".join(sections)
    intro = (
        "Columns: C = concurrency, n = requests, ok = completed, err = failed (all kinds), "
        "output tok/s = output tokens / wall time of the level (ramp-up and tail included), "
        "avg_out = output tokens per ok request, wall s = first send to last finish, "
        "TTFT/ITL = time to first token / inter-token latency (token level). "
        "`!` after C: requests failed at that level; `*`: client-limited level; "
        "`~`: throughput drifted within the level; "
        "n/m: not measurable at the engine's time scale. See docs/reports.md."
    )
    doc = f"# {title or 'SGLang throughput sweep'}\n\n{intro}\n\n{body}\n"
    return doc, body


# --------------------------------------------------------------------------- CSV / JSON
def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return round(value, 4) if math.isfinite(value) else ""
    if isinstance(value, list | tuple):
        return "+".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return value


def csv_rows(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per instance x level, columns as in CSV_HEADER."""
    rows: list[dict[str, Any]] = []
    for item in items:
        meta, sweep = item["meta"], item["sweep"]
        peak, knee = peak_of(sweep), knee_of(sweep)
        for point in _points(sweep):
            row: dict[str, Any] = {}
            for name, path in CSV_COLUMNS:
                if path.startswith("meta."):
                    value = meta.get(path[5:])
                elif path == "@peak":
                    value = peak is not None and _same_c(peak.get("concurrency"), point.get("concurrency"))
                elif path == "@knee":
                    value = knee is not None and _same_c(knee.get("concurrency"), point.get("concurrency"))
                elif path == "errors.total":
                    value = _err_total(point)
                    value = int(value) if value is not None else None
                elif _unmeasurable(point, path):
                    value = None  # not measurable at the engine's time scale: never a wrong number
                else:
                    value = _dig(point, path)
                row[name] = _csv_value(value)
            rows.append(row)
    return rows


def _json_names(items: Sequence[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for item in items:
        meta = item["meta"]
        stem = "_".join(_safe(meta.get(k)) for k in ("host", "instance", "profile"))
        name, n = f"{stem}.json", 2
        while name in names:
            name, n = f"{stem}-{n}.json", n + 1
        names.append(name)
    return names


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- plots
def _concurrency_ticks(ax: Any, values: Iterable[float]) -> None:
    ticks = sorted({float(v) for v in values if v and v > 0})
    ax.set_xscale("log", base=2)
    if ticks:
        ax.set_xticks(ticks)
        ax.set_xticklabels([_fmt_count(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlim(ticks[0] / 1.25, ticks[-1] * 1.25)


def _series(sweep: dict[str, Any], path: str) -> tuple[list[float], list[float]]:
    """(concurrency, value) of the points that have the value (not measurable ones left out)."""
    xs, ys = [], []
    for point in _points(sweep):
        if _unmeasurable(point, path):
            continue
        x, y = _num(point.get("concurrency")), _num(_dig(point, path))
        if x is not None and x > 0 and y is not None:
            xs.append(x)
            ys.append(y)
    return xs, ys


def _all_concurrency(items: Sequence[dict[str, Any]]) -> list[float]:
    return [float(p["concurrency"]) for i in items for p in _points(i["sweep"])]


def _plot_throughput(items: Sequence[dict[str, Any]], path: Path, title: str, figure_cls: Any) -> None:
    fig = figure_cls(figsize=(9, 5.5), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    any_steady = False
    for index, item in enumerate(items):
        color = f"C{index % 10}"
        sweep = item["sweep"]
        xs, ys = _series(sweep, "output_tok_s")
        if not xs:
            continue
        ax.plot(xs, ys, marker="o", color=color, label=_label(item["meta"]))
        sx, sy = _series(sweep, "steady_output_tok_s")
        if sx:
            any_steady = True
            ax.plot(sx, sy, linestyle=":", color=color, linewidth=1.2)
        limited = [(x, y) for p in _points(sweep) if p.get("client_limited") is True
                   for x, y in [(_num(p.get("concurrency")), _num(p.get("output_tok_s")))]
                   if x is not None and y is not None]
        if limited:
            ax.scatter([x for x, _ in limited], [y for _, y in limited], marker="x", s=90,
                       color="black", zorder=5)
        failed = [(x, y) for p in _points(sweep) if _failed(p)
                  for x, y in [(_num(p.get("concurrency")), _num(p.get("output_tok_s")))]
                  if x is not None and y is not None]
        if failed:
            ax.scatter([x for x, _ in failed], [y for _, y in failed], marker="o", s=150,
                       facecolors="none", edgecolors="red", linewidths=1.5, zorder=5)
        knee = knee_of(sweep)
        if knee is not None and _num(knee.get("output_tok_s")) is not None:
            kx, ky = float(knee["concurrency"]), float(knee["output_tok_s"])
            ax.scatter([kx], [ky], marker="*", s=260, color=color, edgecolors="black", zorder=6)
            ax.annotate(f"knee C={_fmt_count(kx)}", (kx, ky), textcoords="offset points",
                        xytext=(6, -14), fontsize=8, color=color)
    _concurrency_ticks(ax, _all_concurrency(items))
    ax.set_xlabel("concurrency (requests in flight, log2 scale)")
    ax.set_ylabel("output tokens / s (whole level)")
    ax.set_title(f"{title}: output throughput vs concurrency")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="major", alpha=0.3)
    # Legend: one entry per instance, plus what the markers mean.
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], marker="*", linestyle="", markersize=13, color="grey",
                          markeredgecolor="black"))
    labels.append("knee")
    if any_steady:
        handles.append(Line2D([], [], linestyle=":", color="grey"))
        labels.append("steady-state window")
    if any(p.get("client_limited") is True for i in items for p in _points(i["sweep"])):
        handles.append(Line2D([], [], marker="x", linestyle="", color="black"))
        labels.append("client-limited level")
    if any(_failed(p) for i in items for p in _points(i["sweep"])):
        handles.append(Line2D([], [], marker="o", linestyle="", markerfacecolor="none", markeredgecolor="red"))
        labels.append("level with failed requests")
    ax.legend(handles, labels, loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")


def _plot_latency(items: Sequence[dict[str, Any]], path: Path, title: str, figure_cls: Any) -> None:
    fig = figure_cls(figsize=(12, 5), dpi=110)
    ax_ttft = fig.add_subplot(1, 2, 1)
    ax_itl = fig.add_subplot(1, 2, 2)
    ttft_values: list[float] = []
    for index, item in enumerate(items):
        color = f"C{index % 10}"
        label = _label(item["meta"])
        xs, ys = _series(item["sweep"], "ttft_ms.p50")
        if xs:
            ax_ttft.plot(xs, ys, marker="o", color=color, label=f"{label} p50")
            ttft_values += ys
        xs, ys = _series(item["sweep"], "ttft_ms.p99")
        if xs:
            ax_ttft.plot(xs, ys, marker="^", linestyle="--", color=color, label=f"{label} p99")
            ttft_values += ys
        xs, ys = _series(item["sweep"], "itl_ms.p50")
        if xs:
            ax_itl.plot(xs, ys, marker="o", color=color, label=f"{label} p50")
        # the server's own means (its /metrics histograms; the model's on the scaled engine)
        xs, ys = _series(item["sweep"], "server.ttft_ms_mean")
        if xs:
            ax_ttft.plot(xs, ys, marker="s", linestyle=":", color=color, label=f"{label} server mean")
            ttft_values += ys
        xs, ys = _series(item["sweep"], "server.itl_ms_mean")
        if xs:
            ax_itl.plot(xs, ys, marker="s", linestyle=":", color=color, label=f"{label} server mean")
    positive = [v for v in ttft_values if v > 0]
    if positive and max(positive) / min(positive) > 50:
        ax_ttft.set_yscale("log")
    else:
        ax_ttft.set_ylim(bottom=0)
    ax_itl.set_ylim(bottom=0)
    for ax, what in ((ax_ttft, "time to first token (ms)"), (ax_itl, "inter-token latency p50 (ms)")):
        _concurrency_ticks(ax, _all_concurrency(items))
        ax.set_xlabel("concurrency (log2 scale)")
        ax.set_ylabel(what)
        ax.grid(True, which="major", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=7)
    ax_ttft.set_title("TTFT p50 (solid), p99 (dashed), server mean (dotted)")
    ax_itl.set_title("ITL p50 (token level), server mean (dotted)")
    fig.suptitle(f"{title}: latency vs concurrency")
    fig.tight_layout()
    fig.savefig(path, format="png")


def _plot_profiles(items: Sequence[dict[str, Any]], path: Path, title: str, figure_cls: Any) -> None:
    """Left: mean throughput curve per profile; right: peak per profile vs the baseline."""
    fig = figure_cls(figsize=(12, 5), dpi=110)
    ax_curve = fig.add_subplot(1, 2, 1)
    ax_bar = fig.add_subplot(1, 2, 2)
    profiles = profiles_in_order(items)
    for index, profile in enumerate(profiles):
        by_c: dict[float, list[float]] = {}
        members = [i for i in items if str(i["meta"].get("profile") or "unknown") == profile]
        for item in members:
            for x, y in zip(*_series(item["sweep"], "output_tok_s"), strict=True):
                by_c.setdefault(x, []).append(y)
        if by_c:
            xs = sorted(by_c)
            ys = [sum(by_c[x]) / len(by_c[x]) for x in xs]
            ax_curve.plot(xs, ys, marker="o", color=f"C{index % 10}",
                          label=f"{profile} (mean of {len(members)} instance{'s' if len(members) > 1 else ''})")
    _concurrency_ticks(ax_curve, _all_concurrency(items))
    ax_curve.set_xlabel("concurrency (log2 scale)")
    ax_curve.set_ylabel("output tokens / s per instance")
    ax_curve.set_title("throughput per profile")
    ax_curve.set_ylim(bottom=0)
    ax_curve.grid(True, alpha=0.3)
    if ax_curve.get_legend_handles_labels()[0]:
        ax_curve.legend(loc="best", fontsize=8)

    rows = profile_summary(items)
    names = [r["profile"] for r in rows]
    peaks = [r["peak_output_tok_s"] or 0.0 for r in rows]
    bars = ax_bar.bar(range(len(names)), peaks, color=[f"C{i % 10}" for i in range(len(names))])
    for index, (bar, row) in enumerate(zip(bars, rows, strict=True)):
        ratio = row["ratio"]
        note = "baseline" if index == 0 else (f"{ratio:.2f}x ({(ratio - 1) * 100:+.0f}%)" if ratio is not None else MISSING)
        ax_bar.annotate(f"{_fmt(row['peak_output_tok_s'])}\n{note}",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        textcoords="offset points", xytext=(0, 3), ha="center", va="bottom", fontsize=9)
    ax_bar.set_xticks(range(len(names)))
    ax_bar.set_xticklabels(names)
    ax_bar.set_xlabel("profile")
    ax_bar.set_ylabel("peak output tokens / s (best instance)")
    ax_bar.set_title("peak throughput per profile")
    ax_bar.set_ylim(0, max(peaks + [1.0]) * 1.2)
    ax_bar.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{title}: profiles compared")
    fig.tight_layout()
    fig.savefig(path, format="png")


def _figure_class() -> Any:
    """matplotlib's Figure (Agg canvas, no pyplot state), or None when it is not installed."""
    try:
        # Figure without pyplot draws through the Agg canvas when saving a PNG, and leaves
        # the process's pyplot backend alone.
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure


def write_plots(items: Sequence[dict[str, Any]], out: Path, title: str) -> tuple[list[str], list[str]]:
    """(plot paths written, warnings)."""
    figure_cls = _figure_class()
    if figure_cls is None:
        return [], ["matplotlib is not installed on the controller: no PNG plots were written"]
    jobs = [("throughput.png", _plot_throughput), ("latency.png", _plot_latency)]
    if len(profiles_in_order(items)) > 1:
        jobs.append(("profiles.png", _plot_profiles))
    plots: list[str] = []
    warnings: list[str] = []
    for name, func in jobs:
        target = out / name
        try:
            func(items, target, title, figure_cls)
        except Exception as exc:  # a plot must never cost the data files
            warnings.append(f"{name} not written: {type(exc).__name__}: {exc}")
            continue
        plots.append(str(target))
    return plots, warnings


# --------------------------------------------------------------------------- latest link
def update_latest(out: Path) -> str:
    """Point ``<parent>/latest`` at ``out`` with a relative link, replaced atomically."""
    parent = out.parent
    link = parent / LATEST_NAME
    if link.exists() and not link.is_symlink():
        raise OSError(f"{link} exists and is not a symlink; not replacing it")
    tmp = parent / f".{LATEST_NAME}.tmp-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(os.path.relpath(out, parent), tmp)
    os.replace(tmp, link)
    return str(link)


# --------------------------------------------------------------------------- entry point
def plan_files(results: list[dict[str, Any]], out_dir: str) -> list[str]:
    """The data files write_report would write (plots excluded), without writing anything."""
    items = normalize(results)
    out = Path(out_dir)
    fleet = [str(out / n) for n in FLEET_FILES] if _fleet.has_router(items) else []
    return [str(out / n) for n in _json_names(items)] + [str(out / "summary.csv"), str(out / "summary.md")] + fleet


def write_fleet(items: Sequence[dict[str, Any]], out: Path) -> list[str]:
    """fleet.csv and fleet.json (the rows and how they were made); [] without a router."""
    if not _fleet.has_router(items):
        return []
    rows = fleet_rows(items)
    csv_path = out / "fleet.csv"
    tmp = csv_path.with_name(f".{csv_path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(_fleet.ROW_FIELDS))
        writer.writeheader()
        writer.writerows(fleet_csv_rows(rows))
    os.replace(tmp, csv_path)
    doc = {"rows": rows, "sources": _json_names(items), "rule": "plugins/module_utils/_fleet.py (docs/reports.md)"}
    json_path = out / "fleet.json"
    _write_text(json_path, json.dumps(doc, indent=2) + "\n")
    return [str(csv_path), str(json_path)]


def write_report(
    results: list[dict[str, Any]],
    out_dir: str,
    *,
    title: str | None = None,
    latest_link: bool = True,
) -> dict[str, Any]:
    """Write the report folder; return {dir, files, table, plots, warnings, latest}.

    ``files`` lists everything written (JSON, CSV, Markdown and plots); ``table`` is the
    Markdown of the instance tables (and the profile table) for printing; ``plots`` is empty,
    with a warning, when matplotlib is missing; ``latest`` is the link path or None.
    """
    items = normalize(results)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    warnings: list[str] = []

    for name, item in zip(_json_names(items), items, strict=True):
        doc = {"meta": item["meta"], "sweep": item["sweep"]}
        target = out / name
        _write_text(target, json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
        files.append(str(target))

    csv_path = out / "summary.csv"
    tmp = csv_path.with_name(f".{csv_path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(CSV_HEADER))
        writer.writeheader()
        writer.writerows(csv_rows(items))
    os.replace(tmp, csv_path)
    files.append(str(csv_path))

    files.extend(write_fleet(items, out))

    md_text, table = render_markdown(items, title)
    md_path = out / "summary.md"
    _write_text(md_path, md_text)
    files.append(str(md_path))

    plots, plot_warnings = write_plots(items, out, title or "SGLang throughput sweep")
    files.extend(plots)
    warnings.extend(f"requests failed at {line} (marked {ERROR_MARK} in summary.md)" for line in failed_levels(items))
    warnings.extend(plot_warnings)

    latest: str | None = None
    if latest_link:
        try:
            latest = update_latest(out)
        except OSError as exc:
            warnings.append(f"latest link not updated: {exc}")

    return {
        "dir": str(out),
        "files": files,
        "table": table,
        "plots": plots,
        "warnings": warnings,
        "latest": latest,
    }
