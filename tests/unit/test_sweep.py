"""Tests of the sweep engine (module_utils/_sweep.py) and the throughput_sweep module.

Pure parts (statistics, stream parsers on the real SGLang 0.5.17 recordings, knee and plateau)
run without network. The rest runs against tests/unit/knownrate_server.py, started once on
127.0.0.1 (a free port) in a subprocess, whose throughput is known analytically.
"""
from __future__ import annotations

import json
import math
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import knownrate_server as krs  # noqa: E402

REC = "sglang-0.5.17-h200"

# The seed sweep (MTP + HiCache, one GPU): C -> output tok/s.
SEED = {1: 61.2, 4: 207.2, 8: 369.7, 16: 384.5, 32: 392.7, 48: 409.0}


def _point(c: int, x: float, **extra: Any) -> dict[str, Any]:
    return {"concurrency": c, "output_tok_s": x, "ok": 8, "client_limited": False, **extra}


def _data_lines(path: Path) -> list[str]:
    return [line[5:].strip() for line in path.read_text().splitlines() if line.startswith("data:")]


# ------------------------------------------------------------------------------------------------
# Statistics
# ------------------------------------------------------------------------------------------------


def test_percentile_linear_interpolation() -> None:
    data = [4.0, 1.0, 3.0, 2.0]
    assert sw.percentile(data, 50) == pytest.approx(2.5)
    assert sw.percentile(data, 90) == pytest.approx(3.7)  # rank 2.7 between 3 and 4
    assert sw.percentile(data, 99) == pytest.approx(3.97)
    assert sw.percentile(data, 0) == 1.0 and sw.percentile(data, 100) == 4.0
    assert sw.percentile([7.0], 99) == 7.0
    assert sw.percentile([], 50) is None
    assert sw.summarize([]) == {"mean": None, "p50": None, "p90": None, "p99": None}
    s = sw.summarize([0.001, 0.002, 0.003], scale=1000.0)
    assert s == {"mean": 2.0, "p50": 2.0, "p90": 2.8, "p99": 2.98}


def test_itl_spreads_a_chunk_gap_over_its_tokens() -> None:
    # first token at 0 (TTFT, no ITL sample), then 3 tokens after 30 ms, then 1 after 10 ms
    samples = sw.itl_samples([(0.0, 1.0), (0.03, 3.0), (0.04, 1.0)])
    assert samples == pytest.approx([0.01, 0.01, 0.01, 0.01])
    # per-chunk counting would have said 2 samples of 30 ms and 10 ms
    assert sw.itl_samples([(0.0, 2.0)]) == []


def test_steady_window_and_tokens_in_it() -> None:
    spans = {0: [(0.0, 1.0), (1.0, 2.0)], 1: [(0.1, 1.1), (1.1, 2.5)]}
    assert sw.steady_window(spans, 2) == (0.1, 2.0)
    assert sw.steady_window(spans, 3) is None  # a client never ran
    assert sw.steady_window({0: [(0.0, 1.0)], 1: [(2.0, 3.0)]}, 2) is None  # empty window
    events = [[(0.05, 1.0), (0.5, 2.0), (2.2, 1.0)], [(1.0, 3.0)]]
    assert sw.tokens_in_window(events, 0.1, 2.0) == 5.0


def test_gain_per_doubling_and_client_rule() -> None:
    assert sw.gain_per_doubling(8, 100.0, 16, 110.0) == pytest.approx(0.10)
    assert sw.gain_per_doubling(1, 100.0, 4, 300.0) == pytest.approx(1.0)  # 200% over 2 doublings
    assert sw.gain_per_doubling(32, 392.7, 48, 409.0) == pytest.approx((409.0 / 392.7 - 1) / math.log2(1.5))
    assert sw.gain_per_doubling(8, 0.0, 16, 10.0) is None
    assert sw.client_limited(1.0, 0.2) is False
    assert sw.client_limited(sw.CLIENT_LAG_LIMIT_MS, 0.2) is True
    assert sw.client_limited(1.0, sw.CLIENT_CPU_LIMIT) is True
    assert sw.client_limited(None, None) is False


def test_knee_and_peak_on_the_seed_table() -> None:
    points = [_point(c, x) for c, x in SEED.items()]
    assert sw.find_peak(points) == {"concurrency": 48, "output_tok_s": 409.0, "client_limited": False}
    knee = sw.find_knee(points, plateau_gain=0.05)
    assert knee is not None
    assert knee["concurrency"] == 8 and knee["rule"] == "share_of_peak"
    assert knee["share_of_peak"] == pytest.approx(369.7 / 409.0, abs=1e-4)
    # the plateau rule alone (an unreachable share) also puts it at 8: 8 -> 16 adds 4% < 5%
    knee = sw.find_knee(points, plateau_gain=0.05, share=1.01)
    assert knee is not None and knee["concurrency"] == 8 and knee["rule"] == "plateau"


def test_knee_plateau_rule_before_the_share_rule() -> None:
    # flat from 2 to 4, then a late jump: the knee is where doubling first stopped paying
    points = [_point(1, 100.0), _point(2, 200.0), _point(4, 205.0), _point(8, 400.0)]
    knee = sw.find_knee(points, plateau_gain=0.05)
    assert knee == {"concurrency": 2, "output_tok_s": 200.0, "share_of_peak": 0.5, "rule": "plateau"}


def test_knee_ignores_client_limited_and_failed_levels() -> None:
    points = [
        _point(1, 100.0),
        _point(2, 190.0),
        _point(4, 900.0, client_limited=True),
        _point(8, 0.0, ok=0),
    ]
    assert sw.find_peak(points) == {"concurrency": 2, "output_tok_s": 190.0, "client_limited": False}
    knee = sw.find_knee(points, 0.05)
    assert knee is not None and knee["concurrency"] == 2
    assert sw.find_knee([_point(1, 0.0, ok=0)], 0.05) is None
    assert sw.find_peak([]) is None
    # every level client-limited: still a peak, flagged
    peak = sw.find_peak([_point(1, 50.0, client_limited=True)])
    assert peak is not None and peak["client_limited"] is True


def test_plateau_reached() -> None:
    pts = [_point(c, x) for c, x in SEED.items()]
    assert not sw.plateau_reached(pts[:1], 0.05)
    assert not sw.plateau_reached(pts[:3], 0.05)  # 4 -> 8 gained 78%
    assert sw.plateau_reached(pts[:4], 0.05)  # 8 -> 16 gained 4%
    limited = pts[:3] + [_point(16, 384.5, client_limited=True)]
    assert not sw.plateau_reached(limited, 0.05)


def test_options_normalized() -> None:
    opts = sw.SweepOptions(url="http://h:30000/v1/", concurrency=[8, 1, 8]).normalized()
    assert opts.url == "http://h:30000" and opts.concurrency == [1, 8]
    assert opts.requests_for(1) == 8 and opts.requests_for(8) == 16
    assert opts.prompts == list(sw.DEFAULT_PROMPTS) and len(opts.prompts) == 8
    assert "api_key" not in opts.effective("m")
    for bad in (
        {"url": "h:1"},
        {"url": "http://h", "api": "grpc"},
        {"url": "http://h", "concurrency": []},
        {"url": "http://h", "requests": 4, "duration": 1.0},
        {"url": "http://h", "max_tokens": 0},
    ):
        with pytest.raises(sw.SweepError):
            sw.SweepOptions(**bad).normalized()


# ------------------------------------------------------------------------------------------------
# Stream parsers on the real recordings
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_openai_completions_recording(fixtures_dir: Path, kind: str) -> None:
    lines = _data_lines(fixtures_dir / REC / kind / "stream_completions.txt")
    parser = sw.OpenAIStreamParser()
    for i, data in enumerate(lines):
        parser.feed(i * 0.01, data)
    parser.close()
    first = json.loads(lines[0])
    assert first["choices"][0]["text"] == ""  # the recording's first token chunk has empty text
    assert parser.first_token_t == 0.0  # TTFT stamped there, not at the first non-empty text
    assert parser.output_tokens == 24 and parser.finish_reason == "length" and parser.done
    assert len(parser.events) == 24  # 24 token chunks (the usage chunk is not one)
    assert sw.itl_samples(parser.events) == pytest.approx([0.01] * 23)


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_openai_chat_recording_skips_the_role_chunk(fixtures_dir: Path, kind: str) -> None:
    lines = _data_lines(fixtures_dir / REC / kind / "stream_chat.txt")
    parser = sw.OpenAIStreamParser()
    for i, data in enumerate(lines):
        parser.feed(float(i), data)
    parser.close()
    assert parser.first_token_t == 1.0  # chunk 0 is role-only
    assert parser.output_tokens == 16
    token_chunks = len(lines) - 3  # role chunk, usage chunk, [DONE]
    assert len(parser.events) == token_chunks
    assert sum(t for _, t in parser.events) == pytest.approx(16.0)  # usage spread over the chunks


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_native_generate_recording(fixtures_dir: Path, kind: str) -> None:
    lines = _data_lines(fixtures_dir / REC / kind / "stream_generate.txt")
    parser = sw.NativeStreamParser()
    for i, data in enumerate(lines):
        parser.feed(i * 0.01, data)
    parser.close()
    assert parser.first_token_t == 0.0
    assert parser.output_tokens == 24 and parser.finish_reason == "length" and parser.done
    assert sw.itl_samples(parser.events) == pytest.approx([0.01] * 23)
    # the fast count scan agrees with a full JSON parse on every recorded chunk
    for data in lines[:-1]:
        fast = sw.NativeStreamParser()
        fast.feed(0.0, data)
        assert fast.output_tokens == json.loads(data)["meta_info"]["completion_tokens"]


def test_native_multi_token_chunks_and_errors() -> None:
    def chunk(count: int, finish: Any = None) -> str:
        return json.dumps({"text": "", "output_ids": list(range(count)),
                           "meta_info": {"finish_reason": finish, "completion_tokens": count}},
                          separators=(",", ":"))

    parser = sw.NativeStreamParser()
    parser.feed(0.0, chunk(2))
    parser.feed(0.03, chunk(5))
    parser.feed(0.03, chunk(5))  # repeated count: not a token chunk
    parser.feed(0.06, chunk(8, {"type": "length", "length": 8}))
    parser.feed(0.07, "[DONE]")
    parser.close()
    assert parser.events == [(0.0, 2.0), (0.03, 3.0), (0.06, 3.0)]
    assert sw.itl_samples(parser.events) == pytest.approx([0.01] * 6)
    trace = sw.Trace(level=0, concurrency=1, index=0, worker=0, start=0.0, end=0.07)
    sw.finalize_trace(trace, parser, 8)
    assert trace.ok and trace.output_tokens == 8 and trace.tpot == pytest.approx(0.07 / 7)

    bad = sw.NativeStreamParser()
    bad.feed(0.0, chunk(1))
    bad.feed(0.1, '{"error":{"message":"boom"}}')
    bad.feed(0.2, "[DONE]")
    trace = sw.Trace(level=0, concurrency=1, index=0, worker=0)
    sw.finalize_trace(trace, bad, 8)
    assert trace.error_kind == "stream" and "boom" in (trace.error or "")
    assert trace.counted_tokens == 0


def test_openai_outcomes() -> None:
    def run(lines: list[str], max_tokens: int = 4) -> sw.Trace:
        parser = sw.OpenAIStreamParser()
        for i, data in enumerate(lines):
            parser.feed(float(i), data)
        trace = sw.Trace(level=0, concurrency=1, index=0, worker=0)
        sw.finalize_trace(trace, parser, max_tokens)
        return trace

    tok = '{"choices":[{"index":0,"text":"a","finish_reason":%s}],"usage":null}'
    usage = '{"choices":[],"usage":{"completion_tokens":%d}}'
    ok = run([tok % "null", tok % '"length"', usage % 4, "[DONE]"])
    assert ok.ok and ok.output_tokens == 4
    short = run([tok % '"stop"', usage % 2, "[DONE]"])
    assert short.error_kind == "short" and short.counted_tokens == 2
    no_usage = run([tok % '"length"', "[DONE]"])
    assert no_usage.error_kind == "stream" and "usage" in (no_usage.error or "")
    cut = run([tok % "null"])
    assert cut.error_kind == "stream"
    err = run([tok % "null", '{"error":{"message":"oops","code":500}}', "[DONE]"])
    assert err.error_kind == "stream" and "oops" in (err.error or "")


def test_server_summary_on_the_recording(fixtures_dir: Path) -> None:
    text = (fixtures_dir / REC / "hybrid" / "ep_server_info.txt").read_text()
    info = json.loads(text[text.index("{"):])
    summary = sw.server_summary(info)
    assert summary["version"] == "0.5.17" and summary["max_running_requests"] == 16
    after = json.loads((fixtures_dir / REC / "hybrid" / "server_info_after.json").read_text())
    assert sw.server_summary(after)["avg_spec_accept_length"] == pytest.approx(1.00008, abs=1e-4)


# ------------------------------------------------------------------------------------------------
# Against the known-rate server
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "knownrate_server.py"), "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 20.0)
        line = proc.stdout.readline() if ready else ""
        if not line.startswith("PORT "):
            pytest.fail(f"known-rate server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def configure(base: str, **fields: Any) -> krs.ServerConfig:
    req = urllib.request.Request(
        base + "/_config", data=json.dumps(fields).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return krs.ServerConfig(**json.loads(resp.read()))


# R = 400 tok/s, T = 100 tokens, P = 0.05 s: S = 0.3 s per request, at most 1600 chunks/s.
RATE_CFG = {"slots": 4, "rate": 400.0, "prefill_s": 0.05}
RATE_T = 100
RATE_LEVELS = [1, 3, 4, 8]  # 3: a partial last wave; 8: twice the slots (queueing)


@pytest.mark.parametrize(("api", "chunk_tokens"), [("openai", 1), ("openai", 3), ("native", 3)])
def test_throughput_matches_the_analytic_rate(server: str, api: str, chunk_tokens: int) -> None:
    cfg = configure(server, chunk_tokens=chunk_tokens, **RATE_CFG)
    facts = sw.run_sweep(sw.SweepOptions(url=server, api=api, concurrency=RATE_LEVELS, max_tokens=RATE_T))
    assert [p["concurrency"] for p in facts["points"]] == RATE_LEVELS
    for point in facts["points"]:
        c = point["concurrency"]
        n = max(2 * c, 8)
        assert point["requests"] == n and point["ok"] == n and point["errors"]["total"] == 0
        assert point["output_tokens"] == n * RATE_T  # the server's count, whatever M is
        expected = krs.expected_output_tok_s(cfg, c, n, RATE_T)
        assert point["output_tok_s"] == pytest.approx(expected, rel=0.03), (api, chunk_tokens, point)
        steady = krs.expected_steady_tok_s(cfg, c, RATE_T)
        assert point["steady_output_tok_s"] == pytest.approx(steady, rel=0.05), (api, chunk_tokens, point)
        # per-token ITL is 1/R whatever the chunking (a per-chunk ITL would read M/R)
        assert point["itl_ms"]["mean"] == pytest.approx(1000.0 / cfg.rate, rel=0.1)
        ttft_floor = (cfg.prefill_s + chunk_tokens / cfg.rate) * 1000.0
        assert point["ttft_ms"]["p50"] >= ttft_floor * 0.97
    assert facts["server"]["max_running_requests"] == 4
    assert facts["peak"]["concurrency"] in (4, 8)
    assert facts["knee"]["concurrency"] == 4
    assert len(facts["records"]) == sum(max(2 * c, 8) for c in RATE_LEVELS)


@pytest.mark.parametrize("api", ["openai", "native"])
def test_ttft_is_stamped_at_an_empty_text_token_chunk(server: str, api: str) -> None:
    # first token at P + 1/R = 40 ms with text ""; first non-empty text only at P + 5/R = 120 ms
    configure(server, rate=50.0, prefill_s=0.02, chunk_tokens=1, empty_text_chunks=4)
    facts = sw.run_sweep(
        sw.SweepOptions(url=server, api=api, concurrency=[1], requests=2, warmup=0, max_tokens=8)
    )
    point = facts["points"][0]
    assert point["ok"] == 2
    assert 35.0 <= point["ttft_ms"]["p50"] <= 90.0, point["ttft_ms"]


def test_http_500_stream_errors_and_short_outputs_are_counted(server: str) -> None:
    configure(server, rate=2000.0, prefill_s=0.005, fail_http_every=5, fail_stream_every=3, short_every=7)
    t = 20
    facts = sw.run_sweep(
        sw.SweepOptions(url=server, concurrency=[4], requests=15, warmup=0, max_tokens=t)
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
    assert elapsed < 3.0
    first, second = facts["points"]
    assert first["level_timed_out"] and first["errors"]["timeout"] == 1 and first["ok"] == 0
    assert 0.55 <= first["duration_s"] <= 0.9
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
    assert point["duration_s"] < 1.0
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
    monkeypatch.setattr(sw, "client_limited", lambda lag, cpu: False)
    configure(server, slots=2, rate=500.0, prefill_s=0.02, chunk_tokens=2,
              legacy_server_info=True, spec_accept_length=2.5)
    facts = sw.run_sweep(
        sw.SweepOptions(url=server, api="native", concurrency=[1, 2, 4, 8], max_tokens=60,
                        stop_on_plateau=True, plateau_gain=0.05)
    )
    assert [p["concurrency"] for p in facts["points"]] == [1, 2, 4]  # 2 -> 4 adds nothing: stop
    assert facts["stopped_on_plateau"] is True
    assert facts["knee"]["concurrency"] == 2
    assert facts["server"]["server_info_path"] == "/get_server_info"
    assert facts["server"]["avg_spec_accept_length_after"] == 2.5
    assert facts["server"]["max_running_requests"] == 2


def test_duration_mode(server: str) -> None:
    configure(server, rate=2000.0, prefill_s=0.01)
    facts = sw.run_sweep(
        sw.SweepOptions(url=server, concurrency=[2], duration=0.4, warmup=0, max_tokens=20,
                        return_records=False)
    )
    point = facts["points"][0]
    assert point["requests"] > 4 and point["ok"] == point["requests"]
    assert point["duration_s"] >= 0.4
    assert facts["records"] == [] and facts["options"]["duration"] == 0.4


# ------------------------------------------------------------------------------------------------
# The module through ansible
# ------------------------------------------------------------------------------------------------


def _ansible(args: list[str], tree: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_CACHE_PLUGIN="memory",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_NOCOLOR="1",
    )
    cmd = [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "llmops.sglang.throughput_sweep", *args]
    if tree:
        cmd += ["-t", tree]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_module_through_ansible(server: str) -> None:
    configure(server, rate=2000.0, prefill_s=0.01, slots=4)
    tree = tempfile.mkdtemp(prefix="sweep-tree-")
    try:
        args = {"url": server + "/v1", "concurrency": [2, 1], "requests": 4, "max_tokens": 30,
                "api_key": "s3cret"}
        proc = _ansible(["-a", json.dumps(args)], tree)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        result = json.loads((Path(tree) / "localhost").read_text())
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    assert result["changed"] is False
    facts = result["ansible_facts"]["sglang_sweep"]
    assert facts["schema_version"] == 1 and facts["url"] == server and facts["api"] == "openai"
    assert facts["model"] == "/models/knownrate"
    assert facts["server"]["version"] == "0.5.17" and facts["server"]["server_info_path"] == "/server_info"
    assert facts["options"]["concurrency"] == [1, 2] and facts["options"]["api_key_set"] is True
    assert "s3cret" not in json.dumps(result)
    assert [p["concurrency"] for p in facts["points"]] == [1, 2]
    for point in facts["points"]:
        assert point["ok"] == 4 and point["output_tokens"] == 120 and point["avg_output_tokens"] == 30
        for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_s"):
            assert set(point[key]) == {"mean", "p50", "p90", "p99"} and point[key]["p50"] > 0
        assert set(point["client"]) == {"loop_lag_ms_p99", "cpu_util"}
        assert point["server_after"]["max_running_requests"] == 4
    assert facts["peak"]["concurrency"] in (1, 2) and facts["knee"] is not None
    assert len(facts["records"]) == 8
    assert set(facts["records"][0]) == {
        "level", "concurrency", "index", "ok", "error_kind", "http_status", "output_tokens",
        "finish_reason", "ttft_ms", "e2e_s", "itl_ms_mean", "start_s", "end_s",
    }
    assert facts["started"].endswith("Z") and facts["finished"] >= facts["started"]


def test_module_check_mode_and_missing_aiohttp(server: str) -> None:
    configure(server)
    before = json.loads(urllib.request.urlopen(server + "/_stats", timeout=5).read())["received"]
    proc = _ansible(["--check", "-a", f"url={server}"])
    assert proc.returncode == 0 and "SKIPPED" in proc.stdout, proc.stdout + proc.stderr
    after = json.loads(urllib.request.urlopen(server + "/_stats", timeout=5).read())["received"]
    assert after == before  # nothing sent
    bare = next(
        (p for p in ("/usr/bin/python3", "/usr/local/bin/python3")
         if os.path.exists(p) and subprocess.run([p, "-c", "import aiohttp"], capture_output=True).returncode),
        None,
    )
    if bare is None:
        pytest.skip("no Python without aiohttp on this machine")
    proc = _ansible(["-a", f"url={server}", "-e", f"ansible_python_interpreter={bare}"])
    assert proc.returncode != 0
    assert "cannot import aiohttp" in proc.stdout and bare in proc.stdout


def test_ansible_doc() -> None:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "--json", "llmops.sglang.throughput_sweep"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)["llmops.sglang.throughput_sweep"]
    options = doc["doc"]["options"]
    assert {"url", "api", "concurrency", "requests", "duration", "stop_on_plateau", "api_key"} <= set(options)
    assert options["api_key"].get("no_log", True)
    assert "sglang_sweep" in json.dumps(doc["return"])


def test_to_model_time_converts_rates_and_times_of_a_scaled_engine() -> None:
    from ansible_collections.llmops.sglang.plugins.module_utils._sweep import to_model_time

    points = [{"output_tok_s": 5000.0, "steady_output_tok_s": 6000.0, "req_s": 10.0, "duration_s": 2.0,
               "steady_window_s": 1.0, "ttft_ms": {"p50": 2.0, "p99": None}, "e2e_s": {"p50": 0.5}}]
    records = [{"ttft_ms": 2.0, "e2e_s": 0.5, "start_s": 1.0, "end_s": 1.5, "itl_ms_mean": None}]
    to_model_time(points, records, 0.01)
    p = points[0]
    assert p["output_tok_s"] == 50.0 and p["steady_output_tok_s"] == 60.0 and p["req_s"] == 0.1
    assert p["duration_s"] == 200.0 and p["ttft_ms"] == {"p50": 200.0, "p99": None} and p["e2e_s"]["p50"] == 50.0
    assert p["wall"]["output_tok_s"] == 5000.0 and p["wall"]["duration_s"] == 2.0
    assert records[0]["end_s"] == 150.0 and records[0]["itl_ms_mean"] is None
    untouched = [{"output_tok_s": 1.0}]
    to_model_time(untouched, [], 1.0)
    assert untouched == [{"output_tok_s": 1.0}]
