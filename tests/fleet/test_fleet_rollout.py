"""Fleet rollout scenarios over real SSH (issue 11), on the session's fleet (3 server hosts x 2
instances, 1 router host with the real sglang-router), in this order, each starting from the
state the previous one left (a fleet deploy costs a minute or more on two shared cores):

1. full rollout, then load through the router;
1b. generate.yml through the router, a 20,000-line dataset, one host's instances killed and
   restarted (deploy.yml again) under the job, then the job stopped and resumed at a higher
   concurrency: every line once;
2. a rolling update (a flag change: every instance restarts) under steady load: zero failures;
3. a host whose engine cannot start: the rollout stops (batch 1, max-fail 0), hosts done serve
   the new version, hosts not reached the old one, the router only has healthy workers;
5. the re-run after the fix converges (the host done before has changed=0 and its pids);
4. a host whose sshd is stopped: reported unreachable, the others roll on (max-fail 34 %);
6. a 2-host TP group behind the router;
7. prefill/decode (issue 32): two hosts each split into a prefill and a decode behind the router
   in PD mode, rolled one host and one side at a time under steady load: zero failures.

A scenario that finds the fleet not in the state it needs fails saying which one broke it.
Numbers (wall times, the rolling update's per-second throughput) are printed and written to
the run folder's reports/; `FLEET_MEASURE=1` adds the batch-size and no-change measurements of
docs/PERFORMANCE.md.
"""
from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import DEFAULT_PORT, Fleet, FleetRun, cmdline
from .load import LoadClient

# every version differs in one flag, so that each rollout restarts every instance it reaches
VERSIONS = {"A": {}, "B": {"--watchdog-timeout": 600}, "C": {"--watchdog-timeout": 900},
            "D": {"--watchdog-timeout": 1200}}
SWEEP = {"sglang_bench_concurrency": [1], "sglang_bench_requests": 2, "sglang_bench_max_tokens": 8,
         "sglang_bench_warmup": 1, "sglang_bench_run_on": "host"}
BROKEN_ENV = {"LLMOPS_SIM_HOST_MEM_AVAILABLE_GB": "not-a-number"}  # the engine exits at start
DONE: dict[str, bool] = {}


@pytest.fixture(scope="module")
def fleet(fleet_session: Fleet) -> Iterator[Fleet]:
    """The session's fleet, fresh at the start of the module and reset at its end (not between
    its scenarios: each builds on the one before)."""
    fleet_session.reset()
    yield fleet_session
    fleet_session.reset()


def _needs(step: str) -> None:
    if not DONE.get(step):
        pytest.fail(f"scenario {step!r} did not pass: this one needs the fleet it leaves", pytrace=False)


def _deploy(fleet: Fleet, version: str, **extra: Any) -> FleetRun:
    return fleet.play("deploy.yml", profile="baseline", sglang_gpus=[0, 1], sglang_extra_args=VERSIONS[version],
                      **extra)


def _version(pid: int) -> str:
    """Which version a running server is, from its own command line ("" when not running)."""
    line = cmdline(pid)
    if not line:
        return ""
    match = re.search(r"--watchdog-timeout (\S+)", line)
    for name, flags in VERSIONS.items():
        if (match and flags and str(flags["--watchdog-timeout"]) == match[1]) or (not match and not flags):
            return name
    return "?"


def _state(fleet: Fleet) -> dict[str, dict[str, tuple[int, str]]]:
    """host -> instance -> (pid, version of the running process)."""
    return {h.name: {n: (p, _version(p)) for n, p in fleet.pids(h.name).items()} for h in fleet.servers}


def _advertised(fleet: Fleet, names: list[str] | None = None) -> set[str]:
    urls = set()
    for host in fleet.servers:
        if names is None or host.name in names:
            urls |= {i["advertise_url"] for i in fleet.manifest(host.name)["instances"] if i.get("rank0", True)}
    return urls


def _wait_router(fleet: Fleet, expected: set[str], timeout: float = 30) -> set[str]:
    """Poll GET /workers (bounded) until its healthy workers are `expected`; the last seen."""
    deadline = time.monotonic() + timeout
    seen = fleet.healthy_worker_urls()
    while seen != expected and time.monotonic() < deadline:
        time.sleep(0.5)
        seen = fleet.healthy_worker_urls()
    return seen


def _load(fleet: Fleet, requests: int, concurrency: int = 2) -> LoadClient:
    """A short bounded burst through the router, waited for."""
    client = LoadClient(fleet.router_url(), concurrency=concurrency, pause=0.02, max_requests=requests,
                        max_seconds=120).start()
    deadline = time.monotonic() + 150
    while client.running() and time.monotonic() < deadline:
        time.sleep(0.2)
    return client.stop()


def _report(fleet: Fleet, name: str, data: dict[str, Any]) -> Path:
    fleet.reports_dir.mkdir(parents=True, exist_ok=True)
    path = fleet.reports_dir / f"{name}.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def _rollout_lines(out: str) -> list[str]:
    """The TASK lines of the rollout (batches, routers, drain, stop, start, wait) in order."""
    keep = re.compile(r"^(TASK \[.*(Batch|router|in-flight|Stop the instances|Start the batch|Wait until the batch)"
                      r"|PLAY \[)")
    return [line.rstrip(" *") for line in out.splitlines() if keep.search(line)]


def test_1_full_rollout_then_load_through_the_router(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    run = _deploy(fleet, "A")
    assert run.rc == 0, run.out[-5000:]
    for host in [*fleet.servers, *fleet.routers]:
        assert run.host(host.name)["failed"] == 0 and run.host(host.name)["changed"] > 0, (host.name, run.recap)
    state = _state(fleet)
    assert all(v == "A" for inst in state.values() for _, v in inst.values()), state
    expected = _advertised(fleet)
    assert len(expected) == 2 * len(fleet.servers)
    assert _wait_router(fleet, expected) == expected, fleet.router_workers()
    assert fleet.get(fleet.router_url() + "/readiness") == 200

    # bench.yml through the router: every worker swept, then the router with the same level,
    # one report with workers, fleet total and router side by side
    reports = fleet.reports_dir
    bench = fleet.play("bench.yml", sglang_bench_target="router", sglang_bench_reports_dir=str(reports),
                       sglang_bench_run_id="router", **SWEEP)
    assert bench.rc == 0, bench.out[-5000:]
    router_doc = json.loads((reports / "router" / f"{fleet.routers[0].name}_router_baseline.json").read_text())
    point = router_doc["sweep"]["points"][0]
    assert router_doc["meta"]["role"] == "router" and point["ok"] == SWEEP["sglang_bench_requests"], point
    assert point["error_rate"] == 0, point
    views = [row["view"] for row in csv.DictReader((reports / "router" / "fleet.csv").open())]
    assert views.count("worker") == 2 * len(fleet.servers) and views.count("fleet") == 1 and "router" in views, views
    # and a bounded load of our own through the router, counted request by request
    client = _load(fleet, requests=120)
    assert len(client.records) == 120 and client.failures() == [], client.failures()[:5]
    assert sum(r.tokens for r in client.records) > 0
    _report(fleet, "full-rollout", {"deploy_seconds": run.seconds, "load": client.dump()})
    with capsys.disabled():
        print(f"\n[1] deploy.yml (3 hosts x 2 instances + router) {run.seconds:.1f} s; bench.yml through the "
              f"router {bench.seconds:.1f} s; "
              f"{len(client.records)} requests through the router, {len(client.failures())} failed")
    DONE["full"] = True


GENERATE_LINES = 20000


def _job_progress(fleet: Fleet, job: str) -> dict[str, Any]:
    path = fleet.routers[0].base_dir / "generate" / job / "progress.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _wait_done(fleet: Fleet, job: str, at_least: int, started: Any, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (now := _job_progress(fleet, job)).get("done", 0) < at_least:
        assert started[0].poll() is None, f"generate.yml ended early: {started[0].communicate()[0][-3000:]}"
        assert time.monotonic() < deadline, f"the job did not reach {at_least} lines in {timeout} s: {now}"
        time.sleep(0.5)
    return now


def test_1b_generate_through_the_router_a_host_killed_and_restarted_under_it(
        fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    """issue 31's fleet scenario: 3 hosts behind the router, 20,000 lines, server1's instances
    killed mid-run and restarted by deploy.yml: every line once, none failed for good, every
    instance served. The job runs slowly (one request per instance, 256 tokens a line) while
    server1 goes and comes back, then is stopped (generate_action=stop) and resumed at 8 per
    instance, so that the scenario costs about two minutes on a quiet machine."""
    _needs("full")
    dataset = fleet.run_dir / "dataset.jsonl"
    ids = [f"d{i}" for i in range(GENERATE_LINES)]
    # prompts that share no prefix: the router's cache_aware policy sends a prompt to the instance
    # whose tree matches it best, and "line 123" matched "line 12..." on one instance, which then
    # served every line (the job's shares said server3/gpu0 100%) until the load gap passed its
    # --balance-abs-threshold (64), more than the job ever had in flight: server1 was killed idle
    dataset.write_text("".join(json.dumps({"id": i, "prompt": f"{hashlib.sha1(i.encode()).hexdigest()[:8]} line {i}"})
                               + "\n" for i in ids))
    args = {"sglang_generate_input": str(dataset), "sglang_generate_defaults": {"max_tokens": 256},
            "sglang_generate_concurrency": 1, "sglang_generate_poll": 2, "sglang_generate_backoff_s": 0.2,
            "sglang_generate_reports_dir": str(fleet.reports_dir)}
    began = time.monotonic()
    play = fleet.start("generate.yml", **args)
    _wait_done(fleet, "dataset", 2000, play)
    killed_at = _job_progress(fleet, "dataset")["done"]
    before = _state(fleet)
    for pid in fleet.pids("server1").values():  # each instance leads its own process group
        with contextlib.suppress(OSError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
    others = _advertised(fleet, ["server2", "server3"])
    assert _wait_router(fleet, others) == others, fleet.router_workers()
    _wait_done(fleet, "dataset", killed_at + 1000, play)  # the job goes on with the other hosts
    redeploy = _deploy(fleet, "A")
    assert redeploy.rc == 0, redeploy.out[-5000:]
    after = _state(fleet)
    assert all(after["server1"][n][0] != before["server1"][n][0] for n in after["server1"]), (before, after)
    assert after["server2"] == before["server2"] and after["server3"] == before["server3"], (before, after)
    assert _wait_router(fleet, _advertised(fleet)) == _advertised(fleet)
    restarted_at = _job_progress(fleet, "dataset")
    assert restarted_at["state"] == "running" and restarted_at["done"] < GENERATE_LINES, \
        f"the job ended before server1 was back: lengthen it ({restarted_at.get('done')} done)"
    stop = fleet.play("generate.yml", generate_action="stop", sglang_generate_job="dataset",
                      sglang_generate_reports_dir=str(fleet.reports_dir))
    assert stop.rc == 0 and "(stopped now)" in stop.out, stop.out[-3000:]
    first = fleet.finish(play, timeout=120)  # its wait saw the job stop
    assert first.rc == 0 and _job_progress(fleet, "dataset")["state"] == "stopped", first.out[-3000:]
    run = fleet.play("generate.yml", timeout=900, **{**args, "sglang_generate_concurrency": 8})
    assert run.rc == 0, run.out[-5000:]
    folder = fleet.routers[0].base_dir / "generate" / "dataset"
    counts: dict[str, int] = {}
    for f in [*sorted(folder.glob("results-*.jsonl")), *sorted(folder.glob("errors.jsonl"))]:
        for raw in f.read_text().splitlines():
            ident = json.loads(raw)["custom_id"]
            counts[ident] = counts.get(ident, 0) + 1
    assert counts == dict.fromkeys(ids, 1), "not every line exactly once"
    # the slow run: every instance served (the router spread the lines), server1's killed under it
    behind = json.loads((folder / "runs.jsonl").read_text().splitlines()[0])["instances"]
    assert all(i["completion_tokens"] > 0 for i in behind.values()) and len(behind) == 6, behind
    assert all(behind[f"server1/{n}"]["restarts"] >= 1 for n in ("gpu0", "gpu1")), behind
    summary = json.loads((fleet.reports_dir / "generate" / "dataset" / "summary.json").read_text())
    assert summary["state"] == "finished" and summary["errors"] == 0, summary
    log = (folder / "job.log").read_text()
    assert log.count(" INFO run ") == 2 and "stopped by SIGTERM" in log  # the slow run, then the resumed one
    _report(fleet, "generate", {"seconds": round(time.monotonic() - began, 1), "killed_at": killed_at,
                                "restarted_at": restarted_at["done"], "redeploy_seconds": redeploy.seconds,
                                "resumed_seconds": run.seconds, "summary": summary})
    with capsys.disabled():
        print(f"\n[1b] generate.yml through the router: {GENERATE_LINES} lines in {time.monotonic() - began:.1f} s, "
              f"server1's instances killed at line {killed_at}, back (deploy.yml {redeploy.seconds:.1f} s) at line "
              f"{restarted_at['done']}, stopped and resumed at 8 per instance ({run.seconds:.1f} s, "
              f"{summary['this_run']['lines_s']} lines/s); {summary['errors']} failed")
    DONE["generate"] = True


def _rolled_under_load(fleet: Fleet, capsys: pytest.CaptureFixture[str], title: str, report: str,
                       **extra: Any) -> tuple[FleetRun, LoadClient, dict[str, Any], bool]:
    """deploy.yml of version B under steady load through the router (4 s of it before and after):
    (the run, the stopped client, its phases, whether it ran throughout), printed and reported."""
    client = LoadClient(fleet.router_url(), concurrency=2, pause=0.05, max_seconds=540).start()
    time.sleep(4)
    client.mark("rollout start")
    run = _deploy(fleet, "B", **extra)
    client.mark("rollout end")
    time.sleep(4)
    ran_throughout = client.running()  # not stopped by its own bounds before the rollout ended
    client.stop()
    phases = client.phases("rollout start", "rollout end")
    path = _report(fleet, report, {"deploy_seconds": run.seconds, "phases": phases,
                                   "longest_gap_s": round(client.longest_gap(), 2), **client.dump()})
    with capsys.disabled():
        print(f"\n{title} under load: deploy.yml {run.seconds:.1f} s; {len(client.records)} requests, "
              f"{len(client.failures())} failed; longest gap between completions {client.longest_gap():.2f} s; "
              f"report {path}")
        for name, row in phases.items():
            print(f"    {name:6s} {row['seconds']:6.1f} s  ok {row['ok']:5d}  failed {row['failed']}  "
                  f"{row['req_s']:6.2f} req/s  {row['tok_s']:7.1f} tok/s")
        print("    per second (req/s): " + " ".join(str(b["ok"]) for b in client.buckets()))
    return run, client, phases, ran_throughout


def test_2_rolling_update_under_load_fails_no_request(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    _needs("full")
    before = _state(fleet)
    run, client, phases, ran_throughout = _rolled_under_load(fleet, capsys, "[2] rolling update A -> B (batch 1)",
                                                             "rolling-update", sglang_rollout_batch=1)
    assert run.rc == 0, run.out[-5000:]
    assert client.failures() == [], client.failures()[:5]
    assert ran_throughout and all(phases[p]["ok"] > 0 for p in phases), phases
    after = _state(fleet)
    for host, insts in after.items():
        for name, (pid, version) in insts.items():
            assert version == "B" and pid != before[host][name][0], (host, name, before[host][name], (pid, version))
    assert _wait_router(fleet, _advertised(fleet)) == _advertised(fleet)
    DONE["rolling"] = True


def test_3_engine_that_cannot_start_stops_the_rollout(fleet: Fleet) -> None:
    _needs("rolling")
    before = _state(fleet)
    fleet.set_hostvars("server2", sglang_env=BROKEN_ENV)
    run = _deploy(fleet, "C", sglang_rollout_batch=1, sglang_rollout_max_fail_percent=0)
    assert run.rc != 0, run.out[-5000:]
    assert run.host("server1")["failed"] == 0 and run.host("server2")["failed"] == 1, run.recap
    assert "LLMOPS_SIM_HOST_MEM_AVAILABLE_GB" in run.out, run.out[-5000:]  # the failed engine's log tail
    after = _state(fleet)
    # done: the new version; not reached: the old one, same processes
    assert {v for _, v in after["server1"].values()} == {"C"}, after
    assert after["server3"] == before["server3"], (before, after)
    # the failed host: the instance tried is down, the next one was not touched
    s2 = after["server2"]
    down = [n for n, (_, v) in s2.items() if v == ""]
    assert len(down) == 1 and all(s2[n] == before["server2"][n] for n in s2 if n not in down), (before, s2)
    healthy = _advertised(fleet) - {i["advertise_url"] for i in fleet.manifest("server2")["instances"]
                                    if i["name"] in down}
    assert _wait_router(fleet, healthy) == healthy, fleet.router_workers()
    assert len(fleet.router_workers()) == len(healthy)  # the down one is not listed at all
    client = _load(fleet, requests=60)
    assert client.failures() == [] and len(client.records) == 60, client.failures()[:5]
    DONE["broken"] = True


def test_5_rerun_after_the_fix_converges(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    _needs("broken")
    before = _state(fleet)
    fleet.set_hostvars("server2", sglang_env=None)
    run = _deploy(fleet, "C", sglang_rollout_batch=1, sglang_rollout_max_fail_percent=0)
    assert run.rc == 0, run.out[-5000:]
    assert run.host("server1")["changed"] == 0 and run.host("router1")["changed"] == 0, run.recap
    assert run.host("server2")["changed"] > 0 and run.host("server3")["changed"] > 0, run.recap
    after = _state(fleet)
    assert after["server1"] == before["server1"], (before, after)   # healthy: not restarted
    assert all(v == "C" for inst in after.values() for _, v in inst.values()), after
    assert _wait_router(fleet, _advertised(fleet)) == _advertised(fleet)
    with capsys.disabled():
        print(f"\n[5] re-run after the fix: {run.seconds:.1f} s; recap {run.recap}")
    DONE["fixed"] = True


def test_4_unreachable_host_is_reported_and_the_rest_rolls_on(fleet: Fleet) -> None:
    _needs("fixed")
    before = _state(fleet)
    fleet.stop_sshd("server3")
    run = _deploy(fleet, "D", sglang_rollout_max_fail_percent=34)
    assert run.host("server3")["unreachable"] == 1, (run.recap, run.out[-5000:])
    # the routers' play fails rather than drop the workers of a host it could not read
    assert run.rc != 0 and "the deployment of server3 was not read" in run.out, run.out[-5000:]
    for name in ("server1", "server2"):
        assert run.host(name)["failed"] == 0 and run.host(name)["changed"] > 0, (run.recap, run.out[-5000:])
    after = _state(fleet)
    assert all(v == "D" for name in ("server1", "server2") for _, v in after[name].values()), after
    assert after["server3"] == before["server3"]  # its servers still run (only sshd is down)
    expected = _advertised(fleet)
    assert _wait_router(fleet, expected) == expected, fleet.router_workers()
    client = _load(fleet, requests=60)
    assert client.failures() == [], client.failures()[:5]
    fleet.start_sshd("server3")
    DONE["unreachable"] = True


def test_6_two_host_tp_group(fleet: Fleet) -> None:
    fleet.reset()
    fleet.set_groups("server3", [])     # a smaller fleet: server1 + server2 = one TP group
    for name in ("server1", "server2"):
        fleet.set_groups(name, ["sglang_servers", "tp_pair"])
    fleet.set_hostvars(["server1", "server2"], sglang_tp_group="tp_pair", sglang_tp_size=4)
    run = fleet.play("deploy.yml", profile="baseline")
    assert run.rc == 0, run.out[-3000:] + _logs(fleet, "server1") + _logs(fleet, "server2")
    (rank0,) = fleet.manifest("server1")["instances"]
    (rank1,) = fleet.manifest("server2")["instances"]
    assert (rank0["rank0"], rank1["rank0"]) == (True, False), (rank0, rank1)
    assert "--node-rank 1" in cmdline(rank1["pid"]) and f"--dist-init-addr {fleet.address('server1')}:" in \
        cmdline(rank1["pid"])
    assert [w["url"].rstrip("/") for w in fleet.router_workers()] == [rank0["advertise_url"]]
    client = _load(fleet, requests=20, concurrency=1)
    assert client.failures() == [] and len(client.records) == 20, client.failures()[:5]

    stop = fleet.play("stop.yml")
    assert stop.rc == 0, stop.out[-5000:]
    first = stop.out.index("Stop the instances that serve the API first")
    then = stop.out.index("Then the other ranks")
    assert stop.out.index("changed: [server1]", first) < then, stop.out[first:then + 2000]
    # rank 1 never had to wait for rank 0's shutdown (as it would had it been signalled first)
    logs = "".join(p.read_text(errors="replace") for p in fleet.hosts["server2"].base_dir.glob("**/*.log"))
    assert logs and "SIGTERM received on node_rank 1" not in logs, logs[-3000:]
    assert fleet.server_processes() == {} or _settle(fleet)


def test_7_prefill_and_decode_rolled_under_load_fail_no_request(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    """issue 32's fleet scenario: server1 and server2 each split into a prefill and a decode
    (sglang_pd, server3 out), the real router in PD mode pairing them across hosts; a rolling update
    (one host at a time, each host one side at a time, decodes first) under steady load fails no
    request: while a host's decode restarts the other host's decode takes its requests with KV from
    either prefill, over the hosts' network."""
    fleet.reset()
    fleet.set_groups("server3", [])
    fleet.set_hostvars(["server1", "server2"], sglang_pd={"role": ["prefill", "decode"]})
    first = _deploy(fleet, "A", sglang_router_pd_disaggregation=True)
    assert first.rc == 0, first.out[-5000:] + _logs(fleet, "server1")
    sides = sorted((w["worker_type"], w["url"].split("//")[1].split(":")[0]) for w in fleet.router_workers())
    assert sides == sorted((side, fleet.address(h)) for h in ("server1", "server2") for side in ("prefill", "decode"))
    before = {h: fleet.pids(h) for h in ("server1", "server2")}
    run, client, phases, ran_throughout = _rolled_under_load(
        fleet, capsys, "[7] PD rolling update A -> B (2 hosts x [prefill, decode], batch 1)", "pd-rolling-update",
        sglang_rollout_batch=1, sglang_router_pd_disaggregation=True)
    assert run.rc == 0, run.out[-5000:]
    assert client.failures() == [], client.failures()[:5]
    assert ran_throughout and all(phases[p]["ok"] > 0 for p in phases), phases
    for host in ("server1", "server2"):
        for name, pid in fleet.pids(host).items():
            assert _version(pid) == "B" and pid != before[host][name], (host, name)
    for host in ("server1", "server2"):
        failed = [line for line in fleet.http_get(host, f"http://{fleet.address(host)}:{DEFAULT_PORT + 1}/metrics")[1]
                  .splitlines() if line.startswith("sglang:num_bootstrap_failed_reqs_total")]
        assert failed and failed[0].endswith(" 0.0"), (host, failed)


def _logs(fleet: Fleet, name: str, lines: int = 40) -> str:
    """The last lines of every server log of a host (for an assertion message)."""
    out = ""
    for path in sorted(fleet.hosts[name].base_dir.glob("*/*.log")):
        out += f"\n--- {path}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return out


def _settle(fleet: Fleet, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while fleet.server_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    return not fleet.server_processes()


@pytest.mark.skipif(not os.environ.get("FLEET_MEASURE"), reason="FLEET_MEASURE=1: docs/PERFORMANCE.md numbers")
def test_measure_rollout_by_batch_size(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    """Rollout wall time of 3 hosts x 2 instances by sglang_rollout_batch, and a no-change re-run."""
    fleet.reset()
    first = _deploy(fleet, "A")
    assert first.rc == 0, first.out[-3000:]
    times = {"first deploy (batch 100%)": first.seconds}
    for batch, version in ((1, "B"), (2, "C"), (3, "D")):
        run = _deploy(fleet, version, sglang_rollout_batch=batch)
        assert run.rc == 0, run.out[-3000:]
        times[f"rolling update, batch {batch}"] = run.seconds
    again = _deploy(fleet, "D")
    assert again.rc == 0 and all(r["changed"] == 0 for r in again.recap.values()), again.recap
    times["no-change re-run"] = again.seconds
    _report(fleet, "rollout-times", times)
    with capsys.disabled():
        print("\nrollout wall time, 3 hosts x 2 instances + router:")
        for what, seconds in times.items():
            print(f"  {seconds:7.1f} s  {what}")
