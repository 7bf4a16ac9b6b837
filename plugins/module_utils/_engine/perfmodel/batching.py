# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Continuous batching on a virtual clock (docs/engine.md "Scheduler"): the simulated SGLang
scheduler the engine paces its tokens with, and a closed-loop benchmark level on it."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.plan import EnginePlan
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.steps import (
    accepted_tokens,
    decode_step_seconds,
    load_back_seconds,
    prefill_seconds,
)


class PrefixHook(Protocol):
    """The prefix cache as the scheduler sees it (``radixcache`` through the engine)."""

    def match(self, req_id: str) -> tuple[int, int]:
        """(device, host) tokens of the request's prompt cached now (host: everything loaded back
        to the device, the storage tier's pages read into the host pool included)."""

    def admitted(self, req_ids: list[str]) -> None:
        """These requests were admitted to a prefill (their prompts become cached)."""

    def io_seconds(self) -> float:
        """The storage tier's disk time (pages read and written) since the last call."""


@dataclass
class StepResult:
    dt: float
    emitted: list[tuple[str, int]] = field(default_factory=list)
    first_token: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    kind: str = "decode"  # "prefill" | "decode"


@dataclass
class _Req:
    req_id: str
    prompt: int
    max_new: int
    generated: int = 0
    steps: int = 0
    ready_at: float = 0.0  # virtual time the request reaches the scheduler
    cached: int = 0  # prompt tokens the prefix cache holds (device + host)
    loaded: int = 0  # of which loaded back from the HiCache host pool

    @property
    def extend(self) -> int:
        """Prompt tokens the prefill computes."""
        return max(1, self.prompt - self.cached)

    @property
    def context(self) -> int:
        return self.prompt + self.generated


class Scheduler:
    """Continuous batching on a virtual clock (deterministic; no threads, no sleeping).

    Each ``step()`` is either a prefill of newly admitted requests (first token of each) or
    one decode / speculative verify round of all running requests, like SGLang's scheduler
    loop with prefill priority. Requests beyond ``max_running_requests`` (or beyond the KV
    token budget) wait in a FIFO queue.

    A submitted request reaches the scheduler only after the front end has handled it: a fixed
    latency (HTTP, chat template, tokenization, IPC, and the detokenizer/streaming path of its
    first token) plus a per-request cost served one request at a time (the tokenizer manager),
    so a burst of requests arrives spread out: the first is prefilled alone, the rest in the
    next prefill (what the H200 run shows). While requests decode, the front end overlaps the
    GPU; with nothing running, the wait is part of the next prefill step's ``dt``.

    ``decode_slowdown`` multiplies every decode step's modelled time (an injected fault,
    ``LLMOPS_SIM_DECODE_SLOWDOWN``; 1: the model as planned).
    """

    def __init__(self, plan: EnginePlan, prefix: PrefixHook | None = None,
                 decode_slowdown: float = 1.0) -> None:
        self.plan = plan
        self.prefix = prefix
        self.decode_slowdown = float(decode_slowdown)
        self._queue: deque[_Req] = deque()
        self._running: list[_Req] = []
        self._clock = 0.0
        self._ratio = float(plan.constants.get("init_new_token_ratio", 0.7))
        self._frontend_s = float(plan.constants.get("frontend_latency_s", 0.0))
        self._frontend_per_req_s = float(plan.constants.get("frontend_per_request_s", 0.0))
        self._frontend_free = 0.0
        self.retracted = 0  # requests retracted so far (the /metrics num_retracted_reqs window)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_queued(self) -> int:
        return len(self._queue)

    @property
    def clock(self) -> float:
        return self._clock

    @property
    def tokens_in_use(self) -> int:
        return sum(r.context for r in self._running)

    def submit(self, req_id: str, prompt_tokens: int, max_new_tokens: int) -> None:
        req = _Req(req_id, max(int(prompt_tokens), 1), max(int(max_new_tokens), 1))
        self._frontend_free = max(self._clock, self._frontend_free) + self._frontend_per_req_s
        req.ready_at = self._frontend_free + self._frontend_s
        self._queue.append(req)

    def cancel(self, req_id: str) -> None:
        self._queue = deque(r for r in self._queue if r.req_id != req_id)
        self._running = [r for r in self._running if r.req_id != req_id]

    def _reserved(self) -> float:
        return sum(r.context + (r.max_new - r.generated) * self._ratio for r in self._running)

    def _admit(self, now: float) -> list[_Req]:
        plan = self.plan
        admitted: list[_Req] = []
        budget = plan.max_prefill_tokens
        reserved = self._reserved()
        while self._queue and len(self._running) + len(admitted) < plan.max_running_requests:
            req = self._queue[0]
            if req.ready_at > now + 1e-12:
                break
            if self.prefix is not None:
                req.cached, req.loaded = self._match(req)
            need = req.prompt + req.max_new * self._ratio
            if admitted and req.extend > budget:
                break
            if (self._running or admitted) and reserved + need > plan.max_total_num_tokens:
                break
            self._queue.popleft()
            admitted.append(req)
            budget -= req.extend
            reserved += need
        if admitted and self.prefix is not None:
            self.prefix.admitted([r.req_id for r in admitted])
        return admitted

    def _match(self, req: _Req) -> tuple[int, int]:
        if self.prefix is None:
            return 0, 0
        device, host = self.prefix.match(req.req_id)
        cached = max(0, min(int(device) + int(host), req.prompt - 1))
        return cached, max(0, min(int(host), cached))

    def step(self) -> StepResult | None:
        if not self._queue and not self._running:
            return None
        wait = 0.0
        if not self._running and self._queue:
            # idle GPU: the next step starts when the head of the queue reaches the scheduler
            wait = max(0.0, self._queue[0].ready_at - self._clock)
        admitted = self._admit(self._clock + wait)
        if admitted:
            return self._prefill(admitted, wait)
        if not self._running:
            # Nothing fits (a single request larger than the KV pool): run it alone anyway.
            req = self._queue.popleft()
            self._running.append(req)
            return self.step()
        return self._decode()

    def _prefill(self, admitted: list[_Req], wait: float) -> StepResult:
        """Prefill the admitted requests: each gets its first token."""
        dt = wait + prefill_seconds(self.plan, sum(r.extend for r in admitted), len(admitted))
        loaded = [r for r in admitted if r.loaded]
        if loaded:
            dt += load_back_seconds(self.plan, sum(r.loaded for r in loaded), len(loaded))
        if self.prefix is not None:  # the storage tier's reads for these prompts, its writes so far
            dt += self.prefix.io_seconds()
        result = StepResult(dt=dt, kind="prefill")
        for req in admitted:
            req.generated = 1
            result.emitted.append((req.req_id, 1))
            result.first_token.append(req.req_id)
            if req.generated >= req.max_new:
                result.finished.append(req.req_id)
            else:
                self._running.append(req)
        self._clock += dt
        return result

    def _decode(self) -> StepResult:
        """One decode / verify round of every running request."""
        dt = decode_step_seconds(self.plan, len(self._running), self.tokens_in_use)
        dt *= self.decode_slowdown
        result = StepResult(dt=dt)
        spec = self.plan.spec_algorithm is not None
        still: list[_Req] = []
        for req in self._running:
            gain = accepted_tokens(self.plan.accept_length, req.steps) if spec else 1
            gain = max(1, min(gain, req.max_new - req.generated))
            req.generated += gain
            req.steps += 1
            result.emitted.append((req.req_id, gain))
            if req.generated >= req.max_new:
                result.finished.append(req.req_id)
            else:
                still.append(req)
        self._running = still
        self._retract()
        self._clock += dt
        return result

    def _retract(self) -> None:
        """Retract the newest request while the KV pool overflows (SGLang retraction)."""
        while len(self._running) > 1 and self.tokens_in_use > self.plan.max_total_num_tokens:
            victim = self._running.pop()
            self.retracted += 1
            victim.prompt += victim.generated
            victim.max_new -= victim.generated
            victim.generated = 0
            victim.cached = victim.loaded = 0
            self._queue.appendleft(victim)


def simulate_level(
    plan: EnginePlan,
    concurrency: int,
    n_requests: int,
    max_tokens: int,
    prompt_tokens: int = 64,
) -> dict[str, Any]:
    """Closed-loop benchmark level on the virtual clock (like the seed's sweep)."""
    sched = Scheduler(plan)
    start: dict[str, float] = {}
    ttft: list[float] = []
    latency: list[float] = []
    tokens = max_running = 0

    def send() -> None:
        rid = f"r{len(start)}"
        sched.submit(rid, prompt_tokens, max_tokens)
        start[rid] = sched.clock

    for _ in range(min(concurrency, n_requests)):
        send()
    while True:
        res = sched.step()
        if res is None:
            break
        max_running = max(max_running, sched.num_running)
        tokens += sum(n for _, n in res.emitted)
        ttft += [sched.clock - start[rid] for rid in res.first_token]
        for rid in res.finished:
            latency.append(sched.clock - start[rid])
            if len(start) < n_requests:
                send()
    wall = sched.clock
    return {
        "concurrency": concurrency,
        "n": n_requests,
        "output_tokens": tokens,
        "wall_s": wall,
        "output_tok_s": tokens / wall if wall > 0 else 0.0,
        "mean_ttft_s": sum(ttft) / len(ttft) if ttft else 0.0,
        "mean_latency_s": sum(latency) / len(latency) if latency else 0.0,
        "max_running": max_running,
    }
