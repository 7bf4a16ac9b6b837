"""Helpers to run the collection's playbooks against localhost with the embedded engine."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from .. import phases
from ..ports import free_port_block  # noqa: F401 - the harness's tests import it from here

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


_STARTED: dict[int, tuple[str, float]] = {}  # a background playbook's pid: its name, when it started


@dataclass
class Run:
    rc: int
    out: str
    recap: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return sum(h["changed"] for h in self.recap.values())


@dataclass
class Deployment:
    """One local 'host' in tmp_path: its inventory, base dir and playbook runner."""

    base: Path
    inventory: Path
    extra: dict

    fact_cache: Path | None = None
    path_prepend: list[Path] = field(default_factory=list)  # e.g. a stand-in nvidia-smi's folder

    def env(self) -> dict[str, str]:
        path = ":".join([*(str(p) for p in self.path_prepend), str(BIN), os.environ.get("PATH", "")])
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_NOCOLOR="1", PATH=path, ANSIBLE_CACHE_PLUGIN="memory")
        if self.fact_cache is not None:
            env.update(ANSIBLE_CACHE_PLUGIN="jsonfile", ANSIBLE_CACHE_PLUGIN_CONNECTION=str(self.fact_cache))
        return env

    def adhoc(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "ansible"), "-i", str(self.inventory), *args], cwd=ROOT, env=self.env(),
                              capture_output=True, text=True, timeout=120, check=False)

    def command(self, playbook: str, *args: str, **extra_vars) -> list[str]:
        cmd = [str(BIN / "ansible-playbook"), "-i", str(self.inventory), str(ROOT / "playbooks" / playbook)]
        for key, value in extra_vars.items():
            cmd += ["-e", json.dumps({key: value})]
        return cmd + list(args)

    def play(self, playbook: str, *args: str, timeout: int = 300, **extra_vars) -> Run:
        started = time.monotonic()
        try:
            proc = subprocess.run(self.command(playbook, *args, **extra_vars), cwd=ROOT, env=self.env(),
                                  capture_output=True, text=True, timeout=timeout, check=False)
        finally:
            phases.add(playbook, time.monotonic() - started)
        return finished(proc.returncode, proc.stdout + proc.stderr)

    def start(self, playbook: str, *args: str, **extra_vars) -> subprocess.Popen:
        """The playbook in the background, in a process group of its own (as a shell's foreground
        job: Ctrl-C is SIGINT to that group), its output in one pipe; end it with ``finish``."""
        proc = subprocess.Popen(self.command(playbook, *args, **extra_vars), cwd=ROOT, env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        _STARTED[proc.pid] = (playbook, time.monotonic())
        return proc

    @staticmethod
    def finish(proc: subprocess.Popen, timeout: int = 300) -> Run:
        try:
            out, _ = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            playbook, started = _STARTED.pop(proc.pid, ("", 0.0))
            if playbook:
                phases.add(playbook, time.monotonic() - started)
        return finished(proc.returncode, out)

    def manifest(self) -> dict:
        return json.loads((self.base / "deployment.json").read_text())

    def pids(self) -> dict[str, int]:
        return {i["name"]: i["pid"] for i in self.manifest()["instances"]}


def finished(rc: int, out: str) -> Run:
    recap = {m[0]: {"ok": int(m[1]), "changed": int(m[2]), "unreachable": int(m[3]), "failed": int(m[4])}
             for m in RECAP.findall(out)}
    return Run(rc, out, recap)


def make_inventory(tmp_path: Path, **overrides) -> Deployment:
    base = tmp_path / "sglang"
    port = free_port_block(4)
    hostvars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "sglang_engine": "sim",
        "sglang_version": "0.5.23",
        "sglang_declared_gpus": [{"name": "NVIDIA H200", "memory_mib": 143771, "count": 2}],
        "sglang_model_path": str(ROOT / "data" / "models" / "qwen3.6-27b"),
        "sglang_base_dir": str(base),
        # an existing installation: the test venv has aiohttp (sglang_install: false path)
        "sglang_install": False,
        "sglang_python": sys.executable,
        "sglang_user": "",
        "sglang_create_user": False,
        "sglang_base_port": port,
        "sglang_service_manager": "process",
        "sglang_sim_time_scale": 0.005,
        "sglang_stop_timeout": 15,
        "sglang_ready_interval": 0.5,
    }
    hostvars.update(overrides)
    inv = {"all": {"children": {"sglang_servers": {"hosts": {"localhost": hostvars}}}}}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return Deployment(base=base, inventory=path, extra=hostvars)


def group_members(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def _left_groups(dep: Deployment) -> set[int]:
    """The process groups a test's deployment left running: those of every process whose working
    folder is under the test's own folder (the servers and the router run in their folders;
    nothing else is there), never this process's own group."""
    root = dep.base.parent.resolve()
    own = os.getpgrp()
    pgids: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{entry}/cwd"))
            pgid = os.getpgid(int(entry))
        except OSError:
            continue
        if pgid != own and (cwd == root or root in cwd.parents):
            pgids.add(pgid)
    return pgids


def cleanup(dep: Deployment) -> None:
    """Leave nothing running: SIGKILL every process of the groups the test's deployment left
    (a test's own stop is what checks stop.yml; a stop.yml after every test was about a tenth of
    the integration run's time)."""
    for pgid in _left_groups(dep):
        for pid in group_members(pgid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    dep = make_inventory(tmp_path)
    yield dep
    cleanup(dep)
