"""The fleet smoke scenario, over real SSH: deploy.yml on three server hosts (two instances each),
status.yml, a small bench.yml sweep run on the hosts, deploy.yml again (nothing changes), stop.yml.
Each step's wall time is printed (and kept in the run folder's timings.json)."""
from __future__ import annotations

import json
import time

import pytest

from ..integration.conftest import group_members
from .harness import Fleet, FleetRun

SWEEP = {"sglang_bench_concurrency": [1], "sglang_bench_requests": 2, "sglang_bench_max_tokens": 8,
         "sglang_bench_warmup": 1, "sglang_bench_run_on": "host"}


def _assert_recap(run: FleetRun, fleet: Fleet, *, changed: bool | None) -> None:
    """Every server host ok, none failed or unreachable; the router host, where the playbook has
    a play for it, neither; `changed`: True = each server changed something, False = no host
    did, None = not checked."""
    assert run.rc == 0, run.out[-5000:]
    servers = {h.name for h in fleet.servers}
    assert servers <= set(run.recap) <= servers | {h.name for h in fleet.routers}, (run.recap, run.out[-3000:])
    for name in run.recap:
        recap = run.host(name)
        assert recap["failed"] == 0 and recap["unreachable"] == 0 and recap["ok"] > 0, (name, recap)
        if changed is True and name in servers:
            assert recap["changed"] > 0, (name, recap)
        elif changed is False:
            assert recap["changed"] == 0, (name, recap, run.out[-3000:])


def test_deploy_status_bench_redeploy_stop_over_ssh(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    timings: dict[str, float] = {"build the fleet (once per session)": fleet.setup_seconds}
    servers = fleet.servers
    assert len(servers) >= 3 and fleet.routers
    router = fleet.routers[0].name

    deploy = fleet.play("deploy.yml", profile="baseline", sglang_gpus=[0, 1])
    timings["deploy.yml (baseline, 2 instances per host)"] = deploy.seconds
    _assert_recap(deploy, fleet, changed=True)

    pids: dict[str, dict[str, int]] = {}
    for i, host in enumerate(servers):
        manifest = fleet.manifest(host.name)
        port = host.hostvars["sglang_base_port"]
        assert [inst["name"] for inst in manifest["instances"]] == ["gpu0", "gpu1"]
        assert manifest["host"] == host.name and manifest["profile"] == "baseline"
        pids[host.name] = fleet.pids(host.name)
        neighbour = servers[(i + 1) % len(servers)].name
        for n, inst in enumerate(manifest["instances"]):
            assert inst["gpus"] == [n]
            assert inst["connect_url"] == f"http://127.0.0.1:{port + n}"
            assert inst["advertise_url"] == f"http://{host.address}:{port + n}", inst
            # the controller, the router host and another server reach it at the host's address
            assert fleet.get(inst["advertise_url"] + "/health_generate") == 200, inst
            status, body = fleet.http_get(router, inst["advertise_url"] + "/v1/models")
            assert status == 200 and json.loads(body)["data"], (router, inst["advertise_url"], body)
            status, body = fleet.http_get(neighbour, inst["advertise_url"] + "/health")
            assert status == 200, (neighbour, inst["advertise_url"], body)
    # the hosts are separate: nothing listens on the router host's own loopback
    status, body = fleet.http_get(router, f"http://127.0.0.1:{servers[0].hostvars['sglang_base_port']}/health",
                                  timeout=3)
    assert status == 0 and "Connection refused" in body, body

    status_run = fleet.play("status.yml")
    timings["status.yml"] = status_run.seconds
    _assert_recap(status_run, fleet, changed=False)
    assert status_run.out.count("gpu0: up http://127.0.0.1:") == len(servers), status_run.out[-3000:]
    assert status_run.out.count("gpu1: up http://127.0.0.1:") == len(servers), status_run.out[-3000:]

    reports = fleet.reports_dir
    bench = fleet.play("bench.yml", sglang_bench_reports_dir=str(reports), sglang_bench_run_id="smoke", **SWEEP)
    timings["bench.yml (C=1, 2 requests x 8 tokens per instance, on the hosts)"] = bench.seconds
    assert bench.rc == 0, bench.out[-5000:]
    for host in servers:
        assert bench.host(host.name)["failed"] == 0 and bench.host(host.name)["unreachable"] == 0
        for inst in ("gpu0", "gpu1"):
            data = json.loads((reports / "smoke" / f"{host.name}_{inst}_baseline.json").read_text())
            point = data["sweep"]["points"][0]
            assert point["concurrency"] == 1 and point["ok"] == 2 and point["error_rate"] == 0, point
            # run next to the server: its loopback URL, which only that host's namespace answers
            assert data["meta"]["url"].startswith("http://127.0.0.1:"), data["meta"]
    assert (reports / "smoke" / "summary.md").exists()

    again = fleet.play("deploy.yml", profile="baseline", sglang_gpus=[0, 1])
    timings["deploy.yml again (nothing to change)"] = again.seconds
    _assert_recap(again, fleet, changed=False)
    assert {h.name: fleet.pids(h.name) for h in servers} == pids

    groups = [pid for host_pids in pids.values() for pid in host_pids.values()]
    stop = fleet.play("stop.yml")
    timings["stop.yml"] = stop.seconds
    _assert_recap(stop, fleet, changed=True)
    deadline = time.monotonic() + 10
    while fleet.server_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert fleet.server_processes() == {}, fleet.server_processes()
    assert not any(group_members(g) for g in groups)
    for host in servers:
        assert not list(host.base_dir.glob("*/server.pid")), host.name
        for n in range(2):
            assert fleet.get(f"http://{host.address}:{host.hostvars['sglang_base_port'] + n}/health", timeout=3) == 0

    (fleet.run_dir / "timings.json").write_text(json.dumps(timings, indent=1))
    with capsys.disabled():
        print(f"\nfleet smoke, {len(servers)} server hosts x 2 instances + {len(fleet.routers)} router host, "
              "wall time per step:")
        for step, seconds in timings.items():
            print(f"  {seconds:7.1f} s  {step}")
