# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""SLOs and goodput (pure). See docs/sweep.md "Goodput and SLOs" for the definitions.

An SLO is a mapping of terms ``<metric>_<stat>_ms: threshold`` with metric ``ttft``, ``itl``,
``tpot`` or ``e2e`` and stat ``p50``, ``p90``, ``p95``, ``p99`` or ``mean``, e.g.
``{ttft_p99_ms: 500, itl_p50_ms: 50}``.

- A request is **good** when it succeeded and meets every term on its own: its TTFT, TPOT and
  E2E (one value per request) are <= the threshold; for ITL (many values per request) its own
  ITL at the term's statistic (the request's ITL p50 for ``itl_p50_ms``) is <= the threshold
  (a request of one token has no ITL and meets an ITL term, as TPOT 0 in SGLang/vLLM).
- ``goodput_req_s`` = good requests / the level's duration; ``goodput_tok_s`` = output
  tokens of the good requests / the duration; ``slo_attainment`` = good / all requests of
  the level (failures in the denominator, as SGLang 0.5.23).
- The level **meets the SLO** (``slo_met``) when, for every term, the term's statistic over the
  level is <= the threshold, a failed request counting as infinitely late (so 2% failures fail
  a p99 term): ``ttft_p99_ms: 500`` means the level's TTFT p99 is <= 500 ms.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench.stats import percentile
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import SweepError

SLO_METRICS = ("ttft", "itl", "tpot", "e2e")
SLO_STATS = ("p50", "p90", "p95", "p99", "mean")


def parse_slo(slo: Any) -> dict[str, float]:
    """The SLO as {term: threshold ms}, checked; {} for none."""
    if slo is None or slo == {}:
        return {}
    if not isinstance(slo, dict):
        raise SweepError(f"slo must be a mapping such as {{ttft_p99_ms: 500, itl_p50_ms: 50}}, got {slo!r}")
    out: dict[str, float] = {}
    for key, value in slo.items():
        parts = str(key).split("_")
        if len(parts) != 3 or parts[0] not in SLO_METRICS or parts[1] not in SLO_STATS or parts[2] != "ms":
            raise SweepError(
                f"slo term {key!r} is not <metric>_<stat>_ms with metric one of {', '.join(SLO_METRICS)} and stat "
                f"one of {', '.join(SLO_STATS)}: write e.g. ttft_p99_ms: 500")
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if isinstance(value, bool) or not number > 0 or not math.isfinite(number):
            raise SweepError(f"slo term {key} must be a number of milliseconds > 0, got {value!r}")
        out[str(key)] = number
    return out


def _stat(values: Sequence[float], stat: str) -> float | None:
    if not values:
        return None
    if stat == "mean":
        value = math.fsum(values) / len(values)
    else:
        value = percentile(sorted(values), float(stat[1:]))
    return math.inf if value is not None and math.isnan(value) else value  # between two inf samples


def request_values(trace: Any, metric: str, stat: str, scale: float) -> float | None:
    """One request's value (ms, in the sweep's time base: wall / ``scale``) for an SLO term;
    None when it has none (ITL/TPOT of a one-token request)."""
    if metric == "ttft":
        value = trace.ttft
    elif metric == "tpot":
        value = trace.tpot
    elif metric == "e2e":
        value = trace.e2e
    else:
        value = _stat(trace.itl(), stat)
    return None if value is None else value * 1000.0 / scale


def _level_samples(traces: Sequence[Any], metric: str, scale: float) -> list[float]:
    """The samples a level's statistic of ``metric`` is taken over (ms), a failed request as inf."""
    samples: list[float] = []
    for trace in traces:
        if not trace.ok:
            samples.append(math.inf)
        elif metric == "itl":
            samples.extend(v * 1000.0 / scale for v in trace.itl())
        else:
            value = request_values(trace, metric, "p50", scale)
            if value is not None:
                samples.append(value)
    return samples


def evaluate_slo(traces: Sequence[Any], slo: dict[str, float], duration_s: float,
                 scale: float = 1.0) -> dict[str, Any]:
    """Goodput and the SLO verdict of one level from its traces (``duration_s`` wall seconds;
    rates per wall second, latencies in the time base ``scale``: see the module docstring)."""
    good = 0
    good_tokens = 0.0
    met_by_term = {term: 0 for term in slo}
    for trace in traces:
        passed = bool(trace.ok)
        for term, threshold in slo.items():
            metric, stat, _ = term.split("_")
            value = request_values(trace, metric, stat, scale) if trace.ok else None
            term_ok = trace.ok and (value is None and metric in ("itl", "tpot") or
                                    value is not None and value <= threshold)
            met_by_term[term] += 1 if term_ok else 0
            passed = passed and term_ok
        if passed:
            good += 1
            good_tokens += trace.counted_tokens
    terms: dict[str, Any] = {}
    for term, threshold in slo.items():
        metric, stat, _ = term.split("_")
        value = _stat(_level_samples(traces, metric, scale), stat)
        terms[term] = {
            "threshold_ms": threshold,
            "value_ms": None if value is None or math.isinf(value) else round(value, 3),
            "met": value is not None and value <= threshold,
            "attainment": round(met_by_term[term] / len(traces), 4) if traces else None,
        }
    return {
        "goodput_req_s": round(good / duration_s * scale, 4) if duration_s > 0 else 0.0,
        "goodput_tok_s": round(good_tokens / duration_s * scale, 3) if duration_s > 0 else 0.0,
        "good_requests": good,
        "slo_attainment": round(good / len(traces), 4) if traces else None,
        "slo_met": bool(traces) and all(t["met"] for t in terms.values()),
        "slo_terms": terms,
    }
