# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Pre-flight: can the planned instances start on this host? Checked before anything stops.

A deploy that stops healthy servers and then finds that the new configuration cannot start
(a port held by another program, a missing model, a missing interpreter) leaves the host with
fewer servers than before. These checks run on the host after the plan and before any change:

- every port an instance will listen on is free, or held by this deployment's own servers
  (they are stopped before the new ones start); otherwise the holder is named (pid, name);
- the files and executables the launch needs exist;
- (asked, not checked) whether the venv the role installs into holds every pinned package
  already, so that the role runs pip only when pip would change something.

Stdlib only, Python >= 3.10 (``llmops.sglang.preflight`` ships it to hosts). Linux /proc.
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils import _detached
from ansible_collections.llmops.sglang.plugins.module_utils._server import hostfacts as _hostfacts
from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout
from ansible_collections.llmops.sglang.plugins.module_utils._server import ownership as _ownership

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


def router_pids(router_dir: str | None, proc: Path = _detached.PROC) -> set[int]:
    """The live processes of the router whose folder is ``router_dir`` (the router role's
    ``<base>/router``): the process group or session its pid file records (``belongs_to``, with
    its service marker), the cgroup of its unit ``sglang-router.service``, or a working folder
    that is its folder (the launch script and the unit start there)."""
    if not router_dir:
        return set()
    try:
        record = _detached.read_pid_file(os.path.join(router_dir, _layout.ROUTER_PID_FILE))
    except _detached.DetachedServiceError:
        record = None
    folder = os.path.realpath(router_dir)
    found = set()
    for stat in _detached.all_stats(proc):
        if not (stat.alive or _detached.has_live_threads(stat.pid, proc)):
            continue
        if record is not None and record.pgid in (stat.pgid, stat.sid) \
                and _detached.belongs_to(record, stat.pid, _layout.ROUTER_SERVICE, proc):
            found.add(stat.pid)
            continue
        try:
            cgroup = (proc / str(stat.pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cgroup = ""
        if f"/{_layout.ROUTER_UNIT}" in cgroup or _detached.read_cwd(stat.pid, proc) == folder:
            found.add(stat.pid)
    return found


def check_ports(ports: list[Mapping[str, Any]], deployment_dir: str | None,
                proc: Path = _detached.PROC, router_dir: str | None = None) -> list[str]:
    """Problems with the ports the instances need: [{port, instance, what, fix?, ours_dir?}] -> messages.
    A port held by a server of the deployment under ``deployment_dir``, or by the router whose
    folder is ``router_dir``, is not a problem: it is stopped before its replacement starts."""
    held = listeners([p["port"] for p in ports], proc)
    if not held:
        return []
    ownership = _ownership.find_ownership(deployment_dir, proc)
    ours = router_pids(router_dir, proc) if router_dir else set()
    problems = []
    for want in ports:
        for lst in (h for h in held if h.port == int(want["port"])):
            owner = ownership.owner(lst.pid) if lst.pid is not None else None
            if owner is not None or (lst.pid is not None and lst.pid in ours):
                continue  # this deployment's own server or router: stopped before its replacement starts
            if want.get("ours_dir") and lst.pid is not None \
                    and _detached.read_cwd(lst.pid, proc) == os.path.realpath(str(want["ours_dir"])):
                continue  # the service of that folder (the storage tier's master): the role restarts it
            holder = f"pid {lst.pid} ({lst.name})" if lst.pid is not None else "a process this user cannot see"
            fix = want.get("fix") or "or choose other ports (sglang_base_port, sglang_nccl_port_base)"
            problems.append(f"port {want['port']} ({want.get('what', 'HTTP')} port of instance {want['instance']}) "
                            f"is held by {holder}, which is not this deployment's: stop it, {fix}")
    return problems


def command_key(words: list[str], program: str) -> str:
    """What a passing command's result depends on: its argv, the program (its real path, size and
    modification time) and the packages beside it (the modification time of each
    ``lib/python*/site-packages`` folder of the program's prefix: installing, upgrading or removing
    a package changes its entries)."""
    digest = hashlib.sha256("\0".join(words).encode())
    real = os.path.realpath(program)
    state = os.stat(real)
    digest.update(f"\0{real}\0{state.st_size}\0{state.st_mtime_ns}".encode())
    prefix = os.path.dirname(os.path.dirname(os.path.abspath(program)))
    for folder in sorted(glob.glob(os.path.join(prefix, "lib", "python*", "site-packages"))):
        digest.update(f"\0{folder}\0{os.stat(folder).st_mtime_ns}".encode())
    return digest.hexdigest()


def _remembered(path: str | None, key: str) -> bool:
    if not path:
        return False
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() == key
    except OSError:
        return False


def _remember(path: str, key: str) -> None:
    """Record a pass (atomically), where the folder is there already (nothing is created for it)."""
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=".preflight-", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(key + "\n")
        os.replace(tmp, path)
    except OSError:
        pass


def check_commands(commands: list[Mapping[str, Any]], timeout: float = 120.0, record: bool = True) -> list[str]:
    """Problems with commands that must succeed: [{argv, what, fix?, missing_ok?, remember?, env?}] ->
    messages (the last lines of what the command wrote). A command whose program is not there is a
    problem, or skipped with ``missing_ok`` (the role installs it later in the run). With
    ``remember`` (a file) a pass is recorded there (``command_key``; not with ``record`` false:
    check mode) and a command whose key it holds is not run again: the same argv accepted by the
    same program with the same packages."""
    problems = []
    for item in commands:
        words = [str(w) for w in item["argv"]]
        what = item.get("what") or "command"
        fix = f": {item['fix']}" if item.get("fix") else ""
        program = words[0] if "/" in words[0] else (shutil.which(words[0]) or words[0])
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            if not item.get("missing_ok"):
                problems.append(f"{what}: {program} is not an executable file on this host{fix}")
            continue
        key = command_key(words, program) if item.get("remember") else ""
        if key and _remembered(item.get("remember"), key):
            continue
        try:
            env = {**os.environ, **{str(k): str(v) for k, v in (item.get("env") or {}).items()}}
            done = subprocess.run(words, capture_output=True, text=True, timeout=timeout, check=False, env=env,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as err:
            problems.append(f"{what}: {program} could not be run ({err}){fix}")
            continue
        if done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip()).splitlines()[-5:]
            problems.append(f"{what}: {program} exited {done.returncode}: " + (" | ".join(said) or "(no output)") + fix)
        elif key and record:
            _remember(str(item["remember"]), key)
    return problems


def service_manager(wanted: str, proc: Path = _detached.PROC, run_systemd: str = "/run/systemd/system") -> str:
    """``wanted`` (systemd or process), or for ``auto`` the host's (``_hostfacts``' rule:
    systemd where PID 1 is systemd and /run/systemd/system exists, else process)."""
    if wanted in ("systemd", "process"):
        return wanted
    return _hostfacts.read_service_manager(proc, run_systemd)


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


def check_folders(folders: list[Mapping[str, Any]]) -> list[str]:
    """Problems with folders the run makes or writes: the folder, or the closest existing folder
    above it, must be writable by this user on a file system mounted read-write."""
    problems = []
    for item in folders:
        path = os.path.abspath(str(item["path"]))
        found = path
        while not os.path.isdir(found) and found != os.sep:
            if os.path.exists(found):
                break  # a file where a folder goes
            found = os.path.dirname(found)
        what, fix = item.get("what") or "folder", f": {item['fix']}" if item.get("fix") else ""
        where = "" if found == path else f" (it does not exist yet; {found} would hold it)"
        if not os.path.isdir(found):
            problems.append(f"{what} {path}: {found} is a file, not a folder{fix}")
        elif os.statvfs(found).f_flag & os.ST_RDONLY:
            problems.append(f"{what} {path}{where} is on a file system mounted read-only{fix}")
        elif not os.access(found, os.W_OK | os.X_OK):
            problems.append(f"{what} {path}{where} is not writable by this user{fix}")
    return problems


_PIN = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*")


def _dist_name(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions(venv: str) -> dict[str, str] | None:
    """Distribution name (PEP 503) -> version, from the ``*.dist-info/METADATA`` of the venv's
    site-packages; None when the venv has no Python."""
    root = Path(venv)
    if not (root / "bin" / "python").exists():
        return None
    found: dict[str, str] = {}
    for meta in root.glob("lib/python*/site-packages/*.dist-info/METADATA"):
        name = version = ""
        try:
            with open(meta, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if not line.strip():
                        break  # the headers end at the first blank line
                    if line.startswith("Name:"):
                        name = line[5:].strip()
                    elif line.startswith("Version:"):
                        version = line[8:].strip()
                    if name and version:
                        break
        except OSError:
            continue
        if name and version:
            found[_dist_name(name)] = version
    return found


def packages_current(venv: str, requirements: list[str]) -> bool:
    """Whether pip would change nothing: every requirement is an exact pin (``name==version``)
    that the venv holds at that version. Anything else (a range, extras, a URL, a missing venv
    or package, another spelling of the version) says False, and pip decides."""
    have = installed_versions(venv)
    if have is None or not requirements:
        return False
    for req in requirements:
        pin = _PIN.fullmatch(str(req))
        if pin is None or have.get(_dist_name(pin[1])) != pin[2]:
            return False
    return True
