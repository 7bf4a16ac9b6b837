# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Starting a service in its own session and process group, as its user, with its log and pid
file, and waiting until it runs (or reporting why it did not).
"""
from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._detached.common import (
    POLL_S,
    DetachedServiceError,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.identity import status
from ansible_collections.llmops.sglang.plugins.module_utils._detached.logs import log_tail
from ansible_collections.llmops.sglang.plugins.module_utils._detached.pidfile import (
    PidRecord,
    remove_pid_file,
    write_pid_file,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.procfs import (
    boot_id,
    iso_utc,
    read_stat,
    start_epoch,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.spec import (
    ActionResult,
    ServiceSpec,
    ServiceStatus,
    child_environment,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.stopping import terminate_group

LOG_FILE_MODE = 0o600


@dataclass(frozen=True)
class _Credentials:
    uid: int | None
    gid: int | None
    groups: list[int] | None


def resolve_credentials(user: str | None, group: str | None) -> _Credentials:
    """uid/gid/supplementary groups to drop to; None fields mean "keep". Only root may switch."""
    if not user and not group:
        return _Credentials(None, None, None)
    uid: int | None = None
    gid: int | None = None
    groups: list[int] | None = None
    if user:
        try:
            pw = pwd.getpwnam(user) if not user.isdigit() else pwd.getpwuid(int(user))
        except KeyError as exc:
            raise DetachedServiceError(f"user {user!r} does not exist") from exc
        uid, gid = pw.pw_uid, pw.pw_gid
        groups = os.getgrouplist(pw.pw_name, pw.pw_gid)
    if group:
        try:
            gr = grp.getgrnam(group) if not group.isdigit() else grp.getgrgid(int(group))
        except KeyError as exc:
            raise DetachedServiceError(f"group {group!r} does not exist") from exc
        gid = gr.gr_gid
    if os.geteuid() != 0:
        if (uid is not None and uid != os.geteuid()) or (gid is not None and gid != os.getegid()):
            raise DetachedServiceError("user/group can only be changed when running as root (become: true)")
        return _Credentials(None, None, None)
    return _Credentials(uid, gid, groups)


def _check_executable(argv0: str, chdir: str | None) -> None:
    if "/" in argv0:
        path = argv0 if os.path.isabs(argv0) else os.path.join(chdir or os.getcwd(), argv0)
        if not os.path.isfile(path):
            raise DetachedServiceError(f"command {argv0!r} does not exist")
        if not os.access(path, os.X_OK):
            raise DetachedServiceError(f"command {argv0!r} is not executable (chmod +x)")
    elif shutil.which(argv0) is None:
        raise DetachedServiceError(f"command {argv0!r} is not on PATH")


def _open_log(spec: ServiceSpec, creds: _Credentials) -> tuple[int, int]:
    """Open the log for appending (creating it and its folder); return (fd, size before)."""
    log = Path(spec.log_file)
    log.parent.mkdir(parents=True, exist_ok=True)
    created = not log.exists()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, LOG_FILE_MODE)
    if created and (creds.uid is not None or creds.gid is not None):
        os.fchown(fd, -1 if creds.uid is None else creds.uid, -1 if creds.gid is None else creds.gid)
    if os.fstat(fd).st_mode & 0o077:  # a server's log may hold its secrets: its owner only
        os.fchmod(fd, LOG_FILE_MODE)
    return fd, os.fstat(fd).st_size


def _adopt(spec: ServiceSpec, current: ServiceStatus, pid: int, check_mode: bool) -> ActionResult | None:
    """A running service (``pid``) found without its pid file (``adopted``): write the pid file
    again. None when its leader is gone by now (then it is started as usual)."""
    if check_mode:
        return ActionResult(True, current, msg=f"{spec.name} runs (pid {pid}); its pid file would be "
                                               "written again")
    leader = read_stat(pid)
    if leader is not None:
        write_pid_file(spec.pid_file, PidRecord(
            pid=leader.pid, pgid=leader.pgid, starttime=leader.starttime, boot_id=boot_id(),
            started_at=iso_utc(start_epoch(leader.starttime)), name=spec.name, argv=tuple(spec.command)))
        return ActionResult(True, status(spec), removed_stale_pid_file=True,
                            msg=f"{spec.name} was running (pid {leader.pid}) but its pid file was missing or "
                                "unreadable: the pid file was written again; the server was not restarted")
    return None


# How long ``start`` waits, after the grace, for the leader to run what ``match`` names.
IDENTIFY_S = 30.0


def _spawn(spec: ServiceSpec, argv: list[str], env: dict[str, str], creds: _Credentials) -> tuple[Any, int]:
    """Start ``argv`` in its own session with its output appended to the log (a header line
    first). Returns the process and the log offset its own output starts at."""
    log_fd, offset = _open_log(spec, creds)
    try:
        header = f"--- {iso_utc(time.time())} detached_service: starting {spec.name}: {shlex.join(argv)}\n"
        os.write(log_fd, header.encode("utf-8"))
        offset += len(header.encode("utf-8"))
        try:
            proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                cwd=spec.chdir or None,
                env=env,
                close_fds=True,
                start_new_session=True,
                user=creds.uid,
                group=creds.gid,
                extra_groups=creds.groups,
                umask=-1 if spec.umask is None else spec.umask,
            )
        except OSError as exc:
            raise DetachedServiceError(f"{spec.name}: cannot start {argv[0]}: {exc}") from exc
    finally:
        os.close(log_fd)
    return proc, offset


def _wait_started(spec: ServiceSpec, proc: Any, offset: int) -> None:
    """Wait ``start_grace`` seconds; a leader that exits by then is cleaned up and reported
    with the log lines it wrote (from ``offset``)."""
    deadline = time.monotonic() + max(0.0, spec.start_grace)
    while True:
        code = proc.poll()
        if code is not None:
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    if code is not None:
        _exited(spec, proc, code, offset, f"within {spec.start_grace:g} s of starting")


def _exited(spec: ServiceSpec, proc: Any, code: int, offset: int, when: str) -> None:
    """The leader exited: clean whatever it left in its group, drop the pid file, report."""
    with contextlib.suppress(DetachedServiceError):
        terminate_group(proc.pid, 1.0, 5.0)
    remove_pid_file(spec.pid_file)
    tail = log_tail(spec.log_file, spec.log_tail_lines, offset)
    shown = "\n".join(tail) if tail else "(nothing was written to the log)"
    raise DetachedServiceError(
        f"{spec.name} exited with status {code} {when}; last lines of {spec.log_file}:\n{shown}",
        log_tail=tail,
    )


def _identified(spec: ServiceSpec, proc: Any, offset: int) -> ServiceStatus:
    """The started leader as ``status`` names it. A launch script that execs the server (the
    roles' scripts do) shows ``match`` in its command line only once it has exec'd, which a busy
    host can delay past ``start_grace``: poll until ``status`` names this leader, the leader
    exits (reported as within the grace), or IDENTIFY_S pass (then what ``status`` says)."""
    deadline = time.monotonic() + IDENTIFY_S
    while True:
        after = status(spec)
        if after.running and after.pid == proc.pid:
            return after
        code = proc.poll()
        if code is not None:
            _exited(spec, proc, code, offset, "before it ran what `match` names")
        if time.monotonic() >= deadline:
            return after
        time.sleep(POLL_S)


def start(spec: ServiceSpec, check_mode: bool = False) -> ActionResult:
    """Start the service unless it is running. Returns once the child runs in its own session,
    the pid file is written and ``start_grace`` has passed without the child exiting."""
    current = status(spec)
    if current.running and current.adopted and current.pid is not None:
        adopted = _adopt(spec, current, current.pid, check_mode)
        if adopted is not None:
            return adopted
    if current.running:
        return ActionResult(False, current, msg=f"{spec.name} is already running (pid {current.pid})")
    if check_mode:
        return ActionResult(True, current, msg=f"{spec.name} would be started")

    leftover_pids: list[int] = []
    killed = False
    if current.group_pids and current.record is not None:
        # Survivors of a dead leader would hold the GPU and the port: stop them first.
        leftover_pids, killed = terminate_group(current.record.pgid, spec.stop_timeout, spec.kill_timeout)
    removed_stale = remove_pid_file(spec.pid_file) if current.pid_file_exists else False

    argv = spec.command
    if spec.chdir and not os.path.isdir(spec.chdir):
        raise DetachedServiceError(f"chdir {spec.chdir} is not a directory")
    _check_executable(argv[0], spec.chdir)
    env = child_environment(spec)
    creds = resolve_credentials(spec.user, spec.group)
    proc, offset = _spawn(spec, argv, env, creds)

    stat = read_stat(proc.pid)
    started_epoch = time.time()
    record = PidRecord(
        pid=proc.pid,
        pgid=proc.pid,  # start_new_session: the child leads its own session and group
        starttime=stat.starttime if stat is not None else None,
        boot_id=boot_id(),
        started_at=iso_utc(started_epoch),
        name=spec.name,
        argv=tuple(argv),
    )
    write_pid_file(spec.pid_file, record)

    _wait_started(spec, proc, offset)
    after = _identified(spec, proc, offset)
    # Leave the child running; it is re-parented when this process exits.
    proc.returncode = 0  # silence Popen's "still running" ResourceWarning on garbage collection
    parts = [f"{spec.name} started (pid {proc.pid})"]
    if leftover_pids:
        parts.append(f"after stopping {len(leftover_pids)} leftover process(es)")
    return ActionResult(
        True,
        after,
        msg=" ".join(parts),
        stopped_pids=leftover_pids,
        killed=killed,
        removed_stale_pid_file=removed_stale,
    )
