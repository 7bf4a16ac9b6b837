# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""A sweep of the time-scaled embedded engine in the GPU time it models: conversion of rates,
spans and latencies, and the check of the client's latencies against the server's (pure).
"""
from __future__ import annotations

import math
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import (
    JITTER_FLOOR_MS,
    LATENCY_JITTER_FACTOR,
    LATENCY_TOLERANCE,
)

# Client latencies checked against the server: point key -> (server mean key, server range key,
# factor to ms of both). TPOT has no histogram: its mean is checked against the mean ITL (equal
# for requests of equal length), and its percentiles follow that verdict.
_CHECKS: dict[str, tuple[str, str | None, float]] = {
    "ttft_ms": ("ttft_ms_mean", "ttft_ms_range", 1.0),
    "itl_ms": ("itl_ms_mean", "itl_ms_range", 1.0),
    "tpot_ms": ("itl_ms_mean", None, 1.0),
    "e2e_s": ("e2e_s_mean", "e2e_s_range", 1000.0),
}
_STATS = ("mean", "p50", "p90", "p99")


def _g(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.3g}"


def _check_ranges(dist: dict[str, Any], present: list[str], ranges: dict[str, Any], to_ms: float,
                  tolerance: float, failed: list[str], why: list[str]) -> None:
    """Each percentile against the server's bucket range for it, widened by ``tolerance``:
    those outside go to ``failed`` and ``why``, in place."""
    for stat in present:
        bounds = ranges.get(stat)
        if stat == "mean" or not bounds:
            continue
        lo = float(bounds[0]) * to_ms
        hi = math.inf if bounds[1] is None else float(bounds[1]) * to_ms
        value = float(dist[stat]) * to_ms
        if not lo * (1.0 - tolerance) <= value <= hi * (1.0 + tolerance):
            if stat not in failed:
                failed.append(stat)
            why.append(f"{stat} {_g(value)} ms outside the model's {_g(lo)}-{_g(hi)} ms")


def check_latency(point: dict[str, Any], scale: float, tolerance: float = LATENCY_TOLERANCE) -> None:
    """Mark the client latencies of a time-scaled level that cannot be trusted, in place.

    The client's TTFT, ITL, TPOT and e2e (already converted to modelled time) are compared with
    the server's modelled ones (``point["server"]``, from /metrics):

    - the mean must be within ``tolerance`` of the server's mean; when it is not, every
      statistic of that quantity is unmeasurable (the disagreement is systematic);
    - each percentile must lie in the server's bucket range for that percentile
      (``histogram_rank_range``) widened by ``tolerance`` on both sides.

    Without server histograms for a quantity, all its statistics are unmeasurable unless its
    wall-clock p50 (for TPOT and e2e: the e2e p50, the span they are measured over) is at least
    LATENCY_JITTER_FACTOR times the client's timing jitter (event-loop lag p99, at least
    JITTER_FLOOR_MS).

    Sets ``latency_unmeasurable`` ({point key: [statistics]}, only failing quantities),
    ``latency_measurable`` (true when nothing failed) and ``latency_check`` ({method per
    quantity, tolerance, reasons per quantity}).
    """
    server = point.get("server") if isinstance(point.get("server"), dict) else None
    lag = (point.get("client") or {}).get("loop_lag_ms_p99")
    lag_text = _g(float(lag)) if isinstance(lag, (int, float)) else "?"
    jitter = max(float(lag) if isinstance(lag, (int, float)) else 0.0, JITTER_FLOOR_MS)
    bad: dict[str, list[str]] = {}
    methods: dict[str, str] = {}
    reasons: dict[str, str] = {}
    for key, (mean_key, range_key, to_ms) in _CHECKS.items():
        dist = point.get(key) if isinstance(point.get(key), dict) else {}
        present = [stat for stat in _STATS if dist.get(stat) is not None]
        if "mean" not in present:
            continue
        failed: list[str] = []
        why: list[str] = []
        if server is not None and server.get(mean_key) is not None:
            methods[key] = "server_metrics"
            ref = float(server[mean_key]) * to_ms
            mine = float(dist["mean"]) * to_ms
            if ref > 0 and abs(mine / ref - 1.0) > tolerance:
                failed = list(present)
                why.append(
                    f"mean {_g(mine)} ms vs the model's {_g(ref)} ms ({mine - ref:+.3g} ms, "
                    f"{(mine - ref) * scale:+.3g} ms of wall time: loopback, HTTP and both event loops)"
                )
            ranges = (server.get(range_key) if range_key else None) or {}
            _check_ranges(dist, present, ranges, to_ms, tolerance, failed, why)
        else:
            methods[key] = "client_jitter"
            ref = float(dist.get("p50") or dist["mean"]) * to_ms
            span_key, span_ms = ("e2e_s", 1000.0) if key in ("tpot_ms", "e2e_s") else (key, to_ms)
            span_p50 = (point.get(span_key) or {}).get("p50")
            wall_ms = None if span_p50 is None else float(span_p50) * span_ms * scale
            if wall_ms is not None and wall_ms < LATENCY_JITTER_FACTOR * jitter:
                failed = list(present)
                why.append(
                    f"no server histogram to check it against, and its wall-clock p50 of {_g(wall_ms)} ms is "
                    f"under {LATENCY_JITTER_FACTOR:g}x the client's timing jitter ({_g(jitter)} ms)"
                )
        if failed:
            bad[key] = [stat for stat in _STATS if stat in failed]
            label = {"ttft_ms": "TTFT", "itl_ms": "ITL", "tpot_ms": "TPOT", "e2e_s": "e2e"}[key]
            ref_ms = float(server[mean_key]) * to_ms if methods[key] == "server_metrics" and server else ref
            reasons[key] = (
                f"{label} {', '.join(bad[key])}: " + "; ".join(why)
                + f". At time scale {scale:g}, {_g(ref_ms)} ms of modelled time is {_g(ref_ms * scale)} ms of "
                f"wall time, against the client's event-loop lag p99 of {lag_text} ms plus the engine's own "
                "scheduling jitter: too short for the client to time at this scale"
            )
    point["latency_unmeasurable"] = bad
    point["latency_measurable"] = not bad
    point["latency_check"] = {"method": methods, "tolerance": tolerance, "reasons": reasons}


_RATE_KEYS = ("output_tok_s", "steady_output_tok_s", "req_s")
_SPAN_KEYS = ("duration_s", "steady_window_s")
_DIST_KEYS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_s")
_RECORD_SPAN_KEYS = ("ttft_ms", "e2e_s", "itl_ms_mean", "start_s", "end_s")


def to_model_time(points: list[dict[str, Any]], records: list[dict[str, Any]], scale: float) -> None:
    """Convert a sweep of the time-scaled embedded engine to the GPU time it models, in place.

    The engine runs `scale` wall seconds per modelled second, so rates are multiplied by
    `scale` and times divided by it. The wall-clock figures stay under each point's `wall`.
    The client's own overheads are divided too: on a strongly scaled run, small TTFT/ITL
    values are mostly client and loopback time, magnified (``check_latency`` then says so).
    A point's ``server`` block is left alone: the engine's histograms are in modelled time.
    """
    if not scale or scale <= 0 or scale == 1:
        return
    for point in points:
        point["wall"] = {k: point.get(k) for k in _RATE_KEYS + _SPAN_KEYS}
        drift = point.get("drift")
        if isinstance(drift, dict):
            point["wall"]["drift"] = {k: drift.get(k) for k in ("first_half_tok_s", "second_half_tok_s")}
            for key in ("first_half_tok_s", "second_half_tok_s"):
                if isinstance(drift.get(key), (int, float)):
                    drift[key] = round(drift[key] * scale, 3)
        warm = point.get("level_warmup")
        if isinstance(warm, dict) and isinstance(warm.get("seconds"), (int, float)):
            point["wall"]["level_warmup_seconds"] = warm["seconds"]
            warm["seconds"] = round(warm["seconds"] / scale, 4)
        for key in _RATE_KEYS:
            if isinstance(point.get(key), (int, float)):
                point[key] = round(point[key] * scale, 3)
        for key in _SPAN_KEYS:
            if isinstance(point.get(key), (int, float)):
                point[key] = round(point[key] / scale, 4)
        for key in _DIST_KEYS:
            dist = point.get(key)
            if isinstance(dist, dict):
                point[key] = {k: (round(v / scale, 4) if isinstance(v, (int, float)) else v) for k, v in dist.items()}
    for rec in records:
        for key in _RECORD_SPAN_KEYS:
            if isinstance(rec.get(key), (int, float)):
                rec[key] = round(rec[key] / scale, 4)
