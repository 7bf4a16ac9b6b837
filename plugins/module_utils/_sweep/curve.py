# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Rules over a sweep's levels (pure): the plateau that stops a sweep, the oversubscription and
error warnings. The peak and the knee are in ``_stats``, shared with the controller.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench.stats import clean, gain_per_doubling
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import (
    ERROR_KINDS,
    OVERSUBSCRIPTION,
    level_label,
)


def oversubscription_warning(levels: Sequence[int], max_running: Any) -> str | None:
    """A warning naming the levels above OVERSUBSCRIPTION x the server's effective
    max_running_requests (from /server_info), or None: their requests mostly queue."""
    if not isinstance(max_running, int) or isinstance(max_running, bool) or max_running < 1:
        return None
    over = [c for c in levels if c > OVERSUBSCRIPTION * max_running]
    if not over:
        return None
    return (
        f"C={', '.join(map(str, over))} is more than {OVERSUBSCRIPTION}x the server's max_running_requests "
        f"({max_running}): it runs {max_running} requests at a time and the others wait in its queue, so these "
        "levels measure queueing (TTFT grows with C), not more throughput"
    )


def error_summary(point: dict[str, Any]) -> str:
    """``4 of 8 requests failed (50%: stream 3, connection 1)`` for one point."""
    errors = point.get("errors") or {}
    kinds = ", ".join(f"{kind} {errors[kind]}" for kind in ERROR_KINDS if errors.get(kind))
    rate = point.get("error_rate")
    share = f"{rate:.0%}: " if isinstance(rate, (int, float)) else ""
    return f"{errors.get('total', 0)} of {point.get('requests', 0)} requests failed ({share}{kinds})"


def error_warning(points: Sequence[dict[str, Any]]) -> str | None:
    """One warning naming every level with failed requests and their kinds, or None."""
    bad = [p for p in points if not clean(p)]
    if not bad:
        return None
    first = next((p["error_messages"][0] for p in bad if p.get("error_messages")), None)
    return (
        "requests failed at " + "; ".join(f"{level_label(p)}: {error_summary(p)}" for p in bad)
        + ". These levels are marked (status errors, or no_requests_ok when nothing succeeded) and left "
        "out of peak, knee and plateau" + (f". First error: {first}" if first else "")
    )


def plateau_reached(points: Sequence[dict[str, Any]], plateau_gain: float) -> bool:
    """After the last point: did it gain less than ``plateau_gain`` per doubling over the previous
    usable point? A client-limited level, or one with failed requests, never counts as a
    plateau, nor as the level it is compared with."""
    if len(points) < 2:
        return False
    last = points[-1]
    if last.get("client_limited") or not (last.get("ok") or 0) > 0 or not clean(last):
        return False
    prev = [p for p in points[:-1] if (p.get("ok") or 0) > 0 and not p.get("client_limited") and clean(p)]
    if not prev:
        return False
    gain = gain_per_doubling(
        prev[-1]["concurrency"], prev[-1]["output_tok_s"], last["concurrency"], last["output_tok_s"]
    )
    return gain is not None and gain < plateau_gain
