# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The generation job's sending (docs/generate.md "How the job sends"): asyncio, aiohttp.

- **Targets**: the router (one target) or each instance (its own target), each with its
  concurrency: that many workers, each sending its next request when its last one ended.
- **The queue**: the input's requests in file order, done ids left out; a request tried again
  waits in a heap until its backoff passed and goes before new ones.
- **Outcomes** (``outcome``): 200 is a result; 408, 429 and 5xx, a connection error, a dropped
  connection and a timeout are tried again (``max_attempts`` in all, backoff doubling from
  ``backoff_s`` to ``backoff_max_s``, with jitter); any other status fails the request at once.
  A request that fails for good is written to the errors file with its reason and attempts.
- **Instances that go down**: a target whose connection is refused is down: its workers pause
  (1 s, doubling to 30 s) and the request goes back to the queue without counting an attempt
  (it never reached a server), so the other targets take it; while every target is down the job
  waits, at most ``down_timeout_s``, then stops (resumable: nothing is lost).
- **Writing**: results are batched (every ``flush_s`` or ``flush_lines``) and written by one
  thread through ``store.Store.write`` (exactly once); a stop (SIGTERM, SIGINT) cancels the
  requests in flight, writes what finished and ends: those cancelled are sent again on resume.
- **Progress**: ``progress.json`` rewritten every ``progress_interval_s`` (whole, by rename):
  lines done of total, this run's and the last minute's rates, ETA, errors, retries, per target.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import itertools
import json
import logging
import os
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._generate import inputs as _inputs
from ansible_collections.llmops.sglang.plugins.module_utils._generate import meter as _meter
from ansible_collections.llmops.sglang.plugins.module_utils._generate import store as _store
from ansible_collections.llmops.sglang.plugins.module_utils._server.files import atomic_write
from ansible_collections.llmops.sglang.plugins.module_utils._shared import modulespec

try:
    import aiohttp
    HAS_AIOHTTP = True
except ImportError:  # pragma: no cover - the module says what to install
    aiohttp = None  # type: ignore[assignment]
    HAS_AIOHTTP = False

PROGRESS = "progress.json"
SCHEMA_VERSION = 1
# Python < 3.11 (engine venvs) has a separate asyncio.TimeoutError
TIMEOUTS: tuple[type[BaseException], ...] = (TimeoutError, asyncio.TimeoutError)
RECENT_S = 60.0
DOWN_FIRST_S = 1.0
DOWN_MAX_S = 30.0
log = logging.getLogger("llmops.sglang.generate")


@dataclass(frozen=True)
class Target:
    """Where requests go: a router or an instance, its base URL and how many at once."""

    name: str
    url: str
    concurrency: int
    source: str = ""


def _documented(option: str) -> Any:
    return modulespec.default("generate_job", option)


@dataclass(frozen=True)
class Settings:
    """How the job sends and writes (``generate_job``'s options, documented there)."""

    folder: str
    input: str
    targets: tuple[Target, ...]
    total: int
    defaults: dict[str, Any] = field(default_factory=dict)
    # the module's options: their documented defaults (plugins/modules/generate_job.py owns them)
    max_attempts: int = _documented("max_attempts")
    backoff_s: float = _documented("backoff_s")
    backoff_max_s: float = _documented("backoff_max_s")
    request_timeout_s: float = _documented("request_timeout_s")
    down_timeout_s: float = _documented("down_timeout_s")
    shard_lines: int = _documented("shard_lines")
    progress_interval_s: float = _documented("progress_interval_s")
    # the writer's batches: not options
    flush_s: float = 0.2
    flush_lines: int = 1024
    api_key: str | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    max_failures_in_a_row: int = _documented("max_failures_in_a_row")
    instances: tuple[dict[str, Any], ...] = ()  # behind a router: whose /metrics give each one's share


@dataclass(frozen=True)
class Outcome:
    """One attempt's end: a result (``status`` 200), a failure to retry, or a final failure;
    ``unreached``: the connection was refused (nothing reached a server)."""

    status: int | None
    body: Any
    retry: bool
    reason: str = ""
    unreached: bool = False


def outcome(status: int | None, body: Any, exc: BaseException | None = None) -> Outcome:
    """Classify one attempt (the module's docstring, "Outcomes")."""
    if exc is not None:
        unreached = aiohttp is not None and isinstance(exc, aiohttp.ClientConnectorError)
        kind = "timeout" if isinstance(exc, TIMEOUTS) else type(exc).__name__
        return Outcome(None, None, True, f"{kind}: {exc}".rstrip(": "), unreached=unreached)
    if status == 200 and isinstance(body, dict):
        return Outcome(status, body, False)
    if status == 200:
        return Outcome(status, body, True, "200 without a JSON object body")
    reason = f"HTTP {status}"
    message = _error_message(body)
    if message:
        reason += f": {message}"
    return Outcome(status, body, status in (408, 429) or (status or 0) >= 500, reason)


def _error_message(body: Any) -> str:
    if isinstance(body, dict):
        err = body.get("error", body.get("message", body.get("detail")))
        if isinstance(err, dict):
            err = err.get("message", err)
        return str(err)[:500] if err else ""
    return str(body)[:500] if body else ""


def backoff(attempt: int, base: float, cap: float, rand: Callable[[], float] = random.random) -> float:
    """Seconds before attempt ``attempt + 1``: base x 2^(attempt-1), at most cap, times 0.5 to 1."""
    return min(cap, base * (2 ** max(0, attempt - 1))) * (0.5 + 0.5 * rand())


@dataclass
class _TargetState:
    target: Target
    lines: int = 0
    errors: int = 0
    retries: int = 0
    in_flight: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    down_until: float = 0.0
    down_for: float = 0.0
    down_since: float | None = None
    downs: int = 0

    def up(self, now: float) -> bool:
        return now >= self.down_until

    def mark_down(self, now: float) -> float:
        """Pause the target (1 s, doubling while it stays down, at most 30 s); the seconds left.
        Its other workers' refusals within one pause do not lengthen it."""
        if now < self.down_until:
            return self.down_until - now
        self.down_for = min(DOWN_MAX_S, self.down_for * 2) if self.down_for else DOWN_FIRST_S
        self.down_until = now + self.down_for
        if self.down_since is None:
            self.down_since = now
            self.downs += 1
        return self.down_for

    def mark_up(self) -> None:
        self.down_for = 0.0
        self.down_since = None


@dataclass(order=True)
class _Retry:
    ready: float
    seq: int
    request: Any = field(compare=False)
    attempts: int = field(compare=False)


class _Queue:
    """The work: retries whose backoff passed first, then the input's next request."""

    def __init__(self, pending: Any) -> None:
        self._pending = pending
        self._exhausted = False
        self._heap: list[_Retry] = []
        self._seq = itertools.count()
        self.in_flight = 0
        self.changed = asyncio.Event()
        self.drained = asyncio.Event()  # no work is left: a paused worker ends too

    def put_back(self, request: Any, attempts: int, delay: float) -> None:
        heapq.heappush(self._heap, _Retry(time.monotonic() + delay, next(self._seq), request, attempts))
        self.changed.set()

    def finished_one(self) -> None:
        self.in_flight -= 1
        self.changed.set()

    @property
    def waiting(self) -> int:
        return len(self._heap)

    async def take(self, stop: asyncio.Event) -> tuple[Any, int] | None:
        """The next (request, attempts so far), or None when no work is left or the job stops."""
        while not stop.is_set():
            now = time.monotonic()
            if self._heap and self._heap[0].ready <= now:
                item = heapq.heappop(self._heap)
                self.in_flight += 1
                return item.request, item.attempts
            if not self._exhausted:
                request = next(self._pending, None)
                if request is not None:
                    self.in_flight += 1
                    return request, 0
                self._exhausted = True
            if not self._heap and self.in_flight == 0:
                self.changed.set()  # wake the other workers: they end too
                self.drained.set()
                return None
            self.changed.clear()
            wait = (self._heap[0].ready - now) if self._heap else None
            try:
                await asyncio.wait_for(self.changed.wait(), timeout=wait)
            except TIMEOUTS:
                pass
        return None


async def served_models(session: Any, targets: tuple[Target, ...]) -> dict[str, str]:
    """Each target's model (the first of its /v1/models), sent as ``model`` in a body that has
    none: the router refuses a body without one (HTTP 422), SGLang takes either. A target that
    does not answer gets none (it is down; its requests go elsewhere)."""
    models: dict[str, str] = {}
    for target in targets:
        url = target.url.rstrip("/") + "/v1/models"
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
                data = await resp.json(content_type=None) if resp.status == 200 else None
        except (aiohttp.ClientError, *TIMEOUTS, OSError, ValueError):
            data = None
        listed = data.get("data") if isinstance(data, dict) else None
        if isinstance(listed, list) and listed and isinstance(listed[0], dict) and listed[0].get("id"):
            models[target.name] = str(listed[0]["id"])
    return models


class Job:
    """One run of the job over a recovered store (``run``)."""

    def __init__(self, settings: Settings, store: _store.Store, *, done_before: int = 0, errors_before: int = 0) -> None:
        self.s = settings
        self.store = store
        # the input's ids done by earlier runs, and of them failed (the journal may hold ids an
        # earlier input had: they count for nothing here)
        self.done_before = done_before
        self.errors_before = errors_before
        self.targets = [_TargetState(t) for t in settings.targets]
        self.stop = asyncio.Event()
        self.state = "running"
        self.message = ""
        self.started_wall = time.time()
        self.started = time.monotonic()
        self.lines = 0  # written this run (results and errors)
        self.error_lines = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.retries = 0
        self.recent: deque[tuple[float, int, int]] = deque()
        self._results: list[_store.Result] = []
        self._flushed = asyncio.Event()
        self._closing = False
        self._all_down_since: float | None = None
        self._failed_in_a_row = 0
        self.meter = _meter.Meter(settings.instances) if settings.instances else None
        self._session: Any = None
        self.models: dict[str, str] = {}  # target -> the model it serves (its /v1/models), for bodies without one
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate-writer")

    # -- the run --------------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        pending = _inputs.requests(self.s.input, self.s.defaults, skip=frozenset(self.store.done))
        self.queue = _Queue(pending)
        headers = {"Authorization": f"Bearer {self.s.api_key}"} if self.s.api_key else {}
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=self.s.request_timeout_s)
        writer = asyncio.ensure_future(self._writer())
        progress = asyncio.ensure_future(self._progress_loop())
        try:
            async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:
                self._session = session
                if self.meter:
                    await self.meter.read(session)
                self.models = await served_models(session, self.s.targets)
                if self.models:
                    log.info("models: %s", ", ".join(f"{k}={v}" for k, v in self.models.items()))
                workers = [asyncio.ensure_future(self._worker(session, t))
                           for t in self.targets for _ in range(t.target.concurrency)]
                stopper = asyncio.ensure_future(self.stop.wait())
                every = asyncio.gather(*workers, return_exceptions=True)
                done, _ = await asyncio.wait([stopper, every], return_when=asyncio.FIRST_COMPLETED)
                if every not in done:  # a stop: cancel what is in flight (sent again on resume)
                    for worker in workers:
                        worker.cancel()
                stopper.cancel()
                for res in await every:
                    if isinstance(res, BaseException) and not isinstance(res, asyncio.CancelledError):
                        raise res
                # the progress loop ends before the session closes: a read of the meter it was
                # making would find the session closed and mark every instance down
                await _cancelled(progress)
                self._session = None
                if self.meter:
                    await self.meter.read(session)
        except _inputs.InputError as exc:
            self.state, self.message = "failed", str(exc)
        finally:
            self._closing = True
            self._flushed.set()
            await writer  # its last batch written and counted
            await _cancelled(progress)
            self._pool.shutdown(wait=True)
        if self.state == "running":
            pending_left = self.s.total - self.done
            if self.stop.is_set():
                self.state = "stopped"
                self.message = self.message or "stopped: resume to send the rest"
            elif pending_left > 0:
                self.state, self.message = "failed", f"{pending_left} request(s) left unsent"
            else:
                self.state = "finished"
        report = self.progress()
        _write_progress(self.s.folder, report)
        log.info("job %s: %s", self.state, _summary_line(report))
        return report

    @property
    def done(self) -> int:
        """The input's ids done, by earlier runs and this one."""
        return self.done_before + self.lines

    async def _worker(self, session: Any, state: _TargetState) -> None:
        url = state.target.url.rstrip("/")
        while not self.queue.drained.is_set():
            now = time.monotonic()
            if not state.up(now):
                await self._wait_down(state)
                continue
            item = await self.queue.take(self.stop)
            if item is None:
                return
            request, attempts = item
            state.in_flight += 1
            body = request.body
            model = self.models.get(state.target.name)
            if model and "model" not in body:
                body = {**body, "model": model}
            try:
                result = await self._attempt(session, url + request.url, body)
            finally:
                state.in_flight -= 1
            self._settle(state, request, attempts, result)
            self.queue.finished_one()

    async def _attempt(self, session: Any, url: str, body: dict[str, Any]) -> Outcome:
        try:
            async with session.post(url, json=body) as resp:
                text = await resp.text()
                try:
                    parsed: Any = json.loads(text) if text else None
                except ValueError:
                    parsed = text
                return outcome(resp.status, parsed)
        except asyncio.CancelledError:
            raise
        except (aiohttp.ClientError, *TIMEOUTS, OSError) as exc:
            return outcome(None, None, exc)

    def _settle(self, state: _TargetState, request: Any, attempts: int, result: Outcome) -> None:
        now = time.monotonic()
        if result.unreached:
            first = state.down_since is None
            wait = state.mark_down(now)
            if first:
                log.warning("%s is down (%s): its workers pause %.0f s, the others take its requests",
                            state.target.name, result.reason, wait)
            self.queue.put_back(request, attempts, 0.0)  # not an attempt: nothing reached a server
            return
        if state.down_since is not None:
            log.info("%s is up again after %.0f s", state.target.name, now - state.down_since)
        state.mark_up()
        self._all_down_since = None
        attempts += 1
        if result.status == 200 and not result.retry:
            line = _store.output_line(request.custom_id, 200, result.body, None, attempts=attempts,
                                      instance=state.target.name)
            prompt, completion = _store.usage_of(line)
            self._results.append(_store.Result(request.custom_id, True, line, prompt, completion))
            self._failed_in_a_row = 0
            state.lines += 1
            state.prompt_tokens += prompt
            state.completion_tokens += completion
        elif result.retry and attempts < self.s.max_attempts:
            self.retries += 1
            state.retries += 1
            delay = backoff(attempts, self.s.backoff_s, self.s.backoff_max_s)
            log.info("%s on %s: %s; attempt %d of %d in %.1f s", request.custom_id, state.target.name,
                     result.reason, attempts + 1, self.s.max_attempts, delay)
            self.queue.put_back(request, attempts, delay)
        else:
            why = result.reason + (f" (after {attempts} attempts)" if result.retry else "")
            code = "http_error" if result.status is not None else "request_failed"
            line = _store.output_line(request.custom_id, result.status, result.body,
                                      {"code": code, "message": why}, attempts=attempts, instance=state.target.name)
            self._results.append(_store.Result(request.custom_id, False, line))
            state.errors += 1
            log.warning("%s failed for good on %s: %s", request.custom_id, state.target.name, why)
            self._failed_in_a_row += 1
            limit = self.s.max_failures_in_a_row
            if limit and self._failed_in_a_row >= limit and not self.stop.is_set():
                self.state = "failed"
                self.message = (f"the last {self._failed_in_a_row} requests failed for good (the last: {why}): stopped "
                                "(max_failures_in_a_row); fix the cause, then resume with retry_errors "
                                "(sglang_generate_retry_errors=true) to send the failed ones again")
                log.error("%s", self.message)
                self.stop.set()
        if len(self._results) >= self.s.flush_lines:
            self._flushed.set()

    async def _wait_down(self, state: _TargetState) -> None:
        """Pause a down target's worker; when every target is down for down_timeout_s, stop."""
        now = time.monotonic()
        if all(not t.up(now) for t in self.targets):
            if self._all_down_since is None:
                self._all_down_since = min(t.down_since or now for t in self.targets)
            if now - self._all_down_since > self.s.down_timeout_s:
                if not self.stop.is_set():
                    self.message = (f"every target down for {now - self._all_down_since:.0f} s (down_timeout_s "
                                    f"{self.s.down_timeout_s:g}): stopped; resume when they are up")
                    log.error(self.message)
                    self.state = "failed"
                    self.stop.set()
                return
        wakers = [asyncio.ensure_future(self.stop.wait()), asyncio.ensure_future(self.queue.drained.wait())]
        try:
            await asyncio.wait(wakers, timeout=max(0.01, state.down_until - now), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waker in wakers:
                waker.cancel()

    # -- writing and progress ---------------------------------------------------------------------

    async def _writer(self) -> None:
        """The only writer: a batch every flush_s (or flush_lines), the last one when the run ends.
        A batch that cannot be written stops the run (its requests are sent again on resume)."""
        try:
            while not self._closing:
                try:
                    await asyncio.wait_for(self._flushed.wait(), timeout=self.s.flush_s)
                except TIMEOUTS:
                    pass
                self._flushed.clear()
                await self._flush()
            await self._flush()
        except OSError as exc:
            self.state = "failed"
            self.message = f"cannot write the results in {self.s.folder} ({exc.strerror or exc}): stopped; resume when it can"
            log.error("%s", self.message)
            self._results = []
            self.stop.set()

    async def _flush(self) -> None:
        if not self._results:
            return
        batch, self._results = self._results, []
        written = await asyncio.get_running_loop().run_in_executor(self._pool, self.store.write, batch)
        now = time.monotonic()
        for result in written:
            self.lines += 1
            self.error_lines += 0 if result.ok else 1
            self.prompt_tokens += result.prompt_tokens
            self.completion_tokens += result.completion_tokens
            self.recent.append((now, result.prompt_tokens, result.completion_tokens))

    async def _progress_loop(self) -> None:
        while True:
            await asyncio.sleep(self.s.progress_interval_s)
            if self.meter and self._session is not None:
                await self.meter.read(self._session)
            try:
                _write_progress(self.s.folder, self.progress())
            except OSError as exc:  # the job goes on: its results are what counts
                log.warning("cannot write %s: %s", PROGRESS, exc)

    def progress(self) -> dict[str, Any]:
        """The progress document (docs/generate.md "Progress")."""
        return progress_document(self)


def progress_document(job: Job) -> dict[str, Any]:
    """The progress document of ``job`` (docs/generate.md "Progress")."""
    now = time.monotonic()
    while job.recent and now - job.recent[0][0] > RECENT_S:
        job.recent.popleft()
    wall = max(now - job.started, 1e-9)
    totals = job.store.totals
    done = job.done
    errors = job.errors_before + job.error_lines
    window = min(RECENT_S, wall)
    recent_lines = len(job.recent)
    rate = recent_lines / window if recent_lines else (job.lines / wall)
    left = max(0, job.s.total - done)
    all_lines = sum(t.lines + t.errors for t in job.targets) or 1
    return {
        "schema_version": SCHEMA_VERSION,
        "state": job.state,
        "message": job.message,
        "pid": os.getpid(),
        "labels": dict(job.s.labels),
        "started_at": _iso(job.started_wall),
        "updated_at": _iso(time.time()),
        "total": job.s.total,
        "done": done,
        "ok": done - errors,
        "errors": errors,
        "pending": left,
        "in_flight": job.queue.in_flight if hasattr(job, "queue") else 0,
        "waiting_retry": job.queue.waiting if hasattr(job, "queue") else 0,
        "retries": job.retries,
        "prompt_tokens": totals.prompt_tokens,  # every run's, from the journal
        "completion_tokens": totals.completion_tokens,
        "this_run": {
            "lines": job.lines, "prompt_tokens": job.prompt_tokens, "completion_tokens": job.completion_tokens,
            "wall_s": round(wall, 3), "lines_s": round(job.lines / wall, 3),
            "input_tok_s": round(job.prompt_tokens / wall, 1), "output_tok_s": round(job.completion_tokens / wall, 1),
        },
        "recent": {
            "window_s": round(window, 1), "lines_s": round(recent_lines / window, 3),
            "input_tok_s": round(sum(r[1] for r in job.recent) / window, 1),
            "output_tok_s": round(sum(r[2] for r in job.recent) / window, 1),
        },
        "eta_s": round(left / rate, 1) if rate > 0 and left else (0.0 if not left else None),
        "targets": {
            t.target.name: {
                "url": t.target.url, "concurrency": t.target.concurrency, "source": t.target.source,
                "lines": t.lines, "errors": t.errors,
                "retries": t.retries, "in_flight": t.in_flight, "prompt_tokens": t.prompt_tokens,
                "completion_tokens": t.completion_tokens, "up": t.up(now), "times_down": t.downs,
                "share": round((t.lines + t.errors) / all_lines, 4),
            } for t in job.targets
        },
        "recovery": job.store.recovery.describe(),
        "files": job.store.files(),
        **({"instances": job.meter.shares()} if job.meter else {}),
    }


async def _cancelled(task: Any) -> None:
    """Cancel a task and wait until it has ended (whatever it raised)."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _summary_line(report: dict[str, Any]) -> str:
    run = report["this_run"]
    return (f"{report['done']}/{report['total']} done ({report['errors']} failed), this run {run['lines']} lines in "
            f"{run['wall_s']:.0f} s, {run['output_tok_s']:.0f} output tok/s")


def _write_progress(folder: str, report: dict[str, Any]) -> None:
    atomic_write(os.path.join(folder, PROGRESS), json.dumps(report, indent=1, sort_keys=True).encode("utf-8"), 0o644)
