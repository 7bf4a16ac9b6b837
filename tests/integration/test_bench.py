"""bench.yml end to end: compare two profiles, then sweep what is deployed; facts and reports."""
from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from tests.procs import client_pids

from .conftest import Deployment, Run, cleanup, group_members, make_inventory

# Slow requests (long levels) but not a slow start: the engine's start-up at the fast scale
# (LLMOPS_SIM_STARTUP_SCALE, docs/engine-api.md), so a deploy does not wait for a load modelled
# at the requests' pace (the mtp deploy at time scale 0.25 took 60 s of a 92 s test).
FAST_START = {"sglang_env": {"LLMOPS_SIM_STARTUP_SCALE": "0.005"}}

pytestmark = pytest.mark.integration

SMALL = {"sglang_bench_concurrency": [1, 4], "sglang_bench_max_tokens": 64, "sglang_gpus": [0]}


def test_compare_then_bench_writes_reports_and_cached_facts(deployment: Deployment, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    deployment.fact_cache = tmp_path / "facts"
    extra = dict(SMALL, sglang_bench_reports_dir=str(reports))
    run = deployment.play("bench.yml", compare="baseline,mtp", **extra)
    assert run.rc == 0, run.out[-4000:]
    latest = reports / "latest"
    assert latest.is_symlink()
    folder = latest.resolve()
    names = {p.name for p in folder.iterdir()}
    assert {"summary.md", "summary.csv", "throughput.png", "latency.png", "profiles.png"} <= names
    assert {"localhost_gpu0_baseline.json", "localhost_gpu0_mtp.json"} <= names
    rows = list(csv.DictReader((folder / "summary.csv").open()))
    assert {(r["profile"], r["concurrency"]) for r in rows} == {
        ("baseline", "1"), ("baseline", "4"), ("mtp", "1"), ("mtp", "4")}
    assert all(r["err"] == "0" for r in rows)
    one = json.loads((folder / "localhost_gpu0_mtp.json").read_text())
    sweep = one["sweep"]
    assert sweep["time_base"] == "model" and sweep["server"]["time_scale"] == 0.005
    assert [p["concurrency"] for p in sweep["points"]] == [1, 4]
    assert all(p["output_tokens"] == p["requests"] * 64 for p in sweep["points"])
    assert len(sweep["records"]) == sum(p["requests"] for p in sweep["points"])
    # the table is printed at the end of the play
    assert "| C | n | ok | err | output tok/s |" in run.out and "profiles.png" in run.out
    assert deployment.manifest()["profile"] == "mtp"

    # plain bench of what is deployed: facts come back and are cached for later plays
    again = deployment.play("bench.yml", "-e", json.dumps({"sglang_bench_run_id": "rerun"}),
                            **dict(extra, sglang_bench_concurrency=[2]))
    assert again.rc == 0, again.out[-4000:]
    assert (reports / "latest").resolve().name == "rerun"
    assert folder.exists()  # earlier reports are kept
    data = json.loads((reports / "rerun" / "localhost_gpu0_mtp.json").read_text())
    assert data["sweep"]["points"][0]["concurrency"] == 2

    # a later, separate command sees the cached facts
    shown = deployment.adhoc("localhost", "-m", "ansible.builtin.debug", "-a", "var=sglang_sweeps")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert '"gpu0"' in shown.stdout or "gpu0:" in shown.stdout, shown.stdout[-2000:]
    assert "output_tok_s" in shown.stdout

    # the async path (instances of a host swept at the same time) and a controller-side client
    par = deployment.play("bench.yml", **dict(extra, sglang_bench_concurrency=[1], sglang_bench_run_id="par",
                                              sglang_bench_parallel_instances=True, sglang_bench_run_on="controller"))
    assert par.rc == 0, par.out[-4000:]
    assert par.recap["localhost"]["changed"] == 1  # the report only; sweeps change nothing
    assert (reports / "par" / "localhost_gpu0_mtp.json").exists()


def test_wildcard_bind_is_reached_on_loopback_by_status_and_bench(tmp_path: Path) -> None:
    """Servers bound to 0.0.0.0: the manifest hands local clients a loopback URL (never
    http://0.0.0.0:PORT), other hosts the inventory address; status and bench reach them."""
    from .conftest import cleanup, make_inventory

    dep = make_inventory(tmp_path, sglang_host_address="0.0.0.0", ansible_host="127.0.0.1", sglang_gpus=[0])
    try:
        run = dep.play("deploy.yml", profile="baseline")
        assert run.rc == 0, run.out[-4000:]
        inst = dep.manifest()["instances"][0]
        port = dep.extra["sglang_base_port"]
        assert inst["connect_url"] == f"http://127.0.0.1:{port}"
        assert inst["advertise_url"] == f"http://127.0.0.1:{port}"
        assert "0.0.0.0" in inst["argv"]  # it does listen on every address
        status = dep.play("status.yml")
        assert status.rc == 0 and f"gpu0: up http://127.0.0.1:{port}" in status.out, status.out[-2000:]
        bench = dep.play("bench.yml", sglang_bench_concurrency=[1], sglang_bench_requests=2,
                         sglang_bench_max_tokens=8, sglang_bench_reports_dir=str(tmp_path / "reports"))
        assert bench.rc == 0, bench.out[-3000:]
        data = json.loads(next((tmp_path / "reports" / "latest").glob("localhost_gpu0_*.json")).read_text())
        assert data["sweep"]["points"][0]["ok"] == 2 and data["meta"]["url"] == f"http://127.0.0.1:{port}"
    finally:
        cleanup(dep)


def _metric(url: str, name: str) -> float:
    """The sum of a metric's series on the server's /metrics (0 when unreachable)."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(f"sglang:{name}{{") or line.startswith(f"sglang:{name} "))


def _wait_for(predicate, seconds: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def _kill_group(pgid: int) -> None:
    os.killpg(pgid, signal.SIGKILL)
    _wait_for(lambda: not group_members(pgid), 10.0)


# A sweep the test can catch in its middle: C=1 runs 8 requests of 512 tokens after a level
# warm-up of 8 short ones (and the initial warm-up request), each a few tenths of a second at
# time scale 0.05.
FAULT = {"sglang_bench_concurrency": [1, 4], "sglang_bench_max_tokens": 512}


def _bench_killing_gpu1(dep: Deployment, reports: Path, **extra) -> tuple[Run, dict]:
    """bench.yml, SIGKILL to gpu1's process group once its measured C=1 level has begun."""
    pids, urls = dep.pids(), {i["name"]: i["connect_url"] for i in dep.manifest()["instances"]}
    proc = dep.start("bench.yml", **FAULT, sglang_bench_reports_dir=str(reports), **extra)
    try:
        # the deploy's warm-up (sglang_ready_warmup), the bench's warm-up + 8 level warm-up requests
        # done, and 2 measured ones
        # a bound against a hang, not a timing: .ci/run runs its playbook stages side by side
        assert _wait_for(lambda: _metric(urls["gpu1"], "num_requests_total") >= 12, 600.0), "gpu1 never swept"
        _kill_group(pids["gpu1"])
    finally:
        run = dep.finish(proc)
    return run, urls


def test_an_instance_killed_mid_bench_is_reported_and_fails_the_play_only_when_asked(tmp_path: Path) -> None:
    """The deployment has an API key (benched without sglang_bench_api_key); gpu1 is killed while
    it is swept: the play goes on, warns, writes the report with gpu1's levels marked; with
    sglang_bench_fail_on_errors it writes the same report and then fails, naming gpu1."""
    dep = make_inventory(tmp_path, sglang_gpus=[0, 1], sglang_api_key="s3cret", sglang_sim_time_scale=0.05, **FAST_START)
    try:
        assert dep.play("deploy.yml", profile="baseline").rc == 0
        reports = tmp_path / "reports"
        run, _ = _bench_killing_gpu1(dep, reports, sglang_bench_run_id="warn")
        assert run.rc == 0, run.out[-4000:]
        assert "requests failed at C=" in run.out and "localhost/gpu1 (baseline): C=" in run.out  # warnings
        folder = reports / "warn"
        gpu0 = json.loads((folder / "localhost_gpu0_baseline.json").read_text())["sweep"]
        gpu1 = json.loads((folder / "localhost_gpu1_baseline.json").read_text())["sweep"]
        assert [p["status"] for p in gpu0["points"]] == ["ok", "ok"] and gpu0["peak"] is not None
        assert gpu0["options"]["api_key_set"] is True  # the deployment's key, sglang_api_key
        assert [p["status"] for p in gpu1["points"]] == ["errors", "no_requests_ok"], gpu1["points"]
        assert gpu1["levels_with_errors"] == [1, 4] and gpu1["peak"] is None and gpu1["knee"] is None
        assert not any(p["client_limited"] for p in gpu1["points"])
        assert gpu1["points"][0]["ok"] >= 1 and gpu1["points"][1]["errors"]["connection"] >= 1
        md = (folder / "summary.md").read_text()
        assert "| 1! |" in md and "| 4! |" in md and "Peak: none (no level ran without failed requests)" in md
        rows = list(csv.DictReader((folder / "summary.csv").open()))
        assert {(r["instance"], r["status"]) for r in rows} == {
            ("gpu0", "ok"), ("gpu1", "errors"), ("gpu1", "no_requests_ok")}

        # gpu1 back (deploy restarts what is down), killed again, this time failing the play
        assert dep.play("deploy.yml", profile="baseline").rc == 0
        run, _ = _bench_killing_gpu1(dep, reports, sglang_bench_run_id="fail", sglang_bench_fail_on_errors=True)
        assert run.rc == 2, run.out[-4000:]
        assert run.recap["localhost"]["failed"] == 1
        assert "requests failed on localhost: localhost/gpu1 (baseline): C=1 (" in run.out
        assert "sglang_bench_fail_on_errors is set" in run.out
        # the report came first, complete
        names = {p.name for p in (reports / "fail").iterdir()}
        assert {"localhost_gpu0_baseline.json", "localhost_gpu1_baseline.json", "summary.md", "summary.csv"} <= names
        assert (reports / "latest").resolve().name == "fail"
    finally:
        cleanup(dep)


def test_ctrl_c_stops_parallel_sweeps_at_once(tmp_path: Path) -> None:
    """SIGINT to ansible-playbook's process group (Ctrl-C) while two instances are swept in
    parallel (async jobs, daemonized by async_wrapper): within a few seconds nothing talks to
    either server. Before watch_pid these jobs went on to the end of their sweep."""
    dep = make_inventory(tmp_path, sglang_gpus=[0, 1], sglang_sim_time_scale=0.05, **FAST_START)
    proc = None
    ports: list[int] = []
    try:
        assert dep.play("deploy.yml", profile="baseline").rc == 0
        urls = [i["connect_url"] for i in dep.manifest()["instances"]]
        ports = [int(u.rsplit(":", 1)[1]) for u in urls]
        proc = dep.start("bench.yml", sglang_bench_parallel_instances=True, sglang_bench_concurrency=[4],
                         sglang_bench_requests=400, sglang_bench_max_tokens=1024, sglang_bench_level_warmup=False,
                         sglang_bench_reports_dir=str(tmp_path / "reports"))
        assert _wait_for(lambda: all(_metric(u, "num_running_reqs") >= 4 for u in urls), 600.0), "no sweep ran"
        os.killpg(proc.pid, signal.SIGINT)
        interrupted = time.monotonic()
        run = dep.finish(proc, timeout=60)
        assert run.rc != 0 and "User interrupted execution" in run.out, run.out[-3000:]
        assert _wait_for(lambda: not any(client_pids(p) for p in ports), 120.0), [client_pids(p) for p in ports]
        assert _wait_for(lambda: all(_metric(u, "num_running_reqs") == 0 for u in urls), 120.0)
        # stopped at once, in the servers' own terms (load slows the stop, it cannot make the
        # servers finish requests that were never sent): far from the 400 requests a level would
        # have run, and nothing more arrives; the wall bound only guards against a hang
        done = [_metric(u, "num_requests_total") for u in urls]
        assert all(n < 100 for n in done), done
        time.sleep(1.0)
        assert [_metric(u, "num_requests_total") for u in urls] == done
        assert time.monotonic() - interrupted < 90.0
        # interrupted before any report (a level that had finished would have left its progress line)
        assert not list((tmp_path / "reports").glob("*/summary.md"))
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for port in ports:
            for pid in client_pids(port):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        cleanup(dep)


def test_progress_jsonl_grows_while_the_sweep_runs_and_the_play_prints_each_level(tmp_path: Path) -> None:
    """bench.yml of three levels: reports/<run id>/progress.jsonl gains a line per finished level
    DURING the run (seen by polling it while ansible-playbook runs), the play output shows each
    level as it lands, and the report has the server's own view of every level."""
    import threading

    # Levels of 10-20 wall seconds each (32 requests of 256 tokens at time scale 0.25; the
    # engine's sleeps set them, so a busy machine does not shorten them): longer than one look of
    # sweep_wait (two module runs) even on a loaded machine. At time scale 0.05 (2-4 s levels)
    # all three levels landed between two looks in a .ci/run beside other jobs (load average
    # 7-15 on 2 cores), and the file went from 0 to 3 lines at once.
    dep = make_inventory(tmp_path, sglang_gpus=[0], sglang_sim_time_scale=0.25, **FAST_START)
    reports = tmp_path / "reports"
    progress = reports / "watch" / "progress.jsonl"
    proc = None
    try:
        assert dep.play("deploy.yml", profile="mtp").rc == 0
        proc = dep.start("bench.yml", sglang_bench_concurrency=[1, 2, 4], sglang_bench_max_tokens=256,
                         sglang_bench_requests=32, sglang_bench_run_id="watch", sglang_bench_progress_poll=0.2,
                         sglang_bench_reports_dir=str(reports))
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
        reader.start()
        counts: list[int] = []
        deadline = time.monotonic() + 480.0
        while proc.poll() is None and time.monotonic() < deadline:  # bounded: one look per 0.1 s
            counts.append(len(progress.read_text().splitlines()) if progress.exists() else 0)
            time.sleep(0.1)
        proc.wait(timeout=60)
        reader.join(timeout=10)
        text = "".join(out)
        assert proc.returncode == 0, text[-4000:]
        lines = [json.loads(line) for line in progress.read_text().splitlines()]
        assert [line["concurrency"] for line in lines] == [1, 2, 4]
        # the file grew while ansible-playbook ran: a level landed while others were still to come
        assert any(0 < n < len(lines) for n in counts), counts
        for line in lines:
            assert (line["host"], line["instance"], line["profile"], line["status"]) == ("localhost", "gpu0", "mtp", "ok")
            assert line["output_tok_s"] > 0 and line["ttft_ms_p50"] > 0 and line["errors"] == 0
            assert line["time_base"] == "model"
        for c in (1, 2, 4):
            assert f"sweep progress: localhost gpu0 (mtp) [modelled time] C={c}: " in text, text[-3000:]
        # the report: the server's view of each level, beside the client's figures
        summary = (reports / "watch" / "summary.md").read_text()
        assert "Server during each level" in summary
        sweep = json.loads((reports / "watch" / "localhost_gpu0_mtp.json").read_text())["sweep"]
        for point in sweep["points"]:
            metrics = point["server_metrics"]
            assert metrics["running_max"] <= point["concurrency"] and metrics["spec_accept_length"] > 1
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        cleanup(dep)


def _job_result(heartbeat_file: str, seconds: float) -> dict:
    """The final result of the async sweep job given ``heartbeat_file`` (found in the async
    folder by its invocation), or {} when none came within ``seconds``."""
    folder = Path(os.environ.get("ANSIBLE_ASYNC_DIR") or Path.home() / ".ansible_async")
    found: dict = {}

    def look() -> bool:
        for path in folder.glob("*"):
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(path.read_text())
                args = (data.get("invocation") or {}).get("module_args") or {}
                if args.get("heartbeat_file") == heartbeat_file and "msg" in data:
                    found.update(data)
                    return True
        return False

    _wait_for(look, seconds, step=0.2)
    return found


@pytest.mark.e2e
def test_a_remote_sweep_stops_when_its_controller_is_killed(tmp_path: Path) -> None:
    """The sweep made to act as on a remote host (no watch_pid: sglang_bench_watch_controller=false,
    throughput_sweep's watch_controller) with the shortest heartbeat timeout the role computes by
    default (30 s); once its first level has landed, SIGKILL to ansible-playbook alone (its worker,
    polling, is left orphaned). No signal reaches the async job: it stops because nobody refreshes
    its heartbeat any more, before its 75 s level would end; the level finished before stays in its
    progress file, and its result says why it stopped. (An 8 s timeout failed runs A1 and B1 of
    .ci/run: on the loaded machine the controller's looks, each refreshing the heartbeat, came
    more than 8 s apart, and the sweep stopped itself before its first level ended.)"""
    dep = make_inventory(tmp_path, sglang_gpus=[0], sglang_sim_time_scale=0.05, **FAST_START)
    proc = None
    port = 0
    host_progress: list[Path] = []
    try:
        assert dep.play("deploy.yml", profile="baseline").rc == 0
        url = dep.manifest()["instances"][0]["connect_url"]
        port = int(url.rsplit(":", 1)[1])
        proc = dep.start("bench.yml", sglang_bench_concurrency=[1, 4], sglang_bench_duration=75,
                         sglang_bench_max_tokens=256, sglang_bench_level_warmup=False, sglang_bench_progress_poll=0.5,
                         sglang_bench_reports_dir=str(tmp_path / "reports"),
                         sglang_bench_watch_controller=False, sglang_bench_heartbeat_limit=30)
        pattern = f"llmops-sglang-sweep-*-{proc.pid}-localhost-gpu0.jsonl"

        def first_level_landed() -> bool:
            host_progress[:] = list(Path("/tmp").glob(pattern))
            return bool(host_progress) and len(host_progress[0].read_text().splitlines()) >= 1

        # a bound against a hang, not a timing: the bench's start and a 75 s level
        assert _wait_for(first_level_landed, 900.0, step=0.2), "no level finished"
        assert client_pids(port), "the sweep should be running its C=4 level"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        # the heartbeat timeout (30 s) and a few polls of the watcher; what proves that the heartbeat
        # stopped the level (not its own end) is the result below: its reason, 1 level finished, no C=4 line
        assert _wait_for(lambda: not client_pids(port), 120.0), client_pids(port)
        assert _wait_for(lambda: _metric(url, "num_running_reqs") == 0, 60.0)
        heartbeat = str(host_progress[0]).replace(".jsonl", ".heartbeat")
        result = _job_result(heartbeat, 120.0)
        assert result.get("failed") is True and "no heartbeat from the controller" in result["msg"], result
        assert "during C=4; levels finished: 1" in result["msg"]
        lines = [json.loads(line) for line in host_progress[0].read_text().splitlines()]
        assert [(line["concurrency"], line["status"]) for line in lines] == [(1, "ok")]
        assert not Path(heartbeat).exists()  # removed by the sweep
    finally:
        if proc is not None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)  # the orphaned worker too
            proc.wait(timeout=10)
        for pid in client_pids(port) if port else []:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for path in host_progress:
            path.unlink(missing_ok=True)
        cleanup(dep)
