# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Request bookkeeping and the token-dispatch loop: requests are submitted to the performance
model's ``Scheduler`` (virtual clock), each modelled step is waited out in wall time (x the time
scale) and its tokens are handed to the requests' queues; the batch log lines and the
latency observations of /metrics are made here, as SGLang's scheduler makes them."""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.config import EngineConfig
from ansible_collections.llmops.sglang.plugins.module_utils._engine.log import Log
from ansible_collections.llmops.sglang.plugins.module_utils._engine.metrics import EngineMetrics
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel import Scheduler, StepResult
from ansible_collections.llmops.sglang.plugins.module_utils._engine.prefixhook import PrefixHook
from ansible_collections.llmops.sglang.plugins.module_utils._engine.radixcache import (
    Handle,
    Match,
    PrefixCache,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.storagetier import PageStore
from ansible_collections.llmops.sglang.plugins.module_utils._engine.storeclient import StoreClient
from ansible_collections.llmops.sglang.plugins.module_utils._engine.tokens import prompt_ids
from ansible_collections.llmops.sglang.plugins.module_utils._shared.models import is_mla

DECODE_LOG_INTERVAL = 40
STORAGE_PAGE_TOKENS = 64  # the fewest tokens of a modelled storage page file
HEALTH_TIMEOUT_S = 20.0
MAMBA_CACHE_CHUNK = 64  # FLA chunk: the grid of the Mamba states a hybrid model keeps
# asyncio.wait_for raises asyncio.TimeoutError, the builtin only from Python 3.11 on
TIMEOUTS = (asyncio.TimeoutError, TimeoutError)  # noqa: UP041

Event = tuple[int, list[int], bool]  # (prompt index, new token ids, finished)


@dataclass
class Req:
    """One generation request in flight."""

    rid: str
    index: int
    prompt_tokens: int
    cached_tokens: int
    max_new: int
    stream: bool
    sink: asyncio.Queue[Event]
    rng: random.Random
    received_ts: float
    dispatch_ts: float
    submitted_at: float
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    forward_entry_ts: float = 0.0
    prefill_finished_ts: float = 0.0
    output_ids: list[int] = field(default_factory=list)
    verify_ct: int = 0
    accepted_drafts: int = 0
    accept_hist: list[int] = field(default_factory=list)
    done: bool = False
    internal: bool = False
    finish_reason: str = "length"
    matched_stop: int | None = None
    # the latency histograms' clock (RequestScheduler.metric_clock): arrival and last token
    m_submitted: float = 0.0
    m_last_token: float | None = None
    # the prefix cache: the prompt's token sequence, the hit split, the match being admitted
    # and the locked prompt
    token_ids: tuple[Hashable, ...] = ()
    cached_device: int = 0
    cached_host: int = 0
    cached_storage: int = 0
    match: Match | None = None
    handle: Handle | None = None
    # prefill/decode disaggregation (disagg.py): its KV came from a prefill instance (no prefill
    # work here), and what to do when it finishes (a prefill instance hands its KV over)
    transferred: bool = False
    on_done: Callable[[Req], None] | None = None


@dataclass
class Submission:
    """The requests of one API call (one per prompt and ``n``) and the queue of their tokens."""

    reqs: list[Req]
    sink: asyncio.Queue[Event]
    cancel: Callable[[], None]

    async def events(self) -> AsyncIterator[Event]:
        """(index, ids, done) until every request is done."""
        remaining = {r.index for r in self.reqs}
        while remaining:
            index, ids, done = await self.sink.get()
            if index not in remaining:
                continue
            if done:
                remaining.discard(index)
            yield index, ids, done

    async def drain(self) -> None:
        """Wait for every token (a non-streamed answer); cancels the requests if cancelled."""
        try:
            async for _ in self.events():
                pass
        except asyncio.CancelledError:
            self.cancel()
            raise


@dataclass
class BatchStats:
    """Decode and verify steps, for the batch log lines, server info and /metrics."""

    verify_steps: int = 0
    verify_tokens: int = 0
    decode_steps: int = 0
    window_tokens: int = 0
    window_time: float = 0.0
    last_gen_throughput: float = 0.0
    # retractions in the last decode log interval (SGLang's num_retracted_reqs gauge), and the
    # scheduler's running count at the start of it
    retracted_window: int = 0
    retracted_mark: int = 0
    # /v1/loads decode_moments (scheduler.py _accumulate_decode_moment): steps, sum of batch
    # sizes, of step microseconds (wall), of batch sizes squared, of batch x step, of tokens
    decode_moments: list[float] = field(default_factory=lambda: [0.0] * 6)


def flush_clears_host(release: str) -> bool:
    """Whether ``/flush_cache`` clears the HiCache host pool: from 0.5.23 on."""
    try:
        version = tuple(int(p) for p in release.split(".")[:3])
    except ValueError:
        return True
    return version >= (0, 5, 23)


def new_prefix_cache(config: EngineConfig) -> PrefixCache | None:
    """The radix cache of the device KV pool (and the HiCache host pool); None with
    ``--disable-radix-cache``."""
    if not config.radix_cache:
        return None
    args = config.args
    page = int(args.get("page_size") or 1)
    return PrefixCache(device_tokens=config.max_total_tokens, host_tokens=config.host_kv_tokens,
                       write_policy=str(args.get("hicache_write_policy") or "write_through"),
                       page_size=page,
                       mamba_chunk=max(MAMBA_CACHE_CHUNK, page) if config.hybrid else 0,
                       storage=new_page_store(config, page),
                       storage_gb_s=float(config.plan.constants.get(
                           "kvstore_gb_s" if args.get("hicache_storage_backend") == "mooncake" else "disk_gb_s", 2.0)),
                       storage_op_s=float(config.plan.constants.get(
                           "kvstore_page_op_ms" if args.get("hicache_storage_backend") == "mooncake"
                           else "disk_page_op_ms", 0.0)) / 1000)


def new_page_store(config: EngineConfig, page: int) -> PageStore | StoreClient | None:
    """The storage tier of ``--hicache-storage-backend file`` with HiCache on (storagetier.py): its
    folder, cap and floor from the environment, a page's bytes from the model's KV per token on
    this rank. One file per page of at least ``STORAGE_PAGE_TOKENS`` tokens (the release writes one
    per page: with --page-size 1, one per token; the bytes are the same)."""
    args = config.args
    backend = args.get("hicache_storage_backend")
    if backend not in ("file", "mooncake") or not config.host_kv_tokens:
        return None
    tokens = max(page, STORAGE_PAGE_TOKENS)
    shape, plan = config.plan.shape, config.plan
    per_token = shape.kv_bytes_per_token + (shape.draft_kv_bytes_per_token if plan.spec_algorithm else 0)
    extra = _extra_config(args.get("hicache_storage_backend_extra_config"))
    page_bytes = max(1, per_token * tokens // plan.tp_size)
    if backend == "mooncake":  # the store shared through its master (storeclient.py): rank 0's view
        return StoreClient(extra, config.served_name, tokens, page_bytes, tp_size=plan.tp_size,
                           mla=is_mla(config.model_config))
    return PageStore.from_env(os.environ, config.served_name, tokens, page_bytes,
                              mla=is_mla(config.model_config), extra_config=extra)


def _extra_config(value: Any) -> dict[str, Any]:
    """--hicache-storage-backend-extra-config: a JSON object (an ``@file`` or a bad value: none)."""
    if not isinstance(value, str) or not value.strip().startswith("{"):
        return {}
    try:
        loaded = json.loads(value)
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


class RequestScheduler:
    """The requests in flight and the loop that paces their tokens."""

    def __init__(self, config: EngineConfig, metrics: EngineMetrics, log: Log) -> None:
        self.config = config
        self.metrics = metrics
        self.log = log
        self.cache = new_prefix_cache(config)
        self.reqs: dict[str, Req] = {}
        self.prefix = PrefixHook(self.cache, self.reqs, metrics)
        self.sched = Scheduler(config.plan, prefix=self.prefix if self.cache is not None else None,
                               decode_slowdown=config.faults.decode_slowdown)
        self.wake = asyncio.Event()
        self.stats = BatchStats()
        self.flushing = False  # a /flush_cache waiting for idle
        # the step in flight: its scheduled loop-time start and the scheduler clock then
        # (metric_clock interpolates between them)
        self._step_wall0 = 0.0
        self._step_model0 = 0.0

    # -- submission --------------------------------------------------------------------
    def submit(self, prompts: list[tuple[int, str]], max_new: int, stream: bool,
               seed: Any = None, internal: bool = False, transferred: bool = False,
               on_done: Callable[[Req], None] | None = None) -> Submission:
        """One request per (token count, cache key) prompt; their tokens arrive on one queue."""
        sink: asyncio.Queue[Event] = asyncio.Queue()
        reqs: list[Req] = []
        now_wall = time.time()
        loop_now = asyncio.get_running_loop().time()
        for index, (tokens, key) in enumerate(prompts):
            rid = uuid.uuid4().hex
            digest = hashlib.sha256(f"{key}|{seed}|{index}".encode()).digest()
            req = Req(rid=rid, index=index, prompt_tokens=tokens, cached_tokens=0,
                      max_new=max(1, max_new), stream=stream, sink=sink,
                      rng=random.Random(int.from_bytes(digest[:8], "big")),
                      received_ts=now_wall, dispatch_ts=time.time(), submitted_at=loop_now,
                      internal=internal, m_submitted=self.metric_clock(loop_now),
                      token_ids=() if internal else prompt_ids(key, tokens), transferred=transferred,
                      on_done=on_done)
            self.reqs[rid] = req
            self.sched.submit(rid, max(1, tokens), req.max_new)
            reqs.append(req)
        self.wake.set()
        return Submission(reqs, sink, lambda: self.cancel(reqs))

    def is_idle(self) -> bool:
        """No request waiting or running (SGLang's ``Scheduler.is_fully_idle``)."""
        return not self.reqs

    def flush(self) -> bool:
        """``/flush_cache`` when idle: the radix tree and the device pool, the speculative
        counters behind ``avg_spec_accept_length``, and (release >= 0.5.23) the HiCache host
        pool; False when not idle."""
        if not self.is_idle():
            self.log.warning(f"Cache not flushed because there are pending requests. #queue-req: "
                             f"{self.num_queued()}, #running-req: {self.num_running()}")
            return False
        if self.cache is not None:
            self.cache.reset(clear_host=flush_clears_host(self.config.release))
        self.stats.verify_steps = self.stats.verify_tokens = 0
        self.log.info("Cache flushed successfully!")
        return True

    def cancel(self, reqs: list[Req]) -> None:
        for req in reqs:
            if not req.done and req.rid in self.reqs:
                try:
                    self.sched.cancel(req.rid)
                except (KeyError, ValueError):
                    pass
                self.reqs.pop(req.rid, None)
                req.done = True
                self.prefix.release(req, finished=False)

    async def one_token(self) -> bool:
        """A one-token generation through the scheduler (health checks, the warm-up)."""
        sub = self.submit([(1, "health")], 1, False, internal=True)

        async def _wait() -> bool:
            while True:
                _, _, done = await sub.sink.get()
                if done:
                    return True

        try:
            return await asyncio.wait_for(_wait(), timeout=HEALTH_TIMEOUT_S)
        except TIMEOUTS:
            self.cancel(sub.reqs)
            return False

    # -- the loop ----------------------------------------------------------------------
    async def run(self) -> None:
        """Step the model; wait each step out (x time scale), then hand its tokens out."""
        loop = asyncio.get_running_loop()
        target: float | None = None
        while True:
            res = self.sched.step()
            if res is None:
                target = None
                if self.reqs:  # finished bookkeeping for anything the model dropped
                    for req in list(self.reqs.values()):
                        self._finish(req, loop.time())
                self.wake.clear()
                await self.wake.wait()
                continue
            now = loop.time()
            if target is None or target < now - 0.05:
                target = now
            self._step_wall0 = target
            self._step_model0 = self.sched.clock - float(res.dt)
            target += float(res.dt) * self.config.time_scale
            delay = target - loop.time()
            await asyncio.sleep(delay if delay > 0.0005 else 0)
            self._dispatch(res, loop.time())

    def metric_clock(self, now: float) -> float:
        """The clock of the latency histograms (TTFT, ITL, e2e, queue time, prefill stage).

        At time scale 1 the event loop's time, like a real server. Time-scaled, the modelled GPU
        time: the scheduler's virtual clock, inside the step in flight interpolated from the
        step's scheduled start (never past the step's end), so a request that arrives during a
        step is stamped where it arrived. The histograms then hold the engine's own model,
        free of the event loop's jitter that wall-clock gaps divided by the scale would magnify.
        """
        scale = self.config.time_scale
        if scale == 1.0:
            return now
        clock = float(self.sched.clock)
        if scale <= 0:
            return clock
        return min(clock, self._step_model0 + max(0.0, now - self._step_wall0) / scale)

    # -- one step's tokens -------------------------------------------------------------
    def _dispatch(self, res: StepResult, now: float) -> None:
        scale = self.config.time_scale
        dt_wall = float(res.dt) * scale
        # histogram clock: a dispatched step ends exactly at the scheduler clock
        scaled = scale != 1.0
        mnow = float(self.sched.clock) if scaled else now
        dt_metric = float(res.dt) if scaled else dt_wall
        finished = set(res.finished or [])
        new_seqs = [self.reqs[r] for r in set(res.first_token or []) if r in self.reqs]
        decode_tokens = 0
        decode_batch = 0
        for rid, count in res.emitted or []:
            req = self.reqs.get(rid)
            if req is None or count <= 0:
                continue
            tokens, decoded = self._emit(req, int(count), now, mnow, rid in finished)
            decode_tokens += tokens
            decode_batch += int(decoded)
        if new_seqs:
            self._after_prefill(new_seqs, now, mnow, dt_metric, dt_wall)
        if decode_batch:
            self._after_decode(decode_tokens, dt_wall, decode_batch)
        for rid in finished:
            req = self.reqs.get(rid)
            if req is not None:
                self._finish(req, now, mnow)

    def _emit(self, req: Req, count: int, now: float, mnow: float, done: bool) -> tuple[int, bool]:
        """Hand ``count`` new tokens to ``req``: (tokens that count as decoded, whether this was
        a decode / verify step for it)."""
        ids = [req.rng.randrange(3, self.config.vocab_size) for _ in range(count)]
        decoded = bool(req.output_ids)
        if decoded:
            self._observe_verify(req, ids, mnow)
        else:
            req.first_token_at = now
            req.prefill_finished_ts = time.time()
            if not req.internal:
                self.metrics.observe_first_token(req.stream, mnow - req.m_submitted)
        req.last_token_at = now
        req.m_last_token = mnow
        req.output_ids.extend(ids)
        req.sink.put_nowait((req.index, ids, done))
        return (len(ids) if decoded else len(ids) - 1), decoded

    def _observe_verify(self, req: Req, ids: list[int], mnow: float) -> None:
        """A decode (or verify) step of ``req``: accept statistics and inter-token latency."""
        req.verify_ct += 1
        accepted = len(ids) - 1
        req.accepted_drafts += accepted
        if self.config.spec:
            self.stats.verify_steps += 1
            self.stats.verify_tokens += len(ids)
            while len(req.accept_hist) <= accepted:
                req.accept_hist.append(0)
            req.accept_hist[accepted] += 1
        if req.m_last_token is not None:
            self.metrics.observe_inter_token((mnow - req.m_last_token) / len(ids), len(ids))

    def _after_prefill(self, new_seqs: list[Req], now: float, mnow: float, dt_metric: float,
                       dt_wall: float) -> None:
        for req in new_seqs:
            if req.first_token_at is None:
                req.first_token_at = now
            req.forward_entry_ts = req.forward_entry_ts or time.time()
            self.metrics.observe_prefill(max(0.0, mnow - req.m_submitted - dt_metric), dt_metric)
        self.metrics.steps_prefill += 1
        self._log_prefill(new_seqs, dt_wall)

    def _after_decode(self, decode_tokens: int, dt_wall: float, batch: int) -> None:
        stats = self.stats
        step_us = float(int(dt_wall * 1e6))
        if step_us > 0:
            for i, value in enumerate((1.0, batch, step_us, batch * batch, batch * step_us,
                                       decode_tokens)):
                stats.decode_moments[i] += value
        self.metrics.steps_decode += 1
        stats.decode_steps += 1
        stats.window_tokens += decode_tokens
        stats.window_time += dt_wall
        self.metrics.realtime["decode"] += decode_tokens
        if stats.decode_steps % DECODE_LOG_INTERVAL == 0:
            stats.last_gen_throughput = (stats.window_tokens / stats.window_time
                                         if stats.window_time > 0 else 0.0)
            stats.retracted_window = self.sched.retracted - stats.retracted_mark
            stats.retracted_mark = self.sched.retracted
            self._log_decode()
            stats.window_tokens = 0
            stats.window_time = 0.0

    def _finish(self, req: Req, now: float, mnow: float | None = None) -> None:
        if req.done:
            return
        req.done = True
        req.finished_at = now
        self.reqs.pop(req.rid, None)
        self.prefix.release(req, finished=True)
        req.sink.put_nowait((req.index, [], True))
        if req.on_done is not None:
            req.on_done(req)
        if not req.internal:
            e2e = (self.metric_clock(now) if mnow is None else mnow) - req.m_submitted
            self.metrics.observe_finished(req.stream, req.prompt_tokens, req.cached_device,
                                          req.cached_host, len(req.output_ids), e2e, req.cached_storage,
                                          received=max(req.prompt_tokens - 1, 0) if req.transferred else 0)

    # -- state for logs, metrics and server info ----------------------------------------
    def num_running(self) -> int:
        return self.sched.num_running

    def num_queued(self) -> int:
        return self.sched.num_queued

    def used_tokens(self) -> int:
        return sum(r.prompt_tokens + len(r.output_ids) for r in self.reqs.values())

    def token_usage(self) -> float:
        total = self.config.max_total_tokens
        return self.used_tokens() / total if total else 0.0

    def avg_accept_length(self) -> float:
        stats = self.stats
        return stats.verify_tokens / stats.verify_steps if stats.verify_steps else 1.0

    def accept_rate(self) -> float:
        drafts = int(self.config.args.get("speculative_num_draft_tokens") or 1) - 1
        if not self.stats.verify_steps or drafts <= 0:
            return 0.0
        return max(0.0, (self.avg_accept_length() - 1.0) / drafts)

    def _mamba_usage(self, running: int) -> float:
        return running / max(self.config.mamba_slots, 1)

    def _log_prefill(self, new_seqs: list[Req], dt_wall: float) -> None:
        new_tokens = sum(r.prompt_tokens - r.cached_tokens for r in new_seqs)
        cached = sum(r.cached_tokens for r in new_seqs)
        usage = f"token usage: {self.token_usage():.2f}, "
        if self.config.hybrid:
            usage = (f"full token usage: {self.token_usage():.2f}, mamba usage: "
                     f"{self._mamba_usage(self.num_running()):.2f}, ")
        running = max(0, self.num_running() - len(new_seqs))
        throughput = new_tokens / dt_wall if dt_wall > 0 else 0.0
        graph = "True" if running + len(new_seqs) <= self.config.graph_max_bs else "False"
        self.log.info(f"Prefill batch, #new-seq: {len(new_seqs)}, #new-token: {new_tokens}, "
                      f"#cached-token: {cached}, {usage}#running-req: {running}, "
                      f"#queue-req: {self.num_queued()}, #pending-token: 0, cuda graph: "
                      f"{graph}, input throughput (token/s): {throughput:.2f}")

    def _log_decode(self) -> None:
        running = self.num_running()
        graph = "True" if running <= self.config.graph_max_bs else "False"
        spec = ""
        if self.config.spec:
            spec = (f"accept len: {self.avg_accept_length():.2f}, accept rate: "
                    f"{self.accept_rate():.2f}, ")
        if self.config.hybrid:
            head = (f"#running-req: {running}, #full token: {self.used_tokens()}, full token "
                    f"usage: {self.token_usage():.2f}, mamba num: {running * 3}, mamba usage: "
                    f"{self._mamba_usage(running):.2f}, ")
        else:
            head = (f"#running-req: {running}, #token: {self.used_tokens()}, token usage: "
                    f"{self.token_usage():.2f}, ")
        self.log.info(f"Decode batch, {head}{spec}cuda graph: {graph}, gen throughput "
                      f"(token/s): {self.stats.last_gen_throughput:.2f}, #queue-req: "
                      f"{self.num_queued()}")


def clear_storage(sched: RequestScheduler) -> bool:
    """The storage tier's pages (``/hicache/storage-backend/clear``, any time: the release does not
    wait for idle): True with HiCache on (a server without a storage tier has nothing to clear)."""
    if not sched.config.host_kv_tokens:
        sched.log.warning("Hierarchical cache is not enabled.")
        return False
    if sched.cache is not None and sched.cache.storage is not None:
        sched.cache.storage.clear()
    sched.log.info("Hierarchical cache cleared successfully!")
    return True
