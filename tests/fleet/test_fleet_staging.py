"""Model staging over the fleet (issue 17): one host (the seed) downloads from the Hub stand-in,
the others get its copy over the existing SSH connections (through the controller), each
verifying every file; then a rolling update to a NEW revision under load through the router.

The Hub stand-in (tests/hubserver.py) listens on the fleet bridge's address, so that the hosts
can reach it, and logs which address every request came from: the proof that only the seed
asks the Hub. Scenarios run in order on the session's fleet (3 server hosts, 1 router host),
each on the state the one before left; one whose predecessor failed fails at once saying so.
"""
from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hubserver import HubServer, Repo, demo_repo

from .harness import Fleet, FleetRun, cmdline
from .load import LoadClient

REPO = "llmops-test/tiny-qwen"
FOLDER = "models--llmops-test--tiny-qwen"
DONE: dict[str, bool] = {}


@pytest.fixture(scope="module")
def hub(fleet_session: Fleet) -> Iterator[HubServer]:
    with HubServer([demo_repo(REPO, weights=3, weight_mb=1.0, seed=7)], host=fleet_session.gateway) as srv:
        yield srv


@pytest.fixture(scope="module")
def fleet(fleet_session: Fleet, hub: HubServer) -> Iterator[Fleet]:
    """The session's fleet, fresh, its servers staging REPO from the seed server1."""
    fleet_session.reset()
    fleet_session.set_hostvars([h.name for h in fleet_session.servers], sglang_model_path=None,
                               sglang_hf_endpoint=hub.endpoint, sglang_model_stage_install=False,
                               sglang_model_stage_python=sys.executable, sglang_model_stage_from="server1",
                               sglang_model_stage_parallel=1,
                               sglang_model_controller_cache_dir=str(fleet_session.run_dir / "controller-models"))
    _pin(fleet_session, hub.repos[REPO])
    yield fleet_session
    fleet_session.reset()


def _pin(fleet: Fleet, repo: Repo) -> None:
    fleet.set_hostvars([h.name for h in fleet.servers], sglang_model={"repo": REPO, "revision": repo.commit})


def _needs(step: str) -> None:
    if not DONE.get(step):
        pytest.fail(f"scenario {step!r} did not pass: this one needs the fleet it leaves", pytrace=False)


def _snapshot(fleet: Fleet, name: str, commit: str) -> Path:
    return fleet.hosts[name].base_dir / "models" / FOLDER / "snapshots" / commit


def _assert_staged(fleet: Fleet, repo: Repo) -> None:
    for host in fleet.servers:
        snap = _snapshot(fleet, host.name, repo.commit)
        assert (snap.parent.parent / "complete" / f"{repo.commit}.json").is_file(), host.name
        for path, data in repo.files.items():
            assert (snap / path).read_bytes() == data, (host.name, path)


def _clients(hub: HubServer, since: int = 0) -> set[str]:
    return {r.client for r in hub.log[since:]}


def _bodies(hub: HubServer, repo: Repo, since: int = 0) -> list[str]:
    """The files whose bytes the Hub sent: a GET of the CDN for an LFS file (its resolve/ answers
    with a redirect), a GET of resolve/ for the others."""
    out = []
    for r in hub.log[since:]:
        if r.method != "GET":
            continue
        if r.server == "cdn":
            out.append(r.path.split(f"/{repo.commit}/", 1)[-1])
        elif "/resolve/" in r.path:
            name = r.path.split("/resolve/", 1)[1].split("/", 1)[1]
            if not repo.is_lfs(name):
                out.append(name)
    return out


def _deploy(fleet: Fleet, **extra: Any) -> FleetRun:
    return fleet.play("deploy.yml", profile="baseline", sglang_gpus=[0, 1], **extra)


def _models(fleet: Fleet) -> dict[str, set[str]]:
    """host -> the --model-path of each running server (from its own command line)."""
    out = {}
    for host in fleet.servers:
        paths = set()
        for pid in fleet.pids(host.name).values():
            match = re.search(r"--model-path (\S+)", cmdline(pid))
            paths.add(match[1] if match else "")
        out[host.name] = paths
    return out


def _wait_router(fleet: Fleet, expected: set[str], timeout: float = 30) -> set[str]:
    deadline = time.monotonic() + timeout
    seen = fleet.healthy_worker_urls()
    while seen != expected and time.monotonic() < deadline:
        time.sleep(0.5)
        seen = fleet.healthy_worker_urls()
    return seen


def _advertised(fleet: Fleet) -> set[str]:
    return {i["advertise_url"] for h in fleet.servers for i in fleet.manifest(h.name)["instances"]
            if i.get("rank0", True)}


def test_1_seed_downloads_the_others_receive_its_verified_copy(fleet: Fleet, hub: HubServer,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    repo = hub.repos[REPO]
    run = fleet.play("stage.yml")
    assert run.rc == 0, run.out[-6000:]
    _assert_staged(fleet, repo)
    # only the seed asked the Hub (the commit is pinned: the controller resolves nothing), each file once
    assert _clients(hub) == {fleet.address("server1")}, {(r.client, r.path) for r in hub.log}
    assert sorted(_bodies(hub, repo)) == sorted(repo.files), _bodies(hub, repo)
    for name in ("server2", "server3"):
        assert run.host(name)["changed"] > 0, run.recap
    # a re-run: every marker complete, nothing sent, nobody asks the Hub
    n = len(hub.log)
    again = fleet.play("stage.yml")
    assert again.rc == 0, again.out[-6000:]
    assert all(again.host(h.name)["changed"] == 0 for h in fleet.servers), again.recap
    assert len(hub.log) == n
    # a byte flipped on server3: found there (size kept, mtime moved), sent again from the relay
    weight = _snapshot(fleet, "server3", repo.commit) / "model-00002-of-00003.safetensors"
    data = bytearray(weight.read_bytes())
    data[4096] ^= 0x01
    weight.write_bytes(bytes(data))
    fixed = fleet.play("stage.yml")
    assert fixed.rc == 0, fixed.out[-6000:]
    assert fixed.host("server3")["changed"] > 0 and fixed.host("server2")["changed"] == 0, fixed.recap
    assert weight.read_bytes() == repo.files[weight.name] and len(hub.log) == n
    with capsys.disabled():
        print(f"\n[1] stage.yml from seed server1: {run.seconds:.1f} s, {len(hub.log)} hub requests, all from "
              f"server1; re-run {again.seconds:.1f} s (changed=0, no request); repaired {fixed.seconds:.1f} s")
    DONE["staged"] = True


def test_2_deploy_then_rolling_update_to_a_new_revision_under_load(fleet: Fleet, hub: HubServer,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _needs("staged")
    old = hub.repos[REPO]
    n = len(hub.log)
    first = _deploy(fleet)
    assert first.rc == 0, first.out[-6000:]
    assert len(hub.log) == n  # staged already: the deploy's staging asked nothing
    assert _models(fleet) == {h.name: {str(_snapshot(fleet, h.name, old.commit))} for h in fleet.servers}
    expected = _advertised(fleet)
    assert _wait_router(fleet, expected) == expected, fleet.router_workers()

    # a new revision on the Hub (other weights, another commit), pinned on every host
    new = demo_repo(REPO, weights=3, weight_mb=1.0, seed=8)
    assert new.commit != old.commit
    hub.repos[REPO] = new
    _pin(fleet, new)
    n = len(hub.log)
    client = LoadClient(fleet.router_url(), concurrency=2, pause=0.05, max_seconds=540).start()
    time.sleep(3)
    client.mark("rollout start")
    run = _deploy(fleet, sglang_rollout_batch=1)
    client.mark("rollout end")
    time.sleep(3)
    ran_throughout = client.running()
    client.stop()
    phases = client.phases("rollout start", "rollout end")
    with capsys.disabled():
        print(f"\n[2] rolling update to {new.commit[:12]} (batch 1) under load: deploy.yml {run.seconds:.1f} s; "
              f"{len(client.records)} requests, {len(client.failures())} failed; hub requests "
              f"{len(hub.log) - n}, from {sorted(_clients(hub, n))}")
    assert run.rc == 0, run.out[-6000:]
    assert client.failures() == [], client.failures()[:5]
    assert ran_throughout and all(phases[p]["ok"] > 0 for p in phases), phases
    # the seed downloaded the new revision; no other host asked the Hub
    assert _clients(hub, n) == {fleet.address("server1")}, {(r.client, r.path) for r in hub.log[n:]}
    _assert_staged(fleet, new)
    assert sorted(_bodies(hub, new, n)) == sorted(new.files), _bodies(hub, new, n)
    assert _models(fleet) == {h.name: {str(_snapshot(fleet, h.name, new.commit))} for h in fleet.servers}
    # the old revision stays on disk until the next one serves (rollback without a download)
    for host in fleet.servers:
        assert _snapshot(fleet, host.name, old.commit).is_dir(), host.name
    assert _wait_router(fleet, _advertised(fleet)) == _advertised(fleet)
    DONE["rolled"] = True
