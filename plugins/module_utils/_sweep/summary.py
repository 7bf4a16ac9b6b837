# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""A level's raw result summarized into its point (throughput, latencies, errors, drift, client
health) and the level warm-up's summary.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench.stats import summarize
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import (
    CLIENT_CPU_LIMIT,
    CLIENT_LAG_LIMIT_MS,
    ERROR_KINDS,
    MAX_ERROR_MESSAGES,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.drift import (
    drift_check,
    steady_window,
    tokens_in_window,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.level import LevelRun, warmup_level_tokens
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.trace import Trace


def client_limited(loop_lag_ms_p99: float | None, cpu_util: float | None) -> bool:
    """The client limited the level when its event loop used >= CLIENT_CPU_LIMIT of a core or
    ran its 10 ms ticks >= CLIENT_LAG_LIMIT_MS late at p99 (the lag its own work caused where
    the kernel tells the run-queue waits apart: ``judged_lag``)."""
    return bool(
        (cpu_util is not None and cpu_util >= CLIENT_CPU_LIMIT)
        or (loop_lag_ms_p99 is not None and loop_lag_ms_p99 >= CLIENT_LAG_LIMIT_MS)
    )


def judged_lag(health: Any) -> float | None:
    """The lag p99 that judges the client: without the waits for a CPU other processes held
    (a busy machine is not a saturated client) where known, else the wall-clock lag."""
    own = health.own_lag_ms_p99
    return own if own is not None else health.lag_ms_p99


def count_errors(traces: Iterable[Trace]) -> tuple[dict[str, int], list[str]]:
    """Failed requests by kind (with ``total``) and up to MAX_ERROR_MESSAGES distinct messages."""
    errors = {kind: 0 for kind in ERROR_KINDS}
    messages: list[str] = []
    for trace in traces:
        if trace.error_kind:
            errors[trace.error_kind] = errors.get(trace.error_kind, 0) + 1
            if trace.error and trace.error not in messages and len(messages) < MAX_ERROR_MESSAGES:
                messages.append(trace.error)
    errors["total"] = sum(errors[k] for k in ERROR_KINDS)
    return errors, messages


def level_status(requests: int, errors: dict[str, int], short_is_error: bool = True) -> str:
    """``ok`` when every request of the level succeeded, ``no_requests_ok`` when none did (or
    none was sent), ``errors`` in between. Every error kind counts (HTTP, stream, timeout,
    connection, short), ``short`` only when ``short_is_error``."""
    failed = int(errors.get("total") or 0) - (0 if short_is_error else int(errors.get("short") or 0))
    if requests <= 0 or failed >= requests:
        return "no_requests_ok"
    return "errors" if failed > 0 else "ok"


def summarize_warmup(run: LevelRun, max_tokens: int) -> dict[str, Any]:
    """What a level's warm-up round did: requests, ok, errors by kind (counted here, never in
    the level's errors), tokens asked and received, and how long it took."""
    errors, messages = count_errors(run.traces)
    return {
        "requests": len(run.traces),
        "ok": sum(1 for t in run.traces if t.ok),
        "errors": errors,
        "error_messages": messages,
        "max_tokens": max_tokens,
        "max_tokens_longest": max((warmup_level_tokens(max_tokens, run.concurrency, t.index) for t in run.traces),
                                  default=max_tokens),
        "output_tokens": sum(t.counted_tokens for t in run.traces),
        "seconds": round(max(run.t_end - run.t_start, 0.0), 4),
        "timed_out": run.timed_out,
    }


def summarize_level(run: LevelRun, short_is_error: bool = True) -> dict[str, Any]:
    """One point of the sweep from its raw traces (see docs/sweep.md for each field).

    ``short_is_error``: whether a ``short`` response makes the level's ``status`` "errors"
    (false with ``ignore_eos: false``, where a model stopping early is what was asked for).
    """
    traces = run.traces
    errors, messages = count_errors(traces)
    ok = [t for t in traces if t.ok]
    status = level_status(len(traces), errors, short_is_error)
    completed = [t for t in traces if t.error_kind in (None, "short")]
    output_tokens = sum(t.counted_tokens for t in traces)
    if traces:
        first = min(t.start for t in traces)
        last = max(t.end for t in traces)
        duration = max(last - first, 0.0)
    else:
        duration = 0.0
    busy = math.fsum(t.e2e for t in traces)
    spans: dict[int, list[tuple[float, float]]] = {}
    for trace in traces:
        spans.setdefault(trace.worker, []).append((trace.start, trace.end))
    window = steady_window(spans, run.concurrency)
    steady = None
    window_s = None
    counted = [t.events for t in traces if t.counted_tokens]
    if window is not None:
        window_s = window[1] - window[0]
        steady = tokens_in_window(counted, window[0], window[1]) / window_s
        drift = drift_check(counted, window[0], window[1], "steady")
    elif traces:
        drift = drift_check(counted, min(t.start for t in traces), max(t.end for t in traces), "level")
    else:
        drift = drift_check([], 0.0, 0.0, "level")
    lag = run.health.lag_ms_p99
    cpu = run.health.cpu_util
    itl: list[float] = []
    for trace in ok:
        itl.extend(trace.itl())
    return {
        "concurrency": run.concurrency,
        "requests": len(traces),
        "ok": len(ok),
        "errors": errors,
        "error_rate": round(errors["total"] / len(traces), 4) if traces else None,
        "status": status,
        "errors_present": status != "ok",
        "error_messages": messages,
        "output_tokens": output_tokens,
        "avg_output_tokens": round(output_tokens / len(completed), 2) if completed else None,
        "duration_s": round(duration, 4),
        "output_tok_s": round(output_tokens / duration, 3) if duration > 0 else 0.0,
        "steady_output_tok_s": None if steady is None else round(steady, 3),
        "steady_window_s": None if window_s is None else round(window_s, 4),
        "req_s": round(len(ok) / duration, 4) if duration > 0 else 0.0,
        "ttft_ms": summarize([t.ttft for t in ok if t.ttft is not None], 1000.0),
        "itl_ms": summarize(itl, 1000.0),
        "tpot_ms": summarize([t.tpot for t in ok if t.tpot is not None], 1000.0),
        "e2e_s": summarize([t.e2e for t in ok], 1.0, 4),
        "achieved_concurrency": round(busy / duration, 3) if duration > 0 else 0.0,
        "level_timed_out": run.timed_out,
        # judged on clean levels only: failed requests end at once and make a busy, short level
        # (a dead server is not a saturated client); the health numbers stay in "client"
        "client_limited": status == "ok" and client_limited(judged_lag(run.health), cpu),
        "client": {"loop_lag_ms_p99": lag, "loop_lag_own_ms_p99": run.health.own_lag_ms_p99,
                   "cpu_util": cpu},
        "gain_per_doubling": None,
        "drift": drift,
        "level_warmup": None,
        "server": None,
        "latency_measurable": None,
        "latency_unmeasurable": None,
        "latency_check": None,
    }
