# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The status rule: whether the pid file's process is the service (pid, start time, boot,
``match``), a service found by its working directory, and the processes it left behind.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils._detached.common import (
    MARKER_ENV,
    PROC,
    DetachedServiceError,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.pidfile import PidRecord, read_pid_file
from ansible_collections.llmops.sglang.plugins.module_utils._detached.procfs import (
    ProcStat,
    all_stats,
    boot_id,
    group_members,
    iso_utc,
    read_cmdline,
    read_cwd,
    read_environ,
    read_stat,
    start_epoch,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.spec import ServiceSpec, ServiceStatus


def _identity_ok(spec: ServiceSpec, record: PidRecord, stat: ProcStat, cmdline: list[str]) -> bool:
    if not stat.alive:
        return False
    if spec.match and spec.match not in " ".join(cmdline):
        return False
    if record.starttime is not None:
        if record.boot_id and record.boot_id != boot_id():
            return False
        return stat.starttime == record.starttime
    # A bare pid file: no start time to compare, so require positive evidence.
    if spec.match:
        return True
    environ = read_environ(stat.pid)
    if environ is not None and environ.get(MARKER_ENV) == spec.name:
        return True
    return bool(cmdline) and spec.command[0] in cmdline


def find_by_workdir(spec: ServiceSpec, proc: Path = PROC) -> ProcStat | None:
    """The service's leader when its pid file cannot say (missing, unreadable, written over):
    a live session leader (``start`` makes the server one) working in the service's ``chdir``,
    running ``match``, and carrying the service's marker when its environment is readable.
    Only with both ``chdir`` and ``match``; the earliest started when several qualify."""
    if not spec.chdir or not spec.match:
        return None
    folder = os.path.realpath(spec.chdir)
    found = []
    for stat in all_stats(proc):
        if stat.pid != stat.sid or not stat.alive or read_cwd(stat.pid, proc) != folder:
            continue
        if spec.match not in " ".join(read_cmdline(stat.pid, proc)):
            continue
        environ = read_environ(stat.pid, proc)
        if environ is not None and environ.get(MARKER_ENV, spec.name) != spec.name:
            continue
        found.append(stat)
    return min(found, key=lambda s: s.starttime) if found else None


def _running(stat: ProcStat, record: PidRecord | None, adopted: bool = False) -> ServiceStatus:
    started = start_epoch(stat.starttime)
    return ServiceStatus(
        running=True,
        pid=stat.pid,
        pgid=stat.pgid,
        cmdline=read_cmdline(stat.pid),
        started_at=iso_utc(started),
        uptime=round(max(0.0, time.time() - started), 2),
        pid_file_exists=record is not None,
        group_pids=[s.pid for s in group_members(stat.pgid)],
        record=record,
        adopted=adopted,
    )


def status(spec: ServiceSpec) -> ServiceStatus:
    """Observe the service; changes nothing. A server whose pid file is missing or unreadable
    but that runs in the service's folder is found all the same (``adopted``)."""
    try:
        record = read_pid_file(spec.pid_file)
    except DetachedServiceError:
        record = None
    exists = Path(spec.pid_file).exists()
    if record is None:
        leader = find_by_workdir(spec)
        if leader is not None:
            return _running(leader, None, adopted=True)
        return ServiceStatus(running=False, pid_file_exists=exists, stale=exists)
    stat = read_stat(record.pid)
    cmdline = read_cmdline(record.pid) if stat is not None else []
    if stat is None or not _identity_ok(spec, record, stat, cmdline):
        survivors = orphans(spec, record)
        leader = find_by_workdir(spec) if not survivors else None
        if leader is not None:  # the pid file names another process: the server runs all the same
            return _running(leader, None, adopted=True)
        return ServiceStatus(
            running=False,
            pid_file_exists=True,
            stale=True,
            group_pids=[s.pid for s in survivors],
            record=record,
        )
    return _running(stat, record)


def belongs_to(record: PidRecord, pid: int, service: str, proc: Path = PROC) -> bool:
    """Whether process ``pid`` is part of the service that ``record`` (its pid file) describes.

    A GPU process of SGLang (its re-parented scheduler) is never the pid in the pid file. The
    rule: the process carries the service's marker in its environment; or, when it carries no
    marker, it is a member of the recorded process group or session (which ``start`` created
    with setsid: only the service's descendants are in it), started in this boot no earlier than
    the leader, and the leader's pid was not reused by another process since. A process with
    another service's marker is not part of it.

    The environment alone cannot decide: SGLang titles its scheduler and detokenizer with
    setproctitle, which overwrites ``/proc/<pid>/environ`` (seen on an H200: the scheduler's
    environment showed no marker). A bare pid file (no start time) needs the marker.
    """
    stat = read_stat(pid, proc)
    if stat is None or record.pgid not in (stat.pgid, stat.sid):
        return False
    if record.boot_id and record.boot_id != boot_id(proc):
        return False
    environ = read_environ(pid, proc)
    if environ is not None and MARKER_ENV in environ:
        return environ[MARKER_ENV] == service
    if record.starttime is None:
        return False
    if stat.starttime < record.starttime:
        return False
    leader = read_stat(record.pid, proc)
    return leader is None or leader.starttime == record.starttime


def orphans(spec: ServiceSpec, record: PidRecord) -> list[ProcStat]:
    """Survivors of a service whose leader is gone (e.g. re-parented scheduler processes):
    the members of its recorded group or session that ``belongs_to`` the service. Only for a
    pid file with a start time."""
    if record.starttime is None:
        return []
    return [m for m in group_members(record.pgid) if belongs_to(record, m.pid, spec.name)]
