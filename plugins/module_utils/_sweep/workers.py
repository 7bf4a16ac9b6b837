# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Several client processes for one sweep level, so that the client is not the bottleneck.

One Python process reads at most about 55-95k streamed chunks/s (docs/PERFORMANCE.md, "The
sweep client's ceiling"): a router in front of many workers can serve more. With
``client_processes`` > 1 a level's C closed-loop clients are split over that many processes
(``split_level``), each with its own event loop, session and connections, running the very
same ``run_level`` on its share. They return their raw traces (``to_wire``: the
``Trace`` fields, token events packed in an array) and their own health; the parent
merges them (``merge_runs``) into one ``LevelRun`` and summarizes it with
``summarize_level`` exactly as if one process had run every request. Times are
``time.perf_counter()``, the system-wide monotonic clock on Linux, so the traces of several
processes share one time base.

Why ``spawn``: the parent runs an event loop with signal handlers and an open session; a fork
would copy them. A spawned child starts a fresh interpreter with the parent's ``sys.path``,
which under Ansible includes the AnsiballZ zip, so it imports this file from there (and re-runs
the module file as ``__mp_main__``, whose ``main()`` is guarded).

Bounds: a child watches its parent (``_interrupt.Interrupts`` with ``watch_pid``) and stops on
SIGINT/SIGTERM/SIGHUP; the parent waits for a level's answers until the level's deadline plus
``ANSWER_GRACE_S``, and ``close`` ends every child (stop message, then SIGTERM, then SIGKILL).
A child never writes to stdout: that is the module's result pipe.
"""
from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
import time
import traceback
import types
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench.interrupt import STOP_SIGNALS, Interrupts
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.client import Client, open_session
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import DEFAULT_PROMPTS, TIMEOUTS
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.level import (
    Health,
    LevelRun,
    LevelShare,
    run_level,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.probe import Probe
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.trace import Trace

# Seconds a child may take to start (a fresh interpreter importing aiohttp) and open connections.
START_TIMEOUT_S = 60.0
# Seconds past a level's deadline for the children to cancel their requests and send their traces.
ANSWER_GRACE_S = 15.0
# Seconds ``close`` waits for children after the stop message, and again after SIGTERM.
STOP_WAIT_S = 2.0


class ClientProcessError(Exception):
    """A client process died, failed or did not answer in time."""


def auto_limit(concurrency: int) -> int:
    """The most processes auto mode uses for a level: the CPUs, and no more than C clients."""
    return max(1, min(os.cpu_count() or 1, concurrency))


def escalation_entry(point: dict[str, Any]) -> dict[str, Any]:
    """What auto mode keeps of a client-limited try it measured again with more processes."""
    return {
        "processes": point.get("client_processes"),
        "output_tok_s": point.get("output_tok_s"),
        "client": dict(point.get("client") or {}),
    }


def split_level(concurrency: int, requests: int | None, processes: int) -> list[Any]:
    """The shares (``LevelShare``) of a level of C clients and N requests over P processes.

    Clients: C // P each, one more for the first C % P. Requests: in proportion to the clients
    (a closed-loop client runs about N / C of them), as contiguous index ranges, so that the
    prompts (round-robin by index) are the ones one process would send. Duration mode
    (``requests`` None): process i sends indices i, i + P, ... Worker ids are 0..C-1 over all.
    """
    count = max(1, min(processes, concurrency))
    shares = []
    workers_before = 0
    for i in range(count):
        workers = concurrency // count + (1 if i < concurrency % count else 0)
        if requests is None:
            share = LevelShare(workers, None, first_index=i, step=count, worker_offset=workers_before)
        else:
            lo = requests * workers_before // concurrency
            hi = requests * (workers_before + workers) // concurrency
            share = LevelShare(workers, hi - lo, first_index=lo, worker_offset=workers_before)
        shares.append(share)
        workers_before += workers
    return shares


# ---------------------------------------------------------------------------------------------
# Traces over the pipe, and their merge (pure)
# ---------------------------------------------------------------------------------------------

_TRACE_FIELDS = ("level", "concurrency", "index", "worker", "start", "end", "first_token_t", "ok",
                 "error_kind", "error", "http_status", "output_tokens", "finish_reason", "prompt_tokens",
                 "cached_tokens")


def to_wire(trace: Any) -> tuple[Any, ...]:
    """A ``Trace`` as a tuple that pickles fast: its fields, then its token events as one
    array of doubles (arrival time, tokens, arrival time, tokens, ...)."""
    flat = array("d")
    for t, n in trace.events:
        flat.append(t)
        flat.append(n)
    return (*(getattr(trace, name) for name in _TRACE_FIELDS), flat)


def from_wire(wire: Sequence[Any]) -> Any:
    """The ``Trace`` that ``to_wire`` packed."""
    trace = Trace(**dict(zip(_TRACE_FIELDS, wire[:-1], strict=True)))
    flat = wire[-1]
    trace.events = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    return trace


@dataclass
class ProcessPart:
    """What one client process returns for a level: its traces and its own health."""

    traces: list[Any]
    lag_ms_p99: float | None
    cpu_util: float | None
    t_start: float
    t_end: float
    timed_out: bool
    own_lag_ms_p99: float | None = None


def _merged_health(parts: Sequence[ProcessPart]) -> Any:
    """A ``level.Health`` whose figures are the worst process's: the level is client-limited
    when any of its processes was (each is one event loop on at most one core)."""
    class _Merged(Health):
        @property
        def lag_ms_p99(self) -> float | None:
            lags = [p.lag_ms_p99 for p in parts if p.lag_ms_p99 is not None]
            return max(lags) if lags else None

        @property
        def own_lag_ms_p99(self) -> float | None:
            lags = [p.own_lag_ms_p99 for p in parts]
            return max(lags) if lags and None not in lags else None

    health = _Merged()
    cpus = [p.cpu_util for p in parts if p.cpu_util is not None]
    health.cpu_util = max(cpus) if cpus else None
    return health


def merge_runs(level: int, concurrency: int, parts: Sequence[ProcessPart]) -> Any:
    """One ``LevelRun`` from the parts of a level run by several processes: the union of
    their traces (by start time), from the first start to the last end, timed out when any part
    was, with the worst process's health (``_merged_health``)."""
    traces = sorted((t for p in parts for t in p.traces), key=lambda t: (t.start, t.index))
    return LevelRun(
        level, concurrency, traces, any(p.timed_out for p in parts), _merged_health(parts),
        min(p.t_start for p in parts), max(p.t_end for p in parts),
    )


# ---------------------------------------------------------------------------------------------
# The child process
# ---------------------------------------------------------------------------------------------


async def _readable(fd: int, timeout: float | None) -> bool:
    """Wait until ``fd`` can be read (data, or EOF); False on timeout."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await asyncio.wait_for(ready, timeout)
        return True
    except TIMEOUTS:
        return False
    finally:
        loop.remove_reader(fd)


def child_main(conn: Any, parent_pid: int, opts: Any, model: str | None) -> None:
    """Entry of a client process: serve the parent's commands until told to stop, the parent is
    gone or a stop signal arrives. stdout goes to /dev/null (it is the module's result pipe)."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - for the process's life
    try:
        asyncio.run(_child(conn, parent_pid, opts, model))
    except KeyboardInterrupt:  # pragma: no cover - a signal before the handlers were installed
        pass


async def _child(conn: Any, parent_pid: int, opts: Any, model: str | None) -> None:
    guard = Interrupts(STOP_SIGNALS, None, parent_pid)
    task = asyncio.current_task()
    if task is not None:
        guard.start(task)
    try:
        async with open_session(opts) as session:
            client = Client(opts, session, model)
            probe = Probe(opts, session)
            while await _readable(conn.fileno(), None):
                try:
                    message = conn.recv()
                except EOFError:
                    return
                if message[0] == "stop":
                    return
                conn.send(await _serve(message, client, probe))
    except asyncio.CancelledError:
        return  # a signal, or the parent is gone: nobody waits for an answer
    finally:
        guard.close()


async def _serve(message: tuple[Any, ...], client: Any, probe: Any) -> tuple[Any, ...]:
    """Run one command: ("warm", seq, workers) or ("run", seq, level, concurrency, deadline,
    share); answer (seq, "ok", payload) or (seq, "error", traceback)."""
    seq = message[1]
    try:
        if message[0] == "warm":
            await probe.warm_connections(message[2])
            return seq, "ok", None
        level, concurrency, deadline, share = message[2:]
        run = await run_level(client, level, concurrency, deadline,
                              list(client.opts.prompts or DEFAULT_PROMPTS), share=share)
        return seq, "ok", {
            "traces": [to_wire(t) for t in run.traces], "lag_ms_p99": run.health.lag_ms_p99,
            "own_lag_ms_p99": run.health.own_lag_ms_p99, "cpu_util": run.health.cpu_util, "t_start": run.t_start, "t_end": run.t_end,
            "timed_out": run.timed_out,
        }
    except Exception:  # noqa: BLE001 - any failure goes back to the parent, which fails the sweep
        return seq, "error", traceback.format_exc(limit=8)


# ---------------------------------------------------------------------------------------------
# The parent's side
# ---------------------------------------------------------------------------------------------


def _start_without_main(proc: Any) -> None:
    """Start a spawned process that does not re-run the parent's ``__main__``.

    ``spawn`` runs the parent's main script (or module) again in the child, as ``__mp_main__``,
    so that objects defined there unpickle. The child needs nothing from it (its target lives
    here), and re-running it fails when the main script is not a file (``python -`` or ``-c``:
    FileNotFoundError '<stdin>') and, under Ansible, imports the module and AnsibleModule again
    in every child. multiprocessing decides from ``sys.modules['__main__']`` (its ``__spec__`` and
    ``__file__``) while ``start()`` runs, so a bare module stands in for it meanwhile.
    """
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        proc.start()
    finally:
        if main is not None:
            sys.modules["__main__"] = main


class ClientPool:
    """The client processes of one sweep, started when a level first needs them and kept for
    the levels after it (their connections stay open between levels)."""

    def __init__(self, opts: Any, model: str | None) -> None:
        self.opts = opts
        self.model = model
        self.ctx = multiprocessing.get_context("spawn")
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.busy: list[bool] = []
        self.seq = 0

    def _ensure(self, count: int) -> None:
        while len(self.procs) < count:
            parent_end, child_end = self.ctx.Pipe()
            proc = self.ctx.Process(target=child_main, args=(child_end, os.getpid(), self.opts, self.model),
                                    name=f"sweep-client-{len(self.procs)}", daemon=True)
            _start_without_main(proc)
            child_end.close()
            self.procs.append(proc)
            self.conns.append(parent_end)
            self.busy.append(False)

    async def _ask(self, messages: Sequence[tuple[Any, ...]], deadline: float, what: str) -> list[Any]:
        """Send message i to process i, then collect every answer by ``deadline`` (perf_counter)."""
        self.seq += 1
        for i, message in enumerate(messages):
            self.busy[i] = True
            try:
                self.conns[i].send((message[0], self.seq, *message[1:]))
            except OSError as exc:
                raise ClientProcessError(f"client process {i} (pid {self.procs[i].pid}) is gone {what}: {exc}") from None
        return [await self._answer(i, deadline, what) for i in range(len(messages))]

    async def _answer(self, i: int, deadline: float, what: str) -> Any:
        conn, proc = self.conns[i], self.procs[i]
        while True:
            if not await _readable(conn.fileno(), max(deadline - time.perf_counter(), 0.001)):
                raise ClientProcessError(f"client process {i} (pid {proc.pid}) did not answer in time {what}")
            try:
                seq, status, payload = conn.recv()
            except (EOFError, OSError):
                proc.join(1.0)
                raise ClientProcessError(
                    f"client process {i} (pid {proc.pid}) exited (code {proc.exitcode}) {what}") from None
            if seq != self.seq:
                continue  # the answer to a command that was given up on
            self.busy[i] = False
            if status != "ok":
                raise ClientProcessError(f"client process {i} failed {what}: {payload}")
            return payload

    async def warm(self, concurrency: int, processes: int) -> None:
        """Start the processes the level needs and open each one's share of its connections."""
        shares = split_level(concurrency, self.opts.requests_for(concurrency), processes)
        self._ensure(len(shares))
        await self._ask([("warm", s.workers) for s in shares], time.perf_counter() + START_TIMEOUT_S,
                        f"while opening connections for C={concurrency}")

    async def run_level(self, level: int, concurrency: int, deadline: float, processes: int) -> Any:
        """The level run by ``processes`` processes, merged (``merge_runs``)."""
        shares = split_level(concurrency, self.opts.requests_for(concurrency), processes)
        self._ensure(len(shares))
        answers = await self._ask([("run", level, concurrency, deadline, s) for s in shares],
                                  deadline + ANSWER_GRACE_S, f"during C={concurrency}")
        parts = [ProcessPart(traces=[from_wire(w) for w in a["traces"]], lag_ms_p99=a["lag_ms_p99"],
                             cpu_util=a["cpu_util"], t_start=a["t_start"], t_end=a["t_end"],
                             timed_out=a["timed_out"], own_lag_ms_p99=a.get("own_lag_ms_p99")) for a in answers]
        return merge_runs(level, concurrency, parts)

    def close(self) -> None:
        """End every process: idle ones are told to stop, busy ones (a level cut by an interrupt
        or an error) get SIGTERM at once; whatever is left after STOP_WAIT_S gets SIGTERM, then
        SIGKILL. Bounded: at most about 2 x STOP_WAIT_S."""
        for conn, proc, busy in zip(self.conns, self.procs, self.busy, strict=True):
            try:
                if busy:
                    proc.terminate()
                else:
                    conn.send(("stop",))
            except (OSError, ValueError):
                pass
        for step in (proc_terminate, proc_kill):
            end = time.monotonic() + STOP_WAIT_S
            for proc in self.procs:
                proc.join(max(end - time.monotonic(), 0.0))
            alive = [p for p in self.procs if p.is_alive()]
            if not alive:
                break
            for proc in alive:
                step(proc)
        for proc in self.procs:
            proc.join(STOP_WAIT_S)
        for conn in self.conns:
            conn.close()
        self.procs, self.conns, self.busy = [], [], []


def proc_terminate(proc: Any) -> None:
    proc.terminate()


def proc_kill(proc: Any) -> None:
    proc.kill()
