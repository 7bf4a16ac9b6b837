# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Statistics of a throughput sweep that both sides use: the host's sweep (``_sweep``) and the
controller's report, fleet view and auto-tuner (``_report``, ``_fleet``, ``plugin_utils/_tune``).

Pure functions over numbers and level dicts (docs/sweep.md): percentiles (numpy's default
interpolation), {mean, p50, p90, p99} summaries, which levels are clean, the peak and the knee.
Standard library only, Python >= 3.10: it runs on hosts and on the controller.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

# A level whose full-run throughput reaches this share of the peak is at (or past) the knee.
KNEE_SHARE = 0.9


def percentile(samples: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0..100) by linear interpolation between closest ranks of the sorted
    raw samples (rank = p/100 * (n-1), numpy's default); None for no samples."""
    if not samples:
        return None
    data = sorted(samples)
    if len(data) == 1:
        return float(data[0])
    rank = min(max(p, 0.0), 100.0) / 100.0 * (len(data) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(data) - 1)
    frac = rank - lo
    return float(data[lo] + (data[hi] - data[lo]) * frac)


def summarize(samples: Sequence[float], scale: float = 1.0, digits: int = 3) -> dict[str, float | None]:
    """{mean, p50, p90, p99} of the raw samples times ``scale``; all None without samples."""
    if not samples:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    data = sorted(float(s) * scale for s in samples)

    def rnd(value: float | None) -> float | None:
        return None if value is None else round(value, digits)

    return {
        "mean": rnd(math.fsum(data) / len(data)),
        "p50": rnd(percentile(data, 50)),
        "p90": rnd(percentile(data, 90)),
        "p99": rnd(percentile(data, 99)),
    }


def gain_per_doubling(c_prev: float, x_prev: float, c_cur: float, x_cur: float) -> float | None:
    """Relative throughput gain per doubling of concurrency between two levels:
    (x_cur / x_prev - 1) / log2(c_cur / c_prev). Equals the plain relative gain for levels that
    double (8 -> 16) and stays comparable for others (32 -> 48, 1 -> 4). None when undefined."""
    if x_prev is None or x_cur is None or x_prev <= 0 or c_cur <= c_prev:
        return None
    return (x_cur / x_prev - 1.0) / math.log2(c_cur / c_prev)


def clean(point: dict[str, Any]) -> bool:
    """Every request of the level succeeded (``status`` ok; a point without a status, from an
    older sweep, by its error count)."""
    status = point.get("status")
    if status is not None:
        return status == "ok"
    return not ((point.get("errors") or {}).get("total") or 0)


def _usable(points: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """Points that can speak for the server: every request succeeded, throughput > 0, and not
    client-limited; when none qualifies, all clean points with throughput (flagged). A level
    with failed requests never qualifies: its rate mixes the server's work with failures."""
    measured = [p for p in points if (p.get("ok") or 0) > 0 and (p.get("output_tok_s") or 0) > 0 and clean(p)]
    good = [p for p in measured if not p.get("client_limited")]
    if good:
        return sorted(good, key=_level), False
    return sorted(measured, key=_level), bool(measured)


def find_peak(points: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The level with the highest full-run output tok/s (the lowest concurrency on a tie) among
    the levels whose requests all succeeded."""
    usable, limited = _usable(points)
    if not usable:
        return None
    best = max(usable, key=lambda p: (p["output_tok_s"], -_level(p)))
    peak = {"concurrency": best["concurrency"], "output_tok_s": best["output_tok_s"], "client_limited": limited}
    if best.get("offered_rate") is not None:  # an open-loop level: its C is only the in-flight cap
        peak["offered_rate"] = best["offered_rate"]
    return peak


def _level(point: dict[str, Any]) -> float:
    """Where a level sits on the sweep's axis: its offered rate (rate mode), else its concurrency."""
    rate = point.get("offered_rate")
    return float(rate) if rate is not None else float(point["concurrency"])


def find_knee(
    points: Sequence[dict[str, Any]], plateau_gain: float, share: float = KNEE_SHARE
) -> dict[str, Any] | None:
    """The knee: the lowest concurrency level that either

    - reaches ``share`` (0.9) of the peak full-run throughput (rule ``share_of_peak``), or
    - is followed by a level that adds less than ``plateau_gain`` per doubling of concurrency
      (rule ``plateau``): going further buys (almost) nothing.

    Levels with a failed request and client-limited levels are left out (the latter unless every
    clean level is client-limited). None when no clean level has throughput.
    """
    usable, _ = _usable(points)
    peak = find_peak(points)
    if not usable or peak is None:
        return None
    top = float(peak["output_tok_s"])
    for i, point in enumerate(usable):
        x = float(point["output_tok_s"])
        rule = None
        if x >= share * top:
            rule = "share_of_peak"
        elif i + 1 < len(usable):
            nxt = usable[i + 1]
            gain = gain_per_doubling(point["concurrency"], x, nxt["concurrency"], nxt["output_tok_s"])
            if gain is not None and gain < plateau_gain:
                rule = "plateau"
        if rule:
            knee = {
                "concurrency": point["concurrency"],
                "output_tok_s": point["output_tok_s"],
                "share_of_peak": round(x / top, 4) if top > 0 else None,
                "rule": rule,
            }
            if point.get("offered_rate") is not None:
                knee["offered_rate"] = point["offered_rate"]
            return knee
    return None  # pragma: no cover - the peak itself always meets the share rule
