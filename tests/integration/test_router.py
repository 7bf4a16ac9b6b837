"""deploy.yml / status.yml / stop.yml with a REAL SGLang router (sglang-router 0.3.2 from the
checkout's .venv-router, `make router`) in front of the two embedded-engine instances of
localhost, which is in both sglang_servers and sglang_routers."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils._router import files as _routerfiles
from ansible_collections.llmops.sglang.plugins.plugin_utils import _routerplan

from .conftest import ROOT, Deployment, cleanup, free_port_block, group_members, make_inventory

pytestmark = pytest.mark.integration

ROUTER_PY = ROOT / ".venv-router" / "bin" / "python"


def router_inventory(tmp_path: Path, **overrides: Any) -> Deployment:
    """make_inventory's localhost, also in sglang_routers, with a router on free ports."""
    if not ROUTER_PY.exists():
        pytest.fail(f"no sglang-router installation at {ROUTER_PY}: run `make router`")
    port = free_port_block(2)
    dep = make_inventory(tmp_path, sglang_router_install=False, sglang_router_python=str(ROUTER_PY),
                         sglang_router_base_dir=str(tmp_path / "router"), sglang_router_user="",
                         sglang_router_create_user=False, sglang_router_service_manager="process",
                         sglang_router_port=port, sglang_router_prometheus_port=port + 1,
                         sglang_router_workers_timeout=60, **overrides)
    inv = yaml.safe_load(dep.inventory.read_text())
    inv["all"]["children"]["sglang_routers"] = {"hosts": {"localhost": None}}
    dep.inventory.write_text(yaml.safe_dump(inv))
    return dep


def router_url(dep: Deployment) -> str:
    return f"http://127.0.0.1:{dep.extra['sglang_router_port']}"


def router_pid(dep: Deployment) -> int | None:
    try:
        return int((Path(dep.extra["sglang_router_base_dir"]) / "router" / "router.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def http(url: str, body: Any = None, key: str | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as err:
        return err.code, None
    except OSError:  # refused: nothing listens
        return 0, None
    try:
        return resp.status, json.loads(raw or b"null")
    except ValueError:  # /health answers OK
        return resp.status, raw.decode()


def workers(dep: Deployment, key: str | None = None) -> list[dict[str, Any]]:
    status, data = http(router_url(dep) + "/workers", key=key)
    assert status == 200, status
    return sorted(data["workers"], key=lambda w: w["url"])


def stop_all(dep: Deployment) -> None:
    """stop.yml (servers, then the router); then SIGKILL whatever of the router is left."""
    pid = router_pid(dep)
    cleanup(dep)
    if pid is not None:
        for member in group_members(pid):
            try:
                os.kill(member, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture
def routed(tmp_path: Path) -> Iterator[Deployment]:
    dep = router_inventory(tmp_path)
    yield dep
    stop_all(dep)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_router_in_front_of_the_instances_idempotent_restarted_on_change_then_stopped(routed: Deployment) -> None:
    """One router deployment, from its gate to its stop. First deploy.yml's rollout check in its
    gate (action router_plan, option rollout; issue 19; was test_rollout_floor.py, which deployed
    the same inventory a second time): a capacity floor that cannot hold is refused before
    anything starts, --check prints the rollout estimate (the load time a default until
    instances have started, then measured), a floor that holds deploys. Then the router in front
    of the instances, idempotent, restarted when its own configuration changes, stopped."""
    base, router = routed.extra["sglang_base_port"], routed.extra["sglang_router_port"]
    ports = [base, base + 1, router, router + 1]
    refused = routed.play("deploy.yml", sglang_rollout_min_available=2)
    assert refused.rc != 0, refused.out[-4000:]
    assert "rollout refused: sglang_rollout_min_available=2 keeps 2 of 2 instances" in refused.out, \
        refused.out[-4000:]
    assert "lower the floor to at most 1 or 50%" in refused.out
    assert not any(listening(p) for p in ports), ports
    assert router_pid(routed) is None and not (routed.base / "deployment.json").exists()
    assert not (Path(routed.extra["sglang_router_base_dir"]) / "router").exists()

    check = routed.play("deploy.yml", "--check")
    assert check.rc == 0, check.out[-4000:]
    text = " ".join(check.out.split())  # the YAML callback folds long lines
    assert "rollout estimate: 1 hosts x 2 instances, 1 host(s) per batch (1 batches)" in text, check.out[-4000:]
    assert "load time L 3 min: a default (nothing measured yet" in text
    assert "capacity floor: none" in text
    assert not any(listening(p) for p in ports)

    first = routed.play("deploy.yml", sglang_rollout_min_available="50%")
    assert first.rc == 0, first.out[-4000:]
    estimate = routed.play("deploy.yml", "--check", sglang_rollout_min_available=1,
                           sglang_rollout_estimate={"host_fixed_s": 20})
    assert estimate.rc == 0, estimate.out[-4000:]
    text = " ".join(estimate.out.split())
    slowest = max(routed.manifest()["instances"], key=lambda i: i["ready_after_s"])
    assert (f"measured (the longest ready_after_s of the last deploy: localhost {slowest['name']})"
            in text), estimate.out[-4000:]
    assert "fixed F 20 s, step S 15 s, run P 2 min (sglang_rollout_estimate)" in text
    assert "capacity floor: sglang_rollout_min_available=1 = 1 of 2 instances, holds" in text

    manifest = routed.manifest()
    expected = sorted(i["connect_url"] for i in manifest["instances"])
    assert len(expected) == 2
    listed = workers(routed)
    assert [w["url"] for w in listed] == expected and all(w["is_healthy"] for w in listed), listed
    assert http(router_url(routed) + "/readiness")[0] == 200
    status, answer = http(router_url(routed) + "/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 4})
    assert status == 200 and answer["usage"]["completion_tokens"] == 4
    pid = router_pid(routed)
    assert pid is not None and alive(pid)
    script = (Path(routed.extra["sglang_router_base_dir"]) / "router" / "launch.sh").read_text()
    args = script.split("args=(\n", 1)[1].split("\n)\n", 1)[0].split()
    assert "--disable-circuit-breaker" in args and args[args.index("--health-check-interval-secs") + 1] == "3"
    assert "--worker-urls" not in args and "--api-key" not in args

    again = routed.play("deploy.yml")
    assert again.rc == 0, again.out[-4000:]
    assert again.changed == 0, again.out[-4000:]
    assert router_pid(routed) == pid and alive(pid)
    assert [(w["url"], w["id"]) for w in workers(routed)] == [(w["url"], w["id"]) for w in listed]

    status_run = routed.play("status.yml")
    assert status_run.rc == 0 and status_run.changed == 0, status_run.out[-4000:]
    assert f"{router_url(routed)}: running (process, pid {pid}), health 200, readiness" in status_run.out
    assert all(url in status_run.out for url in expected)

    # its own configuration changed: restarted (handler), and the workers it had are added again
    changed = routed.play("deploy.yml", sglang_router_policy="round_robin")
    assert changed.rc == 0, changed.out[-4000:]
    assert changed.changed == 3, changed.out[-4000:]  # the script, the restart, the workers added again
    assert not alive(pid)
    pid = router_pid(routed)
    assert pid is not None and alive(pid)
    after = workers(routed)
    assert [w["url"] for w in after] == expected and all(w["is_healthy"] for w in after)

    server_pids = routed.pids()
    stopped = routed.play("stop.yml")
    assert stopped.rc == 0, stopped.out[-4000:]
    assert not alive(pid) and not any(alive(p) for p in server_pids.values())
    assert router_pid(routed) is None
    assert http(router_url(routed) + "/health")[0] == 0


def test_rollback_yml_replaces_one_instance_at_a_time_behind_the_router(routed: Deployment) -> None:
    """rollback.yml after a change: each instance goes back on its previous files one at a time,
    out of the router, drained, restarted, ready and back in before the next (two batches, each
    taking its instance out of the router), and the manifest says what runs."""
    assert routed.play("deploy.yml").rc == 0
    changed = routed.play("deploy.yml", sglang_max_running_requests=7)
    assert changed.rc == 0, changed.out[-4000:]
    before = routed.pids()
    run = routed.play("rollback.yml")
    assert run.rc == 0, run.out[-6000:]
    lines = run.out.splitlines()
    starts = [line for line in lines if line.startswith("TASK [llmops.sglang.server : Start the batch (")]
    assert [s.split("]")[0] for s in starts] == ["TASK [llmops.sglang.server : Start the batch (gpu0)",
                                                 "TASK [llmops.sglang.server : Start the batch (gpu1)"], run.out[-6000:]
    outs = [i for i, line in enumerate(lines) if line.startswith("TASK [llmops.sglang.router : Reconcile the router's workers (absent)")]
    assert len(outs) == 2 and all(lines[i + 1].startswith("changed:") for i in outs), run.out[-6000:]
    after = routed.manifest()["instances"]
    assert all("--max-running-requests" not in i["argv"] or i["argv"][i["argv"].index("--max-running-requests") + 1] != "7"
               for i in after), after
    assert all(i["rolled_back"] for i in after) and all(before[i["name"]] != i["pid"] for i in after)
    assert sorted(w["url"] for w in workers(routed)) == sorted(i["connect_url"] for i in after)


def test_api_key_through_the_router_and_check_mode_first(tmp_path: Path) -> None:
    dep = router_inventory(tmp_path, sglang_api_key="s3cret-key")
    try:
        check = dep.play("deploy.yml", "--check")
        assert check.rc == 0, check.out[-4000:]
        assert router_pid(dep) is None and not (tmp_path / "router" / "router").exists()

        run = dep.play("deploy.yml")
        assert run.rc == 0, run.out[-4000:]
        assert "s3cret-key" not in run.out
        request = {"model": "m", "prompt": "hi", "max_tokens": 2}
        url = router_url(dep)
        assert http(url + "/v1/completions", request)[0] == 401
        assert http(url + "/v1/completions", request, key="wrong")[0] == 401
        status, answer = http(url + "/v1/completions", request, key="s3cret-key")
        assert status == 200 and answer["usage"]["completion_tokens"] == 2
        assert http(url + "/workers")[0] == 401
        listed = workers(dep, key="s3cret-key")
        assert len(listed) == 2 and all(w["is_healthy"] for w in listed)
        for public in ("/health", "/readiness"):
            assert http(url + public)[0] == 200, public
        # the key is in the 0600 env file only: not in the script, the command line or the log
        folder = tmp_path / "router" / "router"
        assert oct(os.stat(folder / "env").st_mode & 0o777) == "0o600"
        assert "s3cret-key" in (folder / "env").read_text()
        assert "s3cret-key" not in (folder / "launch.sh").read_text()
        pid = router_pid(dep)
        assert pid is not None
        assert b"s3cret-key" not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert "s3cret-key" not in (folder / "router.log").read_text(errors="replace")

        again = dep.play("deploy.yml")
        assert again.rc == 0 and again.changed == 0, again.out[-4000:]
        stopped = dep.play("stop.yml")
        assert stopped.rc == 0, stopped.out[-4000:]
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(pid)
    finally:
        stop_all(dep)


def router_only_inventory(tmp_path: Path, **overrides: Any) -> Deployment:
    """localhost in sglang_routers only (no server host): deploy.yml runs the router alone."""
    dep = router_inventory(tmp_path, **overrides)
    inv = yaml.safe_load(dep.inventory.read_text())
    hostvars = inv["all"]["children"]["sglang_servers"]["hosts"]["localhost"]
    inv["all"]["children"] = {"sglang_routers": {"hosts": {"localhost": hostvars}}}
    dep.inventory.write_text(yaml.safe_dump(inv))
    return dep


def test_a_router_moved_to_a_taken_port_is_refused_and_the_old_one_keeps_serving(tmp_path: Path) -> None:
    """RELIABILITY #16.1: -e sglang_router_port=<a port another program holds> stopped the
    working router and the new one died on "Address already in use". Now the router's
    pre-flight refuses before anything stops, naming the holder."""
    dep = router_only_inventory(tmp_path)
    holder = socket.socket()
    try:
        first = dep.play("deploy.yml")
        assert first.rc == 0, first.out[-4000:]
        pid = router_pid(dep)
        assert pid is not None and alive(pid) and http(router_url(dep) + "/health")[0] == 200
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        moved = dep.play("deploy.yml", sglang_router_port=taken)
        assert moved.rc != 0, moved.out[-4000:]
        assert f"port {taken}" in moved.out and f"held by pid {os.getpid()}" in moved.out, moved.out[-4000:]
        assert moved.changed == 0, moved.out[-4000:]
        # the working router was not touched: same process, still answering on its port
        assert router_pid(dep) == pid and alive(pid)
        assert http(router_url(dep) + "/health")[0] == 200
        # its own port is not "taken": a re-deploy on it passes its pre-flight and changes nothing
        again = dep.play("deploy.yml")
        assert again.rc == 0 and again.changed == 0, again.out[-4000:]
        assert router_pid(dep) == pid
    finally:
        holder.close()
        stop_all(dep)


def test_a_deploy_refused_by_the_plan_gate_does_not_start_the_router(tmp_path: Path) -> None:
    """RELIABILITY #16.1: the router's play ran before the servers' plan gate, so after stop.yml
    a deploy refused for an unknown profile had already started the router again."""
    dep = router_inventory(tmp_path)
    try:
        stopped = dep.play("stop.yml")
        assert stopped.rc == 0, stopped.out[-4000:]
        refused = dep.play("deploy.yml", sglang_profile="no_such_profile")
        assert refused.rc != 0 and "no_such_profile" in refused.out, refused.out[-4000:]
        assert refused.changed == 0, refused.out[-4000:]
        assert router_pid(dep) is None
        assert not (Path(dep.extra["sglang_router_base_dir"]) / "router").exists()
        assert http(router_url(dep) + "/health")[0] == 0
    finally:
        stop_all(dep)


def test_a_missing_router_python_is_named_with_the_fix_before_anything_changes(tmp_path: Path) -> None:
    """RELIABILITY #16.11: after `make setup` without `make router` the first deploy failed at
    "Check the router's flags" with a bare "Error executing command" (rc 2, no stderr)."""
    missing = tmp_path / "no-venv-router" / "bin" / "python"
    dep = router_inventory(tmp_path)
    try:
        run = dep.play("deploy.yml", sglang_router_python=str(missing))
        assert run.rc != 0, run.out[-4000:]
        assert f"the router's Python {missing}" in run.out and "make router" in run.out, run.out[-4000:]
        assert "sglang_router_install" in run.out and "Error executing command" not in run.out
        assert run.changed == 0, run.out[-4000:]
        assert not (Path(dep.extra["sglang_router_base_dir"]) / "router").exists()
        assert not (dep.base / "deployment.json").exists() and not dep.base.exists()
    finally:
        stop_all(dep)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_router_unit_verifies(tmp_path: Path) -> None:
    base = tmp_path / "opt-sglang-router"
    (base / "router").mkdir(parents=True)
    launch = base / "router" / "launch.sh"
    launch.write_text("#!/bin/sh\nexec sleep 1\n")
    launch.chmod(0o755)
    # the plan the role writes the unit from (plugin_utils/_routerplan.py, module_utils/_router/files.py)
    defaults = yaml.safe_load((ROOT / "roles" / "router" / "defaults" / "main.yml").read_text())
    defaults.update(sglang_router_base_dir=str(base), sglang_router_user="root", sglang_router_group="root",
                    sglang_router_host="0.0.0.0", sglang_router_prometheus_host="0.0.0.0",
                    sglang_router_shutdown_grace_period=30)
    plan = _routerplan.plan(_routerplan.RouterRequest.from_vars(defaults))
    (tmp_path / "sglang-router.service").write_text(_routerfiles.unit_text(plan))
    unit = (tmp_path / "sglang-router.service").read_text()
    assert unit.startswith("#") and "Ansible managed" in unit
    for line in ("KillMode=control-group", "Restart=on-failure", "TimeoutStopSec=45", f"ExecStart={launch}",
                 f"StandardOutput=append:{base}/router/router.log"):
        assert line in unit
    verify = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / "sglang-router.service")],
                            capture_output=True, text=True, check=False, timeout=60)
    problems = [ln for ln in (verify.stdout + verify.stderr).splitlines()
                if "sglang-router" in ln and "network-online.target" not in ln]
    assert verify.returncode == 0 and not problems, verify.stdout + verify.stderr


@pytest.mark.e2e
def test_bench_through_the_router_reports_workers_fleet_total_and_router_side_by_side(
        routed: Deployment, tmp_path: Path) -> None:
    """bench.yml -e sglang_bench_target=router: both instances swept, then the real router with
    the same levels; one report with the three views, whose numbers agree with the JSON files."""
    import csv

    deployed = routed.play("deploy.yml")
    assert deployed.rc == 0, deployed.out[-4000:]
    reports = tmp_path / "reports"
    run = routed.play("bench.yml", sglang_bench_target="router", sglang_bench_concurrency=[1, 2],
                      sglang_bench_max_tokens=32, sglang_bench_reports_dir=str(reports), sglang_bench_run_id="r")
    assert run.rc == 0, run.out[-4000:]
    folder = reports / "r"
    docs = {p.name: json.loads(p.read_text()) for p in folder.glob("localhost_*.json")}
    assert sorted(docs) == ["localhost_gpu0_baseline.json", "localhost_gpu1_baseline.json", "localhost_router_baseline.json"]
    router = docs["localhost_router_baseline.json"]
    assert router["meta"]["role"] == "router" and router["sweep"]["url"] == router_url(routed)
    # the router does not report the engines' time scale: the workers' was passed on
    assert router["sweep"]["time_base"] == "model" and router["sweep"]["server"]["time_scale"] == 0.005
    workers_docs = [d for name, d in docs.items() if "router" not in name]

    rows = list(csv.DictReader((folder / "fleet.csv").open()))
    assert [(r["concurrency"], r["view"]) for r in rows] == [
        (c, v) for c in ("1", "2") for v in ("worker", "worker", "fleet", "router")]
    for level in (1, 2):
        at = [r for r in rows if r["concurrency"] == str(level)]
        worker_rows = [r for r in at if r["view"] == "worker"]
        fleet = next(r for r in at if r["view"] == "fleet")
        through = next(r for r in at if r["view"] == "router")
        # merged from the records: counts are the workers' sums, and each worker's row is its own sweep
        assert int(fleet["requests"]) == sum(int(r["requests"]) for r in worker_rows) > 0
        assert int(fleet["output_tokens"]) == sum(int(r["output_tokens"]) for r in worker_rows)
        assert fleet["in_flight"] == str(2 * level) and fleet["alignment"] == "aligned"  # swept one after another
        assert float(fleet["window_s"]) == max(float(r["window_s"]) for r in worker_rows)
        for row, doc in zip(worker_rows, sorted(workers_docs, key=lambda d: d["meta"]["instance"]), strict=True):
            point = next(p for p in doc["sweep"]["points"] if p["concurrency"] == level)
            assert int(row["requests"]) == point["requests"] and int(row["output_tokens"]) == point["output_tokens"]
            assert float(row["output_tok_s"]) == pytest.approx(point["output_tok_s"], rel=0.01)
        point = next(p for p in router["sweep"]["points"] if p["concurrency"] == level)
        assert int(through["requests"]) == point["requests"] and int(through["err"]) == 0
        assert int(through["output_tokens"]) == point["requests"] * 32
    summary = (folder / "summary.md").read_text()
    assert "### Fleet: per worker, fleet total (merged), through the router" in summary
    assert "**fleet total (2 workers, merged) [aligned]**" in summary and "| router localhost |" in summary
    assert "### localhost/router (baseline)" in summary
    fleet_doc = json.loads((folder / "fleet.json").read_text())
    assert len(fleet_doc["rows"]) == len(rows)


def test_prefill_and_decode_behind_the_real_router_in_pd_mode(tmp_path: Path) -> None:
    """sglang_pd (issue 32): localhost's two instances as a prefill and a decode (one host split),
    the real sglang-router 0.3.2 in PD mode (sglang_router_pd_disaggregation) with each registered
    with its side and the prefill's bootstrap port; every request through the router is answered
    by the decode from the KV the prefill computed, none failed; bench.yml sweeps the host's pair as
    one (each request to both) and then the router, each side of each level shown; a router not in PD mode is refused by deploy.yml's gate before any
    host changes, naming the fix."""
    boot = free_port_block(1)
    dep = router_inventory(tmp_path, sglang_router_pd_disaggregation=True)
    pd = {"role": ["prefill", "decode"], "bootstrap_port": boot}
    try:
        run = dep.play("deploy.yml", profile="baseline", sglang_pd=pd)
        assert run.rc == 0, run.out[-4000:]
        manifest = dep.manifest()
        sides = {i["name"]: (i["pd_role"], i["bootstrap_port"]) for i in manifest["instances"]}
        assert sides == {"gpu0": ("prefill", boot), "gpu1": ("decode", None)}
        status, workers = http(router_url(dep) + "/workers")
        assert status == 200, workers
        listed = {w["url"]: (w["worker_type"], w.get("bootstrap_port")) for w in workers["workers"]}
        urls = {i["name"]: i["connect_url"] for i in manifest["instances"]}
        assert listed == {urls["gpu0"]: ("prefill", boot), urls["gpu1"]: ("decode", None)}, listed
        assert http(router_url(dep) + "/readiness")[0] == 200  # a prefill and a decode: paired

        bodies = [{"text": f"request {i} " + "shared prompt " * 60, "sampling_params": {"max_new_tokens": 8}}
                  for i in range(12)]
        answers = [http(router_url(dep) + "/generate", body) for body in bodies]
        assert [s for s, _ in answers] == [200] * 12, answers
        assert all(body["meta_info"]["completion_tokens"] == 8 for _, body in answers)  # the decode's answer
        chat_status, chat = http(router_url(dep) + "/v1/chat/completions", {
            "model": "qwen3.6-27b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert chat_status == 200 and chat["usage"]["completion_tokens"] == 4, chat
        metrics = urllib.request.urlopen(urls["gpu1"] + "/metrics", timeout=10).read().decode()
        assert "sglang:num_bootstrap_failed_reqs_total" in metrics
        assert [line for line in metrics.splitlines()
                if line.startswith("sglang:num_bootstrap_failed_reqs_total")][0].endswith(" 0.0")

        # bench.yml through the PD router: the router's sweep reads each side's /metrics (bench_plan's
        # worker_metrics), and the report shows each side of each level
        reports = tmp_path / "reports"
        bench = dep.play("bench.yml", sglang_bench_target="router", sglang_bench_concurrency=[2],
                         sglang_bench_max_tokens=16, sglang_bench_reports_dir=str(reports), sglang_bench_run_id="pd")
        assert bench.rc == 0, bench.out[-4000:]
        (point,) = json.loads((reports / "pd" / "localhost_router_baseline.json").read_text())["sweep"]["points"]
        prefill, decode = point["sides"]["prefill"], point["sides"]["decode"]
        assert point["ok"] == point["requests"] > 0 and (prefill["read"], decode["read"]) == (1, 1)
        assert prefill["pd_kv_transfers"] >= point["ok"] and prefill["pd_kv_transfer_ms_mean"] > 0
        assert decode["pd_kv_transfers"] == 0 and decode["pd_bootstrap_failed"] == prefill["pd_transfer_failed"] == 0
        assert "Each side during each level" in (reports / "pd" / "summary.md").read_text()
        # the host's own sweep (before the router's): its prefill and decode swept as the pair they are,
        # each request to both with a bootstrap room, as the router sends it (bench_plan, the sweep's pd)
        (pair,) = [json.loads(f.read_text()) for f in (reports / "pd").glob("localhost_gpu1*gpu0_baseline.json")]
        (point,) = pair["sweep"]["points"]
        assert pair["sweep"]["options"]["pd"]["prefill"] == [{"url": urls["gpu0"], "bootstrap_port": boot}]
        assert point["ok"] == point["requests"] > 0 and point["sides"]["prefill"]["pd_kv_transfers"] >= point["ok"]
        assert point["sides"]["decode"]["pd_bootstrap_failed"] == 0

        # the gate refuses before any host changes: the router and the instances keep running as they were
        router_before, pids_before = router_pid(dep), {i["name"]: i["pid"] for i in dep.manifest()["instances"]}
        unpaired = dep.play("deploy.yml", profile="baseline", sglang_pd=pd, sglang_router_pd_disaggregation=False)
        assert unpaired.rc != 0
        assert "have prefill/decode instances (sglang_pd), and this router is not in PD mode: set " \
               "sglang_router_pd_disaggregation: true" in unpaired.out, unpaired.out[-3000:]
        assert router_pid(dep) == router_before and {i["name"]: i["pid"] for i in dep.manifest()["instances"]} == \
            pids_before
    finally:
        cleanup(dep)
