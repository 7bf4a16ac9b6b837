"""A whole sweep (module_utils/_sweep/run.py) against tests/unit/knownrate_server.py, whose
throughput is known analytically: rates, errors, timeouts, refusals and interrupts."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _report
from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw
from ansible_collections.llmops.sglang.plugins.module_utils._sweep import run as sw_run
from ansible_collections.llmops.sglang.plugins.module_utils._sweep import summary as sw_summary

from .....procs import client_pids
from .helpers import (
    ROOT,
    SLOW_CFG,
    SLOW_OPTIONS,
    _ansible,
    _kill_clients,
    _port,
    _stats,
    _wait_for,
    configure,
    knownrate_process,
    krs,
    parse_cells,
)

# ------------------------------------------------------------------------------------------------
# Against the known-rate server
# ------------------------------------------------------------------------------------------------


# R = 400 tok/s, T = 100 tokens, P = 0.05 s: S = 0.3 s per request, at most 1600 chunks/s.
RATE_CFG = {"slots": 4, "rate": 400.0, "prefill_s": 0.05}
RATE_T = 100
RATE_LEVELS = [1, 3, 4, 8]  # 3: a partial last wave; 8: twice the slots (queueing)
ROUNDING_S = 3e-4  # the records' and duration_s's rounding (1e-4 s each)


def served(base: str) -> list[dict[str, Any]]:
    """What the known-rate server served since its last /_config, in its own time (monotonic)."""
    with urllib.request.urlopen(base + "/_served", timeout=5) as resp:
        return json.loads(resp.read())


@pytest.mark.parametrize(("api", "chunk_tokens"), [("openai", 1), ("openai", 3), ("native", 3)])
def test_throughput_matches_the_analytic_rate(server: str, api: str, chunk_tokens: int) -> None:
    """The sweep's figures against what the server did, in the server's own timestamps: load on
    the machine slows both alike and cannot make them disagree (issue 16: this test asserted the
    analytic rate within 3% and failed on a loaded 2-core machine, 1268 vs 1333 tok/s; that
    accuracy is now a benchmark, tools/bench/sweep_accuracy.py, docs/PERFORMANCE.md).

    Per level: the counts are exact; every request took the client at least as long as the
    server held it (sent before it arrived, ended after it was done), and the difference is that
    request's own overhead (sending, reading: what load moves); the sweep's window holds the
    server's and exceeds it by at most the overheads of its first and last request. So the
    measured rate lies between the rate the server delivered over its own window and that rate
    over the window stretched by those two overheads, whatever the load. The server never runs
    ahead of its schedule, so its window is at least the analytic one, and a request's first
    token never comes before P + M/R."""
    cfg = configure(server, chunk_tokens=chunk_tokens, **RATE_CFG)
    counts = {c: max(2 * c, 8) for c in RATE_LEVELS}
    prompts = [f"known-rate request {i}" for i in range(max(counts.values()))]  # a request's prompt names it
    facts = sw.run_sweep(sw.SweepOptions(url=server, api=api, concurrency=RATE_LEVELS, max_tokens=RATE_T,
                                         prompts=prompts, warmup=0, level_warmup=False))
    assert [p["concurrency"] for p in facts["points"]] == RATE_LEVELS
    rows = served(server)  # in the order the server received them: level after level
    assert len(rows) == sum(counts.values()) == len(facts["records"])
    offset = 0
    for point in facts["points"]:
        c, n = point["concurrency"], counts[point["concurrency"]]
        level_rows, offset = rows[offset:offset + n], offset + n
        assert point["requests"] == n and point["ok"] == n and point["errors"]["total"] == 0
        assert point["output_tokens"] == n * RATE_T == sum(r["tokens"] for r in level_rows)  # whatever M is
        by_prompt = {r["prompt"]: r for r in level_rows}
        assert sorted(by_prompt) == sorted(prompts[:n]), c  # this level's own requests, each once
        records = [r for r in facts["records"] if r["concurrency"] == c]
        overhead = {}
        for rec in records:
            row = by_prompt[prompts[rec["index"]]]
            held = row["done"] - row["received"]
            assert rec["e2e_s"] >= held - ROUNDING_S, (c, rec, row)
            overhead[rec["index"]] = rec["e2e_s"] - held
        first = min(records, key=lambda r: r["start_s"])
        last = max(records, key=lambda r: r["end_s"])
        assert point["duration_s"] == pytest.approx(last["end_s"] - first["start_s"], abs=ROUNDING_S)
        server_s = max(r["done"] for r in level_rows) - min(r["received"] for r in level_rows)
        slack = overhead[first["index"]] + overhead[last["index"]]
        assert server_s - ROUNDING_S <= point["duration_s"] <= server_s + slack + 2 * ROUNDING_S, (c, server_s, slack)
        delivered = n * RATE_T / server_s  # tok/s over the server's own window
        assert delivered * server_s / (server_s + slack + 2 * ROUNDING_S) <= point["output_tok_s"], (c, delivered)
        assert point["output_tok_s"] <= delivered * server_s / (server_s - ROUNDING_S), (c, delivered)
        analytic_s = n * RATE_T / krs.expected_output_tok_s(cfg, c, n, RATE_T)
        assert server_s >= analytic_s * 0.999, (c, server_s, analytic_s)  # late under load, never early
        assert max(sum(1 for r in level_rows if r["slot"] <= row["slot"] < r["done"]) for row in level_rows) \
            <= min(c, cfg.slots)
        ttft_floor = (cfg.prefill_s + chunk_tokens / cfg.rate) * 1000.0
        assert point["ttft_ms"]["p50"] >= ttft_floor * 0.97
    assert facts["server"]["max_running_requests"] == 4


@pytest.mark.parametrize("api", ["openai", "native"])
def test_ttft_is_stamped_at_an_empty_text_token_chunk(server: str, api: str) -> None:
    # first token at P + 1/R = 0.22 s with text ""; first non-empty text only at P + 5/R = 1.02 s:
    # 0.8 s apart, so that a loaded machine's delays cannot blur the two (they were 80 ms apart
    # with an upper bound of 90 ms); the floor holds whatever the load
    configure(server, rate=5.0, prefill_s=0.02, chunk_tokens=1, empty_text_chunks=4)
    facts = sw.run_sweep(
        sw.SweepOptions(url=server, api=api, concurrency=[1], requests=2, warmup=0, max_tokens=6, level_warmup=False)
    )
    point = facts["points"][0]
    assert point["ok"] == 2
    assert 0.97 * 220.0 <= point["ttft_ms"]["p50"] < 1020.0, point["ttft_ms"]


def test_http_500_stream_errors_and_short_outputs_are_counted(server: str) -> None:
    configure(server, rate=2000.0, prefill_s=0.005, fail_http_every=5, fail_stream_every=3, short_every=7)
    t = 20
    facts = sw.run_sweep(  # no warm-up: the server numbers the measured requests 1..15
        sw.SweepOptions(url=server, concurrency=[4], requests=15, warmup=0, max_tokens=t, level_warmup=False)
    )
    point = facts["points"][0]
    # requests 1..15: HTTP 500 at 5, 10, 15; in-stream error at 3, 6, 9, 12; short at 7, 14
    assert point["errors"] == {"http": 3, "stream": 4, "timeout": 0, "connection": 0, "short": 2, "total": 9}
    assert point["requests"] == 15 and point["ok"] == 6 and point["error_rate"] == pytest.approx(0.6)
    assert point["output_tokens"] == 6 * t + 2 * (t // 2)
    kinds = sorted(r["error_kind"] or "ok" for r in facts["records"])
    assert kinds.count("http") == 3 and kinds.count("ok") == 6
    assert {r["http_status"] for r in facts["records"] if r["error_kind"] == "http"} == {500}
    assert any("injected" in m for m in point["error_messages"])


def test_a_hung_server_ends_the_level_at_level_timeout(server: str) -> None:
    configure(server, hang=True, hang_s=30.0)
    began = time.monotonic()
    # the levels' own time limits are under test here: no level warm-up (which would hang too,
    # for its own level_timeout; see test_level_warmup_on_a_hung_server)
    facts = sw.run_sweep(
        sw.SweepOptions(
            url=server, concurrency=[1, 2], requests=4, warmup=0, max_tokens=10,
            timeout=30.0, level_timeout=0.6, sweep_timeout=1.2, level_warmup=False,
        )
    )
    elapsed = time.monotonic() - began
    # cut by the limits, not by the 30 s requests (a bound load cannot reach: the cut is at 1.2 s)
    assert elapsed < 25.0
    first, second = facts["points"]
    assert first["level_timed_out"] and first["errors"]["timeout"] == 1 and first["ok"] == 0
    assert 0.55 <= first["duration_s"] < 25.0
    assert second["errors"]["timeout"] == 2  # cut by sweep_timeout
    assert facts["stopped_on_timeout"] is True
    assert facts["peak"] is None and facts["knee"] is None


def test_request_timeout_and_connection_errors(server: str) -> None:
    configure(server, hang=True, hang_s=30.0)
    facts = sw.run_sweep(
        sw.SweepOptions(url=server, concurrency=[2], requests=2, warmup=0, timeout=0.3, level_timeout=5.0)
    )
    point = facts["points"][0]
    assert point["errors"]["timeout"] == 2 and not point["level_timed_out"]
    assert 0.3 <= point["duration_s"] < 25.0  # the 0.3 s request timeout, not the 30 s hang
    # nothing listening: every request is a connection error, the sweep still returns
    facts = sw.run_sweep(
        sw.SweepOptions(url="http://127.0.0.1:9", model="m", concurrency=[2], requests=3, warmup=1)
    )
    assert facts["points"][0]["errors"]["connection"] == 3
    assert facts["server"]["server_info_path"] is None and facts["warnings"]
    with pytest.raises(sw.SweepError, match="model"):
        sw.run_sweep(sw.SweepOptions(url="http://127.0.0.1:9", concurrency=[1]))


def test_stop_on_plateau_and_legacy_server_info(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The plateau rule is under test here, not the client-health rule (tested on its own): on a
    # loaded 2-core CI machine a scheduling hiccup could mark a level client-limited, and such
    # a level never triggers the stop.
    monkeypatch.setattr(sw_summary, "client_limited", lambda lag, cpu: False)
    # gains of ~100% (1 -> 2) and ~0% (2 -> 4, 2 slots) against a threshold of 30%. Where the real
    # rule says stop depends on the rates as measured (the rule's own numbers are test_curve's): on
    # a quiet machine after C=4, on a busy one after C=2 (CI run U) or, when C=2 came out slow, not
    # before C=8 (CI, stop 43). What is under test is the sweep obeying the rule: its verdicts are
    # recorded, and from the third level on the rule says stop whatever the rates, so the sweep must
    # stop at the first "stop" and never run C=8.
    verdicts: list[bool] = []
    real_rule = sw_run.plateau_reached

    def rule(points: list[dict[str, Any]], gain: float) -> bool:
        verdicts.append(real_rule(points, gain) or len(points) >= 3)
        return verdicts[-1]

    monkeypatch.setattr(sw_run, "plateau_reached", rule)
    configure(server, slots=2, rate=500.0, prefill_s=0.02, chunk_tokens=2,
              legacy_server_info=True, spec_accept_length=2.5)
    facts = sw.run_sweep(
        sw.SweepOptions(url=server, api="native", concurrency=[1, 2, 4, 8], max_tokens=60,
                        stop_on_plateau=True, plateau_gain=0.3)
    )
    points = facts["points"]
    assert len(verdicts) == len(points) and verdicts[-1] is True and True not in verdicts[:-1]
    assert len(points) in (2, 3) and facts["stopped_on_plateau"] is True
    assert facts["knee"]["concurrency"] in [p["concurrency"] for p in points]
    assert facts["server"]["server_info_path"] == "/get_server_info"
    assert facts["server"]["avg_spec_accept_length_after"] == 2.5
    assert facts["server"]["max_running_requests"] == 2


def test_duration_mode(server: str) -> None:
    """Clients send until the duration has passed since the level began, and no request after it.
    The level's clock starts before its first request is sent, so duration_s (first request's
    start to last one's end) may be short of the duration by that delay, longer on a loaded
    machine (0.3966 s once beside make test's other stages); what holds whatever the load: every
    request started within the duration of the first one, and requests kept coming."""
    configure(server, rate=2000.0, prefill_s=0.01)
    facts = sw.run_sweep(
        sw.SweepOptions(url=server, concurrency=[2], duration=0.4, warmup=0, max_tokens=20)
    )
    point = facts["points"][0]
    assert point["requests"] > 4 and point["ok"] == point["requests"]
    starts = [r["start_s"] for r in facts["records"]]
    # (+ 50 ms: the process descheduled between a client's look at the clock and its send's stamp)
    assert len(starts) == point["requests"] and max(starts) - min(starts) < 0.4 + 0.05
    assert facts["options"]["duration"] == 0.4


def test_no_records_when_not_asked(server: str) -> None:
    configure(server, rate=2000.0, prefill_s=0.01)
    facts = sw.run_sweep(sw.SweepOptions(url=server, concurrency=[1], requests=2, warmup=0, max_tokens=5,
                                         return_records=False))
    assert facts["points"][0]["ok"] == 2 and facts["records"] == []


# A server killed mid-sweep. Levels C=1, 4, 8 of 100 tokens on 4 slots (S = 0.3 s per request),
# no warm-ups: the server numbers the measured requests. C=1 runs requests 1-8; at C=4, 9-12 run
# together and end at S, then 13-16 start and the server dies at the first chunk of 13: 13-16
# break. C=4 delivered 400 tokens in about 0.36 s, three times the C=1 rate: the highest number of
# the sweep, from a level half of whose requests failed. C=8 finds nothing listening.
DIE_LEVELS = [1, 4, 8]
DIE_CFG = {"slots": 4, "rate": 400.0, "prefill_s": 0.05, "die_after_requests": 13}
DIE_OPTIONS = {"concurrency": DIE_LEVELS, "max_tokens": 100, "warmup": 0, "level_warmup": False}


def test_a_server_killed_mid_sweep_marks_its_levels_and_peaks_on_good_ones() -> None:
    with knownrate_process() as url:
        configure(url, **DIE_CFG)
        facts = sw.run_sweep(sw.SweepOptions(url=url, **DIE_OPTIONS))
    one, four, eight = facts["points"]
    assert [p["status"] for p in facts["points"]] == ["ok", "errors", "no_requests_ok"]
    assert [p["errors_present"] for p in facts["points"]] == [False, True, True]
    assert one["ok"] == 8 and one["errors"]["total"] == 0
    assert four["ok"] >= 1 and four["errors"]["total"] >= 1
    assert four["error_rate"] == pytest.approx(four["errors"]["total"] / four["requests"], abs=1e-4)
    assert four["output_tok_s"] > one["output_tok_s"]  # the trap: the broken level has the best rate
    assert eight["ok"] == 0 and eight["errors"]["total"] == eight["requests"] == 16
    assert eight["errors"]["connection"] >= 1
    # errors are not client health: a level of failures that end at once is never client-limited
    assert four["client_limited"] is False and eight["client_limited"] is False
    assert four["gain_per_doubling"] is None and eight["gain_per_doubling"] is None
    # peak and knee from the good level only
    # (client_limited is the good level's own health verdict, which a loaded machine may give)
    assert facts["peak"] == {"concurrency": 1, "output_tok_s": one["output_tok_s"],
                             "client_limited": one["client_limited"]}
    assert facts["knee"]["concurrency"] == 1
    assert facts["levels_with_errors"] == [4, 8]
    warning = next(w for w in facts["warnings"] if w.startswith("requests failed at"))
    assert "C=4: " in warning and "C=8: 16 of 16 requests failed (100%: connection" in warning
    assert "C=1:" not in warning and "left out of peak, knee and plateau" in warning
    # and the report says so
    table = _report.render_table(facts)
    # the C cell of each row: "!" marks failed requests ("*" a client-limited level and "~" a
    # drifted one may join it on a loaded machine: those are the level's own verdicts)
    marks = {re.match(r"\d+", cell).group(): cell for cell in (parse_cells(row)[0] for row in table.splitlines()[2:])}
    assert "!" in marks["4"] and "!" in marks["8"] and "!" not in marks["1"], table
    assert "levels with failed requests (marked !" in _report.render_findings(facts)


def test_module_warns_about_failed_levels_and_fails_with_fail_on_errors() -> None:
    for fail in (False, True):
        tree = tempfile.mkdtemp(prefix="sweep-tree-")
        try:
            with knownrate_process() as url:
                configure(url, **DIE_CFG)
                proc = _ansible(["-a", json.dumps({"url": url, "fail_on_errors": fail, **DIE_OPTIONS})], tree)
            result = json.loads((Path(tree) / "localhost").read_text())
        finally:
            shutil.rmtree(tree, ignore_errors=True)
        facts = result["ansible_facts"]["sglang_sweep"]  # the sweep comes back either way
        assert [p["status"] for p in facts["points"]] == ["ok", "errors", "no_requests_ok"]
        assert facts["peak"]["concurrency"] == 1
        if not fail:
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "requests failed at C=4" in proc.stdout + proc.stderr  # the warning
            assert "requests failed at C=4, 8" in result["msg"]
        else:
            assert proc.returncode != 0 and "localhost | FAILED!" in proc.stdout, proc.stdout
            assert result["msg"].startswith("requests failed at C=4: ") and "C=8: 16 of 16" in result["msg"]
            assert "fail_on_errors" in result["msg"]


def test_a_level_above_max_concurrency_is_refused_before_anything_is_sent(server: str) -> None:
    configure(server)
    with pytest.raises(sw.SweepError, match="max_concurrency=4096"):
        sw.run_sweep(sw.SweepOptions(url=server, concurrency=[1, 100000]))
    proc = _ansible(["-a", json.dumps({"url": server, "concurrency": [100000]})])
    assert proc.returncode != 0 and "above max_concurrency=4096" in proc.stdout, proc.stdout
    assert _stats(server)["received"] == 0  # nothing sent, not even the warm-up


def test_levels_far_above_max_running_requests_are_warned_about(server: str) -> None:
    configure(server, slots=1, rate=5000.0, prefill_s=0.001)
    facts = sw.run_sweep(sw.SweepOptions(url=server, concurrency=[1, 9], requests=9, max_tokens=5, warmup=0,
                                         level_warmup=False))
    assert any("C=9 is more than 8x the server's max_running_requests (1)" in w for w in facts["warnings"])
    assert facts["options"]["max_concurrency"] == 4096


def test_a_sweep_stops_at_once_when_its_reader_or_its_watched_process_is_gone(server: str) -> None:
    configure(server, **SLOW_CFG)
    read_end, write_end = os.pipe()
    closer = threading.Timer(0.5, os.close, [read_end])
    closer.start()
    began = time.monotonic()
    try:
        with pytest.raises(sw.SweepInterrupted, match="reader of its result went away") as info:
            sw.run_sweep(sw.SweepOptions(url=server, **SLOW_OPTIONS), output_fd=write_end)
    finally:
        closer.join()
        os.close(write_end)
    # stopped at once: every request (100 s each) was cut, none ran to its end, whatever the load
    assert _stats(server)["completed"] == 0 and time.monotonic() - began < 90.0
    assert "during C=4; levels finished: none" in str(info.value)
    assert _wait_for(lambda: _stats(server)["in_flight"] == 0, 30.0)  # the server saw its clients leave

    configure(server, **SLOW_CFG)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    began = time.monotonic()
    try:
        with pytest.raises(sw.SweepInterrupted, match=f"process {sleeper.pid} \\(watch_pid\\) is gone"):
            sw.run_sweep(sw.SweepOptions(url=server, watch_pid=sleeper.pid, **SLOW_OPTIONS))
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)
    assert _stats(server)["completed"] == 0 and time.monotonic() - began < 90.0  # cut, not waited for
    assert _stats(server)["received"] == 4
    assert _wait_for(lambda: _stats(server)["in_flight"] == 0, 30.0)


def test_a_sweep_stops_when_its_heartbeat_goes_stale_and_removes_the_file(server: str, tmp_path: Path) -> None:
    """Nobody refreshes the heartbeat file (the controller is gone): the sweep stops as on an
    interrupt, saying why, and leaves no heartbeat file behind; a bad timeout is refused first."""
    beat = tmp_path / "gpu0.heartbeat"
    with pytest.raises(sw.SweepError, match="heartbeat_timeout must be > 0"):
        sw.run_sweep(sw.SweepOptions(url=server, heartbeat_file=str(beat), heartbeat_timeout=0, **SLOW_OPTIONS))
    configure(server, **SLOW_CFG)
    try:
        with pytest.raises(sw.SweepInterrupted, match="no heartbeat from the controller") as info:
            sw.run_sweep(sw.SweepOptions(url=server, heartbeat_file=str(beat), heartbeat_timeout=0.5, **SLOW_OPTIONS))
        assert "during C=4; levels finished: none" in str(info.value)
        assert not beat.exists()
        assert _stats(server)["received"] == 4 and _stats(server)["completed"] == 0
        assert _wait_for(lambda: _stats(server)["in_flight"] == 0, 30.0)
    finally:
        _kill_clients(server)


def test_sigint_stops_the_module_and_its_requests(server: str) -> None:
    """Ctrl-C to the process group of `ansible` running the module (the local connection):
    within a couple of seconds nothing talks to the server any more."""
    configure(server, **SLOW_CFG)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_NOCOLOR="1")
    args = json.dumps({"url": server, **dict(SLOW_OPTIONS, concurrency=[64])})
    proc = subprocess.Popen([str(Path(sys.executable).parent / "ansible"), "localhost", "-m",
                             "llmops.sglang.throughput_sweep", "-a", args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert _wait_for(lambda: _stats(server)["in_flight"] == 64, 30.0), _stats(server)
        os.killpg(proc.pid, signal.SIGINT)
        stopped = time.monotonic()
        proc.communicate(timeout=30)
        assert _wait_for(lambda: not client_pids(_port(server)), 30.0), client_pids(_port(server))
        assert _wait_for(lambda: _stats(server)["in_flight"] == 0, 30.0)
        # stopped at once: none of the 100 s requests ran to its end (a bound in the server's
        # own terms: load slows the stop, it cannot make a cut request complete)
        assert _stats(server)["completed"] == 0 and time.monotonic() - stopped < 90.0
        assert _stats(server)["received"] == 64  # nothing sent after the interrupt
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        _kill_clients(server)


def test_an_async_sweep_stops_with_the_process_it_watches(server: str, tmp_path: Path) -> None:
    """`async`/`poll: 0` makes the module a daemon that outlives the ansible command that started
    it (first part: it watches another process, and goes on after ansible has exited); watching
    the controller's process (the controller_pid lookup), it stops when that process ends."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_NOCOLOR="1", ANSIBLE_ASYNC_DIR=str(tmp_path / "async"))
    ansible = [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "llmops.sglang.throughput_sweep",
               "-B", "120", "-P", "0", "-t", str(tmp_path / "tree")]

    def start(watch: str) -> dict[str, Any]:
        args = json.dumps({"url": server, "watch_pid": watch, **SLOW_OPTIONS})
        run = subprocess.run([*ansible, "-a", args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout + run.stderr
        return json.loads((tmp_path / "tree" / "localhost").read_text())

    def job_result(started: dict[str, Any], seconds: float) -> dict[str, Any]:
        """The job's final result (async_wrapper writes it over {"started": 1, "finished": 0})."""
        path = Path(started["results_file"])
        assert _wait_for(lambda: "msg" in json.loads(path.read_text()), seconds), path.read_text()
        return json.loads(path.read_text())

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        configure(server, **SLOW_CFG)
        started = start(str(sleeper.pid))
        # ansible has exited; its job goes on, sending requests
        assert _wait_for(lambda: _stats(server)["in_flight"] == 4, 20.0), _stats(server)
        time.sleep(1.0)
        assert _stats(server)["in_flight"] == 4 and client_pids(_port(server))
        sleeper.kill()
        sleeper.wait(timeout=10)
        gone = time.monotonic()
        assert _wait_for(lambda: not client_pids(_port(server)), 30.0), client_pids(_port(server))
        assert _stats(server)["completed"] == 0 and time.monotonic() - gone < 90.0  # cut, not run out
        assert "(watch_pid) is gone" in job_result(started, 30.0)["msg"]

        configure(server, **SLOW_CFG)
        started = start("{{ lookup('llmops.sglang.controller_pid') }}")
        ended = time.monotonic()  # the ansible command that started the job is over
        result = job_result(started, 60.0)  # the job's own start-up (AnsiballZ) included
        assert result.get("failed") is True and "(watch_pid) is gone" in result["msg"], result
        assert _stats(server)["completed"] == 0 and time.monotonic() - ended < 90.0  # cut, not run out
        assert not client_pids(_port(server)) and _wait_for(lambda: _stats(server)["in_flight"] == 0, 30.0)
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait(timeout=10)
        _kill_clients(server)
