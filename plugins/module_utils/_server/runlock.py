# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The run lock of a host: runs that change a host (deploy, stop, tune) exclude each other there.

The lock is one file, ``<sglang_base_dir>/.run.lock`` (JSON), naming its holder: the
controller's host name, boot id, the pid of its ``ansible-playbook`` process and that process's
start time (clock ticks after boot, ``/proc/<pid>/stat`` field 22), the playbook, when it was
taken, when its lease was last renewed (the host's clock) and the lease's length. Its token
(``host/boot/pid/starttime``) is the same for every task of one run, so that a run that takes
the lock twice (a host in two plays) holds it once, and releases only its own lock.

Every change (take, take over, renew, release) happens under an exclusive ``flock`` of
``<base>/.run.lock.guard`` (never deleted), and the lock file is written to a temporary file
and linked (``os.link``: fails when it exists, as ``O_EXCL``) or renamed into place, so a reader
never sees half a file. Two runs taking the lock at once: exactly one gets it.

A holder is stale (its lock may be taken over) when

- it ran on this controller host: its pid is gone, the pid now belongs to another process
  (another start time), or the controller host rebooted (another boot id);
- it ran on another controller host, whose processes this one cannot see: its lease expired
  (``lease_s`` seconds after its last renewal, by the managed host's clock). A run renews its
  lease while it lives (``plugin_utils/_lockbeat.py``).

The judgement on the holder's process runs on the controller (``judge``), the file operations
on the host (``acquire``, ``renew``, ``release``): the action ``llmops.sglang.run_lock`` joins
them. Stdlib only, Python >= 3.10: the module ``llmops.sglang.run_lock`` ships this file.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils import _detached
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import default

LOCK_FILE = ".run.lock"
GUARD_FILE = ".run.lock.guard"
LOCK_MODE = 0o644
# the run_lock module's documented lease (plugins/modules/run_lock.py), its one declaration
DEFAULT_LEASE_S: int = default("run_lock", "lease")
HOLDER_KEYS = ("controller_host", "controller_boot_id", "controller_pid", "controller_starttime",
               "playbook", "started_at", "user")


class RunLockError(Exception):
    """The lock cannot be read or written (permissions, a file that is not a lock)."""


def lock_path(base_dir: str) -> str:
    return os.path.join(base_dir, LOCK_FILE)


def guard_path(base_dir: str) -> str:
    return os.path.join(base_dir, GUARD_FILE)


def make_token(holder: dict[str, Any]) -> str:
    """The run's identity: the same for every task of one ansible-playbook run."""
    return "/".join(str(holder.get(k) or "") for k in
                    ("controller_host", "controller_boot_id", "controller_pid", "controller_starttime"))


def utc_iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------
# Controller side: who am I, and is that holder still alive


def controller_identity(pid: int, playbook: str = "", user: str = "",
                        proc: Path = _detached.PROC, hostname: str | None = None) -> dict[str, Any]:
    """The holder record of the run whose ``ansible-playbook`` process is ``pid`` (on this
    machine: call it on the controller)."""
    stat = _detached.read_stat(pid, proc)
    starttime = stat.starttime if stat is not None else None
    holder = {
        "controller_host": hostname if hostname is not None else os.uname().nodename,
        "controller_boot_id": _detached.boot_id(proc),
        "controller_pid": int(pid),
        "controller_starttime": starttime,
        "playbook": playbook,
        "started_at": _detached.iso_utc(_detached.start_epoch(starttime, proc)) if starttime is not None else "",
        "user": user,
    }
    holder["token"] = make_token(holder)
    return holder


def judge(record: dict[str, Any], me: dict[str, Any], expired: bool,
          proc: Path = _detached.PROC) -> tuple[str, str]:
    """(verdict, why) for a lock ``record`` found by the run ``me``: verdict ``mine``, ``live``
    (refuse or wait) or ``stale`` (take it over); ``why`` says how it was told."""
    if record.get("token") == me.get("token"):
        return "mine", "this run holds it"
    if record.get("controller_host") != me.get("controller_host"):
        if expired:
            return "stale", (f"its holder runs on another controller host ({record.get('controller_host')}) and its "
                             f"lease expired (not renewed for more than {record.get('lease_s')} s)")
        return "live", (f"its holder runs on another controller host ({record.get('controller_host')}); its lease is "
                        f"renewed while it runs and expires {record.get('lease_s')} s after the last renewal")
    if record.get("controller_boot_id") and record.get("controller_boot_id") != me.get("controller_boot_id"):
        return "stale", "the controller host rebooted since its holder started"
    pid = record.get("controller_pid")
    stat = _detached.read_stat(int(pid), proc) if isinstance(pid, int) and pid > 0 else None
    if stat is None or not stat.alive:
        return "stale", f"its holder's process {pid} is gone"
    if record.get("controller_starttime") is not None and stat.starttime != record.get("controller_starttime"):
        return "stale", f"pid {pid} is now another process (it started at another time than the holder)"
    return "live", f"its holder's process {pid} runs on this controller host"


def describe(record: dict[str, Any], age_s: float | None = None) -> str:
    """The holder for people: what, who, where, since when."""
    what = record.get("playbook") or "an ansible-playbook run"
    text = (f"{what} of pid {record.get('controller_pid')} on controller host {record.get('controller_host')}"
            + (f" (user {record['user']})" if record.get("user") else "")
            + f", started {record.get('started_at') or '?'}, holding it since {record.get('acquired_at') or '?'}")
    if age_s is not None:
        text += f", lease renewed {age_s:.0f} s ago (expires after {record.get('lease_s')} s)"
    return text


# --------------------------------------------------------------------------------------------
# Host side: the file


@contextlib.contextmanager
def _guarded(base_dir: str) -> Iterator[None]:
    os.makedirs(base_dir, exist_ok=True)
    try:
        fd = os.open(guard_path(base_dir), os.O_RDWR | os.O_CREAT, LOCK_MODE)
    except OSError as exc:
        raise RunLockError(f"cannot open the run lock's guard {guard_path(base_dir)}: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def read(base_dir: str) -> dict[str, Any] | None:
    """The lock's record, None when there is no lock. A file that is not a lock (garbage, a
    lock cut short by a full disk) is a record without a holder: stale by any rule."""
    try:
        with open(lock_path(base_dir), encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RunLockError(f"cannot read the run lock {lock_path(base_dir)}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return {"token": "", "controller_host": "", "controller_pid": None, "lease_s": 0, "renewed_at": 0,
                "unreadable": True}
    return data


def _write(base_dir: str, record: dict[str, Any], replace: bool) -> None:
    """Write the record: to a temporary file, then linked into place (fails if a lock exists:
    the ``O_EXCL`` of the first take) or renamed over the old one (renewal, takeover)."""
    fd, tmp = tempfile.mkstemp(prefix=".run.lock.", suffix=".tmp", dir=base_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()
            os.fchmod(handle.fileno(), LOCK_MODE)
            os.fsync(handle.fileno())
        if replace:
            os.replace(tmp, lock_path(base_dir))
        else:
            os.link(tmp, lock_path(base_dir))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _age(record: dict[str, Any], now: float) -> float:
    renewed = record.get("renewed_at")
    return max(0.0, now - float(renewed)) if isinstance(renewed, (int, float)) else float("inf")


def _expired(record: dict[str, Any], now: float) -> bool:
    lease = record.get("lease_s")
    return not isinstance(lease, (int, float)) or _age(record, now) > float(lease)


def acquire(base_dir: str, holder: dict[str, Any], lease_s: int = DEFAULT_LEASE_S, takeover: str | None = None,
            now: float | None = None) -> dict[str, Any]:
    """Take the lock for ``holder`` (a ``controller_identity`` with its token).

    Returns {acquired, reentered, took_over (the record replaced, or None), holder (the record
    that holds it now), age_s, expired}. Not taken: ``holder`` is the other run's record, with
    the age of its lease and whether it expired; ``takeover`` (that record's token, after the
    controller judged it stale) replaces it only while it is still that record.
    """
    token = str(holder.get("token") or "")
    if not token:
        raise RunLockError("a holder without a token")
    with _guarded(base_dir):
        at = time.time() if now is None else now
        current = read(base_dir)
        mine = {k: holder.get(k) for k in HOLDER_KEYS}
        mine.update(token=token, lease_s=int(lease_s), renewed_at=at)
        if current is None:
            mine["acquired_at"] = utc_iso(at)
            _write(base_dir, mine, replace=False)
            return {"acquired": True, "reentered": False, "took_over": None, "holder": mine, "age_s": 0.0,
                    "expired": False}
        if current.get("token") == token:
            mine["acquired_at"] = current.get("acquired_at") or utc_iso(at)
            _write(base_dir, mine, replace=True)
            return {"acquired": True, "reentered": True, "took_over": None, "holder": mine, "age_s": 0.0,
                    "expired": False}
        if takeover is not None and current.get("token", "") == takeover:
            mine["acquired_at"] = utc_iso(at)
            _write(base_dir, mine, replace=True)
            return {"acquired": True, "reentered": False, "took_over": current, "holder": mine, "age_s": 0.0,
                    "expired": False}
        age = _age(current, at)
        return {"acquired": False, "reentered": False, "took_over": None, "holder": current,
                "age_s": None if age == float("inf") else round(age, 1), "expired": _expired(current, at)}


def renew(base_dir: str, token: str, now: float | None = None) -> bool:
    """Renew the lease of the lock held by ``token``; False when it holds no lock here (released,
    or taken over)."""
    with _guarded(base_dir):
        current = read(base_dir)
        if current is None or current.get("token") != token:
            return False
        current["renewed_at"] = time.time() if now is None else now
        _write(base_dir, current, replace=True)
        return True


def release(base_dir: str, token: str) -> dict[str, Any]:
    """Remove the lock if ``token`` holds it. Returns {released, holder}: ``holder`` is the
    record found (another run's when it was taken over: never removed)."""
    if not os.path.isdir(base_dir):
        return {"released": False, "holder": None}
    with _guarded(base_dir):
        current = read(base_dir)
        if current is None or current.get("token") != token:
            return {"released": False, "holder": current}
        os.unlink(lock_path(base_dir))
        return {"released": True, "holder": current}


def query(base_dir: str, now: float | None = None) -> dict[str, Any]:
    """What status shows: {held, holder, age_s, expired, message}."""
    record = read(base_dir) if os.path.isdir(base_dir) else None
    if record is None:
        return {"held": False, "holder": None, "age_s": None, "expired": False, "message": ""}
    at = time.time() if now is None else now
    age = _age(record, at)
    age_s = None if age == float("inf") else round(age, 1)
    return {"held": True, "holder": record, "age_s": age_s, "expired": _expired(record, at),
            "message": f"a run that changes this host holds its lock ({lock_path(base_dir)}): "
                       f"{describe(record, age_s)}; what this status shows may change before it ends"}
