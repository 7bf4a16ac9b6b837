# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The pid file: line 1 the bare pid, line 2 a JSON record (process group, start time, boot id).
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils._detached.common import DetachedServiceError

PID_FILE_MODE = 0o644


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
