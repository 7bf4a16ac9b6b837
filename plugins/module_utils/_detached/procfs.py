# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Processes as /proc shows them (Linux only): ``/proc/<pid>/stat``, command lines, environments,
working directories, process groups, boot id and boot time.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils._detached.common import PROC

_DEAD_STATES = frozenset("ZX")


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` this module needs."""

    pid: int
    comm: str
    state: str
    ppid: int
    pgid: int
    sid: int
    starttime: int  # clock ticks after boot (field 22)

    @property
    def alive(self) -> bool:
        return self.state not in _DEAD_STATES


def parse_stat(text: str) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line; ``comm`` may hold spaces and parentheses."""
    left = text.index("(")
    right = text.rindex(")")
    pid = int(text[:left].strip())
    comm = text[left + 1 : right]
    rest = text[right + 1 :].split()
    # rest[0] is field 3 (state); field n is rest[n - 3].
    return ProcStat(
        pid=pid,
        comm=comm,
        state=rest[0],
        ppid=int(rest[1]),
        pgid=int(rest[2]),
        sid=int(rest[3]),
        starttime=int(rest[19]),
    )


def read_stat(pid: int, proc: Path = PROC) -> ProcStat | None:
    """The stat of ``pid``, or None when it does not exist (or vanished while reading)."""
    try:
        return parse_stat((proc / str(pid) / "stat").read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, IndexError):
        return None


def read_cmdline(pid: int, proc: Path = PROC) -> list[str]:
    """The argv of ``pid`` (empty for kernel threads, zombies and vanished processes)."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", errors="replace") for part in raw.split(b"\0") if part]


def read_environ(pid: int, proc: Path = PROC) -> dict[str, str] | None:
    """The initial environment of ``pid``; None when it cannot be read (permissions, gone)."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", errors="replace")] = value.decode("utf-8", errors="replace")
    return env


def all_stats(proc: Path = PROC) -> list[ProcStat]:
    """Stat of every process visible in ``/proc``."""
    stats: list[ProcStat] = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return stats
    for entry in entries:
        if entry.isdigit():
            stat = read_stat(int(entry), proc)
            if stat is not None:
                stats.append(stat)
    return stats


def has_live_threads(pid: int, proc: Path = PROC) -> bool:
    """A zombie thread-group leader whose other threads still run (they hold its memory and
    GPU contexts: seen on a real SGLang scheduler exiting while it released pinned memory)."""
    try:
        return len(os.listdir(proc / str(pid) / "task")) > 1
    except OSError:
        return False


def group_members(pgid: int, proc: Path = PROC) -> list[ProcStat]:
    """Live processes in process group ``pgid`` or in session ``pgid``.

    The session is included so that a child that moved itself to a new process group (but
    stayed in the server's session) is still found. The calling process is never included.
    A zombie leader counts as live while other threads of it still run.
    """
    me = os.getpid()
    return sorted(
        (s for s in all_stats(proc)
         if s.pid != me and pgid in (s.pgid, s.sid) and (s.alive or has_live_threads(s.pid, proc))),
        key=lambda s: s.pid,
    )


def boot_id(proc: Path = PROC) -> str:
    try:
        return (proc / "sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return ""


def boot_time(proc: Path = PROC) -> float:
    """Seconds since the epoch at boot (``btime`` in ``/proc/stat``)."""
    try:
        for line in (proc / "stat").read_text(encoding="ascii").splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100


def start_epoch(starttime: int, proc: Path = PROC) -> float:
    """Epoch seconds at which a process with this ``starttime`` (ticks after boot) started."""
    return boot_time(proc) + starttime / clock_ticks()


def iso_utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds")


def read_cwd(pid: int, proc: Path = PROC) -> str | None:
    try:
        return os.readlink(proc / str(pid) / "cwd")
    except OSError:
        return None
