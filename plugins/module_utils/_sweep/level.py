# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""One level: C closed-loop clients over the level's requests (``run_level``), the client's own
health (event-loop lag, CPU) and the raw result (``LevelRun``).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ansible_collections.llmops.sglang.plugins.module_utils._bench.stats import percentile
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.client import Client
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import TICK_S
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.trace import Trace
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.workloads import Workload, render_chat

SCHEDSTAT = "/proc/thread-self/schedstat"


def run_delay_s(path: str = SCHEDSTAT) -> float | None:
    """Seconds this thread has waited on a run queue (runnable, but another process had the
    CPU) since it started: Linux's schedstat, second field; None where there is none."""
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class Health:
    """Event-loop lag (a 10 ms ticker) and process CPU time over a level. Each tick's lag is
    also kept without the time the thread waited for a CPU that other processes held
    (``run_delay_s``): what the client's own work delayed, which a busy machine cannot move."""

    def __init__(self, run_delay=run_delay_s) -> None:
        self.lags: list[float] = []
        self.own_lags: list[float] | None = []
        self._run_delay = run_delay
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = 0.0
        self._wall0 = 0.0
        self.cpu_util: float | None = None

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + TICK_S
        waited = self._run_delay()
        if waited is None:
            self.own_lags = None
        while True:
            await asyncio.sleep(max(0.0, due - loop.time()))
            now = loop.time()
            lag = max(0.0, now - due)
            self.lags.append(lag)
            if waited is not None:
                later = self._run_delay()
                if later is None:
                    self.own_lags, waited = None, None
                else:
                    self.own_lags.append(max(0.0, lag - max(0.0, later - waited)))
                    waited = later
            due = now + TICK_S

    def start(self) -> None:
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        wall = time.perf_counter() - self._wall0
        cpu = time.process_time() - self._cpu0
        self.cpu_util = round(cpu / wall, 3) if wall > 0 else None
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    @property
    def lag_ms_p99(self) -> float | None:
        value = percentile(self.lags, 99)
        return None if value is None else round(value * 1000.0, 3)

    @property
    def own_lag_ms_p99(self) -> float | None:
        """The lag p99 less the run-queue waits; None where the kernel does not tell them."""
        value = percentile(self.own_lags, 99) if self.own_lags else None
        return None if value is None else round(value * 1000.0, 3)


@dataclass
class LevelShare:
    """The part of a level one client process runs (workers.split_level): ``workers``
    closed-loop clients with ids from ``worker_offset``, ``requests`` of them (None: duration
    mode) with request indices ``first_index``, ``first_index + step``, ..."""

    workers: int
    requests: int | None
    first_index: int = 0
    step: int = 1
    worker_offset: int = 0


@dataclass
class LevelRun:
    level: int
    concurrency: int
    traces: list[Trace]
    timed_out: bool
    health: Health
    t_start: float
    t_end: float


async def run_level(
    client: Client,
    level: int,
    concurrency: int,
    deadline: float,
    prompts: Sequence[str],
    warmup_tokens: int | None = None,
    share: LevelShare | None = None,
) -> LevelRun:
    """C closed-loop clients: each sends, waits for the end of the response, sends again, until
    the level's request count is used up (or ``duration`` passed); cut at ``deadline``.

    With ``warmup_tokens``: the level's warm-up round instead, never part of the level's
    numbers: max(C, number of prompts) requests at concurrency C (every prompt's shape goes
    through the server once), with staggered lengths (``warmup_level_tokens``) so that the C
    requests in flight finish one by one and the server runs every batch size from C down
    to 1, as the level's own draining tail will. A real server compiles kernels at the first
    batch of each new shape (seen on an H200: a sweep on a fresh server was 40% slower).

    With ``share``: this process's part of a level spread over several client processes.
    """
    opts = client.opts
    if warmup_tokens is not None:
        total: int | None = max(concurrency, len(prompts))
    else:
        total = opts.requests_for(concurrency)
    if share is None:
        share = LevelShare(concurrency, total)
    total = share.requests
    traces: list[Trace] = []
    # the warm-up round keeps the sweep's prompts: it must not fill the prefix cache with the level's
    workload = getattr(client, "workload", None) if warmup_tokens is None else None
    counter = {"next": 0}
    t_start = time.perf_counter()
    stop_sending_at = (
        t_start + opts.duration if opts.duration is not None and warmup_tokens is None else None
    )

    def claim() -> int | None:
        idx = counter["next"]
        if total is not None and idx >= total:
            return None
        if stop_sending_at is not None and time.perf_counter() >= stop_sending_at:
            return None
        counter["next"] = idx + 1
        return share.first_index + idx * share.step

    async def worker(wid: int) -> None:
        while True:
            idx = claim()
            if idx is None:
                return
            if workload is not None and workload.conversational:
                await converse(client, workload, level, concurrency, idx, wid, traces)
                continue
            trace = Trace(level=level, concurrency=concurrency, index=idx, worker=wid)
            traces.append(trace)
            if workload is not None:  # the level's requests come from the workload
                request = workload.request(idx)
                await client.send(trace, request.prompt, request.max_tokens)
                continue
            tokens = warmup_level_tokens(warmup_tokens, concurrency, idx) if warmup_tokens is not None else None
            await client.send(trace, prompts[idx % len(prompts)], tokens)

    health = Health()
    health.start()
    tasks = [asyncio.ensure_future(worker(share.worker_offset + w)) for w in range(share.workers)]
    remaining = max(0.0, deadline - time.perf_counter())
    try:
        _, pending = await asyncio.wait(tasks, timeout=remaining)
    finally:  # cut by the deadline, or the sweep itself cancelled (interrupted): no client goes on
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await health.stop()
    return LevelRun(level, concurrency, traces, bool(pending), health, t_start, time.perf_counter())


async def converse(client: Client, workload: Workload, level: int, concurrency: int, index: int, wid: int,
                   traces: list[Trace]) -> None:
    """Conversation ``index`` of a multi-turn workload: its turns one after the other (a think
    time before each later turn), each turn's prompt the conversation so far with the server's
    replies as the assistant turns. A failed turn ends the conversation."""
    history: list[dict[str, str]] = []
    for turn, request in enumerate(workload.conversation(index)):
        pause = workload.think(index, turn)
        if pause > 0:
            await asyncio.sleep(pause)
        history.append({"role": "user", "content": request.prompt})
        trace = Trace(level=level, concurrency=concurrency, index=index, worker=wid)
        traces.append(trace)
        reply = await client.send(trace, render_chat(history), request.max_tokens, keep_text=True)
        if not trace.ok:
            return
        history.append({"role": "assistant", "content": reply})


def warmup_level_tokens(base: int, concurrency: int, index: int) -> int:
    """max_tokens of warm-up request ``index`` at concurrency C: base, base + step, ... base +
    (C-1) x step (step = base / 4): the requests in flight end one after another."""
    return base + (index % max(concurrency, 1)) * max(1, base // 4)
