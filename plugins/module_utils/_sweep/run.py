# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The sweep: warm-up, levels in order (one process or a pool of client processes), server
snapshots and /metrics deltas, plateau and timeouts, interrupts and heartbeat, the result.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench.interrupt import Heartbeat, Interrupts
from ansible_collections.llmops.sglang.plugins.module_utils._bench.stats import (
    clean,
    find_knee,
    find_peak,
    gain_per_doubling,
)
from ansible_collections.llmops.sglang.plugins.module_utils._shared import servermetrics as _servermetrics
from ansible_collections.llmops.sglang.plugins.module_utils._sweep import cachestate
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.client import (
    AIOHTTP_IMPORT_ERROR,
    HAS_AIOHTTP,
    Client,
    open_session,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import (
    AUTH_STATUSES,
    DEFAULT_PROMPTS,
    DRIFT_THRESHOLD,
    ERROR_KINDS,
    LATENCY_TOLERANCE,
    METRICS_PATH,
    SCHEMA_VERSION,
    TIMEOUTS,
    SweepError,
    SweepInterrupted,
    auth_message,
    utc_now_iso,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.curve import (
    error_warning,
    oversubscription_warning,
    plateau_reached,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.histograms import (
    parse_histograms,
    server_latency,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.level import LevelRun, run_level
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.options import (
    SweepOptions,
    raise_open_files,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.plan import LevelPlan, search_fact
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.probe import Probe, server_summary
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.ratelevel import run_rate_level
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.sides import WorkerScrapes
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.summary import (
    summarize_level,
    summarize_warmup,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.timebase import (
    check_latency,
    to_model_time,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.trace import Trace, trace_record
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.workers import (
    ClientPool,
    ClientProcessError,
    auto_limit,
    escalation_entry,
)

_NO_INFO: dict[str, Any] = {**server_summary({}), "ok": False, "path": None, "error": "sweep_timeout", "at": None}


async def _within(awaitable: Any, deadline: float, default: Any) -> Any:
    """Await a probe, giving up (with ``default``) at the sweep deadline."""
    try:
        return await asyncio.wait_for(awaitable, max(deadline - time.perf_counter(), 0.001))
    except TIMEOUTS:
        return default


class _ServerMetrics:
    """The /metrics of the server a sweep measures: its histograms before and after each level (a
    server without /metrics is asked once) and its gauges sampled while a level runs."""

    def __init__(self, probe: Probe, url: str, warnings: list[str]) -> None:
        self.probe, self.url, self.warnings = probe, url, warnings
        self.ok: bool | None = None  # None: /metrics not asked yet
        self.scrape: dict[str, Any] | None = None  # the last /metrics read (_servermetrics.parse)

    async def snapshot(self, when: str) -> dict[str, dict[str, Any]] | None:
        """/metrics histograms; a server without /metrics is asked once."""
        if self.ok is False:
            return None
        text, error = await self.probe.metrics_text()
        if text is None:
            if self.ok is None:
                self.ok = False
                self.warnings.append(
                    f"no server-side latency: {self.url}{METRICS_PATH} answered {error} "
                    "(SGLang serves it with --enable-metrics; the profiles turn it on)"
                )
            else:
                self.warnings.append(f"{METRICS_PATH} unreadable {when} ({error}): no server-side latency there")
            return None
        self.ok = True
        self.scrape = _servermetrics.parse(text)
        return parse_histograms(text)

    async def sample(self, samples: _servermetrics.GaugeSamples, time_scale: Any) -> None:
        """Read /metrics every sample interval while a level runs (cancelled when it ends; one
        read at a time, each bounded by the probe timeout), for its gauges' mean and max."""
        interval = _servermetrics.sample_interval(time_scale)
        while True:
            await asyncio.sleep(interval)
            text, _ = await self.probe.metrics_text()
            if text is not None:
                samples.add(_servermetrics.parse(text))


class _Clients:
    """Where a level's clients run: in this process, or spread over client processes
    (``client_processes``; auto doubles them on a client-limited level), and the schedule of the
    open-loop level to run (``rate_plan``, set by plan.LevelPlan.rate_level)."""

    def __init__(self, opts: SweepOptions, probe: Probe, prompts: list[str]) -> None:
        self.opts, self.probe, self.prompts = opts, probe, prompts
        self.processes = max(opts.client_processes, 1)  # auto starts at 1
        self.pool: ClientPool | None = None  # started at the first level that needs it
        self.rate_plan: tuple[float, list[float]] | None = None  # (rate, offsets) of the rate level to run
        self.last_rate_run: Any = None  # the last rate level's ratelevel.RateRun

    async def warm(self, concurrency: int, model: str | None) -> None:
        """Open the level's connections: this process's (for the level warm-up) and, when the
        level runs in several client processes, each one's share of them."""
        await self.probe.warm_connections(concurrency)
        if min(self.processes, concurrency) > 1:
            try:
                await self._pool(model).warm(concurrency, self.processes)
            except ClientProcessError as exc:
                raise SweepError(f"{exc}; the sweep stopped (client_processes={self.processes})") from None

    async def run(self, client: Client, level: int, concurrency: int, deadline: float) -> LevelRun:
        """The level's C clients: in this process, or spread over ``self.processes``."""
        if self.rate_plan is not None:  # an open-loop level (plan.LevelPlan.rate_level), one process
            self.last_rate_run = await run_rate_level(client, level, self.rate_plan[0], self.rate_plan[1],
                                                      concurrency, deadline, self.prompts)
            return self.last_rate_run.run
        if min(self.processes, concurrency) <= 1:
            return await run_level(client, level, concurrency, deadline, self.prompts)
        try:
            return await self._pool(client.model).run_level(level, concurrency, deadline, self.processes)
        except ClientProcessError as exc:
            raise SweepError(f"{exc}; the sweep stopped (client_processes={self.processes})") from None

    def _pool(self, model: str | None) -> ClientPool:
        if self.pool is None:
            self.pool = ClientPool(self.opts, model)
        return self.pool

    def close(self) -> None:
        """End the client processes (at once when they are in the middle of a level)."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None


class _SweepRun:
    """One sweep in progress: its options, session, client and what it has found so far; its
    server's /metrics (``_ServerMetrics``), where its clients run (``_Clients``) and the levels
    beyond plain closed-loop ones (``plan.LevelPlan``) are its collaborators."""

    def __init__(self, opts: SweepOptions, session: Any) -> None:
        self.opts = opts
        self.t0 = time.perf_counter()
        self.t0_unix = time.time()  # records' start_s/end_s on a clock other sweeps share
        self.deadline = self.t0 + opts.sweep_timeout
        self.warnings: list[str] = []
        self.points: list[dict[str, Any]] = []
        self.records: list[dict[str, Any]] = []
        self.stopped_on_plateau = False
        self.stopped_on_timeout = False
        self.probe = Probe(opts, session)
        self.session = session
        self.prompts = list(opts.prompts or DEFAULT_PROMPTS)
        self.metrics = _ServerMetrics(self.probe, opts.url, self.warnings)
        self.clients = _Clients(opts, self.probe, self.prompts)
        self.model: str | None = opts.model
        self.client: Client | None = None
        self.before: dict[str, Any] = {}
        self.after: dict[str, Any] = {}
        self.warm_ok = 0
        self.current: int | None = None  # the level in progress
        self.on_level: Callable[[dict[str, Any]], None] | None = None  # told of each finished level
        self.search_result: dict[str, Any] | None = None

    def timeout(self, where: str) -> None:
        self.stopped_on_timeout = True
        self.warnings.append(f"sweep_timeout={self.opts.sweep_timeout:g}s reached {where}")

    def check_auth(self, statuses: Iterable[int | None] = ()) -> None:
        """Stop with what to set when the server refused a probe or a request for its API key."""
        status = self.probe.denied or next((s for s in statuses if s in AUTH_STATUSES), None)
        if status is not None:
            raise SweepError(auth_message(self.opts.url, status, bool(self.opts.api_key)))

    async def resolve_model(self) -> None:
        if self.model is not None:
            return
        self.model, error = await self.probe.model()
        self.check_auth()
        if self.model is None and self.opts.api == "openai":
            raise SweepError(
                f"cannot learn the model name from {self.opts.url}/v1/models ({error}); "
                "is the server up? Set the model option to skip this lookup."
            )
        if self.model is None:
            self.warnings.append(f"no model from /v1/models ({error}); native requests sent without one")

    async def sampled_level(self, level: int, concurrency: int, deadline: float,
                            samples: _servermetrics.GaugeSamples | None,
                            workers: WorkerScrapes | None = None) -> LevelRun:
        """``run_clients`` with /metrics sampled beside it (when the server serves /metrics), and
        the workers' (``worker_metrics``)."""
        time_scale = self.before.get("time_scale") or self.opts.time_scale  # a router reports none: the workers'
        samplers = [asyncio.ensure_future(task) for task in (
            self.metrics.sample(samples, time_scale) if samples is not None else None,
            workers.sample(_servermetrics.sample_interval(time_scale)) if workers is not None else None,
        ) if task is not None]
        if self.client is None:
            raise AssertionError("the client is made before the levels")
        try:
            return await self.clients.run(self.client, level, concurrency, deadline)
        finally:
            for sampler in samplers:
                sampler.cancel()
            await asyncio.gather(*samplers, return_exceptions=True)

    async def initial_warmup(self) -> None:
        """``warmup`` requests one after the other before the first level, not measured."""
        client = self.client
        if client is None:
            raise AssertionError("the client is made before the warm-up")
        for i in range(self.opts.warmup):
            trace = Trace(level=-1, concurrency=1, index=i, worker=0)
            remaining = self.deadline - time.perf_counter()
            try:
                await asyncio.wait_for(client.send(trace, self.prompts[i % len(self.prompts)]),
                                       max(remaining, 0.001))
            except TIMEOUTS:
                trace.fail("timeout", "sweep_timeout reached during warm-up")
            self.check_auth([trace.http_status])
            if trace.ok:
                self.warm_ok += 1
            else:
                self.warnings.append(f"warm-up request {i} failed ({trace.error_kind}): {trace.error}")

    async def level_warmup(self, level: int, concurrency: int) -> dict[str, Any] | None:
        """The level's discarded warm-up round (``run_level`` with warmup_tokens), summarized."""
        if not self.opts.level_warmup or self.client is None:
            return None
        deadline = min(time.perf_counter() + self.opts.level_timeout, self.deadline)
        warm_run = await run_level(self.client, level, concurrency, deadline, self.prompts,
                                   warmup_tokens=self.opts.level_warmup_tokens)
        if not self.points:  # a key problem shows at the first level; later 401s are level errors
            self.check_auth(t.http_status for t in warm_run.traces)
        warm = summarize_warmup(warm_run, self.opts.level_warmup_tokens)
        if warm["errors"]["total"]:
            kinds = ", ".join(f"{k} {warm['errors'][k]}" for k in ERROR_KINDS if warm["errors"][k])
            self.warnings.append(
                f"C={concurrency}: {warm['errors']['total']} of {warm['requests']} level warm-up requests "
                f"failed ({kinds}): {'; '.join(warm['error_messages'][:2])}"
            )
        return warm

    async def measure_level(self, level: int, concurrency: int,
                            warm: dict[str, Any] | None) -> tuple[dict[str, Any], LevelRun, float]:
        """One measured level with its /metrics and /server_info snapshots around it."""
        if self.client is None:
            raise AssertionError("the client is made before the levels")
        cache_state = await self.prepare_cache(concurrency)
        metrics_before = await _within(self.metrics.snapshot(f"before C={concurrency}"), self.deadline, None)
        scrape_before = self.metrics.scrape if metrics_before is not None else None
        samples = _servermetrics.GaugeSamples() if metrics_before is not None else None
        workers = WorkerScrapes(self.opts.worker_metrics, self.probe.metrics_text) if self.opts.worker_metrics else None
        if workers is not None:
            await _within(workers.before(), self.deadline, None)
        deadline = min(time.perf_counter() + self.opts.level_timeout, self.deadline)
        run = await self.sampled_level(level, concurrency, deadline, samples, workers)
        metrics_after = (
            await _within(self.metrics.snapshot(f"after C={concurrency}"), self.deadline, None)
            if metrics_before is not None else None
        )
        self.after = await _within(self.probe.server_info(), self.deadline, _NO_INFO)
        point = summarize_level(run, short_is_error=self.opts.ignore_eos)
        point["client_processes"] = min(self.clients.processes, concurrency)
        point["client_escalation"] = None
        point["level_warmup"] = warm
        point["cache_state"] = cache_state
        point["client_cache"] = cachestate.client_cache(run.traces)
        if metrics_before is not None and metrics_after is not None:
            point["server"] = server_latency(metrics_before, metrics_after)
        point["server_metrics"] = (_servermetrics.level_metrics(scrape_before, self.metrics.scrape, samples)
                                   if samples is not None and metrics_after is not None else None)
        if workers is not None:  # a PD deployment swept through its router: each side (sides.py)
            point["sides"] = await _within(workers.after(), self.deadline, None)
        point["server_after"] = {k: self.after.get(k) for k in (
            "ok", "version", "max_running_requests", "avg_spec_accept_length", "last_gen_throughput", "at"
        )}
        prev = [p for p in self.points if p["ok"] > 0 and clean(p)]
        if prev and point["ok"] > 0 and clean(point):
            gain = gain_per_doubling(prev[-1]["concurrency"], prev[-1]["output_tok_s"], concurrency,
                                     point["output_tok_s"])
            point["gain_per_doubling"] = None if gain is None else round(gain, 4)
        return point, run, deadline

    async def prepare_cache(self, concurrency: int) -> dict[str, Any] | None:
        """Before a measured level: flush the server's cache (``flush_cache``), clear its storage
        tier (``clear_storage``), then send each shared prefix once (``warm``). None when none is asked."""
        opts = self.opts
        if not opts.flush_cache and not opts.warm and not opts.clear_storage:
            return None
        out: dict[str, Any] = {"flush": None, "clear_storage": None, "warm": None}
        urls = self.client.pairs.urls if self.client is not None and self.client.pairs else [opts.url]  # pd: each
        if opts.flush_cache:
            out["flush"] = await cachestate.on_each(urls, lambda u: cachestate.flush(self.session, u, opts.flush_timeout))
            if not out["flush"]["ok"]:
                self.warnings.append(cachestate.flush_warning(concurrency, out["flush"], opts.flush_timeout))
        if opts.clear_storage:
            out["clear_storage"] = await cachestate.on_each(urls, lambda u: cachestate.clear_storage(self.session, u))
            if not out["clear_storage"]["ok"]:
                self.warnings.append(cachestate.clear_storage_warning(concurrency, out["clear_storage"]))
        prompts = self.client.workload.warm_prompts() if opts.warm and self.client is not None else []
        if opts.warm and not prompts:
            self.warnings.append(f"C={concurrency}: warm is on, but a {opts.workload and opts.workload.get('kind')} "
                                 "workload has no shared prefix to send: nothing warmed")
        elif prompts:
            deadline = min(time.perf_counter() + opts.level_timeout, self.deadline)
            out["warm"] = await cachestate.warm(self.client, prompts, deadline)
            if out["warm"]["ok"] < out["warm"]["requests"]:
                self.warnings.append(f"C={concurrency}: {out['warm']['requests'] - out['warm']['ok']} of "
                                     f"{out['warm']['requests']} cache warm-up requests failed")
        return out

    async def closed_level(self, level: int, concurrency: int) -> tuple[dict[str, Any], LevelRun, float] | None:
        """One closed-loop level: connections, warm-up round, measure (and auto escalation);
        None when the sweep's time ran out before it was measured."""
        self.current = concurrency
        if time.perf_counter() >= self.deadline:
            self.timeout(f"before C={concurrency}")
            return None
        await _within(self.clients.warm(concurrency, self.model), self.deadline, None)
        warm = await self.level_warmup(level, concurrency)
        if warm is not None and time.perf_counter() >= self.deadline:
            self.timeout(f"during the warm-up of C={concurrency}")
            return None
        point, run, deadline = await self.measure_level(level, concurrency, warm)
        if self.opts.client_processes == 0:
            point, run, deadline = await self.escalate(level, concurrency, warm, point, run, deadline)
        return point, run, deadline

    async def run_levels(self) -> None:
        if self.opts.mode == "rate" or self.opts.search or self.opts.repeats > 1 or self.opts.slo:
            await LevelPlan(self).run()
            return
        for level, concurrency in enumerate(self.opts.concurrency):
            measured = await self.closed_level(level, concurrency)
            if measured is None:
                break
            point, run, deadline = measured
            self.points.append(point)
            if self.on_level is not None:
                self.on_level(point)
            if self.opts.return_records:
                self.records.extend(trace_record(t, self.t0) for t in run.traces)
            if run.timed_out and deadline >= self.deadline:
                self.timeout(f"during C={concurrency}")
                break
            if self.opts.stop_on_plateau and plateau_reached(self.points, self.opts.plateau_gain):
                self.stopped_on_plateau = True
                break

    async def escalate(self, level: int, concurrency: int, warm: dict[str, Any] | None, point: dict[str, Any],
                       run: LevelRun, deadline: float) -> tuple[dict[str, Any], LevelRun, float]:
        """Auto mode: measure a client-limited level again with twice the processes (up to the
        CPUs, and C), until it is not client-limited; the discarded tries stay in the point."""
        tries: list[dict[str, Any]] = []
        clients = self.clients
        while point["client_limited"] and clients.processes < auto_limit(concurrency):
            if time.perf_counter() >= self.deadline:
                break
            tries.append(escalation_entry(point))
            clients.processes = min(clients.processes * 2, auto_limit(concurrency))
            await _within(clients.warm(concurrency, self.model), self.deadline, None)
            point, run, deadline = await self.measure_level(level, concurrency, warm)
        if tries:
            point["client_escalation"] = tries
            self.warnings.append(
                f"C={concurrency}: client-limited with {tries[0]['processes']} client process(es); measured again "
                f"with {point['client_processes']} (client_processes: auto)"
            )
        return point, run, deadline

    async def run(self) -> None:
        await self.resolve_model()
        self.before = await self.probe.server_info()
        self.after = self.before
        self.check_auth()
        if not self.before["ok"]:
            self.warnings.append(f"server info unavailable ({self.before.get('error')}); server fields are null")
        loads = self.opts.concurrency if self.opts.mode == "concurrency" else []  # rate mode: no C levels
        queued = oversubscription_warning(loads, self.before.get("max_running_requests"))
        if queued:
            self.warnings.append(queued)
        self.client = Client(self.opts, self.session, self.model)
        await self.initial_warmup()
        await self.run_levels()
        self.current = None


def _convert_time_base(points: list[dict[str, Any]], records: list[dict[str, Any]], scale: Any,
                       warnings: list[str]) -> str:
    """A run against the time-scaled embedded engine in the GPU time it models, its client
    latencies checked against the engine's own; returns the time base ("wall" or "model")."""
    if not (isinstance(scale, (int, float)) and scale > 0 and scale != 1):
        return "wall"
    to_model_time(points, records, float(scale))
    warnings.append(
        f"the server is the embedded engine at time scale {scale:g}: rates and latencies are "
        "converted to the GPU time it models (wall-clock figures under each point's 'wall')"
    )
    not_measured = []
    for point in points:
        check_latency(point, float(scale))
        names = [f"{key} {'/'.join(stats)}" for key, stats in point["latency_unmeasurable"].items()]
        if names:
            not_measured.append(f"{_level_label(point)} ({', '.join(names)})")
    if not_measured:
        warnings.append(
            f"time scale {scale:g}: client latencies that disagree with the engine's model by more than "
            f"{LATENCY_TOLERANCE:.0%} (not measurable at this scale, reported as n/m; the modelled values "
            f"are under each point's 'server', the reasons under 'latency_check'): " + "; ".join(not_measured)
        )
    return "model"


def _level_label(point: dict[str, Any]) -> str:
    """How warnings name a level: C=8, or rate=4 req/s in rate mode."""
    rate = point.get("offered_rate")
    return f"C={point['concurrency']}" if rate is None else f"rate={rate:g} req/s"


def _drift_warnings(points: list[dict[str, Any]]) -> list[str]:
    warnings = []
    for point in points:
        drift = point.get("drift") or {}
        if drift.get("flagged"):
            warnings.append(
                f"{_level_label(point)}: throughput changed within the level: {drift['first_half_tok_s']} tok/s "
                f"in the first half of its {drift['window']} window, {drift['second_half_tok_s']} in the second "
                f"(x{drift['ratio']:.2f}, threshold {DRIFT_THRESHOLD:.0%}): the server's speed was not steady "
                "(compilation, caches, throttling or other load)"
            )
    return warnings


def _result(sweep: _SweepRun, started: str, finished: str, scale: Any, time_base: str) -> dict[str, Any]:
    """The ``sglang_sweep`` fact."""
    opts, points, before, after = sweep.opts, sweep.points, sweep.before, sweep.after
    srv_info = after if after.get("ok") else before
    return {
        "schema_version": SCHEMA_VERSION,
        "url": opts.url,
        "api": opts.api,
        "model": sweep.model,
        "server": {
            "version": srv_info.get("version"),
            "max_running_requests": srv_info.get("max_running_requests"),
            "avg_spec_accept_length_before": before.get("avg_spec_accept_length"),
            "avg_spec_accept_length_after": after.get("avg_spec_accept_length"),
            "server_info_path": sweep.probe.path,
            "time_scale": scale,
            "metrics": bool(sweep.metrics.ok),
        },
        "time_base": time_base,
        "started": started,
        "finished": finished,
        "duration_s": round(time.perf_counter() - sweep.t0, 3),
        "options": opts.effective(sweep.model),
        "warmup": {"requests": opts.warmup, "ok": sweep.warm_ok},
        "level_warmup": {
            "enabled": opts.level_warmup,
            "max_tokens": opts.level_warmup_tokens,
            "requests": sum((p.get("level_warmup") or {}).get("requests", 0) for p in points),
            "errors": sum(((p.get("level_warmup") or {}).get("errors") or {}).get("total", 0) for p in points),
        },
        "points": points,
        "peak": find_peak(points),
        "knee": find_knee(points, opts.plateau_gain) if opts.mode == "concurrency" else None,
        "mode": opts.mode,
        "slo": dict(opts.slo or {}),
        "slo_limit": search_fact(sweep.search_result, opts.mode),
        "levels_with_errors": [p["concurrency"] for p in points if not clean(p)],
        "stopped_on_plateau": sweep.stopped_on_plateau,
        "stopped_on_timeout": sweep.stopped_on_timeout,
        "warnings": sweep.warnings,
        "records": sweep.records if opts.return_records else [],
        "records_t0_unix": round(sweep.t0_unix, 6),
    }


async def arun_sweep(options: SweepOptions, signals: Sequence[int] = (), output_fd: int | None = None,
                     on_level: Callable[[dict[str, Any], Any], None] | None = None) -> dict[str, Any]:
    """Run the sweep; returns the ``sglang_sweep`` fact (schema_version 1).

    ``on_level(point, time_scale)`` is called with each level as it finishes (the point as
    measured, in wall-clock time; ``time_scale`` from /server_info, else ``options.time_scale``,
    None on a real server):
    the module's progress lines. An exception there stops the sweep.

    It stops at once, raising SweepInterrupted, on one of ``signals``, when the reader of
    ``output_fd`` is gone, when ``options.watch_pid`` is gone or when nobody refreshed
    ``options.heartbeat_file`` for ``heartbeat_timeout`` seconds (``_interrupt.Interrupts``).
    """
    if not HAS_AIOHTTP:
        raise SweepError(f"aiohttp is not importable: {AIOHTTP_IMPORT_ERROR}")
    opts = options.normalized()
    raise_open_files(max(opts.concurrency))
    started = utc_now_iso()
    heartbeat = _begin_heartbeat(opts)
    guard = Interrupts(signals, output_fd, opts.watch_pid, heartbeat=heartbeat)
    task = asyncio.current_task()
    if task is not None:
        guard.start(task)
    sweep: _SweepRun | None = None
    try:
        async with open_session(opts) as session:
            sweep = _SweepRun(opts, session)
            if on_level is not None:
                run = sweep
                # the same scale the result is converted with (a router reports none: the option's)
                sweep.on_level = lambda point: on_level(point, run.before.get("time_scale") or run.opts.time_scale)
            try:
                await sweep.run()
            finally:
                sweep.clients.close()
    except asyncio.CancelledError:
        if guard.reason is None:
            raise
        current = sweep.current if sweep is not None else None
        done = [p["concurrency"] for p in sweep.points] if sweep is not None else []
        raise SweepInterrupted(guard.reason, current, done) from None
    finally:
        guard.close()
        if heartbeat is not None:
            heartbeat.end()
    finished = utc_now_iso()
    srv_info = sweep.after if sweep.after.get("ok") else sweep.before
    scale = srv_info.get("time_scale") or sweep.before.get("time_scale") or sweep.opts.time_scale
    time_base = _convert_time_base(sweep.points, sweep.records, scale, sweep.warnings)
    sweep.warnings.extend(_drift_warnings(sweep.points))
    failed = error_warning(sweep.points)
    if failed:
        sweep.warnings.append(failed)
    return _result(sweep, started, finished, scale, time_base)


def _begin_heartbeat(opts: SweepOptions) -> Heartbeat | None:
    """The sweep's heartbeat file, created now (its clock starts with the sweep), or None."""
    if not opts.heartbeat_file:
        return None
    heartbeat = Heartbeat(opts.heartbeat_file, opts.heartbeat_timeout)
    try:
        heartbeat.begin()
    except OSError as exc:
        raise SweepError(f"cannot create heartbeat_file {opts.heartbeat_file}: {exc} (a writable path on the "
                         "machine running the sweep, not a symbolic link)") from None
    return heartbeat


def run_sweep(options: SweepOptions, signals: Sequence[int] = (), output_fd: int | None = None,
              on_level: Callable[[dict[str, Any], Any], None] | None = None) -> dict[str, Any]:
    """Synchronous entry: run the sweep in a fresh event loop (``arun_sweep``)."""
    return asyncio.run(arun_sweep(options, signals, output_fd, on_level))
