"""deploy.yml / stop.yml / status.yml end to end on localhost with the embedded engine."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from .conftest import Deployment, cleanup, group_members, make_inventory

pytestmark = pytest.mark.integration


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


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
        script = Path(inst["launch_script"]).read_text()
        assert "exec " in script and "sglang.launch_server" in script
        assert oct(os.stat(inst["env_file"]).st_mode & 0o777) == "0o600"

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
    os.killpg(pids["gpu0"], signal.SIGKILL)
    for _ in range(100):
        if not group_members(pids["gpu0"]):
            break
        time.sleep(0.05)
    # gpu1's pid file now names a process that is not its server (this test's pid)
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
    try:
        ok = dep.play("deploy.yml", profile="baseline", sglang_gpus=[0])
        assert ok.rc == 0, ok.out[-3000:]
        good_pid = dep.pids()["gpu0"]
        # gpu1 gets a model path without config.json: the engine exits, the deploy fails
        bad = dep.play("deploy.yml", profile="baseline", sglang_gpus=[1], sglang_base_port=dep.extra["sglang_base_port"] + 1,
                       sglang_model_path=str(tmp_path / "no-such-model"), sglang_model_arch="dense")
        assert bad.rc != 0
        assert "instance gpu1 is not ready" in bad.out
        assert "last 50 lines of its log" in bad.out
        assert "config.json" in bad.out  # the engine's own error, from the log tail
        assert alive(good_pid)
    finally:
        cleanup(dep)


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
