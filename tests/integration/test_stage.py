"""playbooks/stage.yml and deploy.yml with a Hub model id, against tests/hubserver.py (a local
stand-in for the Hub; HF_ENDPOINT points the real, pinned huggingface_hub at it)."""
from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hubserver import HubServer, demo_repo

from .conftest import ROOT, Deployment, cleanup, finished, make_inventory

pytestmark = pytest.mark.integration
TOKEN = "hf_IntegrationTokenNeverShown42"


@pytest.fixture
def hub() -> Iterator[HubServer]:
    with HubServer([demo_repo()], token=TOKEN) as srv:
        yield srv


def _inventory(tmp_path: Path, hub: HubServer, **overrides) -> Deployment:
    token_file = tmp_path / "hf_token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    return make_inventory(tmp_path, **{
        "sglang_model_path": "",
        "sglang_model": {"repo": "llmops-test/tiny-qwen", "revision": "main"},
        "sglang_hf_endpoint": hub.endpoint,
        "sglang_hf_token_file": str(token_file),
        "sglang_model_cache_dir": str(tmp_path / "models"),
        "sglang_model_stage_install": False,
        "sglang_model_stage_python": str(Path(__import__("sys").executable)),
        **overrides})


def _play(dep: Deployment, playbook: str, *args: str, env: dict[str, str] | None = None, **extra):
    # HF_TOKEN in the controller's environment: the token of the revision's resolution there
    proc = subprocess.run(dep.command(playbook, *args, **extra), cwd=ROOT,
                          env={**dep.env(), "HF_TOKEN": TOKEN, **(env or {})},
                          capture_output=True, text=True, timeout=600, check=False)
    return finished(proc.returncode, proc.stdout + proc.stderr)


def _commit(hub: HubServer) -> str:
    return hub.repos["llmops-test/tiny-qwen"].commit


def test_stage_playbook_stages_then_reruns_with_one_request_and_never_shows_the_token(tmp_path, hub):
    """The controller resolves main once (the hub, with the token from the controller's
    environment), the host stages with the token from its 0600 file; -vvv shows it nowhere."""
    dep = _inventory(tmp_path, hub)
    first = _play(dep, "stage.yml", "-vvv")
    assert first.rc == 0, first.out[-4000:]
    assert first.changed == 1
    # the wait action's progress line (the last one at least: the local hub is fast)
    assert "staging: localhost llmops-test/tiny-qwen: 6/6 files, 0.01/0.01 GB," in first.out
    snapshot = tmp_path / "models" / "models--llmops-test--tiny-qwen" / "snapshots" / _commit(hub)
    assert (snapshot / "config.json").is_file()
    assert (tmp_path / "models" / "models--llmops-test--tiny-qwen" / "complete" / f"{_commit(hub)}.json").is_file()
    n = len(hub.log)
    again = _play(dep, "stage.yml", "-vvv")
    assert again.rc == 0 and again.changed == 0, again.out[-4000:]
    later = hub.log[n:]
    assert [(r.method, r.path) for r in later] == [("GET", "/api/models/llmops-test/tiny-qwen/revision/main")]
    for out in (first.out, again.out):
        assert TOKEN not in out
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != "hf_token":
            assert TOKEN.encode() not in path.read_bytes(), path


def test_pinned_commit_offline_rerun_makes_no_request(tmp_path, hub):
    dep = _inventory(tmp_path, hub, sglang_model={"repo": "llmops-test/tiny-qwen", "revision": _commit(hub)})
    assert _play(dep, "stage.yml").rc == 0
    n = len(hub.log)
    again = _play(dep, "stage.yml", sglang_hf_offline=True)
    assert again.rc == 0 and again.changed == 0, again.out[-4000:]
    assert len(hub.log) == n


def test_no_room_fails_with_the_numbers_before_any_download(tmp_path, hub):
    dep = _inventory(tmp_path, hub)
    run = _play(dep, "stage.yml", env={"LLMOPS_SGLANG_STAGE_FREE_BYTES": "1000000"})
    assert run.rc != 0
    assert "not enough disk space at" in run.out and "need " in run.out and "have 1000000 bytes" in run.out
    assert not hub.requests("cdn") and not [r for r in hub.log if r.method == "HEAD"]
    assert not (tmp_path / "models" / "models--llmops-test--tiny-qwen" / "snapshots").exists()


def test_bad_source_fails_on_the_controller_before_any_request(tmp_path, hub):
    dep = _inventory(tmp_path, hub, sglang_model={"repo": "not a repo id", "revision": "main"})
    run = _play(dep, "deploy.yml")
    assert run.rc != 0 and "sglang_model.repo='not a repo id' is not a Hub repository id" in run.out
    assert hub.log == [] and not (tmp_path / "sglang").exists()


def test_deploy_with_a_hub_id_stages_then_plans_from_the_staged_config(tmp_path, hub):
    """The Hub model chosen on the command line over an inventory that sets a folder, as a user
    would (issue 28 item 4: refused with "sglang_model_path='': required" before): the empty
    extra var outranks the model role's set_fact, the plan takes the staged folder all the same."""
    dep = _inventory(tmp_path, hub, sglang_model={}, sglang_model_path=str(ROOT / "data" / "models" / "qwen3.6-27b"))
    try:
        run = _play(dep, "deploy.yml", "-e", "profile=baseline", sglang_model_path="",
                    sglang_model={"repo": "llmops-test/tiny-qwen", "revision": "main"})
        assert run.rc == 0, run.out[-6000:]
        snapshot = str(tmp_path / "models" / "models--llmops-test--tiny-qwen" / "snapshots" / _commit(hub))
        manifest = dep.manifest()
        assert manifest["instances"]
        for inst in manifest["instances"]:
            script = Path(inst["paths"]["launch_script"]).read_text()
            assert f"--model-path\n  {snapshot}\n" in script, script
        info = json.loads((Path(snapshot) / "config.json").read_text())
        assert info["model_type"]

        # issue 28 item 9: the Hub down (a port nothing listens on), the same branch again: the
        # commit the host serves goes on, saying so, and nothing restarts
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            down = f"http://127.0.0.1:{sock.getsockname()[1]}"
        pids = dep.pids()
        again = _play(dep, "deploy.yml", "-e", "profile=baseline", sglang_model_path="", sglang_hf_endpoint=down,
                      sglang_model={"repo": "llmops-test/tiny-qwen", "revision": "main"})
        assert again.rc == 0 and again.changed == 0, again.out[-6000:]
        text = " ".join(again.out.split())
        assert f"going on with commit {_commit(hub)}, the one deployed on localhost" in text, again.out[-6000:]
        assert dep.pids() == pids
    finally:
        cleanup(dep)


def test_tags_plan_plans_from_what_is_staged_and_downloads_nothing(tmp_path, hub):
    dep = _inventory(tmp_path, hub, sglang_model={"repo": "llmops-test/tiny-qwen", "revision": _commit(hub)})
    fresh = _play(dep, "deploy.yml", "--tags", "plan", "-e", "profile=baseline")
    assert fresh.rc != 0 and "no config.json could be read there" in fresh.out, fresh.out[-3000:]
    assert hub.log == []  # nothing staged, nothing asked: a pinned commit needs no resolution
    assert _play(dep, "stage.yml").rc == 0
    n = len(hub.log)
    run = _play(dep, "deploy.yml", "--tags", "plan", "-e", "profile=baseline")
    assert run.rc == 0 and run.changed == 0, run.out[-4000:]
    assert "models--llmops-test--tiny-qwen/snapshots/" + _commit(hub) in run.out
    assert len(hub.log) == n and not (tmp_path / "sglang" / "deployment.json").exists()


def test_check_mode_lists_and_checks_room_and_writes_nothing(tmp_path, hub):
    dep = _inventory(tmp_path, hub)
    run = _play(dep, "stage.yml", "--check")
    assert run.rc == 0 and run.changed == 1, run.out[-4000:]
    assert not (tmp_path / "models").exists()
    assert not hub.requests("cdn") and not [r for r in hub.log if r.method == "HEAD"]


def test_stage_from_controller_stages_once_there_and_copies_verified(tmp_path, hub):
    """sglang_model_stage_from controller: the controller stages the commit into its own cache dir,
    the host receives it by copy and verifies it (its own marker); a re-run sends nothing and asks
    the Hub nothing; a byte flipped on the host is found and sent again, without the Hub."""
    commit = _commit(hub)
    ctrl = tmp_path / "controller-models"
    dep = _inventory(tmp_path, hub, sglang_model={"repo": "llmops-test/tiny-qwen", "revision": commit},
                     sglang_model_stage_from="controller", sglang_model_controller_cache_dir=str(ctrl),
                     sglang_hf_controller_token_file=str(tmp_path / "hf_token"))
    first = _play(dep, "stage.yml")
    assert first.rc == 0, first.out[-6000:]
    folder = "models--llmops-test--tiny-qwen"
    for cache in (ctrl, tmp_path / "models"):
        assert (cache / folder / "complete" / f"{commit}.json").is_file(), cache
        for path, data in hub.repos["llmops-test/tiny-qwen"].files.items():
            assert (cache / folder / "snapshots" / commit / path).read_bytes() == data
    # every file once from the hub (the controller's staging), none twice
    downloads = [r.path for r in hub.log if r.method == "GET" and "/resolve/" in r.path or r.server == "cdn"]
    assert len(downloads) == len(set(downloads)) == len(hub.repos["llmops-test/tiny-qwen"].files), downloads
    n = len(hub.log)
    again = _play(dep, "stage.yml")
    assert again.rc == 0 and again.changed == 0, again.out[-4000:]
    assert len(hub.log) == n
    weight = tmp_path / "models" / folder / "snapshots" / commit / "model-00002-of-00003.safetensors"
    data = bytearray(weight.read_bytes())
    data[1000] ^= 0xFF
    weight.write_bytes(bytes(data))
    fixed = _play(dep, "stage.yml")
    assert fixed.rc == 0 and fixed.changed > 0, fixed.out[-4000:]
    assert weight.read_bytes() == hub.repos["llmops-test/tiny-qwen"].files[weight.name]
    assert len(hub.log) == n


@pytest.mark.e2e
def test_ctrl_c_during_staging_then_a_rerun_never_leaves_a_wrong_snapshot_marked_complete(tmp_path, hub):
    """Issue 28 item 10: SIGINT to stage.yml mid-download left its async job downloading; the
    immediate re-run raced it into the same partial file (a file twice its size, sha256 wrong)
    with complete/<commit>.json beside it, and failed with "msg: None". Now the re-run's stager
    waits for the interrupted one (one stager per repository), then adopts what it staged."""
    import os
    import signal
    import threading

    repo = hub.repos["llmops-test/tiny-qwen"]
    big = max(repo.files, key=lambda p: len(repo.files[p]))
    hub.stall_after[big] = len(repo.files[big]) // 2  # the download hangs half way: slow enough to interrupt
    dep = _inventory(tmp_path, hub)
    # the stalled download waits for hub.release() however long the machine takes to get there:
    # with huggingface_hub's 10 s read timeout the interrupted job itself fetched the file again
    # (Range: bytes=<half>-) on a loaded machine, before the check that nobody else does
    env = {**dep.env(), "HF_TOKEN": TOKEN, "HF_HUB_DOWNLOAD_TIMEOUT": "600"}
    proc = subprocess.Popen(dep.command("stage.yml"), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    cache = tmp_path / "models" / "models--llmops-test--tiny-qwen"
    deadline = time.monotonic() + 240
    while not [r for r in hub.requests("cdn") if big in r.path] and time.monotonic() < deadline:
        time.sleep(0.2)  # bounded: until the big file's download began
    assert [r for r in hub.requests("cdn") if big in r.path], "".join(lines)[-3000:]
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the playbook ends, its async job keeps downloading
    proc.wait(timeout=60)
    assert proc.returncode != 0
    listings = len([r for r in hub.log if "/tree/" in r.path])
    again: dict[str, object] = {}
    rerun = threading.Thread(target=lambda: again.update(run=_play(dep, "stage.yml")), daemon=True)
    rerun.start()
    while len([r for r in hub.log if "/tree/" in r.path]) <= listings and time.monotonic() < deadline:
        time.sleep(0.2)  # the re-run's stager has listed: it is at the lock (or would race)
    assert len([r for r in hub.requests("cdn") if big in r.path]) == 1  # nobody else fetches it meanwhile
    del hub.stall_after[big]
    hub.release()  # the interrupted job's download goes on and completes
    rerun.join(timeout=300)
    run = again["run"]
    assert run.rc == 0, run.out[-4000:]
    snapshot = cache / "snapshots" / _commit(hub)
    for path, data in repo.files.items():
        assert (snapshot / path).read_bytes() == data, path
    assert (cache / "complete" / f"{_commit(hub)}.json").is_file()
