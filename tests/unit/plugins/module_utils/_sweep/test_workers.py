"""Tests of several client processes per sweep level (module_utils/_sweep/workers.py).

Pure parts: how a level is split, the option's values, and that merging the traces of several
processes gives the point one process computes from the same traces. Then real sweeps with
``client_processes: 2`` on loopback against tools/bench/zero_server.py (answers at once) and
tests/unit/knownrate_server.py (slow, to interrupt), in-process and through ``ansible`` (the
module's AnsiballZ zip is what the spawned children import from). No timing assertions on
throughput; every load is bounded in requests and seconds.
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw
from ansible_collections.llmops.sglang.plugins.module_utils._sweep import run as sw_run
from ansible_collections.llmops.sglang.plugins.module_utils._sweep import summary as sw_summary
from ansible_collections.llmops.sglang.plugins.module_utils._sweep import workers as swk

from .....procs import client_pids
from .helpers import SLOW_CFG, _port, _stats, _wait_for, configure, knownrate_process

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[4]
ZERO_SERVER = ROOT / "tools" / "bench" / "zero_server.py"

# ------------------------------------------------------------------------------------------------
# Splitting a level, the option
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("c", "n", "p"), [(64, 256, 2), (5, 16, 2), (7, 8, 3), (3, 100, 8), (10, 3, 4)])
def test_split_level_covers_every_client_and_request_once(c: int, n: int, p: int) -> None:
    shares = swk.split_level(c, n, p)
    assert len(shares) == min(p, c)
    assert sum(s.workers for s in shares) == c
    assert max(s.workers for s in shares) - min(s.workers for s in shares) <= 1
    workers = [s.worker_offset + w for s in shares for w in range(s.workers)]
    assert workers == list(range(c))
    indices = sorted(s.first_index + k * s.step for s in shares for k in range(s.requests or 0))
    assert indices == list(range(n))
    for share in shares:  # requests in proportion to the clients, within one
        assert abs(share.requests - n * share.workers / c) < 1.0 + 1e-9


def test_split_level_in_duration_mode_strides_the_indices() -> None:
    shares = swk.split_level(5, None, 2)
    assert [(s.workers, s.requests, s.first_index, s.step, s.worker_offset) for s in shares] == [
        (3, None, 0, 2, 0), (2, None, 1, 2, 3)]


@pytest.mark.parametrize(("value", "want"), [(None, 1), (1, 1), (4, 4), ("2", 2), (0, 0), ("auto", 0),
                                             (" AUTO ", 0), (3.0, 3)])
def test_client_processes_values(value: Any, want: int) -> None:
    assert sw.parse_client_processes(value) == want
    assert sw.SweepOptions(url="http://x", client_processes=value).normalized().client_processes == want


@pytest.mark.parametrize("value", [-1, 257, "many", 1.5, True, [2]])
def test_client_processes_refused_with_the_rule_and_the_fix(value: Any) -> None:
    with pytest.raises(sw.SweepError, match=r"client_processes must be an integer from 1 to 256, or 0 or 'auto'") as info:
        sw.SweepOptions(url="http://x", client_processes=value).normalized()
    assert repr(value) in str(info.value) and "set it to 1" in str(info.value)


def test_effective_options_say_auto() -> None:
    assert sw.SweepOptions(url="http://x", client_processes="auto").normalized().effective(None)["client_processes"] == "auto"
    assert sw.SweepOptions(url="http://x", client_processes=3).normalized().effective(None)["client_processes"] == 3


# ------------------------------------------------------------------------------------------------
# Merging equals one process's computation on the same traces
# ------------------------------------------------------------------------------------------------


def _traces(c: int, per_worker: int) -> list[sw.Trace]:
    """Closed-loop traces of C workers with uneven request lengths, one failure and one short."""
    traces = []
    index = 0
    for w in range(c):
        t = 100.0 + 0.013 * w
        for _ in range(per_worker):
            tokens = 40 + (index * 7) % 23
            trace = sw.Trace(level=2, concurrency=c, index=index, worker=w, start=t, http_status=200)
            gap = 0.002 + 0.0005 * (w % 3)
            trace.events = [(t + 0.05 + k * gap, 1.0) for k in range(tokens)]
            trace.first_token_t = trace.events[0][0]
            trace.end = trace.events[-1][0] + 0.001
            trace.output_tokens = tokens
            trace.finish_reason = "length"
            trace.ok = True
            if index == 5:
                trace.fail("stream", "stream broken: ServerDisconnectedError")
            elif index == 9:
                trace.output_tokens, trace.finish_reason = tokens - 3, "stop"
                trace.fail("short", f"{tokens - 3} of 64 tokens, finish_reason 'stop'")
            traces.append(trace)
            t = trace.end
            index += 1
    return traces


def test_merged_level_equals_the_single_process_point_on_the_same_traces() -> None:
    traces = _traces(c=8, per_worker=5)
    health = sw.Health()
    health.cpu_util = 0.42
    health.lags = [0.001, 0.002, 0.004]
    single = sw.LevelRun(2, 8, list(traces), False, health,
                         min(t.start for t in traces) - 0.01, max(t.end for t in traces) + 0.01)
    want = sw.summarize_level(single)

    # the same traces, as three processes would have returned them (through the wire format)
    groups: list[list[Any]] = [[], [], []]
    for trace in traces:
        groups[trace.worker % 3].append(swk.to_wire(trace))
    parts = [
        swk.ProcessPart(traces=[swk.from_wire(w) for w in g], lag_ms_p99=health.lag_ms_p99 if i == 1 else 0.5,
                        cpu_util=0.42 if i == 2 else 0.1, t_start=single.t_start + 0.001 * i,
                        t_end=single.t_end - 0.001 * i, timed_out=False)
        for i, g in enumerate(groups)
    ]
    merged = swk.merge_runs(2, 8, parts)
    got = sw.summarize_level(merged)
    assert got == want
    assert got["status"] == "errors" and got["errors"]["stream"] == 1 and got["errors"]["short"] == 1
    assert got["steady_output_tok_s"] is not None and got["drift"]["window"] == "steady"
    # and the raw records the facts keep are the same, request by request
    assert sorted((sw.trace_record(t, 50.0) for t in merged.traces), key=_by_index) == sorted(
        (sw.trace_record(t, 50.0) for t in traces), key=_by_index)


def test_merged_health_is_the_worst_process() -> None:
    parts = [swk.ProcessPart([], 3.0, 0.5, 0.0, 1.0, False), swk.ProcessPart([], 25.0, 0.2, 0.5, 2.0, True)]
    run = swk.merge_runs(0, 4, parts)
    assert run.health.lag_ms_p99 == 25.0 and run.health.cpu_util == 0.5
    assert run.timed_out and (run.t_start, run.t_end) == (0.0, 2.0)
    assert sw.client_limited(run.health.lag_ms_p99, run.health.cpu_util)


# ------------------------------------------------------------------------------------------------
# Real sweeps on loopback
# ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def zero_process() -> Iterator[str]:
    """tools/bench/zero_server.py on a free loopback port, which it binds itself (--port 0) and
    announces: a port picked here and passed on could be taken in between (CI, stop 44: the unit
    and newest-core stages run this module side by side, and one's sweeps reached the other's
    server, then nothing); its base URL."""
    proc = subprocess.Popen([sys.executable, str(ZERO_SERVER), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 20.0)
        line = proc.stdout.readline() if ready else ""
        if not line.startswith("PORT "):
            pytest.fail(f"zero server did not start: {line!r}")
        port = int(line.split()[1])
        # it prints PORT at the app's start-up, just before it listens
        assert _wait_for(lambda: _accepts(port), 10.0), f"zero server on port {port} does not accept"
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _accepts(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def zero() -> Iterator[str]:
    with zero_process() as url:
        yield url


def _no_children_left() -> bool:
    return not multiprocessing.active_children()


@pytest.mark.parametrize("api", ["openai", "native"])
def test_two_processes_run_every_request_of_each_level_once(zero: str, api: str) -> None:
    opts = {"url": zero, "api": api, "concurrency": [1, 5, 16], "requests": 40, "max_tokens": 64}
    two = sw.run_sweep(sw.SweepOptions(client_processes=2, **opts))
    one = sw.run_sweep(sw.SweepOptions(**opts))
    assert _no_children_left()
    assert [p["client_processes"] for p in two["points"]] == [1, 2, 2]  # never more than C
    assert [p["client_processes"] for p in one["points"]] == [1, 1, 1]
    assert two["options"]["client_processes"] == 2
    for p2, p1 in zip(two["points"], one["points"], strict=True):
        assert set(p2) == set(p1) and set(p2["client"]) == set(p1["client"]) == {"loop_lag_ms_p99", "loop_lag_own_ms_p99", "cpu_util"}
        assert p2["status"] == "ok" and p2["requests"] == p2["ok"] == 40
        assert p2["output_tokens"] == 40 * 64 and p2["avg_output_tokens"] == 64
        assert p2["output_tok_s"] > 0 and p2["client_escalation"] is None
        assert p2["level_warmup"]["requests"] == max(p2["concurrency"], 8)  # the round in the parent
    by_level: dict[int, list[dict[str, Any]]] = {}
    for rec in two["records"]:
        by_level.setdefault(rec["concurrency"], []).append(rec)
    for c, recs in by_level.items():
        assert sorted(r["index"] for r in recs) == list(range(40)), c
        assert all(r["ok"] and r["output_tokens"] == 64 and r["end_s"] >= r["start_s"] >= 0 for r in recs)
    assert set(two["records"][0]) == set(one["records"][0])
    # one time base: every level's requests lie between the sweep's start and its end
    assert max(r["end_s"] for r in two["records"]) <= two["duration_s"]


def test_auto_measures_a_client_limited_level_again_with_more_processes(
        zero: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sw_summary, "CLIENT_CPU_LIMIT", 0.0)  # every clean level counts as client-limited
    monkeypatch.setattr(sw_run, "auto_limit", lambda c: max(1, min(2, c)))  # two CPUs, whatever this host has
    facts = sw.run_sweep(sw.SweepOptions(url=zero, concurrency=[1, 4, 8], requests=16, max_tokens=32,
                                         client_processes="auto"))
    assert _no_children_left()
    one, four, eight = facts["points"]
    assert one["client_processes"] == 1 and one["client_escalation"] is None  # C=1: one process is all
    assert four["client_processes"] == 2 and four["client_limited"] is True  # still limited at the cap
    assert [t["processes"] for t in four["client_escalation"]] == [1]
    assert four["client_escalation"][0]["output_tok_s"] > 0
    assert eight["client_processes"] == 2 and eight["client_escalation"] is None  # kept for later levels
    assert four["requests"] == four["ok"] == 16
    assert len(facts["records"]) == 48  # the discarded try's requests are not records
    assert any("C=4: client-limited with 1 client process(es); measured again with 2" in w for w in facts["warnings"])


def test_module_with_two_client_processes_through_ansible(zero: str) -> None:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_NOCOLOR="1")
    tree = tempfile.mkdtemp(prefix="sweep-tree-")
    args = {"url": zero, "concurrency": [8, 3], "requests": 24, "max_tokens": 50, "client_processes": "2"}
    # from a folder outside the checkout: the children can only import what the AnsiballZ zip holds
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible"), "localhost", "-m",
                           "llmops.sglang.throughput_sweep", "-a", json.dumps(args), "-t", tree],
                          cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = json.loads((Path(tree) / "localhost").read_text())["ansible_facts"]["sglang_sweep"]
    assert [p["concurrency"] for p in facts["points"]] == [3, 8]
    assert [p["client_processes"] for p in facts["points"]] == [2, 2]
    assert all(p["ok"] == 24 and p["output_tokens"] == 24 * 50 for p in facts["points"])
    assert len(facts["records"]) == 48 and facts["options"]["client_processes"] == 2
    assert not client_pids(_port(zero))  # nothing still connected: the children are gone


def test_module_refuses_a_bad_client_processes_before_sending(zero: str) -> None:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_NOCOLOR="1")
    before = _zero_requests(zero)
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible"), "localhost", "-m",
                           "llmops.sglang.throughput_sweep", "-a", json.dumps({"url": zero, "client_processes": "lots"})],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "client_processes must be an integer from 1 to 256" in proc.stdout, proc.stdout
    assert _zero_requests(zero) == before


def _zero_requests(url: str) -> int:
    import urllib.request

    with urllib.request.urlopen(url + "/server_info", timeout=5) as resp:
        return int(json.loads(resp.read())["zero_server"]["requests"])


@pytest.fixture(scope="module")
def slow() -> Iterator[str]:
    with knownrate_process() as url:
        yield url


def _children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (spawned clients and multiprocessing's resource
    tracker, which spawn starts too)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
    return out


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode()
    return ""


def test_sigint_to_ansible_stops_every_client_process(slow: str) -> None:
    """Ctrl-C (SIGINT to the process group of `ansible` running the module): the module and
    its client processes stop, nothing is connected to the server a few seconds later."""
    configure(slow, **SLOW_CFG)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_CACHE_PLUGIN="memory",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_NOCOLOR="1")
    args = json.dumps({"url": slow, "concurrency": [16], "max_tokens": 1000, "warmup": 0,
                       "level_warmup": False, "client_processes": 2})
    proc = subprocess.Popen([str(Path(sys.executable).parent / "ansible"), "localhost", "-m",
                             "llmops.sglang.throughput_sweep", "-a", args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert _wait_for(lambda: _stats(slow)["in_flight"] == 16, 60.0), _stats(slow)
        assert len(client_pids(_port(slow))) >= 2  # the level's connections live in two processes
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode != 0, out
        assert _wait_for(lambda: not client_pids(_port(slow)), 5.0), client_pids(_port(slow))
        assert _wait_for(lambda: _stats(slow)["in_flight"] == 0, 3.0)
        assert _stats(slow)["received"] == 16  # nothing sent after the interrupt
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for pid in client_pids(_port(slow)):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_client_processes_die_with_a_killed_parent(slow: str) -> None:
    """A parent killed outright (SIGKILL: no cleanup runs) leaves no orphans: each child
    watches its parent and stops within a watch interval."""
    configure(slow, **SLOW_CFG)
    code = (
        "import sys; sys.path.insert(0, sys.argv[2])\n"
        "from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw\n"
        "sw.run_sweep(sw.SweepOptions(url=sys.argv[1], concurrency=[8], max_tokens=1000, warmup=0,"
        " level_warmup=False, client_processes=2))\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code, slow, str(ROOT / "collections")], start_new_session=True)
    try:
        assert _wait_for(lambda: _stats(slow)["in_flight"] == 8, 60.0), _stats(slow)
        children = _children_of(parent.pid)
        assert len([c for c in children if "spawn_main" in _cmdline(c)]) == 2, [_cmdline(c) for c in children]
        parent.kill()
        parent.wait(timeout=10)
        assert _wait_for(lambda: not any(os.path.exists(f"/proc/{c}") and _alive(c) for c in children), 5.0)
        assert _wait_for(lambda: not client_pids(_port(slow)), 3.0), client_pids(_port(slow))
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)
        for pid in client_pids(_port(slow)):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    with contextlib.suppress(OSError, IndexError):
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    return False


def test_a_level_timeout_cuts_every_process_and_counts_its_requests(slow: str) -> None:
    configure(slow, **SLOW_CFG)
    began = time.monotonic()
    facts = sw.run_sweep(sw.SweepOptions(url=slow, concurrency=[6], max_tokens=1000, warmup=0, level_warmup=False,
                                         level_timeout=1.5, client_processes=2))
    # cut by the level's 1.5 s limit: none of the 100 s requests ran to its end (in the server's
    # own terms, which load cannot move); the wall bound only guards against a hang
    assert _stats(slow)["completed"] == 0 and time.monotonic() - began < 90.0
    point = facts["points"][0]
    assert point["level_timed_out"] is True and point["client_processes"] == 2
    assert point["errors"]["timeout"] == point["requests"] == 6 and point["status"] == "no_requests_ok"
    assert _no_children_left()
    assert _wait_for(lambda: _stats(slow)["in_flight"] == 0, 3.0)


def _by_index(record: dict) -> int:
    return record["index"]
