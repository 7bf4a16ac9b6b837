"""Several hosts on one machine, reachable over real SSH: the fleet test harness.

Each host is a network namespace with its own address on a private /24, joined to a bridge in
the root namespace by a veth pair, running its own ``sshd`` (a generated host key; a generated
client key in its authorized_keys). Namespaces share this machine's filesystem and pid space,
so the test venv's Python works on every host and each host gets its own ``sglang_base_dir``
under the run folder. The controller (``ansible-playbook``, in the root namespace) reaches the
hosts at their addresses through the bridge, over SSH, as it would a real fleet.

Everything made is recorded in a state file under ``STATE_DIR`` *before* it is made, so that a
run killed at any point is cleaned up by the next one (``clean_stale``), and nothing that a run
did not record as its own is touched. See ``tests/fleet/README.md``.

Plain Python; pytest is only needed by ``conftest.py``.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import phases
from ..integration.conftest import RECAP, Run, group_members

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SSHD = Path("/usr/sbin/sshd")
STATE_DIR = Path("/run/llmops-fleet")
NS_PREFIX = "llmops-fleet-"
# llmops-fleet-<pid>-<fleet index>-<host name>; bridge lfb<pid base36>-<k>; veth lfv<pid36>-<k>-<i>
NS_NAME = re.compile(r"^llmops-fleet-(\d+)-(\d+)-[a-z0-9]+$")
BRIDGE_NAME = re.compile(r"^lfb([0-9a-z]+)-(\d+)$")
SUBNET_POOL = ipaddress.ip_network("10.213.0.0/16")
DEFAULT_PORT = 30000
ROUTER_PORT = 8000
# the pinned sglang-router of the checkout (`make router`): the hosts have no network to PyPI
ROUTER_PYTHON = ROOT / ".venv-router" / "bin" / "python"
GPUS = [{"name": "NVIDIA H200", "memory_mib": 143771, "count": 2}]


class _NoAliases(yaml.SafeDumper):
    """Every host's values written out in full (no `&id001` anchors for shared lists)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class FleetError(RuntimeError):
    """The harness could not build or drive the fleet; the message says what and why."""


# --------------------------------------------------------------------------------------------
# small helpers: commands, processes


def sh(argv: Sequence[str], *, timeout: float = 30, check: bool = True, input: str | None = None,
       env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a command (bounded); with check, a failure raises FleetError with its output."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, input=input,
                              env=dict(env) if env is not None else None, check=False)
    except subprocess.TimeoutExpired as exc:
        raise FleetError(f"timed out after {timeout} s: {' '.join(argv)}") from exc
    if check and proc.returncode != 0:
        raise FleetError(f"failed (rc {proc.returncode}): {' '.join(argv)}\n{proc.stdout}{proc.stderr}".rstrip())
    return proc


_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
_SIGTERM = int(signal.SIGTERM)


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when this process dies (PR_SET_PDEATHSIG), so a
    killed test run leaves no ansible-playbook or load generator driving a dead fleet."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, _SIGTERM, 0, 0, 0)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def start_time(pid: int) -> int | None:
    """The kernel's start time of a live (not zombie) process: with the pid, its identity."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def alive(pid: int) -> bool:
    return start_time(pid) is not None


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def kill_all(pids: Iterable[int], *, grace: float = 3.0) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL what is left and wait (bounded)."""
    pids = {p for p in pids if p != os.getpid() and alive(p)}
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            pids = {p for p in pids if alive(p)}
            if pids:
                time.sleep(0.05)
        if not pids:
            return


def netns_list() -> list[str]:
    out = sh(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def netns_pids(ns: str) -> list[int]:
    """Every live process whose network namespace is `ns` (`ip netns pids`)."""
    out = sh(["ip", "netns", "pids", ns], check=False).stdout
    return [int(p) for p in out.split() if p.isdigit() and alive(int(p))]


def link_exists(name: str) -> bool:
    return sh(["ip", "link", "show", "dev", name], check=False).returncode == 0


def pgids_of_base_dir(base_dir: Path) -> set[int]:
    """The process groups of the servers a base dir records (manifest and pid files), as
    tests/integration's cleanup finds them; a pid file's group is left out when its leader is
    alive but not the process it recorded (start time and boot id differ: a reused pid)."""
    found: set[int] = set()
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        manifest = json.loads((base_dir / "deployment.json").read_text())
        found |= {int(i["pid"]) for i in manifest.get("instances", []) if i.get("pid")}
    for pid_file in base_dir.glob("*/server.pid") if base_dir.is_dir() else []:
        with contextlib.suppress(OSError, ValueError, IndexError, TypeError, AttributeError):
            lines = pid_file.read_text().splitlines()
            pid = int(lines[0].split()[0])
            meta = json.loads(lines[1]) if len(lines) > 1 else {}
            pgid = int(meta.get("pgid") or pid)
            now = start_time(pid)
            if now is not None and meta.get("starttime") is not None and (
                    now != meta["starttime"] or meta.get("boot_id", boot_id()) != boot_id()):
                found.discard(pgid)
                continue
            found.add(pgid)
    return {p for p in found if p > 1}


def processes_mentioning(path: Path) -> list[int]:
    """The controller-side processes of a run: ssh clients and control masters, ansible and
    ansible-playbook (and their forks) whose command line names `path` or a file in it. Not any
    other process that happens to name it (a developer's `less` of a log in it)."""
    mention = re.compile(re.escape(str(path)) + r"(/|\s|$)")  # the folder itself, not .../fleet10 for .../fleet1
    found = []
    for pid in all_pids():
        if pid == os.getpid():
            continue
        line = cmdline(pid)
        if mention.search(line) and (comm(pid) == "ssh" or re.search(r"/ansible(-playbook)?\s", line)):
            found.append(pid)
    return found


# --------------------------------------------------------------------------------------------
# state: what a run made, recorded before it is made


@dataclass
class State:
    path: Path
    owner_pid: int
    owner_start: int | None
    boot: str
    subnet: str = ""
    bridge: str = ""
    namespaces: list[str] = field(default_factory=list)
    veths: list[str] = field(default_factory=list)
    run_dir: str = ""
    base_dirs: list[str] = field(default_factory=list)

    def save(self) -> None:
        data = {k: v for k, v in self.__dict__.items() if k != "path"}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.path)

    @classmethod
    def load(cls, path: Path) -> State | None:
        try:
            data = json.loads(path.read_text())
            return cls(path=path, **data)
        except (OSError, ValueError, TypeError):
            return None

    def owner_alive(self) -> bool:
        return self.boot == boot_id() and start_time(self.owner_pid) == self.owner_start


@contextlib.contextmanager
def state_lock() -> Iterator[None]:
    """One harness at a time chooses a subnet and cleans stale state (bounded wait)."""
    STATE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "w") as handle:
        deadline = time.monotonic() + 60
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                if time.monotonic() > deadline:
                    raise FleetError(f"{STATE_DIR / '.lock'} held for 60 s by another fleet run") from exc
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def destroy(state: State, *, base_dirs: bool = True) -> list[str]:
    """Remove everything `state` records: processes in its namespaces, the servers its base
    dirs record (`base_dirs`: for a live run; a dead run's pid files may name reused pids, and
    its servers ran in its namespaces anyway), its own ssh/ansible processes, then the
    namespaces, veths and bridge. Returns what could not be removed (empty when all is gone)."""
    present = set(netns_list())
    doomed: set[int] = set()
    for ns in state.namespaces:
        if ns in present:
            doomed |= set(netns_pids(ns))
    for base in state.base_dirs if base_dirs else []:
        for pgid in pgids_of_base_dir(Path(base)):
            doomed |= set(group_members(pgid))
    if state.run_dir:
        doomed |= set(processes_mentioning(Path(state.run_dir)))
    # sshd listeners first (no new sessions), then everything else
    kill_all([p for p in doomed if comm(p) == "sshd"], grace=1.0)
    kill_all(doomed)
    left: list[str] = []
    for ns in state.namespaces:
        if ns in present:
            rest = netns_pids(ns)
            if rest:
                kill_all(rest, grace=0)
            res = sh(["ip", "netns", "del", ns], check=False)
            if res.returncode != 0 and ns in netns_list():
                left.append(f"namespace {ns}: {res.stderr.strip()}")
    for link in [*state.veths, state.bridge]:
        if link and link_exists(link):
            res = sh(["ip", "link", "del", "dev", link], check=False)
            if res.returncode != 0 and link_exists(link):
                left.append(f"link {link}: {res.stderr.strip()}")
    return left


def clean_stale() -> list[str]:
    """Clean what dead fleet runs left (their state files, and namespaces/bridges named by this
    harness whose run is gone). Call with the state lock held. Returns what was cleaned."""
    cleaned: list[str] = []
    recorded: set[str] = set()
    for path in sorted(STATE_DIR.glob("*.json")):
        state = State.load(path)
        if state is None:
            continue
        recorded |= set(state.namespaces) | {state.bridge}
        if state.owner_alive():
            continue
        left = destroy(state, base_dirs=False)
        if not left:
            path.unlink(missing_ok=True)
        cleaned.append(f"{path.name}: {', '.join(state.namespaces) or 'nothing made'}"
                       + (f" (left: {'; '.join(left)})" if left else ""))
    # names only this harness makes, without a state file (a state file removed by hand):
    # only where the run's pid is gone, never a name of a live run
    for ns in netns_list():
        match = NS_NAME.match(ns)
        if match and ns not in recorded and not alive(int(match[1])):
            kill_all(netns_pids(ns))
            sh(["ip", "netns", "del", ns], check=False)
            cleaned.append(f"namespace {ns}")
    out = sh(["ip", "-o", "link", "show", "type", "bridge"], check=False).stdout
    for name in re.findall(r"^\d+:\s+([^:@\s]+)", out, re.M):
        match = BRIDGE_NAME.match(name)
        if match and name not in recorded and not alive(int(match[1], 36)):
            sh(["ip", "link", "del", "dev", name], check=False)
            cleaned.append(f"bridge {name}")
    return cleaned


def used_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks this machine's root namespace has addresses or routes in, and those
    that live fleet runs recorded."""
    nets: list[ipaddress.IPv4Network] = []
    for line in sh(["ip", "-o", "-4", "addr", "show"], check=False).stdout.splitlines():
        match = re.search(r"\binet\s+(\S+)", line)
        if match:
            nets.append(ipaddress.ip_interface(match[1]).network)
    for table in ("main", "local"):
        for line in sh(["ip", "-4", "route", "show", "table", table], check=False).stdout.splitlines():
            words = line.split()
            if not words:
                continue
            dest = words[1] if words[0] in ("local", "broadcast", "unicast", "blackhole", "unreachable",
                                            "prohibit") and len(words) > 1 else words[0]
            if dest == "default":
                continue
            with contextlib.suppress(ValueError):
                nets.append(ipaddress.ip_network(dest, strict=False))
    for path in STATE_DIR.glob("*.json"):
        state = State.load(path)
        if state and state.subnet:
            nets.append(ipaddress.ip_network(state.subnet))
    return nets


def pick_subnet(seed: int) -> ipaddress.IPv4Network:
    used = used_networks()
    subnets = list(SUBNET_POOL.subnets(new_prefix=24))[1:-1]
    start = seed % len(subnets)
    for net in subnets[start:] + subnets[:start]:
        if not any(net.overlaps(u) for u in used):
            return net
    raise FleetError(f"no free /24 in {SUBNET_POOL}: every one overlaps an address or route of this machine")


def base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
        if not number:
            return out


# --------------------------------------------------------------------------------------------
# the fleet


@dataclass
class Host:
    name: str
    groups: list[str]
    index: int
    ns: str
    address: str
    veth: str
    dir: Path                       # run folder of this host: sshd/, sglang/, tmp/
    hostvars: dict[str, Any]        # what the inventory says (set_hostvars changes it)
    initial_hostvars: dict[str, Any] = field(default_factory=dict)  # restored by reset()
    initial_groups: list[str] = field(default_factory=list)         # restored by reset()

    @property
    def base_dir(self) -> Path:
        return Path(self.hostvars["sglang_base_dir"])

    @property
    def sshd_pid_file(self) -> Path:
        return self.dir / "sshd" / "sshd.pid"


@dataclass
class FleetRun(Run):
    """One ansible-playbook run: rc, output, recap per host, and its wall time."""

    seconds: float = 0.0
    argv: list[str] = field(default_factory=list)
    log: Path | None = None         # the run's log with a timestamp per line (ANSIBLE_LOG_PATH)

    def host(self, name: str) -> dict[str, int]:
        return self.recap[name]


class Fleet:
    """Hosts on this machine, each a network namespace with its own sshd, and an inventory of
    them. Build with `Fleet.create(...)`; `close()` removes everything (idempotent)."""

    def __init__(self, run_dir: Path, index: int) -> None:
        self.run_dir = run_dir
        self.index = index
        self.tag = f"{os.getpid()}-{index}"
        short = f"{base36(os.getpid())}-{index}"
        self.bridge = f"lfb{short}"
        self._veth_prefix = f"lfv{short}-"
        self.hosts: dict[str, Host] = {}
        self.subnet: ipaddress.IPv4Network | None = None
        self.gateway = ""
        self.inventory = run_dir / "inventory.yml"
        self.key = run_dir / "ssh" / "id_ed25519"
        self.known_hosts = run_dir / "ssh" / "known_hosts"
        self.control_dir = run_dir / "cp"
        self.facts_dir = run_dir / "facts"
        self.reports_dir = run_dir / "reports"
        self.setup_seconds = 0.0
        self.logs_dir = run_dir / "logs"
        self._runs = 0
        self._popens: list[subprocess.Popen] = []
        self._closed = False
        self.state = State(path=STATE_DIR / f"{self.tag}.json", owner_pid=os.getpid(),
                           owner_start=start_time(os.getpid()), boot=boot_id(), run_dir=str(run_dir))

    # ---- building

    @classmethod
    def create(cls, run_dir: Path, *, servers: int = 3, routers: int = 1, index: int = 0,
               hostvars: Mapping[str, Any] | None = None,
               host_overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Fleet:
        """Build a fleet of `servers` hosts in `sglang_servers` (server1..) and `routers` in
        `sglang_routers` (router1..). `hostvars` apply to every host, `host_overrides` to one
        (by name). On any failure what was made is removed and FleetError raised."""
        check_prerequisites()
        started = time.monotonic()
        run_dir.mkdir(parents=True, exist_ok=True)
        fleet = cls(run_dir, index)
        try:
            fleet._build(servers, routers, dict(hostvars or {}), dict(host_overrides or {}))
        except BaseException:
            fleet.close()
            raise
        fleet.setup_seconds = time.monotonic() - started
        return fleet

    def _build(self, servers: int, routers: int, hostvars: dict, overrides: dict) -> None:
        names = [(f"server{i}", "sglang_servers") for i in range(1, servers + 1)]
        names += [(f"router{i}", "sglang_routers") for i in range(1, routers + 1)]
        if not 1 <= len(names) <= 200:
            raise FleetError("a fleet has 1 to 200 hosts")
        unknown = set(overrides) - {name for name, _ in names}
        if unknown:
            raise FleetError(f"host_overrides for hosts this fleet does not have: {sorted(unknown)}")
        with state_lock():
            clean_stale()
            self.subnet = pick_subnet(os.getpid() * 7 + self.index)
            hosts_ip = list(self.subnet.hosts())
            self.gateway = str(hosts_ip[0])
            for i, (name, group) in enumerate(names, 1):
                host_dir = self.run_dir / "hosts" / name
                host = Host(name=name, groups=[group], index=i, ns=f"{NS_PREFIX}{self.tag}-{name}",
                            address=str(hosts_ip[9 + i]), veth=f"{self._veth_prefix}{i}", dir=host_dir,
                            hostvars={})
                self.hosts[name] = host
            # record first, then make: a run killed from here on is cleaned by the next one
            self.state.subnet = str(self.subnet)
            self.state.bridge = self.bridge
            self.state.namespaces = [h.ns for h in self.hosts.values()]
            self.state.veths = [h.veth for h in self.hosts.values()]
            self.state.base_dirs = [str(h.dir / "sglang") for h in self.hosts.values()]
            self.state.save()
            sh(["ip", "link", "add", "name", self.bridge, "type", "bridge"])
            sh(["ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge])
            sh(["ip", "link", "set", self.bridge, "up"])
        self._keys()
        for host in self.hosts.values():
            self._make_host(host)
        for host in self.hosts.values():
            host.hostvars = self._hostvars(host, hostvars, overrides.get(host.name, {}))
            host.initial_hostvars = json.loads(json.dumps(host.hostvars))
            host.initial_groups = list(host.groups)
        self.write_inventory()
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        for host in self.hosts.values():
            self.start_sshd(host.name)
        for host in self.hosts.values():
            res = self.ssh(host.name, "true", timeout=20)
            if res.returncode != 0:
                raise FleetError(f"ssh root@{host.address} ({host.name}) does not work: "
                                 f"{res.stdout}{res.stderr}\n{self.sshd_log(host.name)}")

    def _keys(self) -> None:
        ssh_dir = self.key.parent
        ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"llmops-fleet-{self.tag}", "-f", str(self.key)])

    def _make_host(self, host: Host) -> None:
        sshd_dir = host.dir / "sshd"
        sshd_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        (host.dir / "tmp").mkdir(mode=0o700, exist_ok=True)
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{host.name}@{self.tag}",
            "-f", str(sshd_dir / "ssh_host_ed25519_key")])
        shutil.copyfile(self.key.with_suffix(".pub"), sshd_dir / "authorized_keys")
        sh(["ip", "netns", "add", host.ns])
        sh(["ip", "netns", "exec", host.ns, "ip", "link", "set", "lo", "up"])
        sh(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.ns])
        sh(["ip", "link", "set", host.veth, "master", self.bridge])
        sh(["ip", "link", "set", host.veth, "up"])
        assert self.subnet is not None
        sh(["ip", "netns", "exec", host.ns, "ip", "addr", "add", f"{host.address}/{self.subnet.prefixlen}",
            "dev", "eth0"])
        sh(["ip", "netns", "exec", host.ns, "ip", "link", "set", "eth0", "up"])
        sh(["ip", "netns", "exec", host.ns, "ip", "route", "add", "default", "via", self.gateway])
        pub = (sshd_dir / "ssh_host_ed25519_key.pub").read_text().split()
        with self.known_hosts.open("a") as handle:
            handle.write(f"{host.address} {pub[0]} {pub[1]}\n")

    def _hostvars(self, host: Host, common: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
        hostvars: dict[str, Any] = {
            "ansible_host": host.address,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_python_interpreter": sys.executable,
            # each host its own remote and async temp folders (a real host has its own home)
            "ansible_remote_tmp": str(host.dir / "tmp" / "ansible"),
            "ansible_async_dir": str(host.dir / "tmp" / "async"),
            "sglang_engine": "sim",
            "sglang_version": "0.5.23",
            "sglang_declared_gpus": GPUS,
            "sglang_model_path": str(ROOT / "data" / "models" / "qwen3.6-27b"),
            "sglang_base_dir": str(host.dir / "sglang"),
            "sglang_install": False,
            "sglang_python": sys.executable,
            "sglang_user": "",
            "sglang_create_user": False,
            "sglang_host_address": "0.0.0.0",
            "sglang_base_port": DEFAULT_PORT,
            "sglang_service_manager": "process",
            "sglang_sim_time_scale": 0.005,
            "sglang_stop_timeout": 15,
            "sglang_ready_interval": 0.5,
        }
        if "sglang_routers" in host.groups:
            # an existing installation (the checkout's .venv-router), run as a process group,
            # on every interface of its host (clients come from other hosts)
            hostvars.update({
                "sglang_router_install": False,
                "sglang_router_python": str(ROUTER_PYTHON),
                "sglang_router_base_dir": str(host.dir / "router"),
                "sglang_router_user": "",
                "sglang_router_create_user": False,
                "sglang_router_service_manager": "process",
                "sglang_router_host": "0.0.0.0",
                "sglang_router_port": ROUTER_PORT,
                "sglang_router_workers_timeout": 60,
                "sglang_router_readiness_timeout": 60,
            })
        hostvars.update(common)
        hostvars.update(own)
        return hostvars

    def write_inventory(self) -> Path:
        """(Re)write the inventory from each host's hostvars (edit them, then call this)."""
        groups: dict[str, dict] = {}
        for host in self.hosts.values():
            for group in host.groups:
                groups.setdefault(group, {"hosts": {}})["hosts"][host.name] = host.hostvars
        ssh_args = " ".join([
            "-F /dev/null",                       # this machine's ~/.ssh/config has no say
            f"-o UserKnownHostsFile={self.known_hosts}", "-o GlobalKnownHostsFile=/dev/null",
            "-o StrictHostKeyChecking=yes", "-o IdentitiesOnly=yes", "-o BatchMode=yes",
            # a host that vanishes (link down) is seen dead in 15 s, also on an open connection
            "-o ServerAliveInterval=5", "-o ServerAliveCountMax=3",
        ])
        inv = {"all": {
            # control sockets named by address (ssh's title of a master shows it: control_masters)
            "vars": {"ansible_ssh_common_args": ssh_args, "ansible_host_key_checking": True,
                     "ansible_control_path_dir": str(self.control_dir),
                     "ansible_control_path": f"{self.control_dir}/%%h-%%p-%%r"},
            "children": groups}}
        self.inventory.write_text(
            f"# fleet {self.tag}: {len(self.hosts)} hosts in {self.subnet}, bridge {self.bridge} ({self.gateway})\n"
            + yaml.dump(inv, Dumper=_NoAliases, sort_keys=False))
        return self.inventory

    def set_groups(self, name: str, groups: Sequence[str]) -> None:
        """Put a host in these inventory groups only ([]: out of the inventory) and rewrite the
        inventory; reset() restores its groups. `servers`/`routers` follow the groups."""
        self.hosts[name].groups = list(groups)
        self.write_inventory()

    def set_hostvars(self, names: str | Iterable[str] | None = None, **hostvars: Any) -> None:
        """Change inventory variables of some hosts (a name, names, or every host) and rewrite
        the inventory; a value None removes the variable. reset() restores the original ones."""
        chosen = [names] if isinstance(names, str) else list(names) if names is not None else list(self.hosts)
        for name in chosen:
            host = self.hosts[name]
            for key, value in hostvars.items():
                if value is None:
                    host.hostvars.pop(key, None)
                else:
                    host.hostvars[key] = value
        self.write_inventory()

    # ---- sshd, links

    def sshd_argv(self, name: str) -> list[str]:
        host = self.hosts[name]
        sshd_dir = host.dir / "sshd"
        return ["ip", "netns", "exec", host.ns, str(SSHD), "-f", "/dev/null",
                "-h", str(sshd_dir / "ssh_host_ed25519_key"),
                "-o", f"ListenAddress={host.address}:22",
                "-o", f"AuthorizedKeysFile={sshd_dir / 'authorized_keys'}",
                "-o", f"PidFile={host.sshd_pid_file}",
                "-o", "StrictModes=no", "-o", "PermitRootLogin=prohibit-password",
                "-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no",
                "-o", "UsePAM=no", "-o", "Subsystem=sftp internal-sftp",
                "-o", "MaxStartups=50:30:100", "-o", "MaxSessions=50",
                "-o", "LogLevel=VERBOSE", "-E", str(sshd_dir / "sshd.log")]

    def sshd_pid(self, name: str) -> int | None:
        """The pid of the host's sshd listener, when it runs."""
        host = self.hosts[name]
        try:
            pid = int(host.sshd_pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        if alive(pid) and comm(pid) == "sshd" and pid in netns_pids(host.ns):
            return pid
        return None

    def start_sshd(self, name: str, *, timeout: float = 10) -> int:
        """Start the host's sshd (a no-op when it runs) and wait until its port answers."""
        host = self.hosts[name]
        pid = self.sshd_pid(name)
        if pid is None:
            host.sshd_pid_file.unlink(missing_ok=True)
            sh(self.sshd_argv(name), timeout=15)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.sshd_pid(name)
            if pid is not None and self.port_open(host.address, 22):
                return pid
            time.sleep(0.05)
        raise FleetError(f"sshd of {name} did not come up on {host.address}:22 within {timeout} s\n"
                         + self.sshd_log(name))

    def control_masters(self, name: str | None = None) -> list[int]:
        """The controller's ssh control masters (ControlPersist) of the fleet, or of one host
        (their sockets are <control_dir>/<address>-<port>-<user>)."""
        needle = f"{self.control_dir}/{self.hosts[name].address}-" if name else ""
        return [p for p in processes_mentioning(self.control_dir) if needle in cmdline(p)]

    def stop_sshd(self, name: str, *, sessions: bool = True) -> None:
        """Stop the host's sshd listener: new SSH connections are refused (Ansible: UNREACHABLE).
        With `sessions`, every sshd of the namespace goes too (open sessions and the
        connections Ansible keeps open with ControlPersist), and the controller's control
        masters to it, so the very next task cannot ride on an old connection."""
        host = self.hosts[name]
        pid = self.sshd_pid(name)
        if pid is not None:
            kill_all([pid], grace=2)
        if sessions:
            kill_all([p for p in netns_pids(host.ns) if comm(p) == "sshd"], grace=2)
            kill_all(self.control_masters(name), grace=1)
        host.sshd_pid_file.unlink(missing_ok=True)

    def link_down(self, name: str, *, masters: bool = True) -> None:
        """Take the host off the network (its veth down): packets to it vanish, connections time
        out, as for a host that died or a cut cable; its processes keep running. With
        `masters`, the controller's open control master to it goes too, so the next task
        connects afresh and fails after the connect timeout (`ansible_timeout`, 10 s); without,
        the task rides on the old connection until ServerAliveInterval x CountMax (15 s) say
        it is dead."""
        sh(["ip", "link", "set", self.hosts[name].veth, "down"])
        if masters:
            kill_all(self.control_masters(name), grace=1)

    def link_up(self, name: str) -> None:
        sh(["ip", "link", "set", self.hosts[name].veth, "up"])

    def sshd_log(self, name: str, lines: int = 30) -> str:
        path = self.hosts[name].dir / "sshd" / "sshd.log"
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"({path} not there)"
        return f"--- {path} (last {lines} lines)\n" + "\n".join(text)

    # ---- driving it

    def address(self, name: str) -> str:
        return self.hosts[name].address

    @property
    def servers(self) -> list[Host]:
        return [h for h in self.hosts.values() if "sglang_servers" in h.groups]

    @property
    def routers(self) -> list[Host]:
        return [h for h in self.hosts.values() if "sglang_routers" in h.groups]

    def env(self) -> dict[str, str]:
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_NOCOLOR="1", PATH=f"{BIN}:{os.environ.get('PATH', '')}",
                   ANSIBLE_CACHE_PLUGIN="jsonfile", ANSIBLE_CACHE_PLUGIN_CONNECTION=str(self.facts_dir))
        for key in ("ANSIBLE_INVENTORY", "ANSIBLE_SSH_ARGS", "ANSIBLE_REMOTE_USER", "ANSIBLE_PRIVATE_KEY_FILE"):
            env.pop(key, None)
        return env

    def _bounded(self, cmd: list[str], timeout: float, log: Path) -> tuple[int, str]:
        """Run a controller command in its own process group; on timeout or interrupt the whole
        group (ansible's forks, ssh clients) goes. Its log (timestamped lines) goes to `log`."""
        log.parent.mkdir(exist_ok=True)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(self.env(), ANSIBLE_LOG_PATH=str(log)),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                preexec_fn=_die_with_parent)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            if isinstance(exc, subprocess.TimeoutExpired):
                return 124, (out or "") + f"\n[fleet harness] killed after {timeout} s: {' '.join(cmd)}\n"
            raise
        return proc.returncode, out or ""

    def play(self, playbook: str, *args: str, timeout: float = 600, **extra_vars: Any) -> FleetRun:
        """ansible-playbook playbooks/<playbook> against the fleet: each keyword an extra var
        (JSON), `args` passed as they are (e.g. "--limit", "server1", "-v")."""
        cmd = [str(BIN / "ansible-playbook"), "-i", str(self.inventory), str(ROOT / "playbooks" / playbook)]
        for key, value in extra_vars.items():
            cmd += ["-e", json.dumps({key: value})]
        cmd += list(args)
        log = self._log_path(playbook)
        started = time.monotonic()
        rc, out = self._bounded(cmd, timeout, log)
        phases.add(playbook, time.monotonic() - started)
        recap = {m[0]: {"ok": int(m[1]), "changed": int(m[2]), "unreachable": int(m[3]), "failed": int(m[4])}
                 for m in RECAP.findall(out)}
        return FleetRun(rc, out, recap, seconds=time.monotonic() - started, argv=cmd, log=log)

    def start(self, playbook: str, *args: str, **extra_vars: Any) -> tuple[subprocess.Popen, list[str], Path, float]:
        """ansible-playbook in the background, in its own process group (its log as `play`'s);
        end it with `finish` (or SIGKILL its group: the controller killed)."""
        cmd = [str(BIN / "ansible-playbook"), "-i", str(self.inventory), str(ROOT / "playbooks" / playbook)]
        for key, value in extra_vars.items():
            cmd += ["-e", json.dumps({key: value})]
        cmd += list(args)
        log = self._log_path(playbook)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(self.env(), ANSIBLE_LOG_PATH=str(log)),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                preexec_fn=_die_with_parent)
        self._popens.append(proc)
        return proc, cmd, log, time.monotonic()

    def finish(self, started: tuple[subprocess.Popen, list[str], Path, float], timeout: float = 600) -> FleetRun:
        """Wait for a `start`ed playbook (its whole group SIGKILLed after `timeout`)."""
        proc, cmd, log, began = started
        try:
            out, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            rc, out = 124, (out or "") + f"\n[fleet harness] killed after {timeout} s: {' '.join(cmd)}\n"
        phases.add(Path(cmd[3]).name, time.monotonic() - began)
        recap = {m[0]: {"ok": int(m[1]), "changed": int(m[2]), "unreachable": int(m[3]), "failed": int(m[4])}
                 for m in RECAP.findall(out or "")}
        return FleetRun(rc, out or "", recap, seconds=time.monotonic() - began, argv=cmd, log=log)

    def _log_path(self, what: str) -> Path:
        self._runs += 1
        return self.logs_dir / f"{self._runs:03d}-{Path(what).stem}.log"

    def adhoc(self, pattern: str, *args: str, timeout: float = 120) -> FleetRun:
        """`ansible PATTERN -i INVENTORY ARGS...` (e.g. "-m", "ansible.builtin.ping")."""
        started = time.monotonic()
        cmd = [str(BIN / "ansible"), "-i", str(self.inventory), pattern, *args]
        log = self._log_path(f"adhoc-{pattern}")
        rc, out = self._bounded(cmd, timeout, log)
        return FleetRun(rc, out, {}, seconds=time.monotonic() - started, argv=cmd, log=log)

    def exec(self, name: str, argv: Sequence[str], *, timeout: float = 60, check: bool = False,
             input: str | None = None) -> subprocess.CompletedProcess:
        """Run a command inside the host's namespace (its network, this machine's files)."""
        return sh(["ip", "netns", "exec", self.hosts[name].ns, *argv], timeout=timeout, check=check, input=input)

    def popen(self, name: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start a background command inside the host's namespace (a load generator); it is
        killed at reset/close if still running. Bound it yourself (count and time)."""
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.STDOUT)
        kwargs.setdefault("text", True)
        proc = subprocess.Popen(["ip", "netns", "exec", self.hosts[name].ns, *argv], start_new_session=True,
                                preexec_fn=_die_with_parent, **kwargs)
        self._popens.append(proc)
        return proc

    def python(self, name: str, code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run Python code (the test venv's interpreter) inside the host's namespace."""
        return self.exec(name, [sys.executable, "-c", code, *args], timeout=timeout)

    def http_get(self, name: str, url: str, *, timeout: float = 10) -> tuple[int, str]:
        """GET `url` from inside the host's namespace: (status, body); status 0 and the error
        when it cannot be reached."""
        code = ("import sys, urllib.request, urllib.error\n"
                "try:\n"
                "    r = urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2]))\n"
                "    print(r.status); print(r.read().decode(errors='replace'), end='')\n"
                "except urllib.error.HTTPError as e:\n"
                "    print(e.code); print(e.read().decode(errors='replace'), end='')\n"
                "except OSError as e:\n"
                "    print(0); print(repr(e), end='')\n")
        res = self.python(name, code, url, str(timeout), timeout=timeout + 20)
        first, _, body = res.stdout.partition("\n")
        try:
            return int(first), body
        except ValueError:
            return 0, res.stdout + res.stderr

    def ssh(self, name: str, command: str, *, timeout: float = 30) -> subprocess.CompletedProcess:
        """`ssh root@ADDRESS COMMAND` with the fleet's key and known_hosts (no control master)."""
        host = self.hosts[name]
        return sh(["ssh", "-F", "/dev/null", "-i", str(self.key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                   "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
                   "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5", f"root@{host.address}", command],
                  timeout=timeout, check=False)

    @staticmethod
    def port_open(address: str, port: int, timeout: float = 1.0) -> bool:
        """A TCP connect from the controller (root namespace) succeeds."""
        try:
            with socket.create_connection((address, port), timeout=timeout):
                return True
        except OSError:
            return False

    @staticmethod
    def get(url: str, timeout: float = 10) -> int:
        """GET from the controller: the HTTP status (0 when unreachable)."""
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    def router_url(self, name: str | None = None) -> str:
        """The router's base URL at its host's address (the first router by default)."""
        host = self.hosts[name] if name else self.routers[0]
        return f"http://{host.address}:{host.hostvars.get('sglang_router_port', ROUTER_PORT)}"

    def router_workers(self, name: str | None = None, timeout: float = 10) -> list[dict[str, Any]]:
        """The router's `GET /workers` list, from the controller ([] when it does not answer)."""
        try:
            with urllib.request.urlopen(self.router_url(name) + "/workers", timeout=timeout) as resp:
                return list(json.loads(resp.read()).get("workers") or [])
        except (OSError, ValueError):
            return []

    def healthy_worker_urls(self, name: str | None = None) -> set[str]:
        return {w["url"].rstrip("/") for w in self.router_workers(name) if w.get("is_healthy")}

    def manifest(self, name: str) -> dict:
        return json.loads((self.hosts[name].base_dir / "deployment.json").read_text())

    def pids(self, name: str) -> dict[str, int]:
        return {i["name"]: i["pid"] for i in self.manifest(name)["instances"]}

    def processes(self, name: str | None = None, *, sshd: bool = False) -> dict[int, str]:
        """pid -> command line of every process in the hosts' namespaces (one host, or all),
        without the sshd processes unless asked."""
        found: dict[int, str] = {}
        for host in [self.hosts[name]] if name else self.hosts.values():
            for pid in netns_pids(host.ns):
                if sshd or comm(pid) != "sshd":
                    found[pid] = cmdline(pid)
        return found

    def server_processes(self) -> dict[int, str]:
        """What is left of the servers the hosts' base dirs record (their process groups), in
        or out of the namespaces, and every non-sshd process in the namespaces."""
        found = self.processes()
        for host in self.hosts.values():
            for pgid in pgids_of_base_dir(host.base_dir):
                found.update({p: cmdline(p) for p in group_members(pgid)})
        return found

    # ---- between scenarios, and at the end

    def reset(self) -> None:
        """Back to a fresh fleet: links up, every sshd running, the controller's control masters,
        background commands and every non-sshd process of the namespaces killed, each host's
        sglang base dir removed, the inventory rewritten from the hosts' hostvars."""
        self._kill_popens()
        for host in self.hosts.values():
            if link_exists(host.veth):
                self.link_up(host.name)
        kill_all(self.control_masters(), grace=1)  # fresh connections (one may hang on a cut link)
        kill_all(self.server_processes())
        for host in self.hosts.values():
            # the inventory back to what it was made with (a scenario may have changed it)
            changed_base = host.base_dir
            host.hostvars = json.loads(json.dumps(host.initial_hostvars))
            host.groups = list(host.initial_groups)
            for base in {changed_base, host.base_dir, host.dir / "router"}:
                shutil.rmtree(base, ignore_errors=True)
            self.start_sshd(host.name)
        self.write_inventory()

    def _kill_popens(self) -> None:
        for proc in self._popens:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        self._popens.clear()

    def close(self) -> list[str]:
        """Remove everything this fleet made (idempotent): processes of the namespaces and of
        the base dirs, control masters, sshd, namespaces, veths, bridge; then its state file.
        Returns what could not be removed."""
        if self._closed:
            return []
        self._closed = True
        self._kill_popens()
        left = destroy(self.state)
        if not left:
            self.state.path.unlink(missing_ok=True)
        return left


def check_prerequisites() -> None:
    """Root, iproute2, ssh tools, sshd (installed from apt when missing), namespaces creatable.
    Raises FleetError saying which is missing."""
    if os.geteuid() != 0:
        raise FleetError("the fleet harness needs root (network namespaces, a bridge, sshd on port 22); "
                         "run `make fleet-test` as root")
    if shutil.which("ip") is None:
        raise FleetError("`ip` not found: install iproute2")
    if not SSHD.exists():
        install_openssh_server()
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            raise FleetError(f"`{tool}` not found: install openssh-client")
    probe = f"{NS_PREFIX}{os.getpid()}-0-probe"  # NS_NAME: cleaned if left
    res = sh(["ip", "netns", "add", probe], check=False)
    sh(["ip", "netns", "del", probe], check=False)
    if res.returncode != 0:
        raise FleetError(f"cannot create a network namespace (`ip netns add`): {res.stderr.strip()}; "
                         "the fleet harness needs CAP_SYS_ADMIN and CAP_NET_ADMIN")


def install_openssh_server(timeout: float = 600) -> None:
    """apt-get install openssh-server (what `make fleet-test` does first), bounded."""
    if shutil.which("apt-get") is None:
        raise FleetError(f"{SSHD} is missing and there is no apt-get: install openssh-server")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update", "-qq"],
                 ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "openssh-server"]):
        res = sh(argv, timeout=timeout, check=False, env=env)
        if res.returncode != 0:
            raise FleetError(f"{' '.join(argv)} failed (rc {res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    if not SSHD.exists():
        raise FleetError(f"openssh-server installed but {SSHD} is not there")
