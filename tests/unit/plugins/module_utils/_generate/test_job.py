"""The job on its host (job.py with runner.py and store.py) against a fake server: outcomes,
retries, targets that go down, stops and kills, the checks before sending."""
from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._generate import job, runner
from ansible_collections.llmops.sglang.plugins.module_utils._generate import store as st

from .....ports import free_port
from .fakeserver import FakeServer, write_input

ROOT = Path(__file__).resolve().parents[5]


def settings(tmp_path: Path, *targets: runner.Target, **kw) -> runner.Settings:
    base = {"backoff_s": 0.01, "backoff_max_s": 0.05, "progress_interval_s": 0.05, "flush_s": 0.02}
    return runner.Settings(folder=str(tmp_path / "job"), input=str(tmp_path / "in.jsonl"), targets=targets,
                           total=0, **{**base, **kw})


def lines(folder: Path) -> dict[str, list[dict]]:
    """Every output line by custom_id, over the shards and the errors file."""
    out: dict[str, list[dict]] = {}
    for f in sorted(folder.glob("results-*.jsonl")) + sorted(folder.glob("errors.jsonl")):
        for raw in f.read_text().splitlines():
            obj = json.loads(raw)
            out.setdefault(obj["custom_id"], []).append(obj)
    return out


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # a port nothing listens on: refused


def test_every_request_once_in_the_batch_output_format_with_its_usage(tmp_path: Path, server: FakeServer) -> None:
    ids = write_input(tmp_path / "in.jsonl", 120)
    report = job.run(settings(tmp_path, runner.Target("a", server.url, 8), shard_lines=50), job_name="t")
    out = lines(tmp_path / "job")
    assert report["state"] == "finished" and sorted(out) == sorted(ids) and all(len(v) == 1 for v in out.values())
    assert report["done"] == report["ok"] == report["total"] == 120 and report["pending"] == 0
    first = out["r0"][0]  # a chat line: its body as the server answered
    assert first["response"]["status_code"] == 200 and first["response"]["body"]["usage"]["prompt_tokens"] == 2
    assert first["id"].startswith("batch_req_") and first["error"] is None and first["attempts"] == 1
    assert report["completion_tokens"] == sum(server.bodies[i].get("max_tokens", 4) for i in ids)
    assert report["files"]["results"] == ["results-00000.jsonl", "results-00001.jsonl", "results-00002.jsonl"]
    assert set(server.seen.values()) == {1}
    assert job.status(str(tmp_path / "job"))["state"] == "finished"
    assert json.loads((tmp_path / "job" / "runs.jsonl").read_text())["done"] == 120


def test_a_4xx_fails_at_once_a_503_is_tried_again_and_a_lasting_503_fails_after_max_attempts(tmp_path: Path) -> None:
    srv = FakeServer(fail={"r1": 400, "r2": 503}, flaky={"r4"}, flaky_times=2).start()
    try:
        write_input(tmp_path / "in.jsonl", 6, chat_every=0)
        report = job.run(settings(tmp_path, runner.Target("a", srv.url, 4), max_attempts=3))
    finally:
        srv.stop()
    out = lines(tmp_path / "job")
    assert report["state"] == "finished" and report["errors"] == 2 and report["ok"] == 4
    assert out["r1"][0]["attempts"] == 1 and out["r1"][0]["error"]["message"] == "HTTP 400: no r1"
    assert out["r2"][0]["attempts"] == 3 and "(after 3 attempts)" in out["r2"][0]["error"]["message"]
    assert out["r4"][0]["attempts"] == 3 and out["r4"][0]["error"] is None
    assert srv.seen["r1"] == 1 and srv.seen["r2"] == 3 and srv.seen["r4"] == 3
    log = (tmp_path / "job" / "job.log").read_text()
    assert "r2 failed for good on a: HTTP 503" in log and "r4 on a: HTTP 503: busy; attempt 2 of 3" in log


def test_a_body_without_a_model_gets_the_one_the_target_serves_and_one_with_a_model_keeps_it(tmp_path: Path) -> None:
    srv = FakeServer(model="served").start()  # refuses a body without a model, as sglang-router does (422)
    try:
        (tmp_path / "in.jsonl").write_text('{"id": "a", "prompt": "a"}\n{"id": "b", "prompt": "b", "model": "mine"}\n')
        report = job.run(settings(tmp_path, runner.Target("router", srv.url, 2)))
    finally:
        srv.stop()
    assert report["state"] == "finished" and report["ok"] == 2
    assert srv.bodies["a"]["model"] == "served" and srv.bodies["b"]["model"] == "mine"
    assert "models: router=served" in (tmp_path / "job" / "job.log").read_text()


def test_through_a_router_the_instances_counters_give_each_ones_share(tmp_path: Path) -> None:
    busy, idle = FakeServer().start(), FakeServer().start()
    busy.tokens = [100, 1000]  # served before the job: not the job's
    try:
        write_input(tmp_path / "in.jsonl", 40, chat_every=0)
        report = job.run(settings(tmp_path, runner.Target("router", busy.url, 4), instances=(
            {"name": "h/busy", "url": busy.url}, {"name": "h/idle", "url": idle.url},
            {"name": "h/gone", "url": dead_url()})))
    finally:
        busy.stop()
        idle.stop()
    shares = report["instances"]
    assert shares["h/busy"]["completion_tokens"] == report["completion_tokens"] == 160 and shares["h/busy"]["share"] == 1.0
    assert shares["h/idle"] == {"prompt_tokens": 0, "completion_tokens": 0, "share": 0.0, "up": True, "restarts": 0}
    assert shares["h/gone"]["up"] is False


def test_a_cause_every_request_meets_stops_the_run_and_retry_errors_sends_them_again(tmp_path: Path) -> None:
    ids = write_input(tmp_path / "in.jsonl", 300, chat_every=0)
    srv = FakeServer(fail={i: 422 for i in ids}).start()
    try:
        s = settings(tmp_path, runner.Target("a", srv.url, 2), max_failures_in_a_row=20)
        report = job.run(s)
        assert report["state"] == "failed" and "the last 20 requests failed for good" in report["message"]
        assert 20 <= report["errors"] < 300 and "sglang_generate_retry_errors=true" in report["message"]
        assert job.check(s.folder, s.input)["pending"] == 300 - report["errors"]
        srv.fail = {}  # the cause fixed
        assert job.check(s.folder, s.input, retry_errors=True)["pending"] == 300
        again = job.run(s, retry_errors=True)
    finally:
        srv.stop()
    out = lines(tmp_path / "job")
    assert again["state"] == "finished" and again["errors"] == 0 and sorted(out) == sorted(ids)
    assert all(len(v) == 1 and v[0]["error"] is None for v in out.values())
    assert (tmp_path / "job" / "errors-retried-1.jsonl").read_text().count("\n") == report["errors"]
    assert "retry_errors: the" in (tmp_path / "job" / "job.log").read_text()


def test_a_target_that_refuses_connections_is_routed_around_without_counting_attempts(
        tmp_path: Path, server: FakeServer) -> None:
    ids = write_input(tmp_path / "in.jsonl", 60)
    report = job.run(settings(tmp_path, runner.Target("down", dead_url(), 4), runner.Target("up", server.url, 4),
                              max_attempts=1))
    out = lines(tmp_path / "job")
    assert report["state"] == "finished" and sorted(out) == sorted(ids) and report["errors"] == 0
    assert {o[0]["instance"] for o in out.values()} == {"up"}
    assert report["targets"]["down"]["times_down"] == 1 and report["targets"]["down"]["lines"] == 0
    assert report["targets"]["up"]["share"] == 1.0
    assert "down is down" in (tmp_path / "job" / "job.log").read_text()


def test_every_target_down_stops_the_run_after_down_timeout_and_a_resume_finishes_it(tmp_path: Path) -> None:
    ids = write_input(tmp_path / "in.jsonl", 30)
    url = dead_url()
    report = job.run(settings(tmp_path, runner.Target("a", url, 2), down_timeout_s=0.5))
    assert report["state"] == "failed" and "every target down" in report["message"] and report["done"] == 0
    assert not (tmp_path / "job" / "errors.jsonl").exists()  # nothing failed for good: it never reached a server
    srv = FakeServer().start(port=int(url.rsplit(":", 1)[1]))
    try:
        again = job.run(settings(tmp_path, runner.Target("a", url, 2)))
    finally:
        srv.stop()
    assert again["state"] == "finished" and sorted(lines(tmp_path / "job")) == sorted(ids)


def test_sigterm_stops_the_run_and_a_resume_sends_only_the_rest(tmp_path: Path) -> None:
    srv = FakeServer(delay=0.02).start()
    try:
        ids = write_input(tmp_path / "in.jsonl", 200)
        s = settings(tmp_path, runner.Target("a", srv.url, 4))
        proc = _spawn(s)
        _wait_for(lambda: (job.status(s.folder)["progress"] or {}).get("done", 0) >= 20)
        status = job.status(s.folder)
        assert status["state"] == "running" and status["pid"] == proc.pid
        stopped = job.stop(s.folder, timeout=30)
        assert stopped["stopped"] and not stopped["killed"] and stopped["state"] == "stopped"
        assert proc.wait(10) == 0
        progress = stopped["progress"]
        assert "stopped by SIGTERM" in progress["message"] and 0 < progress["done"] < 200
        checked = job.check(s.folder, s.input)
        assert checked["state"] == "resumable" and checked["pending"] == 200 - progress["done"]
        sent_before = sum(srv.seen.values())
        report = job.run(s)
    finally:
        srv.stop()
    out = lines(tmp_path / "job")
    assert report["state"] == "finished" and sorted(out) == sorted(ids) and all(len(v) == 1 for v in out.values())
    # the rest, and at most the 4 that were in flight at the stop again
    assert sum(srv.seen.values()) - sent_before <= 200 - progress["done"] + 4
    assert report["this_run"]["lines"] == 200 - progress["done"]


def test_kill_9_at_random_points_loses_nothing_and_writes_nothing_twice(tmp_path: Path) -> None:
    """The job killed with SIGKILL again and again: after each kill no id is written twice, and
    the union of the outputs once the job finished is every input id exactly once."""
    srv = FakeServer(delay=0.01).start()
    rng = random.Random(1234)
    try:
        ids = write_input(tmp_path / "in.jsonl", 2000)
        s = settings(tmp_path, runner.Target("a", srv.url, 16), shard_lines=400)
        kills = 0
        sent_when_done: dict[str, int] = {}
        for attempt in range(13):  # 12 runs killed at a random moment of their sending, then one to the end
            proc = _spawn(s)
            # once it runs (its pid file written under its lock), a random moment of its sending
            _wait_for(lambda p=proc: p.poll() is not None or (Path(s.folder) / job.PID).exists())
            try:
                proc.wait(rng.uniform(0.05, 0.5) if attempt < 12 else 120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                kills += 1
            out = lines(Path(s.folder)) if Path(s.folder).exists() else {}
            assert all(len(v) == 1 for v in out.values()), "an id written twice"
            for ident in out:  # done now: how often it was sent, which no later run may change
                sent_when_done.setdefault(ident, srv.seen[ident])
            if job.status(s.folder)["state"] == "finished":
                break
        seen = dict(srv.seen)
    finally:
        srv.stop()
    out = lines(Path(s.folder))
    assert kills >= 3, f"the job was killed {kills} times only: the test proves little"
    assert sorted(out) == sorted(ids) and all(len(v) == 1 for v in out.values())
    again = sorted(i for i, n in sent_when_done.items() if seen[i] != n)
    assert not again, f"done ids sent again by a later run: {again[:10]}"
    assert len(sent_when_done) > len(ids) / 4  # the kills left a good part done before the last run
    journal = [json.loads(x)["c"] for x in (Path(s.folder) / st.JOURNAL).read_text().splitlines()]
    assert sorted(journal) == sorted(ids)


def test_a_second_run_on_a_running_job_attaches_instead_of_sending(tmp_path: Path) -> None:
    srv = FakeServer(delay=0.02).start()
    try:
        write_input(tmp_path / "in.jsonl", 100)
        s = settings(tmp_path, runner.Target("a", srv.url, 2))
        proc = _spawn(s)
        _wait_for(lambda: job.status(s.folder)["state"] == "running")
        assert job.run(s) == {"state": "running", "attached": True, "pid": proc.pid, "folder": s.folder}
        assert job.check(s.folder, s.input)["state"] == "running"
        job.stop(s.folder)
        proc.wait(10)
    finally:
        srv.stop()


def test_a_changed_input_is_refused_unless_allowed_and_then_only_its_new_ids_are_sent(
        tmp_path: Path, server: FakeServer) -> None:
    write_input(tmp_path / "in.jsonl", 20)
    s = settings(tmp_path, runner.Target("a", server.url, 4))
    assert job.run(s)["state"] == "finished"
    write_input(tmp_path / "in.jsonl", 30, start=10)  # r10..r39: r10..r19 done
    with pytest.raises(job.JobError, match=r"the input changed since this job began .* with 20 requests, now .* with 30\).*"
                                           r"sglang_generate_allow_input_change=true"):
        job.check(s.folder, s.input)
    with pytest.raises(job.JobError, match="the input changed"):
        job.run(s)
    checked = job.check(s.folder, s.input, allow_input_change=True)
    assert checked["state"] == "resumable" and checked["done"] == 10 and checked["pending"] == 20
    report = job.run(s, allow_input_change=True)
    assert report["state"] == "finished" and report["done"] == 30 and report["this_run"]["lines"] == 20
    assert max(server.seen.values()) == 1


def test_a_folder_that_cannot_be_written_is_refused_before_anything_is_sent(tmp_path: Path, server: FakeServer) -> None:
    write_input(tmp_path / "in.jsonl", 5)
    (tmp_path / "file").write_text("x")
    s = dataclasses.replace(settings(tmp_path, runner.Target("a", server.url, 1)), folder=str(tmp_path / "file" / "job"))
    with pytest.raises(job.JobError, match=r"the job's folder .*/file/job cannot be written .* nothing was sent: give "
                                           "sglang_generate_dir"):
        job.check(s.folder, s.input)
    with pytest.raises(job.JobError, match="cannot be written"):
        job.run(s)
    assert not server.seen


def test_a_malformed_input_is_refused_with_its_line_before_anything_is_sent(tmp_path: Path, server: FakeServer) -> None:
    write_input(tmp_path / "in.jsonl", 5)
    with (tmp_path / "in.jsonl").open("a") as fh:
        fh.write('{"id": "r1", "prompt": "again"}\n')
    s = settings(tmp_path, runner.Target("a", server.url, 1))
    with pytest.raises(job.JobError, match=r"1 of 6 line\(s\) cannot be sent, nothing was sent: line 6: id 'r1' is on line 2"):
        job.run(s)
    assert not server.seen and not (tmp_path / "job" / "job.json").exists()


def test_status_of_a_job_killed_without_an_end_is_interrupted(tmp_path: Path) -> None:
    srv = FakeServer(delay=0.05).start()
    try:
        write_input(tmp_path / "in.jsonl", 100)
        s = settings(tmp_path, runner.Target("a", srv.url, 2))
        proc = _spawn(s)
        _wait_for(lambda: (job.status(s.folder)["progress"] or {}).get("done", 0) >= 2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        srv.stop()
    status = job.status(s.folder)
    assert status["state"] == "interrupted" and status["pid"] is None
    assert job.stop(s.folder)["was_running"] is False


# -- the job in a process of its own, as the module runs it ------------------------------------------------

SCRIPT = """
import json, sys
from ansible_collections.llmops.sglang.plugins.module_utils._generate import job, runner
s = json.loads(sys.argv[1])
s["targets"] = tuple(runner.Target(**t) for t in s["targets"])
job.run(runner.Settings(**s))
"""


def _spawn(s: runner.Settings) -> subprocess.Popen:
    doc = dataclasses.asdict(s)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "collections")}
    return subprocess.Popen([sys.executable, "-c", SCRIPT, json.dumps(doc)], env=env)


def _wait_for(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)
