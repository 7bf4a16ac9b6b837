"""The bench role's plan of one host (plugins/plugin_utils/_benchplan.py): the instances swept and
their batches, URLs, Python, waits, run id and file names; what used to be Jinja in
roles/bench/tasks/sweep.yml, sweep_batch.yml and main.yml."""
from __future__ import annotations

import os
import subprocess
import time
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils import _benchplan as bp
from ansible_collections.llmops.sglang.plugins.plugin_utils._declared import role_default

MANIFEST = {"python": "/opt/sglang/venv/bin/python", "profile": "mtp", "instances": [
    {"name": "gpu0", "connect_url": "http://127.0.0.1:30000", "advertise_url": "http://10.0.0.5:30000"},
    {"name": "gpu1", "connect_url": "http://127.0.0.1:30001", "advertise_url": None},
]}
NOW = 1_764_860_000.25  # 2025-12-04T14:53:20.25Z
STARTED = 1_764_859_990.0


def variables(**given: Any) -> dict[str, Any]:
    """The role's declared defaults (roles/bench/meta/argument_specs.yml), with ``given``."""
    return {name: given.get(name.removeprefix("sglang_bench_"), role_default("bench", name)) for name in bp.VARIABLES}


def plan(host: str = "node1", manifest: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    extra = {k: kwargs.pop(k) for k in ("through_router", "health", "workers", "host_python", "controller_python")
             if k in kwargs}
    req = bp.BenchHost(host=host, manifest=MANIFEST if manifest is None else manifest, variables=variables(**kwargs),
                       **extra)
    return bp.plan(req, controller_started=STARTED, now=NOW, controller_pid=4242)


def test_every_instance_one_after_another_on_the_host_with_the_engine_venv() -> None:
    p = plan()
    assert [s["name"] for s in p["sweeps"]] == ["gpu0", "gpu1"]
    assert [[s["name"] for s in batch] for batch in p["batches"]] == [["gpu0"], ["gpu1"]]
    assert [s["url"] for s in p["sweeps"]] == ["http://127.0.0.1:30000", "http://127.0.0.1:30001"]  # next to the server
    assert p["python"] == MANIFEST["python"] and p["delegate_to"] == "node1"
    assert p["down"] == [] and p["warnings"] == []
    # the waits from the declared defaults: sweep_timeout 7200 + 120 s; max(30, 5 x poll 2 s)
    assert p["job_timeout"] == role_default("bench", "sglang_bench_sweep_timeout") + bp.JOB_GRACE_S
    assert p["heartbeat_timeout"] == max(30.0, 5 * role_default("bench", "sglang_bench_progress_poll"))
    assert plan(progress_poll=10)["heartbeat_timeout"] == 50.0
    assert plan(progress_poll=10, heartbeat_limit=8)["heartbeat_timeout"] == 8.0  # given: as given


def test_parallel_instances_are_one_batch_and_no_instance_is_no_batch() -> None:
    assert [[s["name"] for s in b] for b in plan(parallel_instances=True)["batches"]] == [["gpu0", "gpu1"]]
    assert plan(manifest={"instances": []}, parallel_instances=True)["batches"] == []


def test_from_the_controller_the_advertised_url_and_the_controllers_python() -> None:
    p = plan(run_on="controller", controller_python="/venv/bin/python3")
    assert [s["url"] for s in p["sweeps"]] == ["http://10.0.0.5:30000", "http://127.0.0.1:30001"]  # none advertised: local
    assert p["python"] == "/venv/bin/python3" and p["delegate_to"] == "localhost"
    # a local host: its local URLs are the controller's
    assert [s["url"] for s in plan(host="localhost", run_on="controller")["sweeps"]][0] == "http://127.0.0.1:30000"


def test_the_python_on_the_host() -> None:
    assert plan(python="/usr/bin/python3.12")["python"] == "/usr/bin/python3.12"
    assert plan(manifest={"instances": []}, host_python="/usr/bin/python3")["python"] == "/usr/bin/python3"
    assert plan(manifest={"instances": []})["python"] == "python3"


def test_sglang_bench_instances_selects_and_names_what_the_host_lacks() -> None:
    assert [s["name"] for s in plan(instances=["gpu1"])["sweeps"]] == ["gpu1"]
    partly = plan(instances=["gpu1", "gpu7"])
    assert [s["name"] for s in partly["sweeps"]] == ["gpu1"] and "gpu7" in partly["warnings"][0]
    with pytest.raises(bp.BenchPlanError) as err:
        plan(instances=["gpu7"])
    assert str(err.value) == ("sglang_bench_instances is ['gpu7'], and the deployment on node1 has none of them (its "
                              "instances: gpu0, gpu1): name instances it has, or set [] to sweep every one")


def test_through_a_router_the_workers_selection_does_not_apply() -> None:
    """The router's sweep has one target, the router: before, sglang_bench_instances (worker names)
    filtered it out and the router's play failed on its missing sweep."""
    router = {"python": "/r/bin/python", "instances": [{"name": "router", "connect_url": "http://127.0.0.1:8000",
                                                       "advertise_url": "http://10.0.0.9:8000"}]}
    p = plan(manifest=router, through_router=True, instances=["gpu0"], health=[{"name": "router", "up": False}])
    assert [s["name"] for s in p["sweeps"]] == ["router"] and p["down"] == []


def test_through_the_router_of_a_pd_deployment_its_workers_metrics_are_read_with_their_side() -> None:
    """The router's /metrics says nothing of the engines: through the router of a prefill/decode
    deployment the sweep reads each rank-0 worker's, where the router reaches it; a unified fleet's
    are not read (its workers were swept one by one already)."""
    router = {"python": "/r/bin/python", "instances": [{"name": "router", "connect_url": "http://127.0.0.1:8000",
                                                       "advertise_url": None}]}
    split = {"instances": [{**MANIFEST["instances"][0], "pd_role": "prefill"},
                           {**MANIFEST["instances"][1], "pd_role": "decode"},
                           {"name": "gpu2", "connect_url": "http://127.0.0.1:30002", "rank0": False, "pd_role": "decode"}]}
    p = plan(manifest=router, through_router=True, workers=[{"host": "node1", "manifest": split, "sweeps": {}}])
    assert p["sweeps"][0]["worker_metrics"] == [
        {"name": "node1/gpu0", "url": "http://10.0.0.5:30000", "side": "prefill"},
        {"name": "node1/gpu1", "url": "http://127.0.0.1:30001", "side": "decode"}]
    unified = plan(manifest=router, through_router=True, workers=[{"host": "node1", "manifest": MANIFEST}])
    assert unified["sweeps"][0]["worker_metrics"] == [] and "worker_metrics" not in plan()["sweeps"][0]


PD_HOST = {"python": "/opt/sglang/venv/bin/python", "instances": [
    {"name": "gpu0", "connect_url": "http://127.0.0.1:30000", "advertise_url": "http://10.0.0.5:30000",
     "pd_role": "prefill", "bootstrap_port": 8998},
    {"name": "gpu1", "connect_url": "http://127.0.0.1:30001", "advertise_url": "http://10.0.0.5:30001",
     "pd_role": "prefill", "bootstrap_port": 8999},
    {"name": "gpu2", "connect_url": "http://127.0.0.1:30002", "advertise_url": "http://10.0.0.5:30002",
     "pd_role": "decode", "bootstrap_port": 8998},
]}


def test_a_pd_hosts_instances_are_swept_as_the_pair_they_are() -> None:
    """Swept one by one, a prefill and a decode each run unpaired (no KV hand-over): the host's PD
    instances are one sweep whose requests each go to a prefill and a decode, as the router sends
    them, named after them (decodes first), with each side's /metrics read."""
    p = plan(manifest=PD_HOST)
    (sweep,) = p["sweeps"]
    assert sweep["name"] == "gpu2+gpu0+gpu1" and sweep["url"] == "http://127.0.0.1:30002" and p["warnings"] == []
    assert sweep["pd"] == {"prefill": [{"url": "http://127.0.0.1:30000", "bootstrap_port": 8998},
                                       {"url": "http://127.0.0.1:30001", "bootstrap_port": 8999}],
                           "decode": ["http://127.0.0.1:30002"]}
    assert [(w["name"], w["side"]) for w in sweep["worker_metrics"]] == [
        ("node1/gpu2", "decode"), ("node1/gpu0", "prefill"), ("node1/gpu1", "prefill")]
    assert sweep["progress_file"].endswith("-node1-gpu2+gpu0+gpu1.jsonl")
    # naming one of them sweeps the pair (a side alone cannot serve); from the controller, the
    # URLs other hosts use; an instance down takes no part
    assert plan(manifest=PD_HOST, instances=["gpu0"])["sweeps"][0]["name"] == "gpu2+gpu0+gpu1"
    remote = plan(manifest=PD_HOST, run_on="controller", host="node9")["sweeps"][0]
    assert remote["pd"]["prefill"][0]["url"] == "http://10.0.0.5:30000" and remote["url"] == "http://10.0.0.5:30002"
    health = [{"name": "gpu0", "up": True}, {"name": "gpu1", "up": False}, {"name": "gpu2", "up": True}]
    assert plan(manifest=PD_HOST, health=health, target="router")["sweeps"][0]["name"] == "gpu2+gpu0"


def test_a_host_with_one_side_cannot_pair_and_says_so() -> None:
    """Its pairs span hosts: each instance is swept unpaired, and the plan names the router's sweep."""
    prefills = {**PD_HOST, "instances": PD_HOST["instances"][:2]}
    p = plan(manifest=prefills)
    assert [s["name"] for s in p["sweeps"]] == ["gpu0", "gpu1"] and all("pd" not in s for s in p["sweeps"])
    (said,) = p["warnings"]
    assert said.startswith("node1: gpu0 (prefill), gpu1 (prefill) are prefill/decode instances (sglang_pd) with no "
                           "decode instance up on this host to pair with: swept on its own each runs unpaired")
    assert "sglang_bench_target=router" in said


def test_instances_down_are_not_swept_and_come_back_with_their_host() -> None:
    health = [{"name": "gpu0", "up": True}, {"name": "gpu1", "up": False, "pid": None}]
    p = plan(health=health)
    assert [s["name"] for s in p["sweeps"]] == ["gpu0"]
    assert p["down"] == [{"name": "gpu1", "up": False, "pid": None, "host": "node1"}]
    assert plan(health=health, instances=["gpu0"])["down"] == []  # one not asked for is not reported
    assert plan(health=[{"name": "gpu0", "up": False}, {"name": "gpu1", "up": False}])["batches"] == []


def test_run_id_and_file_names() -> None:
    p = plan()
    assert p["run_id"] == time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(STARTED)) == "20251204T145310Z"
    assert plan(run_id="tune-1")["run_id"] == "tune-1"
    assert bp.run_id("", None, NOW) == "20251204T145320Z"  # the controller's start unknown: now
    assert p["run_key"] == "20251204T145320250000-4242"
    assert p["progress_file"] == "/tmp/llmops-sglang-sweep-20251204T145320250000-4242-node1-{instance}.jsonl"
    assert p["sweeps"][1]["heartbeat_file"] == "/tmp/llmops-sglang-sweep-20251204T145320250000-4242-node1-gpu1.heartbeat"


def test_a_bad_poll_or_heartbeat_timeout_is_refused() -> None:
    with pytest.raises(bp.BenchPlanError, match="sglang_bench_progress_poll must be > 0 seconds, got 0"):
        plan(progress_poll=0)
    with pytest.raises(bp.BenchPlanError, match=r"sglang_bench_heartbeat_limit must be > 0 seconds, or 0 for "
                                                r"max\(30, 5 x sglang_bench_progress_poll\), got -1"):
        plan(heartbeat_limit=-1)


def test_process_started_is_the_same_for_every_asker_and_agrees_with_ps() -> None:
    started = bp.process_started(os.getpid())
    assert started is not None and started == bp.process_started(os.getpid())
    assert started <= time.time()
    out = subprocess.run(["ps", "-o", "etimes=", "-p", str(os.getpid())], capture_output=True, text=True, check=True)
    assert abs((time.time() - int(out.stdout)) - started) <= 2  # ps counts whole seconds
    assert bp.process_started(2 ** 22 + 12345) is None  # above pid_max: no such process
