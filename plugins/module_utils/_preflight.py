# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Pre-flight: can the planned instances start on this host? Checked before anything stops.

A deploy that stops healthy servers and then finds that the new configuration cannot start
(a port held by another program, a missing model, a missing interpreter) leaves the host with
fewer servers than before. These checks run on the host after the plan and before any change:

- every port an instance will listen on is free, or held by this deployment's own servers
  (they are stopped before the new ones start); otherwise the holder is named (pid, name);
- the files and executables the launch needs exist.

Stdlib only, Python >= 3.10 (``llmops.sglang.preflight`` ships it to hosts). Linux /proc.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils import _detached, _ownership

TCP_LISTEN = "0A"
NET_TABLES = ("net/tcp", "net/tcp6")


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket: its port, the socket inode, and the process holding it."""

    port: int
    inode: int
    pid: int | None = None
    name: str = ""


def listening_inodes(proc: Path = _detached.PROC) -> dict[int, set[int]]:
    """port -> inodes of the sockets listening on it (IPv4 and IPv6)."""
    found: dict[int, set[int]] = {}
    for table in NET_TABLES:
        try:
            lines = (proc / table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != TCP_LISTEN:
                continue
            try:
                port = int(cols[1].rsplit(":", 1)[1], 16)
                inode = int(cols[9])
            except (IndexError, ValueError):
                continue
            found.setdefault(port, set()).add(inode)
    return found


def socket_owners(inodes: set[int], proc: Path = _detached.PROC) -> dict[int, int]:
    """socket inode -> pid of a process holding it (scanning /proc/<pid>/fd)."""
    owners: dict[int, int] = {}
    if not inodes:
        return owners
    for stat in _detached.all_stats(proc):
        fd_dir = proc / str(stat.pid) / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd_dir / fd)
            except OSError:
                continue
            if target.startswith("socket:[") and int(target[8:-1]) in inodes:
                owners.setdefault(int(target[8:-1]), stat.pid)
    return owners


def listeners(ports: Iterable[int], proc: Path = _detached.PROC) -> list[Listener]:
    """Who listens on any of ``ports`` (a holder not visible to this user has pid None)."""
    wanted = {int(p) for p in ports}
    by_port = {port: inodes for port, inodes in listening_inodes(proc).items() if port in wanted}
    owners = socket_owners({i for inodes in by_port.values() for i in inodes}, proc)
    found = []
    for port, inodes in sorted(by_port.items()):
        for inode in sorted(inodes):
            pid = owners.get(inode)
            name = ""
            if pid is not None:
                cmd = _detached.read_cmdline(pid, proc)
                name = " ".join(cmd)[:120] if cmd else (getattr(_detached.read_stat(pid, proc), "comm", "") or "")
            found.append(Listener(port=port, inode=inode, pid=pid, name=name))
    return found


def check_ports(ports: list[Mapping[str, Any]], deployment_dir: str | None,
                proc: Path = _detached.PROC) -> list[str]:
    """Problems with the ports the instances need: [{port, instance, what}] -> messages."""
    held = listeners([p["port"] for p in ports], proc)
    if not held:
        return []
    ownership = _ownership.find_ownership(deployment_dir, proc)
    problems = []
    for want in ports:
        for lst in (h for h in held if h.port == int(want["port"])):
            owner = ownership.owner(lst.pid) if lst.pid is not None else None
            if owner is not None:
                continue  # this deployment's own server: stopped before its replacement starts
            holder = f"pid {lst.pid} ({lst.name})" if lst.pid is not None else "a process this user cannot see"
            problems.append(f"port {want['port']} ({want.get('what', 'HTTP')} port of instance {want['instance']}) "
                            f"is held by {holder}, which is not this deployment's: stop it, or choose other ports "
                            "(sglang_base_port, sglang_nccl_port_base)")
    return problems


def runnable_by(path: str, user: str) -> bool:
    """Whether ``user`` may run ``path``: search permission on every folder above it and execute
    permission on it (the resolved file), from the permission bits (ACLs are not read)."""
    import grp
    import pwd

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return True  # the role creates the user later in the run: nothing to check against yet
    if pw.pw_uid == 0:
        return True
    gids = {pw.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}

    def allowed(target: str, bit: int) -> bool:
        try:
            st = os.stat(target)
        except OSError:
            return False
        if st.st_uid == pw.pw_uid:
            return bool(st.st_mode & (bit << 6))
        if st.st_gid in gids:
            return bool(st.st_mode & (bit << 3))
        return bool(st.st_mode & bit)

    for candidate in (path, os.path.realpath(path)):
        parts = os.path.dirname(os.path.abspath(candidate)).split(os.sep)
        for depth in range(1, len(parts) + 1):
            if not allowed(os.sep + os.path.join(*parts[1:depth]) if depth > 1 else os.sep, 0o1):
                return False
    return allowed(os.path.realpath(path), 0o1)


def check_paths(files: list[Mapping[str, Any]], executables: list[Mapping[str, Any]],
                user: str | None = None) -> list[str]:
    """Problems with files that must exist and programs that must be executable (by ``user``,
    the account the servers run as, when given)."""
    problems = []
    for item in files:
        if not os.path.exists(str(item["path"])):
            problems.append(f"{item.get('what', 'file')} {item['path']} does not exist on this host"
                            + (f": {item['fix']}" if item.get("fix") else ""))
    for item in executables:
        path = str(item["path"])
        if "/" not in path:  # a command name: looked up on PATH
            path = shutil.which(path) or path
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            problems.append(f"{item.get('what', 'program')} {path} is not an executable file on this host"
                            + (f": {item['fix']}" if item.get("fix") else ""))
        elif user and not runnable_by(path, user):
            problems.append(f"{item.get('what', 'program')} {path} cannot be run by {user}, the user the servers "
                            "run as (a folder above it or the file itself is closed to that user)"
                            + (f": {item['fix']}" if item.get("fix") else ""))
    return problems
