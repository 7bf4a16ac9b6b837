# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Repeated levels (pure): the mean and 95% confidence interval (Student t) of each measure over
a level's N runs, and the flag for runs that disagree. See docs/sweep.md "Repeats".

A measure's interval is mean ± t(0.975, N-1) x s / sqrt(N) (s: the sample standard deviation).
A level is flagged (``disagree``) when, for a throughput measure (output_tok_s, req_s), the
interval's half-width is more than REPEAT_CI_LIMIT of the mean: its runs differ more than the
run-to-run noise of a steady server, so the level's value is not known to ±5%.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

REPEAT_CI_LIMIT = 0.05
# t(0.975, df) for df = 1..30; above 30 the normal 1.96 (within 4% at df 31).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
# The measures of a point summarized over its runs: (name, path in the point, how a time scale
# converts it: "rate" x scale, "time" / scale, "" already in the sweep's time base).
MEASURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("output_tok_s", ("output_tok_s",), "rate"),
    ("req_s", ("req_s",), "rate"),
    ("achieved_rate", ("achieved_rate",), ""),
    ("goodput_req_s", ("goodput_req_s",), ""),
    ("ttft_ms_p50", ("ttft_ms", "p50"), "time"),
    ("ttft_ms_p99", ("ttft_ms", "p99"), "time"),
    ("itl_ms_p50", ("itl_ms", "p50"), "time"),
    ("itl_ms_p99", ("itl_ms", "p99"), "time"),
    ("tpot_ms_p50", ("tpot_ms", "p50"), "time"),
    ("e2e_s_p50", ("e2e_s", "p50"), "time"),
)
THROUGHPUT = ("output_tok_s", "req_s")


def t975(df: int) -> float:
    """The two-sided 95% Student t quantile for ``df`` degrees of freedom (>= 1)."""
    if df < 1:
        raise ValueError("a confidence interval needs at least two runs")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def interval(values: Sequence[float]) -> dict[str, Any]:
    """{n, mean, ci95_low, ci95_high, half_width, rel_half_width, runs} of the values (the
    interval None for fewer than two)."""
    n = len(values)
    mean = math.fsum(values) / n if n else None
    out: dict[str, Any] = {"n": n, "mean": None if mean is None else round(mean, 4), "runs": list(values),
                           "ci95_low": None, "ci95_high": None, "half_width": None, "rel_half_width": None}
    if n < 2 or mean is None:
        return out
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    out.update(ci95_low=round(mean - half, 4), ci95_high=round(mean + half, 4), half_width=round(half, 4),
               rel_half_width=round(half / abs(mean), 4) if mean else None)
    return out


def _get(point: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = point
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def summarize_repeats(points: Sequence[dict[str, Any]], limit: float = REPEAT_CI_LIMIT,
                      scale: float = 1.0) -> dict[str, Any]:
    """The ``repeats`` block of a level measured ``len(points)`` times (points as measured, in
    wall-clock time; ``scale``: the time-scaled engine's, to give the block in modelled time)."""
    measures: dict[str, Any] = {}
    factor = {"rate": scale, "time": 1.0 / scale, "": 1.0}
    for name, path, kind in MEASURES:
        values = [_get(p, path) for p in points]
        if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            measures[name] = interval([round(float(v) * factor[kind], 4) for v in values])
    wide = [name for name in THROUGHPUT
            if (measures.get(name) or {}).get("rel_half_width") is not None
            and measures[name]["rel_half_width"] > limit]
    return {"n": len(points), "ci_limit": limit, "disagree": bool(wide), "disagree_on": wide,
            "measures": measures}
