# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""``apply``: the wanted state (started, stopped, restarted) from the status found.
"""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils._detached.common import DetachedServiceError
from ansible_collections.llmops.sglang.plugins.module_utils._detached.identity import status
from ansible_collections.llmops.sglang.plugins.module_utils._detached.spec import ActionResult, ServiceSpec
from ansible_collections.llmops.sglang.plugins.module_utils._detached.starting import start
from ansible_collections.llmops.sglang.plugins.module_utils._detached.stopping import stop


def restart(spec: ServiceSpec, check_mode: bool = False) -> ActionResult:
    """Stop (when running) then start; always changed."""
    if check_mode:
        return ActionResult(True, status(spec), msg=f"{spec.name} would be restarted")
    stopped = stop(spec)
    started = start(spec)
    started.stopped_pids = stopped.stopped_pids + started.stopped_pids
    started.killed = stopped.killed or started.killed
    started.removed_stale_pid_file = stopped.removed_stale_pid_file or started.removed_stale_pid_file
    started.msg = f"{spec.name} restarted (pid {started.status.pid})"
    started.changed = True
    return started


def apply(spec: ServiceSpec, state: str, check_mode: bool = False) -> ActionResult:
    """Drive the service to ``state`` (started, stopped, restarted) or observe it (status)."""
    if state == "started":
        if spec.restart_changed:
            current = status(spec)
            if current.running and current.record is not None and current.record.argv \
                    and list(current.record.argv) != list(spec.command):
                result = restart(spec, check_mode)
                result.msg = f"{result.msg}: it ran another command line"
                return result
        return start(spec, check_mode)
    if state == "stopped":
        return stop(spec, check_mode)
    if state == "restarted":
        return restart(spec, check_mode)
    if state == "status":
        current = status(spec)
        word = "running" if current.running else "not running"
        return ActionResult(False, current, msg=f"{spec.name} is {word}")
    raise DetachedServiceError(f"unknown state {state!r}")
