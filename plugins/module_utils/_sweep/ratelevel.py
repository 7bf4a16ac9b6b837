# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""One open-loop level: requests sent at seeded arrival times (``openloop.arrival_offsets``)
whatever the server's answers, at most ``max_inflight`` in flight (``run_rate_level``), and
what the level adds to its point (``rate_fields``). See docs/sweep.md "Open-loop rate mode".

Each request is due at level start + its offset (absolute times: a late send never shifts the
ones after it). When ``max_inflight`` requests are in flight, the next waits for a slot: that
wait is the client's queueing delay, recorded per request and never part of its TTFT or E2E
(which start when it is sent, as in bench_serving and vLLM).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench.stats import summarize
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import TIMEOUTS
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.level import Health, LevelRun, converse
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.trace import Trace


@dataclass
class RateRun:
    """A rate level's ``LevelRun`` and, per request index, its due and send times."""

    run: LevelRun
    rate: float
    cap: int
    due: dict[int, float] = field(default_factory=dict)
    sent: dict[int, float] = field(default_factory=dict)
    unsent: int = 0  # requests due before the deadline cut the level but never sent
    # requests that found every slot busy, or were due while an earlier one waited for a slot
    queued: set[int] = field(default_factory=set)


async def run_rate_level(client: Any, level: int, rate: float, offsets: Sequence[float], cap: int,
                         deadline: float, prompts: Sequence[str], now: Any = time.perf_counter) -> RateRun:
    """Send request i at start + ``offsets[i]`` (``rate``: the offered rate, recorded), at most
    ``cap`` in flight; cut at ``deadline`` (requests in flight are then timeouts).

    Request i is the client's workload's request i (its prompt and max_tokens), as in a closed
    loop level; a conversational workload's arrival i is conversation i, its turns one after the
    other in its slot (bench_serving's multi-turn arrivals count conversations too). Without a
    workload on the client, ``prompts`` round-robin."""
    traces: list[Trace] = []
    workload = getattr(client, "workload", None)
    free = list(range(cap - 1, -1, -1))  # slot ids, used as the traces' worker ids
    slot_freed = asyncio.Event()
    t_start = now()
    result = RateRun(LevelRun(level, cap, traces, False, Health(), t_start, t_start), rate, cap)

    async def one(index: int, slot: int) -> None:
        try:
            if workload is not None and workload.conversational:
                await converse(client, workload, level, cap, index, slot, traces)
                return
            trace = Trace(level=level, concurrency=cap, index=index, worker=slot)
            traces.append(trace)
            if workload is not None:
                request = workload.request(index)
                await client.send(trace, request.prompt, request.max_tokens)
            else:
                await client.send(trace, prompts[index % len(prompts)])
        finally:
            free.append(slot)
            slot_freed.set()

    held_until = [t_start]  # when the last wait for a slot ended

    async def dispatch() -> None:
        loop = asyncio.get_running_loop()
        for index, offset in enumerate(offsets):
            due = t_start + offset
            result.due[index] = due
            wait = due - now()
            if wait > 0:
                await asyncio.sleep(wait)
            if due < held_until[0]:  # due while an earlier request waited for a slot: queued behind it
                result.queued.add(index)
            while not free:
                result.queued.add(index)
                slot_freed.clear()
                await slot_freed.wait()
                held_until[0] = now()
            result.sent[index] = now()
            tasks.append(loop.create_task(one(index, free.pop())))

    tasks: list[asyncio.Task[None]] = []
    result.run.health.start()
    sender = asyncio.ensure_future(dispatch())
    try:
        await asyncio.wait_for(asyncio.shield(sender), max(deadline - now(), 0.0))
        pending = [t for t in tasks if not t.done()]
        if pending:
            _, still = await asyncio.wait(pending, timeout=max(deadline - now(), 0.0))
            result.run.timed_out = bool(still)
    except TIMEOUTS:
        result.run.timed_out = True
    finally:
        sender.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(sender, *tasks, return_exceptions=True)
        await result.run.health.stop()
    result.unsent = len(offsets) - len(result.sent)
    result.run.t_end = now()
    return result


def rate_fields(rate_run: RateRun, scale: float = 1.0) -> dict[str, Any]:
    """What a rate level adds to its point (rates per wall second x ``scale``, delays / ``scale``:
    the sweep's time base):

    - ``offered_rate``: the rate asked for; ``scheduled_rate``: the rate of the seeded schedule
      itself ((n - 1) / (last due - first due));
    - ``achieved_rate``: (n - 1) / (last send - first send) over the requests sent, the rate
      the server was offered in fact (below the schedule when the in-flight cap held requests
      back or the client was late);
    - ``queue_delay_ms``: per request, send time - due time (waiting for a slot, and client
      lateness), its mean/p50/p90/p99; ``queued_requests``: how many waited for a slot (found
      every slot busy, or were due while an earlier request waited for one);
    - ``max_inflight``: the cap; ``unsent``: requests due but cut by the level's deadline.
    """
    due = [rate_run.due[i] for i in sorted(rate_run.due)]
    sent = [rate_run.sent[i] for i in sorted(rate_run.sent)]
    delays = [rate_run.sent[i] - rate_run.due[i] for i in rate_run.sent]

    def rate(times: list[float]) -> float | None:
        span = (max(times) - min(times)) if len(times) > 1 else 0.0
        return round((len(times) - 1) / span * scale, 4) if span > 0 else None

    return {
        "offered_rate": round(rate_run.rate, 4),
        "scheduled_rate": rate(due),
        "achieved_rate": rate(sent),
        "max_inflight": rate_run.cap,
        "queued_requests": len(rate_run.queued),
        "queue_delay_ms": summarize([d / scale for d in delays], 1000.0),
        "unsent": rate_run.unsent,
    }
