# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The life of a node of rank > 0 (``--nnodes N --node-rank R``, R > 0): no API, no tokenizer,
no detokenizer; its schedulers (``procs``) load their share of the model and serve rank 0.

As SGLang's ``Engine._launch_subprocesses`` for ``node_rank >= 1`` (0.5.17
``entrypoints/engine.py`` 1105-1129, 0.5.23 1234-1300): the start-up lines, in which the node
joins rank 0's meeting (``fleet.Joiner``); once its schedulers are ready (load + HiCache
pinning), the placeholder HTTP server on ``--port`` (``server.PlaceholderServer``; connections
are refused before, whatever ``LLMOPS_SIM_LISTEN`` says) and the line ``Dummy health check
server started in background thread at HOST:PORT``; then it waits for the schedulers to exit
(``block_until_scheduler_exits``, each logging ``Scheduler or DataParallelController <pid>
terminated with <code>``). What ends it:

- rank 0 shuts down (0.5.17+: its ``ShutdownReq`` reaches every TP rank): the schedulers exit
  0, then launch_server.py's ``kill_process_tree(include_parent=False)``, exit 0;
- rank 0 goes away without it (killed, crashed, or 0.5.10's shutdown): the scheduler fails
  (``fleet.scheduler_exception``), SIGQUIT, and the launch-phase handler (never replaced on a
  rank > 0) kills the process tree: exit -9;
- SIGTERM: no handler in 0.5.10 / 0.5.17 (the process dies of it, its schedulers with it
  through the parent-death signal, and rank 0 loses a peer); 0.5.23 logs that it waits for rank
  0's ShutdownReq and goes on (release trait ``nonzero_rank_sigterm``);
- its schedulers exit on their own: the lines above, the meeting connection closes (rank 0
  loses a peer), exit 0.
"""
from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from dataclasses import dataclass, field
from typing import Any, Protocol

from ansible_collections.llmops.sglang.plugins.module_utils._engine import fleet
from ansible_collections.llmops.sglang.plugins.module_utils._engine.startup import Schedule, play_lines

FAILSAFE_S = 30.0


class _Log(Protocol):
    def info(self, msg: str) -> None: ...

    def warning(self, msg: str) -> None: ...

    def error(self, msg: str) -> None: ...


class _Procs(Protocol):
    def terminate_schedulers(self) -> None: ...

    async def wait_schedulers(self) -> None: ...

    def kill_process_tree(self, include_parent: bool) -> None: ...


class _Placeholder(Protocol):
    async def start(self, sock: socket.socket) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class Follower:
    """One node of rank > 0 and what it does until it ends (the module's docstring)."""

    args: dict[str, Any]
    traits: dict[str, Any]
    log: _Log
    joiner: fleet.Joiner
    placeholder: _Placeholder
    procs: _Procs
    time_scale: float  # of the start-up (LLMOPS_SIM_STARTUP_SCALE): a follower only starts up
    state: str = "loading"  # loading -> placeholder -> stopping
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)  # a scheduler died loading

    async def _sleep_until(self, deadline: float) -> bool:
        """Sleep until the loop time reaches deadline; True when a stop came first."""
        delay = deadline - asyncio.get_running_loop().time()
        try:
            await asyncio.wait_for(self.stop_event.wait(), timeout=max(delay, 0.0))
        except (asyncio.TimeoutError, TimeoutError):  # noqa: UP041 - Python 3.10
            return False
        return True

    async def _until_stop(self, task: asyncio.Future[Any]) -> bool:
        """Wait for ``task`` or a stop (then cancel it); True when the task finished."""
        stop = asyncio.ensure_future(self.stop_event.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if task.done():
            return True
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return False

    async def _meet(self) -> float | None:
        meet = asyncio.ensure_future(self.joiner.meet())
        if not await self._until_stop(meet):
            return None
        try:
            return meet.result()
        except fleet.MeetingError as exc:
            await self._fail(str(exc))
            return None

    async def _fail(self, line: str) -> None:
        fleet.scheduler_exception(self.log, line)
        await asyncio.sleep(FAILSAFE_S)

    async def run(self, sock: socket.socket, schedule: Schedule) -> int:
        """Start-up, the meeting, the placeholder, then wait for what ends it; the exit code."""
        loop = asyncio.get_running_loop()
        start = await play_lines(schedule, self.log, loop.time(), self.time_scale,
                                 self._sleep_until, self._meet)
        if start is None or await self._sleep_until(start + schedule.ready_at * self.time_scale):
            await self.joiner.close()
            return 1
        await self.placeholder.start(sock)
        host, port = str(self.args.get("host") or "127.0.0.1"), self.args.get("port")
        shown = f"[{host}]" if ":" in host else host
        self.log.info(f"Dummy health check server started in background thread at {shown}:{port}")
        self.state = "placeholder"
        if self.traits.get("nonzero_rank_sigterm") == "wait_for_rank0_shutdown":
            loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        try:
            return await self._serve()
        finally:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGTERM)
            await self.placeholder.stop()
            await self.joiner.close()

    def _on_sigterm(self) -> None:
        """0.5.23: a rank > 0 cannot drain alone; rank 0's ShutdownReq stops its schedulers."""
        rank = self.args.get("node_rank")
        self.log.warning(f"SIGTERM received on node_rank {rank}; waiting for the rank-0 "
                         "ShutdownReq broadcast to stop the schedulers.")

    async def _serve(self) -> int:
        rank0 = asyncio.ensure_future(self.joiner.watch())
        schedulers = asyncio.ensure_future(self.procs.wait_schedulers())
        waits: set[asyncio.Future[Any]] = {rank0, schedulers}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        self.state = "stopping"
        if rank0.done() and not rank0.cancelled():
            line = rank0.result()
            if line is not None:  # rank 0 went away: this scheduler's gloo group broke
                await self._fail(line)
                return 1
            self.procs.terminate_schedulers()  # the ShutdownReq: they exit 0
            await self.procs.wait_schedulers()
        else:
            await self.joiner.close()  # schedulers gone: rank 0 loses this node
        self.procs.kill_process_tree(include_parent=False)  # launch_server.py's finally
        return 0
