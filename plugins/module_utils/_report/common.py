# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What every part of the report shares (part of the ``_report`` package, see its ``__init__``):
the marks, the formatting of missing and unmeasurable values, the levels of a sweep, peak and
knee, the items normalized, the instance labels and the failed levels.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench.fleet import router_meta

MISSING = "-"
NOT_MEASURABLE = "n/m"
DRIFT_MARK = "~"
ERROR_MARK = "!"
LATEST_NAME = "latest"
ERROR_KINDS = ("http", "stream", "timeout", "connection", "short")


# --------------------------------------------------------------------------- small helpers
def dig(data: Any, path: str) -> Any:
    """``data['a']['b']`` for path ``a.b``; None where any step is missing."""
    cur = data
    for key in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur


def num(value: Any) -> float | None:
    """A finite float, or None (bools, strings and NaN are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def fmt(value: Any, decimals: int = 1) -> str:
    number = num(value)
    if number is None:
        return MISSING
    return f"{number:.{decimals}f}"


def fmt_count(value: Any) -> str:
    """Integers as integers; a non-integral value (an average) with one decimal."""
    number = num(value)
    if number is None:
        return MISSING
    if number == int(number):
        return str(int(number))
    return f"{number:.1f}"


def unmeasurable(point: dict[str, Any], path: str) -> bool:
    """Whether the statistic at ``path`` (e.g. ``itl_ms.p50``) was marked not measurable by the
    sweep (``latency_unmeasurable``: a time-scaled run where the client could not time it)."""
    key, _, stat = path.partition(".")
    marks = point.get("latency_unmeasurable")
    return isinstance(marks, dict) and isinstance(marks.get(key), list) and stat in marks[key]


def has_failed(point: dict[str, Any]) -> bool:
    """The sweep marked the level as having failed requests (``status`` errors or
    no_requests_ok). Points of sweeps made before ``status`` existed are not marked."""
    status = point.get("status")
    return isinstance(status, str) and status != "ok"


def level_name(point: dict[str, Any]) -> str:
    """A level in words: ``8 req/s`` for an open-loop (rate mode) level, ``C=8`` otherwise (the
    ``concurrency`` of a rate level is only its in-flight cap)."""
    rate = num(point.get("offered_rate"))
    return f"{rate:g} req/s" if rate is not None else f"C={fmt_count(point.get('concurrency'))}"


def level_cell(point: dict[str, Any]) -> str:
    """A level in a table's first column: ``8 req/s`` (rate mode) or the concurrency."""
    rate = num(point.get("offered_rate"))
    return f"{rate:g} req/s" if rate is not None else fmt_count(point.get("concurrency"))


def level_header(header: Sequence[str], points: Sequence[dict[str, Any]]) -> list[str]:
    """A table's header with its first column ("C") named "level" when the levels are rates."""
    rated = any(num(p.get("offered_rate")) is not None for p in points)
    return ["level", *header[1:]] if rated and header and header[0] == "C" else list(header)


def levels_text(points: Sequence[dict[str, Any]]) -> str:
    """Several levels in words: ``C=16, 32, 48``, or ``4 req/s, 8 req/s`` in rate mode."""
    if any(num(p.get("offered_rate")) is not None for p in points):
        return ", ".join(level_name(p) for p in points)
    return "C=" + ", ".join(fmt_count(p.get("concurrency")) for p in points)


def error_text(point: dict[str, Any]) -> str:
    """``C=4 (8 of 8 failed: 100%, connection 8)`` for one level."""
    errors = point.get("errors") if isinstance(point.get("errors"), dict) else {}
    parts = [f"{fmt_count(err_total(point))} of {fmt_count(point.get('requests'))} failed"]
    rate = num(point.get("error_rate"))
    details = ([f"{rate * 100:.0f}%"] if rate is not None else []) + [
        f"{kind} {fmt_count(errors.get(kind))}" for kind in ERROR_KINDS if (num(errors.get(kind)) or 0) > 0]
    text = parts[0] + (": " + ", ".join(details) if details else "")
    return f"{level_name(point)} ({text})"


def failed_levels(items: Sequence[dict[str, Any]]) -> list[str]:
    """One line per instance whose sweep had levels with failed requests:
    ``host/instance (profile): C=4 (8 of 8 failed: 100%, connection 8), C=8 (...)``."""
    lines = []
    for item in items:
        bad = [p for p in points_of(item["sweep"]) if has_failed(p)]
        if bad:
            lines.append(f"{instance_label(item['meta'])}: " + ", ".join(error_text(p) for p in bad))
    return lines


def err_total(point: dict[str, Any]) -> float | None:
    """errors.total; else the sum of the kinds; else requests - ok."""
    errors = point.get("errors")
    if isinstance(errors, dict):
        total = num(errors.get("total"))
        if total is not None:
            return total
        kinds = [num(errors.get(kind)) for kind in ERROR_KINDS]
        if any(k is not None for k in kinds):
            return sum(k for k in kinds if k is not None)
    requests, ok = num(point.get("requests")), num(point.get("ok"))
    if requests is not None and ok is not None:
        return max(requests - ok, 0.0)
    return None


def points_of(sweep: dict[str, Any]) -> list[dict[str, Any]]:
    """The sweep's points that carry a concurrency, sorted by it."""
    points = [p for p in sweep.get("points") or [] if isinstance(p, dict)]
    with_c = [p for p in points if num(p.get("concurrency")) is not None]
    return sorted(with_c, key=lambda p: float(p["concurrency"]))


def peak_of(sweep: dict[str, Any]) -> dict[str, Any] | None:
    """The sweep's peak {concurrency, output_tok_s}; computed from the points (levels without
    failed requests) when the sweep has no ``peak`` field. A sweep whose peak is null (no level
    ran without errors) has none."""
    peak = sweep.get("peak")
    if isinstance(peak, dict) and num(peak.get("output_tok_s")) is not None:
        return with_rate(peak, sweep)
    if "peak" in sweep and any(has_failed(p) for p in points_of(sweep)):
        return None  # the sweep found none: every level that had throughput had failed requests
    best: dict[str, Any] | None = None
    for point in points_of(sweep):
        if has_failed(point):
            continue
        tok_s = num(point.get("output_tok_s"))
        if tok_s is not None and (best is None or tok_s > best["output_tok_s"]):
            best = {"concurrency": point["concurrency"], "output_tok_s": tok_s}
            if num(point.get("offered_rate")) is not None:
                best["offered_rate"] = point["offered_rate"]
    return best


def with_rate(level: dict[str, Any], sweep: dict[str, Any]) -> dict[str, Any]:
    """A peak or knee of a rate-mode sweep recorded without its level's rate (sweeps before
    issue 28 item 3 kept only ``concurrency``, the in-flight cap every rate level shares, so the
    H200's report said "Peak: 3062.1 tok/s at C=4096"): the rate of the point it names."""
    if sweep.get("mode") != "rate" or num(level.get("offered_rate")) is not None:
        return level
    same = [p for p in points_of(sweep) if num(p.get("offered_rate")) is not None
            and num(p.get("output_tok_s")) == num(level.get("output_tok_s"))]
    return {**level, "offered_rate": same[0]["offered_rate"]} if same else level


def knee_of(sweep: dict[str, Any]) -> dict[str, Any] | None:
    """The sweep's knee, or None when the sweep found none (never guessed here)."""
    knee = sweep.get("knee")
    if isinstance(knee, dict) and num(knee.get("concurrency")) is not None:
        return with_rate(knee, sweep)
    return None


def instance_label(meta: dict[str, Any]) -> str:
    host = meta.get("host") or "?"
    instance = meta.get("instance") or "?"
    profile = meta.get("profile") or "?"
    return f"{host}/{instance} ({profile})"


def normalize(results: Iterable[Any]) -> list[dict[str, Any]]:
    """Each item as {"meta": dict, "sweep": dict}.

    Accepted forms, in any mix:

    - ``{meta, sweep}``: one instance's sweep with its meta;
    - a bare sweep (an item with ``points`` and no ``sweep`` key); its meta is then only its url;
    - ``{host, manifest, sweeps}``: one host's sweeps keyed by instance name (as the bench role
      collects them) with that host's deployment manifest: one item per instance, its meta
      from the manifest (profile, release, engine, the instance's gpus and url);
    - ``{host, router: {url, workers_down}, sweeps: [...]}``: a router's sweeps, their meta a
      router's (``_fleet.router_meta``: profile and release where the workers of the same
      results agree, and the workers that were down).

    Anything else is rejected with ValueError.
    """
    items: list[dict[str, Any]] = []
    routers: list[tuple[int, dict[str, Any]]] = []
    for index, item in enumerate(results):
        if not isinstance(item, dict):
            raise ValueError(f"results[{index}] is a {type(item).__name__}, expected a dict")
        if isinstance(item.get("sweep"), dict):
            meta = item.get("meta") if isinstance(item.get("meta"), dict) else {}
            sweep = item["sweep"]
        elif "points" in item:
            meta, sweep = {}, item
        elif isinstance(item.get("router"), dict) and isinstance(item.get("sweeps"), list):
            routers.append((len(items), item))
            continue
        elif isinstance(item.get("sweeps"), dict):
            items.extend(_host_items(item, index))
            continue
        else:
            raise ValueError(
                f"results[{index}] has no 'sweep' (expected {{meta: ..., sweep: <sglang_sweep>}}, or a host's "
                "{host: ..., manifest: ..., sweeps: {instance: <sglang_sweep>}})"
            )
        items.append(_with_url(meta, sweep))
    workers = list(items)
    for at, item in reversed(routers):
        items[at:at] = _router_items(item, workers)
    return items


def _with_url(meta: dict[str, Any], sweep: dict[str, Any]) -> dict[str, Any]:
    meta = dict(meta)
    if not meta.get("url") and sweep.get("url"):
        meta["url"] = sweep["url"]
    return {"meta": meta, "sweep": sweep}


def _host_items(entry: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """A host's {name: sweep} with its manifest -> one item per instance."""
    manifest = entry.get("manifest") if isinstance(entry.get("manifest"), dict) else {}
    by_name = {i.get("name"): i for i in manifest.get("instances") or [] if isinstance(i, dict)}
    out = []
    for name, sweep in entry["sweeps"].items():
        if not isinstance(sweep, dict):
            raise ValueError(f"results[{index}].sweeps[{name!r}] is a {type(sweep).__name__}, expected a sweep")
        # a PD host's pair swept as one (bench_plan): "gpu1+gpu0", the decodes' and prefills' names
        members = [by_name[n] for n in str(name).split("+") if n in by_name] or [{}]
        inst = members[0]
        out.append(_with_url({"host": entry.get("host"), "instance": name, "profile": manifest.get("profile"),
                              "release": manifest.get("release"), "engine": manifest.get("engine"),
                              "gpus": [g for m in members for g in m.get("gpus", [])],
                              "url": inst.get("connect_url") or inst.get("url")}, sweep))
    return out


def _router_items(entry: dict[str, Any], workers: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A router's sweeps -> items with a router's meta, next to the workers of the same results."""
    router = entry["router"]
    meta = router_meta(str(entry.get("host")), str(router.get("url") or ""), workers,
                       router.get("workers_down") or [])
    return [_with_url(dict(meta), sweep) for sweep in entry["sweeps"] if isinstance(sweep, dict)]


def profiles_in_order(items: Sequence[dict[str, Any]]) -> list[str]:
    """Distinct profiles in the order they first appear (the first is the baseline)."""
    seen: list[str] = []
    for item in items:
        profile = str(item["meta"].get("profile") or "unknown")
        if profile not in seen:
            seen.append(profile)
    return seen


# --------------------------------------------------------------------------- markdown
def md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


# --------------------------------------------------------------------------- CSV / JSON
def csv_value(value: Any) -> Any:
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
