# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""One measured request (``Trace``), its inter-token latencies and the record a sweep keeps of it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._sweep.streams import StreamParser


def itl_samples(events: Sequence[tuple[float, float]]) -> list[float]:
    """Per-token inter-token latencies (seconds) from token events ``(arrival time, tokens added)``.

    The first event is the first token (TTFT) and yields no sample. Each later event's gap from
    the previous event is spread over the tokens it added: an event adding m tokens after a gap g
    contributes round(m) samples of g/m (at least one), so a chunk of 3 speculative tokens counts
    as three tokens of g/3, not one of g.
    """
    out: list[float] = []
    for i in range(1, len(events)):
        t_prev = events[i - 1][0]
        t_cur, tokens = events[i]
        if tokens <= 0:
            continue
        value = (t_cur - t_prev) / tokens
        out.extend([value] * max(1, int(round(tokens))))
    return out


@dataclass
class Trace:
    """One measured request (times from time.perf_counter())."""

    level: int
    concurrency: int
    index: int
    worker: int
    start: float = 0.0
    end: float = 0.0
    first_token_t: float | None = None
    ok: bool = False
    error_kind: str | None = None
    error: str | None = None
    http_status: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    events: list[tuple[float, float]] = field(default_factory=list)

    def fail(self, kind: str, message: str) -> None:
        if self.error_kind is None:
            self.error_kind = kind
            self.error = message[:300]
        self.ok = False

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_t is None else self.first_token_t - self.start

    @property
    def e2e(self) -> float:
        return self.end - self.start

    def itl(self) -> list[float]:
        return itl_samples(self.events)

    @property
    def tpot(self) -> float | None:
        """(e2e - TTFT) / (output tokens - 1)."""
        if self.ttft is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    @property
    def counted_tokens(self) -> int:
        """Tokens this request adds to the level's output: server-counted tokens of a response
        that completed (ok or short); 0 for a failed one."""
        if self.error_kind in (None, "short") and self.output_tokens:
            return int(self.output_tokens)
        return 0


def finalize_trace(trace: Trace, parser: StreamParser, max_tokens: int) -> None:
    """Classify a request whose body ended (or that failed) from its parser's state."""
    parser.close()
    trace.first_token_t = parser.first_token_t
    trace.output_tokens = parser.output_tokens
    trace.finish_reason = parser.finish_reason
    trace.events = parser.events
    trace.prompt_tokens = parser.prompt_tokens
    trace.cached_tokens = parser.cached_tokens
    if trace.error_kind is not None:
        return
    if parser.error is not None:
        trace.fail("stream", f"error in stream: {parser.error}")
    elif not parser.complete:
        trace.fail("stream", "stream ended before a finish_reason or [DONE]")
    elif parser.output_tokens is None:
        trace.fail("stream", "no token count in the stream (usage missing: include_usage ignored?)")
    elif parser.finish_reason != "length" and parser.output_tokens < max_tokens:
        trace.fail(
            "short",
            f"{parser.output_tokens} of {max_tokens} tokens, finish_reason {parser.finish_reason!r}",
        )
    else:
        trace.ok = True


def trace_record(trace: Trace, t0: float) -> dict[str, Any]:
    """The raw per-request record kept in the facts (times in seconds since the sweep started)."""
    itl = trace.itl()
    return {
        "level": trace.level,
        "concurrency": trace.concurrency,
        "index": trace.index,
        "ok": trace.ok,
        "error_kind": trace.error_kind,
        "http_status": trace.http_status,
        "output_tokens": trace.output_tokens,
        "finish_reason": trace.finish_reason,
        "cached_tokens": trace.cached_tokens,
        "ttft_ms": None if trace.ttft is None else round(trace.ttft * 1000.0, 3),
        "e2e_s": round(trace.e2e, 4),
        "itl_ms_mean": round(math.fsum(itl) / len(itl) * 1000.0, 4) if itl else None,
        "start_s": round(trace.start - t0, 4),
        "end_s": round(trace.end - t0, 4),
    }
