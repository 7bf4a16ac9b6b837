# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What a service is (``ServiceSpec``), what it is found to be (``ServiceStatus``), what an action
did (``ActionResult``), and its inputs checked: command, umask, environment file.
"""
from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils._detached.common import (
    MARKER_ENV,
    DetachedServiceError,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.pidfile import PidRecord

_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
    restart_changed: bool = False  # started: a running service started with another command is restarted


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
