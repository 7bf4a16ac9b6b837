# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""When a long-running client on a host must stop at once: a signal, its reader gone, its
controller gone. Plain Python, no Ansible import; used by the throughput sweep.

A sweep runs for minutes to hours and keeps a server busy while it does. An operator who
interrupts ``ansible-playbook`` (Ctrl-C) expects it to stop. What reaches the module then:

- **signals**: ansible's worker process passes SIGINT/SIGTERM to its own process group, where
  a module started through the local connection runs; SSH with a pty sends SIGHUP. Python
  would stop on them anyway, in its own way per version (``asyncio.run`` of Python >= 3.11
  turns the first SIGINT into a cancellation of the main task, 3.10 raises KeyboardInterrupt
  wherever the loop is); here the first one cancels the sweep, whose levels cancel their
  clients, and a second one ends the process at once.
- **the reader of the result gone**: a module writes its result to stdout, a pipe read by
  whoever started it (the worker of the local connection, sshd for SSH without a pty). When
  that end is closed, because the controller was interrupted and its worker or its SSH client
  died, nothing will ever read the result and no signal arrives: the write end of the pipe
  reports POLLERR (or POLLHUP for a socket) and the sweep stops.
- **a watched process gone**: a job started with ``async``/``poll: 0`` is daemonized by
  ansible's async_wrapper into a session of its own; its stdout is read by the wrapper, which
  lives on, and no signal from the controller reaches it. When it runs on the controller's
  machine, the controller's ansible process id (``watch_pid``) tells: the sweep stops when that
  process is gone (or is a zombie, or its pid now belongs to another process).
- **a heartbeat gone stale**: on another host the controller's process cannot be watched, so
  the controller shows it is there instead. The sweep creates ``heartbeat_file`` when it starts;
  whoever waits for the job (the bench role's ``sweep_wait``) refreshes its modification time at
  each look; the sweep stops when nobody did for ``heartbeat_timeout`` seconds (the controller
  killed, its machine gone, the network cut). Both times are read on the sweep's own machine
  (its clock and its file system), so the two machines' clocks never meet.
"""
from __future__ import annotations

import asyncio
import os
import select
import signal
import stat
import time
from collections.abc import Sequence
from typing import Any

STOP_SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WATCH_INTERVAL_S = 0.2


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int) -> str | None:
    """The start time of ``pid`` (field 22 of /proc/<pid>/stat, clock ticks since boot), or None
    where /proc does not tell (another OS, or no such process)."""
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def process_alive(pid: int, start: str | None = None) -> bool:
    """Whether ``pid`` is a live process, and the same one that had start time ``start`` (when
    given; a reused pid belongs to another process). A zombie is not alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    fields = _stat_fields(pid)
    if not fields:
        return True  # no /proc: kill(0) is all there is
    if fields[0] == "Z":
        return False
    return start is None or len(fields) <= 19 or fields[19] == start


def reader_gone(fd: int) -> bool:
    """Whether ``fd`` is a pipe or socket whose other end was closed (POLLERR / POLLHUP).
    False for files, ttys and /dev/null, and where poll is not available."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)) or not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(fd, 0)  # no events asked: only POLLERR, POLLHUP and POLLNVAL are reported
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


class Heartbeat:
    """A file whose modification time says when the controller last looked at the job.

    ``begin()`` creates it (0600, never through a symbolic link) and starts the clock, so a
    controller that never looks at all is seen too; ``age()`` is the seconds since the later of
    that start and the file's last refresh (a file removed or unreadable keeps the last time seen:
    only a refresh moves it forward); ``end()`` removes it. Whoever refreshes it must not create
    it (``touch -c``): after ``end()`` a late refresh then leaves nothing behind.
    """

    def __init__(self, path: str, timeout: float) -> None:
        if not timeout > 0:
            raise ValueError(f"heartbeat_timeout must be > 0 seconds, got {timeout!r}")
        self.path = path
        self.timeout = float(timeout)
        self.last = time.time()

    def begin(self) -> None:
        """Create (or refresh a leftover regular file at) ``path``; OSError when it cannot be."""
        flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(self.path, flags, 0o600)
        try:
            os.utime(fd)
        finally:
            os.close(fd)
        self.last = time.time()

    def age(self, now: float | None = None) -> float:
        """Seconds since the last sign of the controller (never negative)."""
        try:
            self.last = max(self.last, os.lstat(self.path).st_mtime)
        except OSError:
            pass  # gone or unreadable: the last time seen stands
        current = time.time() if now is None else now
        return max(0.0, current - self.last)

    def stale(self, now: float | None = None) -> str | None:
        """Why the sweep should stop (no refresh for longer than ``timeout``), or None."""
        age = self.age(now)
        if age <= self.timeout:
            return None
        return (f"no heartbeat from the controller for {age:.0f} s (heartbeat_file {self.path} not refreshed "
                f"within heartbeat_timeout={self.timeout:g} s): whoever waited for the sweep is gone")

    def end(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass


class Interrupts:
    """Cancels one asyncio task when a stop signal arrives, when the reader of ``output_fd`` is
    gone, when process ``watch_pid`` is gone or when ``heartbeat`` is stale; ``reason`` then says
    which.

    ``start(task)`` inside the running loop, ``close()`` when the task is over. Signal handlers
    are installed only for ``signals`` (the main thread only; the module asks for
    STOP_SIGNALS); a second signal ends the process at once (exit status 128 + signal).
    """

    def __init__(self, signals: Sequence[int] = (), output_fd: int | None = None,
                 watch_pid: int | None = None, interval: float = WATCH_INTERVAL_S,
                 heartbeat: Heartbeat | None = None) -> None:
        self.signals = tuple(signals)
        self.output_fd = output_fd
        self.watch_pid = watch_pid
        self.heartbeat = heartbeat
        self.interval = interval
        self.reason: str | None = None
        self._start = process_start(watch_pid) if watch_pid else None
        self._task: asyncio.Task[Any] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._installed: list[int] = []

    def check(self) -> str | None:
        """Why the client should stop now, or None."""
        if self.output_fd is not None and reader_gone(self.output_fd):
            return "the reader of its result went away (the controller's connection is gone)"
        if self.watch_pid and not process_alive(self.watch_pid, self._start):
            return f"the controller's process {self.watch_pid} (watch_pid) is gone"
        if self.heartbeat is not None:
            return self.heartbeat.stale()
        return None

    def start(self, task: asyncio.Task[Any]) -> None:
        self._task = task
        loop = asyncio.get_running_loop()
        for sig in self.signals:
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (RuntimeError, ValueError, NotImplementedError):
                continue  # not the main thread, or a platform without it
            self._installed.append(sig)
        if self.output_fd is not None or self.watch_pid or self.heartbeat is not None:
            self._watcher = loop.create_task(self._watch())

    def stop_now(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            if self._task is not None and not self._task.done():
                self._task.cancel()

    def _on_signal(self, sig: int) -> None:
        if self.reason is not None:
            os._exit(128 + sig)  # a second signal: no more waiting for the teardown
        self.stop_now(f"{signal.Signals(sig).name} received")

    async def _watch(self) -> None:
        while self.reason is None:
            await asyncio.sleep(self.interval)
            why = self.check()
            if why is not None:
                self.stop_now(why)

    def close(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._installed:
            loop.remove_signal_handler(sig)
        self._installed = []
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
