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

    # --tags plan says what a profile change would do, and why, per instance (issue 28 item 12)
    shown = deployment.play("deploy.yml", "--tags", "plan", profile="baseline")
    assert shown.rc == 0 and shown.changed == 0, shown.out[-4000:]
    text = " ".join(shown.out.split())  # the YAML callback folds long lines
    for name in ("gpu0", "gpu1"):
        assert f"{name}: restart (" in text and "- --speculative-algorithm NEXTN" in text, shown.out[-4000:]
    assert "in all: 2 restart" in text and deployment.pids() == now

    # a profile change restarts every instance whose argv changed (all of them here)
    fourth = deployment.play("deploy.yml", profile="baseline")
    assert fourth.rc == 0, fourth.out[-4000:]
    after = deployment.pids()
    assert after["gpu0"] != now["gpu0"] and after["gpu1"] != now["gpu1"]
    assert deployment.manifest()["profile"] == "baseline"
    assert not any(alive(p) for p in now.values())


def test_the_gate_plan_is_the_deployed_plan_and_the_host_is_read_once(deployment: Deployment) -> None:
    """deploy.yml plans each host once: the deploy play deploys the plan its gate checked, even
    when a variable says otherwise by then (here one whose value flips once the gate has run),
    and host_facts (which reads the manifest and the model's config.json too) and preflight each
    run once per host, server_status and slurp not at all."""
    flip = "{{ 16 if __sglang_plan is defined else 8 }}"
    run = deployment.play("deploy.yml", "-vvv", profile="baseline", sglang_max_running_requests=flip)
    assert run.rc == 0, run.out[-4000:]
    for inst in deployment.manifest()["instances"]:
        argv = inst["argv"]
        assert argv[argv.index("--max-running-requests") + 1] == "8", argv
        script = Path(inst["paths"]["launch_script"]).read_text()
        assert "--max-running-requests\n  8\n" in script, script
    used = [line for line in run.out.splitlines() if line.startswith("Using module file")]
    for module, runs in (("host_facts.py", 1), ("preflight.py", 1), ("server_status.py", 0), ("slurp.py", 0)):
        assert sum(line.endswith("/" + module) for line in used) == runs, (module, used)


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
    """gpu1's engine dies at start (a GPU the embedded engine has no specs for: its own error,
    as a real server's CUDA error would be): the deploy fails naming it, with its log tail;
    gpu0 comes up and stays; fixed, a re-run brings both up (the GPU list is in every
    instance's environment, so gpu0 restarts too)."""
    dep = make_inventory(tmp_path, sglang_declared_gpus=[{"name": "NVIDIA H200", "memory_mib": 143771},
                                                         {"name": "NVIDIA H999", "memory_mib": 143771}])
    port = dep.extra["sglang_base_port"]
    try:
        bad = dep.play("deploy.yml", profile="baseline")
        assert bad.rc != 0
        out = bad.out
        assert ("instance gpu1 is not ready" in out) or ("sglang-gpu1 exited" in out), out[-3000:]
        assert "unknown GPU 'NVIDIA H999'" in out  # the engine's own words, from its log tail
        gpu0_pid = int((dep.base / "gpu0" / "server.pid").read_text().split()[0])
        assert alive(gpu0_pid)
        # gpu1's failure can end the play while gpu0 is still loading: it comes up on its own
        assert wait_healthy(f"http://127.0.0.1:{port}", 60)
        fixed = dep.play("deploy.yml", profile="baseline", sglang_declared_gpus=[
            {"name": "NVIDIA H200", "memory_mib": 143771, "count": 2}])
        assert fixed.rc == 0, fixed.out[-3000:]
        assert all(alive(p) for p in dep.pids().values())
    finally:
        cleanup(dep)
        for pid_file in dep.base.glob("*/server.pid"):
            pid = int(pid_file.read_text().split()[0])
            for member in group_members(pid):
                os.kill(member, signal.SIGKILL)


def test_preflight_refuses_before_anything_stops(deployment: Deployment, tmp_path: Path) -> None:
    """A new configuration that cannot start changes nothing: a port held by another program
    (named, with its pid), a model folder that is not there, a Python that is not there."""
    assert deployment.play("deploy.yml", profile="baseline").rc == 0
    pids = deployment.pids()
    manifest = (deployment.base / "deployment.json").read_bytes()
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    taken = blocker.getsockname()[1]
    try:
        moved = deployment.play("deploy.yml", profile="mtp", sglang_base_port=taken)
        assert moved.rc != 0 and moved.changed == 0
        assert f"port {taken} (HTTP port of instance gpu0) is held by pid {os.getpid()}" in moved.out, moved.out[-3000:]
    finally:
        blocker.close()
    missing = deployment.play("deploy.yml", profile="mtp", sglang_model_path=str(tmp_path / "no-model"),
                              sglang_model_arch="hybrid")
    assert missing.rc != 0 and missing.changed == 0
    assert f"the model's config {tmp_path}/no-model/config.json does not exist on this host" in missing.out
    no_python = deployment.play("deploy.yml", profile="mtp", sglang_python=str(tmp_path / "venv" / "bin" / "python"))
    assert no_python.rc != 0 and no_python.changed == 0
    assert "is not an executable file on this host" in no_python.out
    # nothing was stopped, nothing was rewritten
    assert deployment.pids() == pids and all(alive(p) for p in pids.values())
    assert (deployment.base / "deployment.json").read_bytes() == manifest
    status = deployment.play("status.yml")
    assert status.out.count(": up http://127.0.0.1:") == 2, status.out[-2000:]


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
    # what the deploy would do, per instance, not the whole plan (854 lines before, issue 28 item 12)
    text = " ".join(run.out.split())
    assert "localhost: 2 instance(s), SGLang 0.5.23 (sim engine, process services), profile mtp_hicache" in text
    assert "gpu0: start (new: not in deployment.json) - GPU 0" in text and "in all: 2 start" in text, run.out[-3000:]
    assert "--hicache-size" in run.out and "HiCache:" in run.out and "cgroup:" not in run.out
    assert not (dep.base / "deployment.json").exists()
    tags = dep.play("deploy.yml", "--tags", "plan", profile="mtp_hicache")
    assert tags.rc == 0 and tags.changed == 0 and "--speculative-num-draft-tokens" in tags.out
    assert len(tags.out.splitlines()) < 150, len(tags.out.splitlines())
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


def test_serial_start_policy_and_a_storage_tier_then_a_rerun_changes_nothing(deployment: Deployment) -> None:
    """Instances started one after another; with HiCache's storage tier (issue 30): its folder per
    instance made by server_files, its flags and variables from the plan, its arithmetic in
    deployment.json, each folder stamped with its page layout, the tier's first prefill inside the
    readiness gate (wait_ready's prime); a re-run (the disk's free space
    moved) changes nothing and keeps the pages; sglang_hicache_storage_clear clears them."""
    storage = {"backend": "file", "path": str(deployment.base / "kv"), "size_gb": 1, "reserve_gib": 0}
    run = deployment.play("deploy.yml", profile="mtp_hicache", sglang_start_policy="serial",
                          sglang_hicache_storage=storage)
    assert run.rc == 0, run.out[-4000:]
    manifest = deployment.manifest()
    tier = manifest["hicache_storage"]
    assert tier["root"] == storage["path"] and set(tier["instances"]) == {"gpu0", "gpu1"}
    for record in manifest["instances"]:
        folder = deployment.base / "kv" / record["name"]
        assert folder.is_dir() and record["argv"][-2:] == ["--hicache-storage-backend", "file"]
        env = (deployment.base / record["name"] / "env").read_text()
        assert f"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR={folder}" in env
        assert "SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE=1000000000" in env
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
    # the launch script stamped each folder with its page layout (kept in deployment.json); the
    # readiness prime (the tier's first prefill, before the instance counted as ready) wrote pages
    for name in ("gpu0", "gpu1"):
        stamp = (deployment.base / "kv" / name / ".llmops-layout").read_text().strip()
        assert stamp == tier["instances"][name]["layout"]["digest"]
        assert list((deployment.base / "kv" / name).glob("*.bin")), f"no page of the prime in {name}'s folder"
    page = deployment.base / "kv" / "gpu0" / "page.bin"
    page.write_bytes(b"x" * 4096)  # the tier holds a page now
    again = deployment.play("deploy.yml", profile="mtp_hicache", sglang_start_policy="serial",
                            sglang_hicache_storage=storage)
    assert again.rc == 0 and again.changed == 0, again.out[-3000:]
    assert page.exists()
    # sglang_hicache_storage_clear: each running instance clears its tier through the release's
    # endpoint; nothing restarts
    cleared = deployment.play("deploy.yml", profile="mtp_hicache", sglang_start_policy="serial",
                              sglang_hicache_storage=storage, sglang_hicache_storage_clear=True)
    assert cleared.rc == 0 and cleared.changed == 1, cleared.out[-3000:]
    assert not page.exists() and deployment.manifest()["instances"][0]["pid"] == first["pid"]


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


def test_a_pid_file_written_over_starts_no_duplicate_and_stop_still_stops(deployment: Deployment) -> None:
    """`echo 'xx garbage' > gpu0/server.pid`: the next deploy used to start a duplicate (which
    died on its port while the old server answered readiness: rc 0, a dead pid in the
    manifest), and stop.yml left the old server running. Now the server is found by its folder,
    its pid file written again, and nothing restarts."""
    assert deployment.play("deploy.yml", profile="baseline").rc == 0
    pids = deployment.pids()
    port = deployment.extra["sglang_base_port"]
    (deployment.base / "gpu0" / "server.pid").write_text("xx garbage\n")
    status = deployment.play("status.yml")
    assert status.rc == 0 and "gpu0: up" in status.out and "process=running" in status.out, status.out[-2000:]
    again = deployment.play("deploy.yml", "-v", profile="baseline")
    assert again.rc == 0, again.out[-3000:]
    assert deployment.pids() == pids  # the same servers, recorded with their live pids
    assert all(alive(p) for p in pids.values())
    assert int((deployment.base / "gpu0" / "server.pid").read_text().split()[0]) == pids["gpu0"]
    assert "its pid file was missing or unreadable" in again.out
    assert "Errno 98" not in (deployment.base / "gpu0" / "server.log").read_text()  # no duplicate tried
    (deployment.base / "gpu1" / "server.pid").write_text("xx garbage\n")
    stop = deployment.play("stop.yml")
    assert stop.rc == 0, stop.out[-2000:]
    assert not group_members(pids["gpu0"]) and not group_members(pids["gpu1"])
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port + 1}/health", timeout=3)


def test_zero_means_automatic_from_extra_vars(deployment: Deployment) -> None:
    """`-e sglang_max_running_requests=0` arrives as the string "0": it rendered
    `--max-running-requests 0` and restarted both servers (status then said 1);
    `-e sglang_hicache_size_gb=0` and `-e sglang_nccl_port_base=0` failed. Every documented
    sentinel means automatic from -e as from YAML and JSON."""
    first = deployment.play("deploy.yml", profile="mtp_hicache")
    assert first.rc == 0, first.out[-3000:]
    pids = deployment.pids()
    argv = deployment.manifest()["instances"][0]["argv"]
    again = deployment.play("deploy.yml", "-e", "sglang_max_running_requests=0", "-e", "sglang_hicache_size_gb=0",
                            "-e", "sglang_nccl_port_base=0", "-e", "sglang_gpus=", profile="mtp_hicache")
    assert again.rc == 0, again.out[-3000:]
    assert again.changed == 0 and deployment.pids() == pids
    assert deployment.manifest()["instances"][0]["argv"] == argv
    assert argv[argv.index("--max-running-requests") + 1] != "0"
    status = deployment.play("status.yml")
    assert "max_running_requests=1 " not in status.out and "max_running_requests=" in status.out


def test_stop_and_status_without_a_readable_manifest(deployment: Deployment) -> None:
    """Garbage in deployment.json made stop.yml fail on a raw from_json error with nothing
    stopped; a deleted manifest made status say "no deployment" while two servers ran. Both
    now fall back to the instance folders, say so, and act on what is theirs."""
    assert deployment.play("deploy.yml", profile="baseline").rc == 0
    pids = deployment.pids()
    manifest = deployment.base / "deployment.json"
    manifest.unlink()
    status = deployment.play("status.yml")
    assert status.rc == 0, status.out[-2000:]
    assert "does not exist; found instance folder(s) gpu0, gpu1" in status.out
    assert status.out.count(": up http://127.0.0.1:") == 2 and "process=running" in status.out
    manifest.write_text("{ this is not json")
    stop = deployment.play("stop.yml")
    assert stop.rc == 0, stop.out[-2000:]
    assert "is not a deployment manifest" in stop.out
    assert not any(group_members(p) for p in pids.values())
    assert not list(deployment.base.glob("*/server.pid"))


def test_shell_characters_in_paths_and_names_stay_quoted(tmp_path: Path) -> None:
    """A base dir and a served model name holding spaces, `;` and `$(...)` reach the launch
    script, the env file and the server as plain text: nothing is run, the server answers
    with the name as given."""
    canary = tmp_path / "pwned"
    weird = tmp_path / f"base dir; $(touch {canary})" / "sglang"
    name = f"my model; $(touch {canary}) `touch {canary}`"
    dep = make_inventory(tmp_path, sglang_base_dir=str(weird), sglang_served_model_name=name, sglang_gpus=[0])
    dep.base = weird
    try:
        run = dep.play("deploy.yml", profile="baseline")
        assert run.rc == 0, run.out[-3000:]
        assert not canary.exists()
        url = dep.manifest()["instances"][0]["connect_url"]
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == name
        status = dep.play("status.yml")
        assert status.rc == 0 and "gpu0: up" in status.out
    finally:
        cleanup(dep)
    assert not canary.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="creates a system user and drops to it: needs root")
def test_services_run_as_the_configured_user(tmp_path: Path) -> None:
    """sglang_user set: the role creates it, installs the engine into a fresh venv (pip, as a
    real host does), and every server process runs as that user; launch scripts 0750, env files
    and logs 0600, all owned by it."""
    import pwd
    import shutil
    import uuid

    user = f"llmops{uuid.uuid4().hex[:6]}"
    base = Path(f"/tmp/{user}")  # outside pytest's 0700 tmp folders: the user must reach it
    dep = make_inventory(tmp_path, sglang_user=user, sglang_group=user, sglang_create_user=True,
                         sglang_base_dir=str(base / "sglang"), sglang_install=True, sglang_python="",
                         sglang_venv=str(base / "venv"), sglang_venv_python="/usr/bin/python3", sglang_gpus=[0])
    dep.base = base / "sglang"
    try:
        run = dep.play("deploy.yml", profile="baseline", timeout=600)
        assert run.rc == 0, run.out[-4000:]
        # pre-flight: a Python the user cannot run (the test's own venv lives under /root, 0700)
        # is refused before anything stops
        refused = dep.play("deploy.yml", profile="baseline", sglang_install=False, sglang_python=sys.executable)
        assert refused.rc != 0 and refused.changed == 0
        assert f"cannot be run by {user}" in refused.out, refused.out[-3000:]
        uid = pwd.getpwnam(user).pw_uid
        leader = dep.pids()["gpu0"]
        members = group_members(leader)
        assert len(members) >= 3  # the server, its scheduler, its detokenizer
        for pid in members:
            uids = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if line.startswith("Uid:")).split()[1:]
            assert {int(u) for u in uids} == {uid}, (pid, uids)
        folder = dep.base / "gpu0"
        for name, mode in (("launch.sh", 0o750), ("env", 0o600), ("server.log", 0o600)):
            st = (folder / name).stat()
            assert (st.st_uid, st.st_mode & 0o777) == (uid, mode), name
    finally:
        cleanup(dep)
        subprocess.run(["userdel", user], capture_output=True, check=False)
        subprocess.run(["groupdel", user], capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_no_secret_in_argv_output_results_or_files(tmp_path: Path) -> None:
    """With an API key and an HF token set: no process's argv holds the key (it reaches SGLang
    through a 0600 --config file), and no task output at -v --diff, no manifest, report,
    cached fact or other file the collection writes holds either secret. What remains is
    SGLang's own server_args line in server.log, which is 0600 (docs/RELIABILITY.md). Without
    the key a request is refused; status and bench use it."""
    key, token = "sk-llmops-SECRET-7f3a9c", "hf_llmopsTESTtoken0123456789abcdef"
    dep = make_inventory(tmp_path, sglang_api_key=key, sglang_hf_token=token, sglang_gpus=[0])
    dep.fact_cache = tmp_path / "facts"
    reports = tmp_path / "reports"
    outputs = []
    try:
        for playbook, args in (("deploy.yml", ("-v", "--diff")), ("deploy.yml", ("-v", "--diff")),
                               ("status.yml", ("-v",)), ("bench.yml", ("-v",))):
            run = dep.play(playbook, *args, profile="baseline", sglang_bench_concurrency=[1],
                           sglang_bench_requests=2, sglang_bench_max_tokens=8, sglang_bench_reports_dir=str(reports))
            assert run.rc == 0, run.out[-3000:]
            outputs.append(run.out)
        assert "gpu0: up" in outputs[2]
        leader = dep.pids()["gpu0"]
        for pid in [leader, *group_members(leader)]:
            assert key not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        url = dep.manifest()["instances"][0]["connect_url"]
        request = urllib.request.Request(url + "/v1/models")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
        request.add_header("Authorization", f"Bearer {key}")
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 200
        stop = dep.play("stop.yml", "-v")
        assert stop.rc == 0
        outputs.append(stop.out)
        for out in outputs:
            assert key not in out and token not in out
        folder = dep.base / "gpu0"
        allowed = {folder / "secrets.yaml": key, folder / "env": token, folder / "server.log": key}
        for path, secret in allowed.items():
            assert path.stat().st_mode & 0o777 == 0o600, path
            assert secret in path.read_text(), path  # where it must be (the log: SGLang's own line)
        written = [p for p in tmp_path.rglob("*") if p.is_file() and p != dep.inventory and p not in allowed]
        assert any(p.name == "deployment.json" for p in written) and any(p.suffix == ".md" for p in written)
        for path in written:
            data = path.read_bytes()
            assert key.encode() not in data and token.encode() not in data, path
    finally:
        cleanup(dep)


def test_the_hosts_of_a_batch_roll_out_together_not_one_after_another(tmp_path: Path) -> None:
    """Two hosts in one play batch, each starting its instances one per batch (serial policy):
    each rollout batch is one include shared by both hosts (its tasks run once for the two, in
    Ansible's lockstep), not one include per host run after the other's (a loop over each host's
    own records made Ansible do that: a batch of hosts took as long as its hosts one by one).
    Read from Ansible's own output: each task header once per batch, both hosts under it."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    one = make_inventory(tmp_path / "a", sglang_start_policy="serial")
    port = one.extra["sglang_base_port"]  # random blocks: make sure the second is another
    two = make_inventory(tmp_path / "b", sglang_start_policy="serial")
    while abs(two.extra["sglang_base_port"] - port) < 8:
        two = make_inventory(tmp_path / "b", sglang_start_policy="serial")
    hosts = {"host-a": one.extra, "host-b": two.extra}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"all": {"children": {"sglang_servers": {"hosts": hosts}}}}))
    both = Deployment(base=one.base, inventory=inventory, extra=one.extra)
    try:
        run = both.play("deploy.yml")
        assert run.rc == 0, run.out[-4000:]
        starts = [i for i, line in enumerate(run.out.splitlines())
                  if line.startswith("TASK [llmops.sglang.server : Start the instances that are not running")]
        assert len(starts) == 2, run.out[-6000:]  # two batches (gpu0, then gpu1), not four
        lines = run.out.splitlines()
        for at in starts:
            block = lines[at + 1:at + 8]
            assert any("[host-a]" in line for line in block) and any("[host-b]" in line for line in block), block
        for dep in (one, two):
            assert [i["name"] for i in dep.manifest()["instances"]] == ["gpu0", "gpu1"]
    finally:
        for dep in (one, two):
            cleanup(dep)


def test_a_mooncake_tier_runs_its_master_and_a_page_one_instance_served_is_the_others_hit(
        deployment: Deployment) -> None:
    """sglang_hicache_storage backend mooncake with no master (issue 30): the role runs the store's
    master on this host (the embedded engine's stand-in, with mooncake_master's flags) before the
    instances, each instance mounts its segment (the plan took them out of the host tier's budget),
    a prompt served by gpu0 is read from the store by gpu1; a re-run changes nothing; stop.yml
    stops the master after the instances."""
    from .conftest import free_port_block

    rpc = free_port_block(2)
    storage = {"backend": "mooncake", "segment_gib": 1, "master_port": rpc, "metrics_port": rpc + 1}
    run = deployment.play("deploy.yml", profile="hicache", sglang_hicache_storage=storage)
    assert run.rc == 0, run.out[-4000:]
    assert run.out.index("Run the storage tier's master") < run.out.index("Start the batch")
    manifest = deployment.manifest()
    assert manifest["kvstore"]["address"] == f"127.0.0.1:{rpc}" and manifest["hicache"]["lent_bytes"] == \
        manifest["hicache_storage"]["lent_bytes_total"] > 2 * 2**30
    master_pid = int((deployment.base / "kvstore" / "master.pid").read_text().split()[0])
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{rpc + 1}/metrics", timeout=5).read().decode()
    assert "master_active_clients 2\n" in metrics and "master_total_capacity_bytes 2147483648\n" in metrics, metrics

    prompt = "shared system prompt " * 400
    urls = {i["name"]: i["connect_url"] for i in manifest["instances"]}

    def generate(url: str) -> dict:
        body = json.dumps({"text": prompt, "sampling_params": {"max_new_tokens": 2}}).encode()
        request = urllib.request.Request(f"{url}/generate", body, {"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(request, timeout=60).read())["meta_info"]["cached_tokens_details"] or {}

    assert generate(urls["gpu0"]).get("storage", 0) == 0  # a prompt no instance served yet
    deadline = time.monotonic() + 30  # gpu0 writes its pages through as it serves
    while True:
        details = generate(urls["gpu1"])
        if details.get("storage", 0) > 1000 or time.monotonic() > deadline:
            break
        urllib.request.urlopen(urllib.request.Request(f"{urls['gpu1']}/flush_cache", b"", method="POST"), timeout=10)
        time.sleep(0.5)
    assert details["storage"] > 1000 and details["storage_backend"] == "MooncakeStore", details

    again = deployment.play("deploy.yml", profile="hicache", sglang_hicache_storage=storage)
    assert again.rc == 0 and again.changed == 0, again.out[-3000:]
    assert int((deployment.base / "kvstore" / "master.pid").read_text().split()[0]) == master_pid
    stopped = deployment.play("stop.yml")
    assert stopped.rc == 0, stopped.out[-3000:]
    assert not group_members(master_pid) and not (deployment.base / "kvstore" / "master.pid").exists()
