# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Stopping a service: SIGTERM to its process group, a wait, then SIGKILL; orphans too.
"""
from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable

from ansible_collections.llmops.sglang.plugins.module_utils._detached.common import (
    POLL_S,
    DetachedServiceError,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.identity import status
from ansible_collections.llmops.sglang.plugins.module_utils._detached.pidfile import remove_pid_file
from ansible_collections.llmops.sglang.plugins.module_utils._detached.procfs import ProcStat, group_members
from ansible_collections.llmops.sglang.plugins.module_utils._detached.spec import (
    ActionResult,
    ServiceSpec,
    ServiceStatus,
)


def _signal_members(pgid: int, members: Iterable[ProcStat], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for member in members:
        if member.pgid != pgid:  # same session, other group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member.pid, sig)


def _reap(pids: Iterable[int]) -> None:
    """Reap any of ``pids`` that are our own children (only when the caller started them)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _wait_gone(pgid: int, pids: set[int], timeout: float) -> list[ProcStat]:
    """Wait until no live process of the group/session remains; return the survivors."""
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        _reap(pids)
        left = group_members(pgid)
        if not left or time.monotonic() >= deadline:
            return left
        pids.update(s.pid for s in left)
        time.sleep(POLL_S)


def terminate_group(pgid: int, stop_timeout: float, kill_timeout: float) -> tuple[list[int], bool]:
    """SIGTERM the group (and its session), wait up to ``stop_timeout``; then SIGKILL and wait
    up to ``kill_timeout``. Returns (every pid signalled, whether SIGKILL was needed); raises
    when processes survive SIGKILL (e.g. stuck in uninterruptible sleep in a GPU driver)."""
    members = group_members(pgid)
    seen = {s.pid for s in members}
    if not members:
        return [], False
    _signal_members(pgid, members, signal.SIGTERM)
    left = _wait_gone(pgid, seen, stop_timeout)
    killed = False
    if left:
        killed = True
        _signal_members(pgid, left, signal.SIGKILL)
        left = _wait_gone(pgid, seen, kill_timeout)
        if left:
            desc = ", ".join(f"{s.pid} ({s.comm}, state {s.state})" for s in left)
            raise DetachedServiceError(
                f"processes of group {pgid} survived SIGKILL for {kill_timeout:g} s: {desc}"
            )
    return sorted(seen), killed


def stop(spec: ServiceSpec, check_mode: bool = False) -> ActionResult:
    """Stop the whole process group; remove the pid file (a stale one too, reported changed)."""
    current = status(spec)
    if current.running and current.pgid is not None:
        if check_mode:
            return ActionResult(True, current, msg=f"{spec.name} would be stopped")
        pids, killed = terminate_group(current.pgid, spec.stop_timeout, spec.kill_timeout)
        remove_pid_file(spec.pid_file)
        how = "killed (SIGKILL after SIGTERM timeout)" if killed else "stopped"
        return ActionResult(
            True,
            ServiceStatus(running=False),
            msg=f"{spec.name} {how}: {len(pids)} process(es)",
            stopped_pids=pids,
            killed=killed,
        )
    if current.group_pids and current.record is not None:
        # The leader is gone, but processes of its group survive: stop them too.
        if check_mode:
            return ActionResult(True, current, msg=f"{spec.name}: leftover processes would be stopped")
        pids, killed = terminate_group(current.record.pgid, spec.stop_timeout, spec.kill_timeout)
        remove_pid_file(spec.pid_file)
        return ActionResult(
            True,
            ServiceStatus(running=False),
            msg=f"{spec.name} was not running; stopped {len(pids)} leftover process(es) of its group",
            stopped_pids=pids,
            killed=killed,
            removed_stale_pid_file=True,
        )
    if current.pid_file_exists:
        if not check_mode:
            remove_pid_file(spec.pid_file)
        return ActionResult(
            True,
            ServiceStatus(running=False),
            msg=f"{spec.name} was not running; removed stale pid file {spec.pid_file}",
            removed_stale_pid_file=True,
        )
    return ActionResult(False, current, msg=f"{spec.name} is not running")
