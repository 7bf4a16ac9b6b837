# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Detached, process-group-managed services for hosts where systemd is not PID 1.

A service is an argv (typically one launch script that ``exec``s the server), a pid file and
a log file. The server is started in its own session and process group, so that a stop can
reach every process it spawned, including the scheduler and detokenizer processes that SGLang
re-parents away from the server.

Identity of a running service (the "status rule"): the pid file records the pid, its process
group, the kernel's start time of that pid (``/proc/<pid>/stat`` field 22) and the boot id.
The service is running only if that pid exists, is not a zombie, was started at that very
time during this boot, and (when ``match`` is given) its command line contains ``match``. A
recycled pid or a pid file from an earlier boot is therefore never mistaken for the server.

Pid file format: line 1 is the bare pid (so ``kill $(head -1 FILE)`` works); line 2 is a JSON
record with the rest. A pid file holding only a pid (written by something else) is accepted;
it has no start time, so the process must then show the service marker in its environment or
``match`` in its command line.

Plain Python, Linux only (``/proc``); no Ansible import.
"""
from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

PROC = Path("/proc")
MARKER_ENV = "LLMOPS_DETACHED_SERVICE"
POLL_S = 0.05
PID_FILE_MODE = 0o644
LOG_FILE_MODE = 0o600
_DEAD_STATES = frozenset("ZX")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class DetachedServiceError(Exception):
    """A failure a person can act on; ``log_tail`` holds the service's last log lines."""

    def __init__(self, msg: str, log_tail: list[str] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.log_tail = log_tail or []


# --------------------------------------------------------------------------------------------
# /proc parsing


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


# --------------------------------------------------------------------------------------------
# pid file


@dataclass(frozen=True)
class PidRecord:
    """What the pid file says. ``starttime`` is None for a bare-pid file."""

    pid: int
    pgid: int
    starttime: int | None = None
    boot_id: str = ""
    started_at: str = ""
    name: str = ""
    argv: tuple[str, ...] = ()

    def to_text(self) -> str:
        meta = {
            "pid": self.pid,
            "pgid": self.pgid,
            "starttime": self.starttime,
            "boot_id": self.boot_id,
            "started_at": self.started_at,
            "name": self.name,
            "argv": list(self.argv),
        }
        return f"{self.pid}\n{json.dumps(meta, sort_keys=True)}\n"


def parse_pid_file(text: str) -> PidRecord | None:
    """Parse a pid file; None when it holds no usable pid."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    try:
        pid = int(lines[0])
    except ValueError:
        return None
    if pid <= 0:
        return None
    meta: dict[str, object] = {}
    if len(lines) > 1:
        try:
            loaded = json.loads(lines[1])
        except ValueError:
            loaded = None
        if isinstance(loaded, dict):
            meta = loaded
    starttime = meta.get("starttime")
    pgid = meta.get("pgid")
    argv = meta.get("argv")
    return PidRecord(
        pid=pid,
        pgid=pgid if isinstance(pgid, int) and pgid > 0 else pid,
        starttime=starttime if isinstance(starttime, int) else None,
        boot_id=str(meta.get("boot_id") or ""),
        started_at=str(meta.get("started_at") or ""),
        name=str(meta.get("name") or ""),
        argv=tuple(str(a) for a in argv) if isinstance(argv, list) else (),
    )


def read_pid_file(path: str | os.PathLike[str]) -> PidRecord | None:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DetachedServiceError(f"cannot read pid file {path}: {exc}") from exc
    return parse_pid_file(text)


def write_pid_file(path: str | os.PathLike[str], record: PidRecord) -> None:
    """Write the pid file atomically (temp file in the same folder, fsync, rename), mode 0644."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(record.to_text())
            handle.flush()
            os.fchmod(handle.fileno(), PID_FILE_MODE)
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_pid_file(path: str | os.PathLike[str]) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# service description and results


@dataclass
class ServiceSpec:
    """Everything that describes one detached service."""

    name: str
    command: list[str]
    pid_file: str
    log_file: str
    chdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    env_file: str | None = None
    user: str | None = None
    group: str | None = None
    umask: int | None = None
    match: str | None = None
    stop_timeout: float = 60.0
    kill_timeout: float = 30.0
    start_grace: float = 1.0
    log_tail_lines: int = 50


@dataclass
class ServiceStatus:
    """The observed state of a service; ``stale`` is True when a pid file exists but does not
    describe a running instance of the service."""

    running: bool
    pid: int | None = None
    pgid: int | None = None
    cmdline: list[str] = field(default_factory=list)
    started_at: str | None = None
    uptime: float | None = None
    pid_file_exists: bool = False
    stale: bool = False
    group_pids: list[int] = field(default_factory=list)
    record: PidRecord | None = None
    adopted: bool = False  # running, found by its working directory: its pid file was missing or unreadable


@dataclass
class ActionResult:
    changed: bool
    status: ServiceStatus
    msg: str = ""
    stopped_pids: list[int] = field(default_factory=list)
    killed: bool = False
    removed_stale_pid_file: bool = False


def normalize_command(command: str | Sequence[str]) -> list[str]:
    """A command given as a string is split like a shell would (no shell is ever run)."""
    argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    if not argv:
        raise DetachedServiceError("command is empty")
    return argv


def parse_umask(value: str | int | None) -> int | None:
    """``'0022'``/``'022'``/``'22'`` (octal strings) or an int already in octal (``0o22``)."""
    if value is None or value == "":
        return None
    if isinstance(value, int):
        mask = value
    else:
        try:
            mask = int(str(value), 8)
        except ValueError as exc:
            raise DetachedServiceError(f"umask {value!r} is not an octal number") from exc
    if not 0 <= mask <= 0o777:
        raise DetachedServiceError(f"umask {value!r} is out of range")
    return mask


def parse_env_file(text: str, source: str = "env_file") -> dict[str, str]:
    """``KEY=VALUE`` lines; blank lines and ``#`` comments are skipped, an ``export `` prefix
    and one pair of matching surrounding quotes are removed. No expansion is done."""
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _ENV_KEY.fullmatch(key):
            # The line itself may hold a secret: name the line, never print it.
            raise DetachedServiceError(f"{source} line {number} is not KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key] = value
    return env


def read_env_file(path: str) -> dict[str, str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise DetachedServiceError(f"cannot read env_file {path}: {exc.strerror or exc}") from exc
    return parse_env_file(text, source=f"env_file {path}")


def child_environment(spec: ServiceSpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``base`` (default: this process's), then ``env_file``, then
    ``env``, then the service marker."""
    env = dict(os.environ if base is None else base)
    if spec.env_file:
        env.update(read_env_file(spec.env_file))
    env.update({str(k): str(v) for k, v in spec.env.items()})
    env[MARKER_ENV] = spec.name
    return env


# --------------------------------------------------------------------------------------------
# status


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


def read_cwd(pid: int, proc: Path = PROC) -> str | None:
    try:
        return os.readlink(proc / str(pid) / "cwd")
    except OSError:
        return None


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


# --------------------------------------------------------------------------------------------
# stop


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


# --------------------------------------------------------------------------------------------
# start


# Secrets a server may print (SGLang logs its whole server_args, api_key included): a log tail
# the collection shows (a failed start, a readiness timeout) never repeats them.
_SECRET_PATTERNS = (
    re.compile(r"((?:admin_)?api_key\s*=\s*)('[^']*'|\"[^\"]*\"|[^,\s)]+)"),  # server_args=ServerArgs(api_key='...')
    re.compile(r"(\"(?:admin_)?api_key\"\s*:\s*)(\"[^\"]*\")"),  # JSON
    re.compile(r"(--(?:admin-)?api-key[ =])(\S+)"),  # a command line
    re.compile(r"(Bearer\s+)(\S+)", re.IGNORECASE),
    re.compile(r"((?:HF_TOKEN|HUGGING_FACE_HUB_TOKEN|SGLANG_API_KEY)\s*[=:]\s*)(\S+)"),
    re.compile(r"()(hf_[A-Za-z0-9]{20,})"),
)
REDACTED = "<redacted>"


def redact(line: str) -> str:
    """A log line with the secrets it may hold replaced by <redacted> (None values kept)."""
    for pattern in _SECRET_PATTERNS:
        line = pattern.sub(lambda m: m.group(1) + (m.group(2) if m.group(2) in ("None", "null") else REDACTED), line)
    return line


def log_tail(path: str, lines: int, offset: int = 0) -> list[str]:
    """The last ``lines`` lines of the log written after byte ``offset`` (the whole log's tail
    when nothing was written after it), secrets redacted (``redact``)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            start = offset if 0 < offset < size else 0
            # Read at most the last 256 KiB: enough for any tail a person reads.
            start = max(start, size - 256 * 1024)
            handle.seek(start)
            data = handle.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace").splitlines()
    return [redact(line) for line in text[-lines:]] if lines > 0 else []


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


def start(spec: ServiceSpec, check_mode: bool = False) -> ActionResult:
    """Start the service unless it is running. Returns once the child runs in its own session,
    the pid file is written and ``start_grace`` has passed without the child exiting."""
    current = status(spec)
    if current.running and current.adopted and current.pid is not None:
        if check_mode:
            return ActionResult(True, current, msg=f"{spec.name} runs (pid {current.pid}); its pid file would be "
                                                   "written again")
        leader = read_stat(current.pid)
        if leader is not None:
            write_pid_file(spec.pid_file, PidRecord(
                pid=leader.pid, pgid=leader.pgid, starttime=leader.starttime, boot_id=boot_id(),
                started_at=iso_utc(start_epoch(leader.starttime)), name=spec.name, argv=tuple(spec.command)))
            return ActionResult(True, status(spec), removed_stale_pid_file=True,
                                msg=f"{spec.name} was running (pid {leader.pid}) but its pid file was missing or "
                                    "unreadable: the pid file was written again; the server was not restarted")
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

    deadline = time.monotonic() + max(0.0, spec.start_grace)
    while True:
        code = proc.poll()
        if code is not None:
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    if code is not None:
        # The leader exited: clean whatever it left in its group, drop the pid file, report.
        with contextlib.suppress(DetachedServiceError):
            terminate_group(proc.pid, 1.0, 5.0)
        remove_pid_file(spec.pid_file)
        tail = log_tail(spec.log_file, spec.log_tail_lines, offset)
        shown = "\n".join(tail) if tail else "(nothing was written to the log)"
        raise DetachedServiceError(
            f"{spec.name} exited with status {code} within {spec.start_grace:g} s of starting; "
            f"last lines of {spec.log_file}:\n{shown}",
            log_tail=tail,
        )
    # Leave the child running; it is re-parented when this process exits.
    proc.returncode = 0  # silence Popen's "still running" ResourceWarning on garbage collection
    after = status(spec)
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
