# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The steady window of a level and the drift check between the two halves of it (pure).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import (
    DRIFT_MIN_CHUNKS,
    DRIFT_MIN_TOKENS,
    DRIFT_THRESHOLD,
)


def steady_window(spans_by_worker: dict[int, list[tuple[float, float]]], concurrency: int) -> tuple[float, float] | None:
    """The window in which every one of the C closed-loop clients had a request in flight.

    From the moment the last client sent its first request to the moment the first client
    finished its last one (a client re-sends as soon as a response ends, so in between the number
    in flight equals C, up to the microseconds between one end and the next send). None when
    fewer than C clients ran or the window is empty.
    """
    if len(spans_by_worker) < concurrency or not spans_by_worker:
        return None
    start = max(min(s for s, _ in spans) for spans in spans_by_worker.values() if spans)
    end = min(max(e for _, e in spans) for spans in spans_by_worker.values() if spans)
    if end <= start:
        return None
    return start, end


def tokens_in_window(event_lists: Iterable[Sequence[tuple[float, float]]], start: float, end: float) -> float:
    """Tokens whose arrival time falls inside [start, end]."""
    return math.fsum(tokens for events in event_lists for t, tokens in events if start <= t <= end)


def drift_check(
    event_lists: Iterable[Sequence[tuple[float, float]]],
    start: float,
    end: float,
    window: str,
    threshold: float = DRIFT_THRESHOLD,
    min_tokens: float = DRIFT_MIN_TOKENS,
    min_chunks: int = DRIFT_MIN_CHUNKS,
) -> dict[str, Any]:
    """Throughput in the first and second halves of a level's window ``[start, end]``.

    Tokens are counted at their arrival (first half: ``[start, mid)``, second: ``[mid, end]``).
    ``ratio`` = second / first; ``flagged`` when it is off 1 by more than ``threshold`` (the
    server's speed changed during the level: compilation, caches, throttling, other load).
    A half with fewer than ``min_tokens`` tokens or ``min_chunks`` token chunks is too short to
    tell: ``checked`` is false and ``reason`` says so (never flagged).
    """
    out: dict[str, Any] = {
        "window": window, "first_half_tok_s": None, "second_half_tok_s": None, "ratio": None,
        "flagged": False, "checked": False, "threshold": threshold, "reason": None,
    }
    span = end - start
    if span <= 0:
        out["reason"] = "empty window"
        return out
    mid = start + span / 2.0
    tokens = [0.0, 0.0]
    chunks = [0, 0]
    for events in event_lists:
        for t, n in events:
            if start <= t < mid:
                tokens[0] += n
                chunks[0] += 1
            elif mid <= t <= end:
                tokens[1] += n
                chunks[1] += 1
    half = span / 2.0
    out["first_half_tok_s"] = round(tokens[0] / half, 3)
    out["second_half_tok_s"] = round(tokens[1] / half, 3)
    if min(tokens) < min_tokens or min(chunks) < min_chunks:
        out["reason"] = (
            f"too short to split: {tokens[0]:.0f} + {tokens[1]:.0f} tokens in {chunks[0]} + {chunks[1]} "
            f"chunks (each half needs {min_tokens:g} tokens and {min_chunks} chunks)"
        )
        return out
    ratio = tokens[1] / tokens[0]
    out["ratio"] = round(ratio, 4)
    out["checked"] = True
    out["flagged"] = abs(ratio - 1.0) > threshold
    return out
