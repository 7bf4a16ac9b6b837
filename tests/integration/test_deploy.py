"""deploy.yml / stop.yml / status.yml end to end on localhost with the embedded engine."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest

from . import fake_nvidia_smi
from .conftest import Deployment, cleanup, group_members, make_inventory

pytestmark = pytest.mark.integration


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_healthy(url: str, timeout: float) -> bool:
    """Poll /health_generate until 200 (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health_generate", timeout=10) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def test_deploy_is_idempotent_and_restarts_only_what_changed(deployment: Deployment) -> None:
    first = deployment.play("deploy.yml", profile="mtp_hicache")
    assert first.rc == 0, first.out[-4000:]
    manifest = deployment.manifest()
    assert [i["name"] for i in manifest["instances"]] == ["gpu0", "gpu1"]
    assert manifest["profile"] == "mtp_hicache" and manifest["engine"] == "sim"
    pids = deployment.pids()
    assert all(alive(p) for p in pids.values())
    for inst in manifest["instances"]:
        assert inst["ready_at"], inst
        script = Path(inst["paths"]["launch_script"]).read_text()
        assert "exec " in script and "sglang.launch_server" in script
        assert oct(os.stat(inst["paths"]["env_file"]).st_mode & 0o777) == "0o600"

    again = deployment.play("deploy.yml", profile="mtp_hicache")
    assert again.rc == 0, again.out[-4000:]
    assert again.changed == 0, again.out[-4000:]
    assert deployment.pids() == pids

    # drift on one instance only: its env file edited by hand -> only gpu1 restarts
    env_file = deployment.base / "gpu1" / "env"
    env_file.write_text(env_file.read_text() + "SOMETHING=else\n")
    third = deployment.play("deploy.yml", profile="mtp_hicache")
    assert third.rc == 0, third.out[-4000:]
    now = deployment.pids()
    assert now["gpu0"] == pids["gpu0"]
    assert now["gpu1"] != pids["gpu1"] and not alive(pids["gpu1"])

    # a profile change restarts every instance whose argv changed (all of them here)
    fourth = deployment.play("deploy.yml", profile="baseline")
    assert fourth.rc == 0, fourth.out[-4000:]
    after = deployment.pids()
    assert after["gpu0"] != now["gpu0"] and after["gpu1"] != now["gpu1"]
    assert deployment.manifest()["profile"] == "baseline"
    assert not any(alive(p) for p in now.values())


def test_killed_instance_is_restarted_and_stale_pid_file_is_not_a_server(deployment: Deployment) -> None:
    assert deployment.play("deploy.yml", profile="mtp").rc == 0
    pids = deployment.pids()
    for name in ("gpu0", "gpu1"):
        os.killpg(pids[name], signal.SIGKILL)
        for _ in range(100):
            if not group_members(pids[name]):
                break
            time.sleep(0.05)
    # gpu1's pid file is stale and names a live process that is not its server (this test)
    (deployment.base / "gpu1" / "server.pid").write_text(f"{os.getpid()}\n")
    run = deployment.play("deploy.yml", profile="mtp")
    assert run.rc == 0, run.out[-4000:]
    now = deployment.pids()
    assert now["gpu0"] != pids["gpu0"] and alive(now["gpu0"])
    assert now["gpu1"] != os.getpid() and alive(now["gpu1"])
    status = deployment.play("status.yml")
    assert status.rc == 0 and "gpu0: up" in status.out and "gpu1: up" in status.out, status.out[-3000:]


def test_stop_start_cycles_leave_no_orphans(deployment: Deployment) -> None:
    groups: list[int] = []
    for _ in range(2):
        assert deployment.play("deploy.yml", profile="baseline").rc == 0
        groups += list(deployment.pids().values())
        stop = deployment.play("stop.yml")
        assert stop.rc == 0, stop.out[-3000:]
        assert not list(deployment.base.glob("*/server.pid"))
    assert all(not group_members(g) for g in groups)


def test_engine_that_cannot_start_fails_with_its_log_and_leaves_the_others(tmp_path: Path) -> None:
    dep = make_inventory(tmp_path)
    port = dep.extra["sglang_base_port"]
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", port + 1))  # gpu1's port is taken: its engine cannot start
    blocker.listen(1)
    try:
        bad = dep.play("deploy.yml", profile="baseline")
        assert bad.rc != 0
        out = bad.out
        assert ("instance gpu1 is not ready" in out) or ("sglang-gpu1 exited" in out), out[-3000:]
        assert "address already in use" in out  # the engine's own words, from its log tail
        gpu0_pid = int((dep.base / "gpu0" / "server.pid").read_text().split()[0])
        assert alive(gpu0_pid)
        # gpu1's failure can end the play while gpu0 is still loading: it comes up on its own
        assert wait_healthy(f"http://127.0.0.1:{port}", 60)
        blocker.close()
        retry = dep.play("deploy.yml", profile="baseline")
        assert retry.rc == 0, retry.out[-3000:]
        assert dep.pids()["gpu0"] == gpu0_pid
    finally:
        blocker.close()
        cleanup(dep)
        for pid_file in dep.base.glob("*/server.pid"):
            pid = int(pid_file.read_text().split()[0])
            for member in group_members(pid):
                os.kill(member, signal.SIGKILL)


def test_instances_no_longer_planned_are_stopped(deployment: Deployment) -> None:
    assert deployment.play("deploy.yml", profile="baseline").rc == 0
    pids = deployment.pids()
    run = deployment.play("deploy.yml", profile="baseline", sglang_gpus=[0])
    assert run.rc == 0, run.out[-3000:]
    assert list(deployment.pids()) == ["gpu0"] and deployment.pids()["gpu0"] == pids["gpu0"]
    assert not group_members(pids["gpu1"])


def test_check_mode_prints_the_plan_and_changes_nothing(tmp_path: Path) -> None:
    dep = make_inventory(tmp_path)
    run = dep.play("deploy.yml", "--check", profile="mtp_hicache")
    assert run.rc == 0, run.out[-3000:]
    assert "--hicache-size" in run.out and "CUDA_VISIBLE_DEVICES" in run.out
    assert not (dep.base / "deployment.json").exists()
    tags = dep.play("deploy.yml", "--tags", "plan", profile="mtp_hicache")
    assert tags.rc == 0 and tags.changed == 0 and "--speculative-num-draft-tokens" in tags.out
    assert not dep.base.exists()


def test_bad_profile_fails_on_the_controller_before_any_change(tmp_path: Path) -> None:
    dep = make_inventory(tmp_path)
    run = dep.play("deploy.yml", profile="turbo")
    assert run.rc != 0
    assert "turbo" in run.out and "mtp_hicache" in run.out
    assert not dep.base.exists()
    bad_flag = dep.play("deploy.yml", profile="baseline", sglang_extra_args={"--mamba-scheduler-strategy": "extra_buffer"})
    assert bad_flag.rc != 0
    assert "--mamba-radix-cache-strategy" in bad_flag.out
    assert not dep.base.exists()


def test_serial_start_policy_starts_instances_one_after_another(deployment: Deployment) -> None:
    run = deployment.play("deploy.yml", profile="mtp_hicache", sglang_start_policy="serial")
    assert run.rc == 0, run.out[-4000:]
    manifest = deployment.manifest()
    first, second = manifest["instances"]
    assert first["ready_at"] and second["ready_at"]
    assert first["ready_at"] <= second["ready_at"]
    # each instance's start came after the previous one was ready: the pid file of gpu1 records
    # its start, which is no earlier than gpu0's readiness
    gpu1_started = json.loads((deployment.base / "gpu1" / "server.pid").read_text().splitlines()[1])["started_at"]
    gpu0_ready = datetime.strptime(first["ready_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert datetime.fromisoformat(gpu1_started) >= gpu0_ready
    out = run.out
    assert out.index("Start the batch (gpu0)") < out.index("Wait until the batch answers") \
        < out.index("Start the batch (gpu1)")
    again = deployment.play("deploy.yml", profile="mtp_hicache", sglang_start_policy="serial")
    assert again.rc == 0 and again.changed == 0, again.out[-3000:]


def _scheduler_child(leader: int, timeout: float = 20) -> int:
    """The pid of an instance's scheduler process (SGLang's process shape: a child of the
    server's process group titled sglang::scheduler), as nvidia-smi lists it on a GPU."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in group_members(leader):
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if pid != leader and title == b"sglang::scheduler":
                return pid
        time.sleep(0.1)
    raise AssertionError(f"no sglang::scheduler child in the process group of {leader}")


def test_redeploy_on_gpus_its_own_schedulers_hold_and_refuses_foreign_ones(tmp_path: Path) -> None:
    """The H200 re-deploy failure, locally: nvidia-smi (a stand-in answering with the recorded
    H200 pair) lists each instance's scheduler child on its GPU. A re-deploy with nothing
    changed must see them as its own (changed=0, same pids); a foreign process on a GPU makes
    the plan refuse before anything changes, naming its pid and name; force_busy goes ahead
    with a warning."""
    smi_dir = tmp_path / "smi"
    fake_nvidia_smi.install(smi_dir)
    dep = make_inventory(tmp_path)
    dep.path_prepend.append(smi_dir)
    try:
        first = dep.play("deploy.yml", profile="mtp")
        assert first.rc == 0, first.out[-4000:]
        pids = dep.pids()
        schedulers = {name: _scheduler_child(pid) for name, pid in pids.items()}
        fake_nvidia_smi.write_state(smi_dir, [
            {"gpu": 0, "pid": schedulers["gpu0"], "used_memory_mib": 120000},
            {"gpu": 1, "pid": schedulers["gpu1"], "used_memory_mib": 120000}])
        again = dep.play("deploy.yml", "-v", profile="mtp")
        assert again.rc == 0, again.out[-4000:]
        assert again.changed == 0, again.out[-4000:]
        assert dep.pids() == pids
        assert "'owner': 'gpu0'" in again.out or "owner: gpu0" in again.out

        manifest_before = (dep.base / "deployment.json").read_bytes()
        scripts_before = {p: p.read_bytes() for p in dep.base.glob("*/launch.sh")}
        stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        try:
            fake_nvidia_smi.write_state(smi_dir, [
                {"gpu": 0, "pid": schedulers["gpu0"], "used_memory_mib": 120000},
                {"gpu": 1, "pid": schedulers["gpu1"], "used_memory_mib": 120000},
                {"gpu": 1, "pid": stranger.pid, "used_memory_mib": 4000}])
            refused = dep.play("deploy.yml", profile="baseline")
            assert refused.rc != 0
            assert f"GPU 1 (pid {stranger.pid} {sys.executable})" in refused.out, refused.out[-3000:]
            assert "sglang_force_busy_gpus" in refused.out
            assert refused.changed == 0
            assert dep.pids() == pids and (dep.base / "deployment.json").read_bytes() == manifest_before
            assert {p: p.read_bytes() for p in dep.base.glob("*/launch.sh")} == scripts_before

            forced = dep.play("deploy.yml", profile="mtp", sglang_force_busy_gpus=True)
            assert forced.rc == 0, forced.out[-3000:]
            assert "deploying on busy GPU(s) because force_busy is set" in forced.out
            assert forced.changed == 0 and dep.pids() == pids
        finally:
            stranger.kill()
            stranger.wait()
    finally:
        cleanup(dep)
