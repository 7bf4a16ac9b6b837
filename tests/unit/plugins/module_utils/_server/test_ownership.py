"""Which GPU processes belong to this deployment (module_utils/_server/ownership.py), with real
process groups started by _detached, a fake /proc for systemd units, and the busy rule of
_hostfacts.attach_processes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _detached as d
from ansible_collections.llmops.sglang.plugins.module_utils._server import hostfacts as hf
from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout
from ansible_collections.llmops.sglang.plugins.module_utils._server import ownership as own

# The launch script's server spawns a child, as SGLang's main process spawns its scheduler.
SERVER = ("import subprocess, sys, time; "
          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', 'test-scheduler']); "
          "time.sleep(60)")


def _children(pgid: int) -> list[int]:
    return [s.pid for s in d.group_members(pgid) if s.pid != pgid]


def _argv0(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except (OSError, IndexError):
        return None


def _wait(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[Path, dict[str, d.ServiceSpec]]]:
    """Instances gpu0 (GPU 0) and gpu1 (GPU 1) started as the server role starts them."""
    base = tmp_path / "sglang"
    specs = {}
    for index in (0, 1):
        name = f"gpu{index}"
        paths = _layout.instance_paths(str(base), name)
        Path(paths["dir"]).mkdir(parents=True)
        Path(paths["env_file"]).write_text(f"CUDA_VISIBLE_DEVICES={index}\nCUDA_DEVICE_ORDER=PCI_BUS_ID\n")
        script = Path(paths["launch_script"])
        script.write_text(f"#!/bin/sh\nexec {sys.executable} -c \"{SERVER}\" sglang.launch_server\n")
        script.chmod(0o750)
        specs[name] = d.ServiceSpec(name=_layout.service_name(name), command=[str(script)],
                                    pid_file=paths["pid_file"], log_file=paths["log_file"], chdir=paths["dir"],
                                    match="sglang.launch_server", start_grace=0.2, stop_timeout=5)
        d.start(specs[name])
    yield base, specs
    for spec in specs.values():
        record = d.read_pid_file(spec.pid_file)
        if record is not None:
            for member in d.group_members(record.pgid):
                os.kill(member.pid, signal.SIGKILL)


def test_children_of_an_instance_are_owned_and_others_are_foreign(deployment) -> None:
    base, specs = deployment
    leader = {name: d.read_pid_file(spec.pid_file).pid for name, spec in specs.items()}
    assert _wait(lambda: all(_children(pid) for pid in leader.values()))
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        found = own.find_ownership(str(base))
        for name, pid in leader.items():
            child = _children(pid)[0]
            assert found.owner(child) == name  # the "scheduler" child, not the pid in the pid file
            assert found.owner(pid) == name
        assert found.owner(stranger.pid) is None
        assert found.owner(os.getpid()) is None
        assert found.instances_on_gpu() == {0: ["gpu0"], 1: ["gpu1"]}
        fact = found.to_fact()
        assert [i["name"] for i in fact["instances"]] == ["gpu0", "gpu1"]
        assert all(i["running"] and i["backend"] == "process" for i in fact["instances"])
    finally:
        stranger.kill()
        stranger.wait()


def test_a_stopped_instance_owns_nothing_and_its_gpu_is_not_claimed(deployment) -> None:
    base, specs = deployment
    d.stop(specs["gpu1"])
    found = own.find_ownership(str(base))
    assert found.instances["gpu1"].pids == [] and found.instances_on_gpu() == {0: ["gpu0"]}


def test_a_pid_file_of_an_earlier_boot_owns_nothing(deployment, tmp_path: Path) -> None:
    base, specs = deployment
    record = d.read_pid_file(specs["gpu0"].pid_file)
    stale = d.PidRecord(pid=record.pid, pgid=record.pgid, starttime=record.starttime, boot_id="another-boot")
    d.write_pid_file(specs["gpu0"].pid_file, stale)
    assert not d.belongs_to(stale, record.pid, specs["gpu0"].name)  # the record grants nothing
    found = own.find_ownership(str(base))
    # the server still works in its folder: that, not the stale record, makes it the instance's
    assert found.owner(record.pid) == "gpu0" and found.instances["gpu0"].backend == "workdir"
    # a folder no server works in: nothing
    other = tmp_path / "other"
    paths = _layout.instance_paths(str(other), "gpu0")
    Path(paths["dir"]).mkdir(parents=True)
    d.write_pid_file(paths["pid_file"], stale)
    assert own.find_ownership(str(other)).instances["gpu0"].pids == []


def test_a_process_of_the_group_without_the_marker_is_foreign(tmp_path: Path) -> None:
    """In the instance's process group but carrying another service's marker (something the
    launch environment started for someone else): not the instance's."""
    base = tmp_path / "sglang"
    paths = _layout.instance_paths(str(base), "gpu0")
    Path(paths["dir"]).mkdir(parents=True)
    script = Path(paths["launch_script"])
    script.write_text(f"#!/bin/sh\n{d.MARKER_ENV}=someone-else {sys.executable} -c 'import time; time.sleep(60)' &\n"
                      f"exec {sys.executable} -c 'import time; time.sleep(60)' sglang.launch_server\n")
    script.chmod(0o750)
    spec = d.ServiceSpec(name=_layout.service_name("gpu0"), command=[str(script)], pid_file=paths["pid_file"],
                         log_file=paths["log_file"], match="sglang.launch_server", start_grace=0.2)
    d.start(spec)
    leader = d.read_pid_file(spec.pid_file).pid
    try:
        # the child is the shell's fork (with the instance's marker) until it execs Python: wait for Python
        assert _wait(lambda: len(_children(leader)) == 1 and _argv0(_children(leader)[0]) == sys.executable)
        other = _children(leader)[0]
        found = own.find_ownership(str(base))
        assert found.owner(leader) == "gpu0"
        assert found.owner(other) is None
    finally:
        for member in d.group_members(leader):
            os.kill(member.pid, signal.SIGKILL)


def test_a_child_whose_environment_shows_no_marker_is_the_instances(tmp_path: Path) -> None:
    """SGLang's scheduler and detokenizer set their title with setproctitle, which overwrites
    /proc/<pid>/environ: no marker there (seen on an H200, where this made a re-deploy refuse
    the deployment's own GPU). Membership of the service's session decides."""
    base = tmp_path / "sglang"
    paths = _layout.instance_paths(str(base), "gpu0")
    Path(paths["dir"]).mkdir(parents=True)
    script = Path(paths["launch_script"])
    script.write_text(f"#!/bin/sh\nenv -i {sys.executable} -c 'import time; time.sleep(60)' &\n"
                      f"exec {sys.executable} -c 'import time; time.sleep(60)' sglang.launch_server\n")
    script.chmod(0o750)
    spec = d.ServiceSpec(name=_layout.service_name("gpu0"), command=[str(script)], pid_file=paths["pid_file"],
                         log_file=paths["log_file"], match="sglang.launch_server", start_grace=0.2)
    d.start(spec)
    leader = d.read_pid_file(spec.pid_file).pid
    try:
        # the child is the shell's fork, then `env -i`, then Python: wait for Python (before its
        # exec, a loaded machine shows the fork still holding the shell's environment, marker included)
        assert _wait(lambda: len(_children(leader)) == 1 and _argv0(_children(leader)[0]) == sys.executable)
        child = _children(leader)[0]
        assert d.MARKER_ENV not in (d.read_environ(child) or {})
        assert own.find_ownership(str(base)).owner(child) == "gpu0"
        record = d.read_pid_file(spec.pid_file)
        assert [m.pid for m in d.orphans(spec, record)] == sorted([leader, child])
    finally:
        for member in d.group_members(leader):
            os.kill(member.pid, signal.SIGKILL)


def test_no_base_dir_or_no_instances(tmp_path: Path) -> None:
    assert own.find_ownership(None).owner_by_pid == {}
    assert own.find_ownership(str(tmp_path / "missing")).instances == {}
    (tmp_path / "engine").mkdir()  # not an instance folder
    (tmp_path / "notes").mkdir()
    assert own.find_ownership(str(tmp_path)).instances == {}


def _fake_proc(root: Path, pid: int, comm: str, cgroup: str, pgid: int | None = None) -> None:
    folder = root / str(pid)
    folder.mkdir(parents=True)
    group = pgid or pid
    folder.joinpath("stat").write_text(
        f"{pid} ({comm}) S 1 {group} {group} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0\n")
    folder.joinpath("cgroup").write_text(cgroup)


def test_systemd_unit_control_group(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    base = tmp_path / "sglang"
    for name, gpu in (("gpu0", 0), ("gpu1", 1)):
        paths = _layout.instance_paths(str(base), name)
        Path(paths["dir"]).mkdir(parents=True)
        Path(paths["launch_script"]).write_text("#!/bin/sh\n")
        Path(paths["env_file"]).write_text(f"CUDA_VISIBLE_DEVICES={gpu}\n")
    _fake_proc(proc, 848, "sglang::schedul", "0::/system.slice/system-sglang.slice/sglang@gpu0.service\n")
    _fake_proc(proc, 849, "sglang::detoken", "0::/system.slice/system-sglang.slice/sglang@gpu0.service\n")
    _fake_proc(proc, 900, "python3", "0::/system.slice/other.service\n")
    _fake_proc(proc, 901, "python3", "0::/system.slice/system-sglang.slice/sglang@gpu7.service\n")
    found = own.find_ownership(str(base), proc)
    assert found.owner(848) == "gpu0" and found.owner(849) == "gpu0"
    assert found.owner(900) is None
    assert found.owner(901) is None  # a unit of an instance this deployment does not have
    assert found.instances["gpu0"].backend == "systemd"
    assert found.instances_on_gpu() == {0: ["gpu0"]}


@pytest.mark.parametrize(("cgroup", "name"), [
    ("0::/system.slice/system-sglang.slice/sglang@gpu0.service\n", "gpu0"),
    ("12:memory:/system.slice/system-sglang.slice/sglang@gpu0-1.service\n1:name=systemd:/x\n", "gpu0-1"),
    ("0::/system.slice/sglang@gpu2.service/init.scope\n", "gpu2"),
    ("0::/user.slice/user-0.slice/session-1.scope\n", None),
])
def test_unit_instance_from_cgroup(cgroup: str, name: str | None) -> None:
    assert _layout.unit_instance(cgroup) == name


def _gpus(used: tuple[int, int] = (0, 0)) -> list[dict]:
    return [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA H200", "memory_used_mib": used[i]} for i in (0, 1)]


def test_busy_counts_foreign_processes_only() -> None:
    gpus = _gpus((70000, 70000))
    procs = [{"gpu_uuid": "GPU-0", "pid": 848, "process_name": "sglang::scheduler", "used_memory_mib": 70000},
             {"gpu_uuid": "GPU-1", "pid": 999, "process_name": "python3", "used_memory_mib": 70000}]
    hf.attach_processes(gpus, procs, owners={848: "gpu0"}, instances_on_gpu={0: ["gpu0"]})
    assert gpus[0]["busy"] is False and gpus[0]["owned_by"] == ["gpu0"]
    assert gpus[0]["processes"][0]["owner"] == "gpu0"
    assert gpus[1]["busy"] is True and gpus[1]["owned_by"] == []
    assert gpus[1]["processes"][0]["owner"] is None


def test_memory_in_use_without_listed_processes() -> None:
    """Another PID namespace (a container): nvidia-smi lists no process. On a GPU that a
    running instance of this deployment was given, that memory is its own; elsewhere busy."""
    gpus = _gpus((70000, 70000))
    hf.attach_processes(gpus, [], instances_on_gpu={0: ["gpu0"]})
    assert [g["busy"] for g in gpus] == [False, True]
    gpus = _gpus((512, 0))
    hf.attach_processes(gpus, [])
    assert [g["busy"] for g in gpus] == [False, False]


def test_a_server_whose_pid_file_was_written_over_is_found_by_its_folder(deployment) -> None:
    """`echo 'xx garbage' > gpu0/server.pid`: the server runs on. Ownership (its GPU processes)
    and the service's status find it by its working directory; a start writes the pid file
    again instead of starting a duplicate; a stop stops it."""
    base, specs = deployment
    spec = specs["gpu0"]
    leader = d.read_pid_file(spec.pid_file).pid
    assert _wait(lambda: bool(_children(leader)))
    child = _children(leader)[0]
    Path(spec.pid_file).write_text("xx garbage\n")
    found = own.find_ownership(str(base))
    assert found.owner(child) == "gpu0" and found.owner(leader) == "gpu0"
    seen = d.status(spec)
    assert seen.running and seen.adopted and seen.pid == leader
    again = d.start(spec)
    assert again.changed and "written again" in again.msg and again.status.pid == leader
    assert d.read_pid_file(spec.pid_file).pid == leader and not d.status(spec).adopted
    assert [s.pid for s in d.group_members(leader)] == sorted([leader, child])  # no duplicate started
    stopped = d.stop(spec)
    assert stopped.changed and not d.group_members(leader)
