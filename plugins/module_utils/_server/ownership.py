# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Which processes on a host belong to this deployment's SGLang instances.

A real SGLang server's GPU processes are its scheduler (one per TP rank) and detokenizer
children, never the pid in the pid file; nvidia-smi lists the scheduler. A process belongs to
instance ``gpuN`` of the deployment under ``base_dir`` when

- process backend: it is in the process group or session that the instance's pid file
  records (this boot, started no earlier than the leader, and carrying the instance's
  service marker when its environment is readable: ``_detached.belongs_to``);
- systemd backend: it runs in the control group of the unit ``sglang@gpuN.service``;
- either: it works in the instance's folder (its cwd; the launch script and the unit start
  there, and SGLang's processes stay there), which also finds a server whose pid file was
  deleted or written over.

Anything else on a GPU is foreign: the plan refuses that GPU unless told to go ahead.

Stdlib only, Python >= 3.10 (shipped to hosts inside ``llmops.sglang.host_facts``).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils import _detached
from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout


@dataclass
class InstanceProcesses:
    """The live processes of one instance of the deployment, and the GPUs it was given."""

    name: str
    pids: list[int] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    backend: str | None = None  # "process" (pid file), "systemd" (unit cgroup), "workdir", None (none seen)

    def to_fact(self) -> dict[str, object]:
        return {"name": self.name, "pids": sorted(self.pids), "gpus": list(self.gpus),
                "running": bool(self.pids), "backend": self.backend}


@dataclass
class Ownership:
    """The deployment's instances and the owner of each of their processes."""

    base_dir: str
    instances: dict[str, InstanceProcesses] = field(default_factory=dict)
    owner_by_pid: dict[int, str] = field(default_factory=dict)

    def owner(self, pid: int) -> str | None:
        return self.owner_by_pid.get(int(pid))

    def instances_on_gpu(self) -> dict[int, list[str]]:
        """GPU index -> names of running instances that were given that GPU."""
        out: dict[int, list[str]] = {}
        for inst in self.instances.values():
            if inst.pids:
                for gpu in inst.gpus:
                    out.setdefault(gpu, []).append(inst.name)
        return out

    def running(self) -> list[str]:
        """The instance folders with a live process: part of the deployment, listed or not."""
        return [name for name, procs in self.instances.items() if procs.pids]

    def to_fact(self) -> dict[str, object]:
        return {"base_dir": self.base_dir,
                "instances": [self.instances[name].to_fact() for name in self.instances]}


def env_file_gpus(text: str) -> list[int]:
    """GPU indices from an instance's env file (its ``CUDA_VISIBLE_DEVICES`` line)."""
    try:
        env = _detached.parse_env_file(text)
    except _detached.DetachedServiceError:
        return []
    value = env.get("CUDA_VISIBLE_DEVICES", "")
    gpus = []
    for part in value.split(","):
        part = part.strip()
        if part.isdigit():
            gpus.append(int(part))
    return gpus


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def find_ownership(base_dir: str | None, proc_root: str | Path = _detached.PROC) -> Ownership:
    """Scan the host's processes once and attribute them to the deployment's instances
    (the instance folders under ``base_dir``: the manifest may be missing or stale)."""
    proc = Path(proc_root)
    ownership = Ownership(base_dir=base_dir or "")
    if not base_dir:
        return ownership
    records: dict[str, _detached.PidRecord] = {}
    for name in _layout.discover(base_dir):
        paths = _layout.instance_paths(base_dir, name)
        env_text = _read(Path(paths["env_file"]))
        ownership.instances[name] = InstanceProcesses(name=name, gpus=env_file_gpus(env_text or ""))
        try:
            record = _detached.read_pid_file(paths["pid_file"])
        except _detached.DetachedServiceError:
            record = None
        if record is not None:
            records[name] = record
    if not ownership.instances:
        return ownership
    by_pgid: dict[int, list[str]] = {}
    for name, record in records.items():
        by_pgid.setdefault(record.pgid, []).append(name)
    by_dir = {os.path.realpath(_layout.instance_dir(base_dir, name)): name for name in ownership.instances}
    for stat in _detached.all_stats(proc):
        if not (stat.alive or _detached.has_live_threads(stat.pid, proc)):
            continue
        owner = None
        for name in by_pgid.get(stat.pgid, []) + by_pgid.get(stat.sid, []):
            if _detached.belongs_to(records[name], stat.pid, _layout.service_name(name), proc):
                owner, backend = name, "process"
                break
        if owner is None:
            unit = _layout.unit_instance(_read(proc / str(stat.pid) / "cgroup") or "")
            if unit in ownership.instances:
                owner, backend = unit, "systemd"
        if owner is None:
            folder = _detached.read_cwd(stat.pid, proc)
            marker = (_detached.read_environ(stat.pid, proc) or {}).get(_detached.MARKER_ENV) if folder in by_dir else None
            if folder in by_dir and marker in (None, _layout.service_name(by_dir[folder])):
                owner, backend = by_dir[folder], "workdir"
        if owner is not None:
            ownership.owner_by_pid[stat.pid] = owner
            inst = ownership.instances[owner]
            inst.pids.append(stat.pid)
            inst.backend = backend
    return ownership


def foreign(processes: list[Mapping[str, object]]) -> list[Mapping[str, object]]:
    """The processes of a GPU that belong to no instance of this deployment."""
    return [proc for proc in processes if not proc.get("owner")]
