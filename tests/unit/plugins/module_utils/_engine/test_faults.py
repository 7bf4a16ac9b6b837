"""The embedded engine's injected faults (issue 19's "bad change"): LLMOPS_SIM_FAIL_SHARE answers a
share of generation requests with HTTP 500, counted in /metrics as a real 500; and
LLMOPS_SIM_DECODE_SLOWDOWN multiplies the modelled decode step time. Driven in-process on the
virtual clock (time scale 0: no sleeping); durations compared are the engine's modelled seconds,
never wall clocks."""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from ansible_collections.llmops.sglang.plugins.module_utils._engine import cli, perfmodel
from ansible_collections.llmops.sglang.plugins.module_utils._engine.engine import Engine, EngineConfig
from ansible_collections.llmops.sglang.plugins.module_utils._engine.faults import (
    DECODE_SLOWDOWN_ENV,
    FAIL_SHARE_ENV,
    FailureGate,
    Faults,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.host import StartupError
from ansible_collections.llmops.sglang.plugins.module_utils._engine.log import Log
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.batching import Scheduler
from ansible_collections.llmops.sglang.plugins.module_utils._engine.server import HttpServer
from ansible_collections.llmops.sglang.plugins.module_utils._shared import flags as _flags
from ansible_collections.llmops.sglang.plugins.module_utils._shared import releases as _releases

from .....ports import free_port

ROOT = Path(__file__).resolve().parents[5]
MODEL = ROOT / "data" / "models" / "qwen3-0.6b-dense"
RELEASE = "0.5.17"


def make_engine(faults: Faults, argv: list[str] | None = None) -> Engine:
    args = vars(_flags.build_parser(RELEASE).parse_args(
        ["--model-path", str(MODEL), "--enable-metrics", *(argv or [])]))
    model_config = perfmodel.load_model_config(str(MODEL))
    plan = perfmodel.plan_engine(args, model_config, perfmodel.find_gpu("NVIDIA H200"), RELEASE,
                                 200 * 10**9)
    config = EngineConfig.build(args=args, plan=plan, gpu_name="NVIDIA H200", release=RELEASE,
                                traits=_releases.release_traits(RELEASE),
                                model_config=model_config, time_scale=0.0, faults=faults)
    engine = Engine(config, Log("error"))
    engine.state = "ready"
    return engine


# one request of every generation endpoint, streamed and not
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("/generate", {"text": "Hello there", "sampling_params": {"max_new_tokens": 4}}),
    ("/generate", {"text": "Hello there", "sampling_params": {"max_new_tokens": 4}, "stream": True}),
    ("/v1/completions", {"model": "m", "prompt": "Hello", "max_tokens": 4}),
    ("/v1/completions", {"model": "m", "prompt": "Hello", "max_tokens": 4, "stream": True}),
    ("/v1/chat/completions", {"model": "m", "max_tokens": 4,
                              "messages": [{"role": "user", "content": "Hi"}]}),
    ("/v1/chat/completions", {"model": "m", "max_tokens": 4, "stream": True,
                              "messages": [{"role": "user", "content": "Hi"}]}),
]


def _serve(engine: Engine, rounds: int) -> tuple[list[tuple[str, bool, int, Any]], str]:
    """Every call of CALLS ``rounds`` times, one after another: (path, stream, status, body)
    each; then the /metrics text."""
    async def main() -> tuple[list[tuple[str, bool, int, Any]], str]:
        client = TestClient(TestServer(HttpServer(engine).build_app()))
        await client.start_server()
        loop_task = asyncio.create_task(engine.scheduler.run())
        answers: list[tuple[str, bool, int, Any]] = []
        try:
            for _ in range(rounds):
                for path, body in CALLS:
                    resp = await client.post(path, json=body)
                    text = await resp.text()
                    payload: Any = text
                    if resp.content_type == "application/json":
                        payload = json.loads(text)
                    answers.append((path, bool(body.get("stream")), resp.status, payload))
            metrics = await (await client.get("/metrics")).text()
        finally:
            loop_task.cancel()
            await asyncio.gather(loop_task, return_exceptions=True)
            await client.close()
        return answers, metrics
    return asyncio.run(asyncio.wait_for(main(), timeout=120))


def _responses(metrics: str) -> dict[tuple[str, str], float]:
    """sglang:http_responses_total by (endpoint, status_code), POST only."""
    out: dict[tuple[str, str], float] = {}
    for line in metrics.splitlines():
        if not line.startswith("sglang:http_responses_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[:line.index("}")]))
        if labels["method"] == "POST":
            out[(labels["endpoint"], labels["status_code"])] = float(line.rsplit(" ", 1)[1])
    return out


def _counter(metrics: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(f"sglang:{name}{{"))


# -- LLMOPS_SIM_FAIL_SHARE --------------------------------------------------------------------
def test_fail_share_half_fails_exactly_half_with_sglang_500_counted_in_metrics() -> None:
    engine = make_engine(Faults(fail_share=Fraction(1, 2)))
    answers, metrics = _serve(engine, rounds=4)  # 24 requests: each call 4 times
    failed = [a for a in answers if a[2] == 500]
    served = [a for a in answers if a[2] == 200]
    assert len(failed) == len(served) == 12
    assert [a[2] for a in answers] == [200, 500] * 12  # every second one, whatever its kind
    for path, stream, _status, body in failed:
        if path == "/generate":
            assert set(body) == {"error"} and "LLMOPS_SIM_FAIL_SHARE=0.5" in body["error"]["message"]
        else:  # the OpenAI serving layer's 500 body
            assert body["object"] == "error" and body["code"] == 500
            assert body["type"] == "InternalServerError"
            assert body["message"].startswith("Internal server error: injected fault")
        assert not isinstance(body, str), f"{path} stream={stream}: a JSON 500, not a stream"
    # the failed ones never reached the scheduler: tokens and finished requests of the served only
    assert _counter(metrics, "num_requests_total") == 12
    assert _counter(metrics, "generation_tokens_total") == 12 * 4
    counted = _responses(metrics)
    assert sum(n for (_e, s), n in counted.items() if s == "500") == 12
    assert sum(n for (_e, s), n in counted.items() if s == "200") == 12
    for endpoint in ("/generate", "/v1/completions", "/v1/chat/completions"):
        assert counted[(endpoint, "500")] == 4 and counted[(endpoint, "200")] == 4


def test_fail_share_zero_and_one() -> None:
    for share, status in ((Fraction(0), 200), (Fraction(1), 500)):
        answers, metrics = _serve(make_engine(Faults(fail_share=share)), rounds=1)
        assert {a[2] for a in answers} == {status}
        assert sum(n for (_e, s), n in _responses(metrics).items() if s == "500") == (
            len(CALLS) if status == 500 else 0)


def test_fail_share_bad_requests_and_not_ready_are_not_counted() -> None:
    """A 400 or a 503 is answered as before and does not move the failure counter."""
    engine = make_engine(Faults(fail_share=Fraction(1, 2)))

    async def main() -> list[int]:
        client = TestClient(TestServer(HttpServer(engine).build_app()))
        await client.start_server()
        try:
            statuses = [(await client.post("/v1/completions", json={"model": "m"})).status]
            engine.state = "loading"
            statuses.append((await client.post("/generate", json={"text": "x"})).status)
        finally:
            await client.close()
        return statuses

    assert asyncio.run(main()) == [400, 503]
    assert engine.fail_gate.seen == 0


@pytest.mark.parametrize("share,n", [(Fraction(3, 10), 10), (Fraction(1, 3), 30),
                                     (Fraction(29, 100), 300), (Fraction(1, 7), 50)])
def test_failure_gate_spreads_floor_or_ceil_of_n_share(share: Fraction, n: int) -> None:
    gate = FailureGate(share)
    fates = [gate.next_fails() for _ in range(n)]
    assert sum(fates) == (n * share).__floor__() == gate.failed
    for width in (1, 3, 10):  # any window of consecutive requests: floor or ceil of width x share
        for start in range(n - width + 1):
            assert sum(fates[start:start + width]) in ((width * share).__floor__(),
                                                       (width * share).__ceil__())


# -- LLMOPS_SIM_DECODE_SLOWDOWN ---------------------------------------------------------------
def _decode_run(slowdown: float) -> tuple[Engine, Scheduler]:
    """One request of 64 tokens through the engine, alone: its inter-token latencies are its
    decode steps, in modelled seconds."""
    engine = make_engine(Faults(decode_slowdown=slowdown))

    async def main() -> None:
        loop_task = asyncio.create_task(engine.scheduler.run())
        try:
            await engine.scheduler.submit([(200, "a prompt")], 64, False).drain()
        finally:
            loop_task.cancel()
            await asyncio.gather(loop_task, return_exceptions=True)

    asyncio.run(asyncio.wait_for(main(), timeout=60))
    return engine, engine.scheduler.sched


def test_decode_slowdown_triples_modelled_decode_time_only() -> None:
    base, base_sched = _decode_run(1.0)
    slow, slow_sched = _decode_run(3.0)
    itl_base = base.metrics.hist_plain["inter_token_latency_seconds"]
    itl_slow = slow.metrics.hist_plain["inter_token_latency_seconds"]
    assert itl_base.total == itl_slow.total == 63
    assert itl_slow.sum == pytest.approx(3 * itl_base.sum, rel=1e-9)
    # the prefill (TTFT of a request alone) is unchanged; the request's e2e grows by 2x decode
    ttft_base = base.metrics.stream_histogram("time_to_first_token_seconds", False).sum
    ttft_slow = slow.metrics.stream_histogram("time_to_first_token_seconds", False).sum
    assert ttft_slow == pytest.approx(ttft_base, rel=1e-12)
    e2e_base = base.metrics.stream_histogram("e2e_request_latency_seconds", False).sum
    e2e_slow = slow.metrics.stream_histogram("e2e_request_latency_seconds", False).sum
    assert e2e_slow - e2e_base == pytest.approx(2 * itl_base.sum, rel=1e-9)
    assert slow_sched.clock - base_sched.clock == pytest.approx(2 * itl_base.sum, rel=1e-9)


def test_decode_slowdown_delays_queued_requests_first_token() -> None:
    """A request that waits for a free slot waits for slower decodes: its TTFT grows."""
    def ttft_sum(slowdown: float) -> float:
        engine = make_engine(Faults(decode_slowdown=slowdown), ["--max-running-requests", "1"])

        async def main() -> None:
            loop_task = asyncio.create_task(engine.scheduler.run())
            try:
                subs = [engine.scheduler.submit([(100, f"p{i}")], 32, False) for i in range(3)]
                for sub in subs:
                    await sub.drain()
            finally:
                loop_task.cancel()
                await asyncio.gather(loop_task, return_exceptions=True)

        asyncio.run(asyncio.wait_for(main(), timeout=60))
        return engine.metrics.stream_histogram("time_to_first_token_seconds", False).sum

    assert ttft_sum(4.0) > ttft_sum(1.0) * 1.5


def test_scheduler_decode_slowdown_on_the_virtual_clock() -> None:
    args = vars(_flags.build_parser(RELEASE).parse_args(["--model-path", str(MODEL)]))
    plan = perfmodel.plan_engine(args, perfmodel.load_model_config(str(MODEL)),
                                 perfmodel.find_gpu("NVIDIA H200"), RELEASE, 200 * 10**9)

    def steps(slowdown: float) -> list[tuple[str, float]]:
        sched = Scheduler(plan, decode_slowdown=slowdown)
        for i in range(4):
            sched.submit(f"r{i}", 128, 16)
        out = []
        while (res := sched.step()) is not None:
            out.append((res.kind, res.dt))
        return out

    plain, slow = steps(1.0), steps(3.0)
    assert [k for k, _ in plain] == [k for k, _ in slow]
    for (kind, dt1), (_, dt3) in zip(plain, slow, strict=True):
        assert dt3 == pytest.approx(dt1 * (3.0 if kind == "decode" else 1.0), rel=1e-12)


# -- start-up: valid and invalid values -------------------------------------------------------
def test_faults_from_env_defaults_and_values() -> None:
    assert Faults.from_env({}) == Faults()
    assert Faults.from_env({FAIL_SHARE_ENV: "", DECODE_SLOWDOWN_ENV: " "}) == Faults()
    faults = Faults.from_env({FAIL_SHARE_ENV: "0.3", DECODE_SLOWDOWN_ENV: "2.5"})
    assert faults.fail_share == Fraction(3, 10) and faults.decode_slowdown == 2.5
    assert faults.as_dict() == {"fail_share": 0.3, "decode_slowdown": 2.5}
    assert Faults.from_env({FAIL_SHARE_ENV: "1", DECODE_SLOWDOWN_ENV: "1"}).fail_share == 1


@pytest.mark.parametrize("name,raw", [
    (FAIL_SHARE_ENV, "abc"), (FAIL_SHARE_ENV, "-0.1"), (FAIL_SHARE_ENV, "1.5"),
    (FAIL_SHARE_ENV, "nan"), (FAIL_SHARE_ENV, "inf"), (FAIL_SHARE_ENV, "30%"),
    (DECODE_SLOWDOWN_ENV, "0.5"), (DECODE_SLOWDOWN_ENV, "0"), (DECODE_SLOWDOWN_ENV, "slow"),
    (DECODE_SLOWDOWN_ENV, "inf"), (DECODE_SLOWDOWN_ENV, "nan"), (DECODE_SLOWDOWN_ENV, "-3"),
])
def test_invalid_values_refused(name: str, raw: str) -> None:
    with pytest.raises(StartupError, match=rf"invalid {name}='{re.escape(raw)}': .*must be"):
        Faults.from_env({name: raw})


def test_engine_refuses_to_start_with_an_invalid_value(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """cli.main exits 1 with the variable named, before it binds a port or starts children."""
    monkeypatch.setenv("LLMOPS_SGLANG_RELEASE", RELEASE)
    monkeypatch.setenv("LLMOPS_SIM_HOST_MEM_AVAILABLE_GB", "200")
    monkeypatch.setenv(DECODE_SLOWDOWN_ENV, "0.5")
    assert cli.main(["--model-path", str(MODEL), "--port", "1"]) == 1
    assert f"invalid {DECODE_SLOWDOWN_ENV}='0.5'" in capsys.readouterr().err


def test_server_info_reports_the_faults() -> None:
    engine = make_engine(Faults(fail_share=Fraction(1, 4), decode_slowdown=2.0))

    async def main() -> dict[str, Any]:
        client = TestClient(TestServer(HttpServer(engine).build_app()))
        await client.start_server()
        try:
            return await (await client.get("/server_info")).json()
        finally:
            await client.close()

    sim = asyncio.run(main())["llmops_sim"]
    assert sim["fail_share"] == 0.25 and sim["decode_slowdown"] == 2.0


def _http(method: str, url: str, body: Any = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_engine_process_takes_the_faults_from_its_environment(tmp_path: Path) -> None:
    """The whole path a deploy uses: the instance's environment -> cli -> the serving engine."""
    port = free_port()
    env = dict(os.environ, LLMOPS_SGLANG_RELEASE=RELEASE, LLMOPS_SIM_GPUS="NVIDIA H200",
               CUDA_VISIBLE_DEVICES="0", LLMOPS_SIM_TIME_SCALE="0.001",
               LLMOPS_SIM_HOST_MEM_AVAILABLE_GB="200",
               PYTHONPATH=os.pathsep.join([str(ROOT / "collections"), os.environ.get("PYTHONPATH", "")]),
               **{FAIL_SHARE_ENV: "0.5", DECODE_SLOWDOWN_ENV: "2"})
    with open(tmp_path / "engine.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "ansible_collections.llmops.sglang.plugins."
                                 "module_utils._engine", "--model-path", str(MODEL), "--port",
                                 str(port), "--enable-metrics"], env=env, stdout=log, stderr=log)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60  # a bound on a hang, not a measurement
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    if _http("GET", base + "/health")[0] == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.05)
            info = json.loads(_http("GET", base + "/server_info")[1])
            statuses = [_http("POST", base + "/generate", {
                "text": "hi", "sampling_params": {"max_new_tokens": 2}})[0] for _ in range(4)]
            metrics = _http("GET", base + "/metrics")[1].decode()
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
    assert info["llmops_sim"]["fail_share"] == 0.5 and info["llmops_sim"]["decode_slowdown"] == 2.0
    assert statuses == [200, 500, 200, 500]
    assert _responses(metrics)[("/generate", "500")] == 2
    assert "Error in request: injected fault: LLMOPS_SIM_FAIL_SHARE=0.5" in (tmp_path / "engine.log").read_text()
