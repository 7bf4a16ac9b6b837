"""Prefill/decode disaggregation in the embedded engine (``_engine/disagg.py``, issue 32): a prefill
and a decode engine given the same body with the router's bootstrap fields (what sglang-router 0.3.2
sends both, seen on the wire); the decode side generates once the prefill's KV arrived and does no
prefill work for it; a prefill out of reach fails the request and is counted; no bootstrap room (a
health check, SGLang's fake host) runs standalone."""
from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from ansible_collections.llmops.sglang.plugins.module_utils._engine.disagg import (
    FAKE_BOOTSTRAP_HOST,
    bootstrap_of,
    refused_args,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.server import HttpServer

from .....ports import free_port
from .test_radixcache import DENSE, make_engine, metric


def _engines(port: int) -> tuple[Any, Any]:
    common = ["--host", "127.0.0.1", "--enable-metrics", "--disaggregation-transfer-backend", "mooncake_tcp",
              "--disaggregation-bootstrap-port", str(port)]
    return (make_engine(["--disaggregation-mode", "prefill", *common], DENSE),
            make_engine(["--disaggregation-mode", "decode", *common], DENSE))


async def _serving(engines: tuple[Any, ...], body: Any) -> Any:
    clients = [TestClient(TestServer(HttpServer(e).build_app())) for e in engines]
    loops = [asyncio.create_task(e.scheduler.run()) for e in engines]
    for engine in engines:
        engine.state = "ready"
        if engine.disagg is not None:
            await engine.disagg.start()
    for client in clients:
        await client.start_server()
    try:
        return await asyncio.wait_for(body(*clients), timeout=60)
    finally:
        for client in clients:
            await client.close()
        for engine in engines:
            if engine.disagg is not None:
                await engine.disagg.stop()
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)


def test_the_decode_side_generates_from_the_kv_the_prefill_side_computed() -> None:
    port = free_port()
    prefill, decode = _engines(port)
    body = {"text": "a long shared system prompt " * 80, "sampling_params": {"max_new_tokens": 16},
            "bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 4242}

    async def scenario(p: TestClient, d: TestClient) -> tuple[Any, Any, str, str]:
        # as the router sends them: both at once; decode first, so it waits for the KV
        answers = await asyncio.gather(d.post("/generate", json=body), p.post("/generate", json=body))
        texts = [await a.json() for a in answers]
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                "bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 7}
        chats = await asyncio.gather(d.post("/v1/chat/completions", json=chat),
                                     p.post("/v1/chat/completions", json=chat))
        assert [c.status for c in chats] == [200, 200]
        assert (await chats[0].json())["usage"]["completion_tokens"] == 4
        info = await (await p.get("/server_info")).json()
        return texts[0], texts[1], (await d.get("/metrics")).status, info["disaggregation_mode"]

    decoded, prefilled, status, mode = asyncio.run(_serving((prefill, decode), scenario))
    assert mode == "prefill" and status == 200
    assert decoded["meta_info"]["completion_tokens"] == 16  # the tokens come from decode
    assert prefilled["meta_info"]["completion_tokens"] == 1  # prefill computes the prompt and one token
    prompt = decoded["meta_info"]["prompt_tokens"]
    assert prompt > 200 and prefill.disagg.counters.transferred_reqs == 2
    # decode did no prefill work for it: all but the last prompt token came with the KV
    computed = {name: metric(e, "realtime_tokens_total", mode="prefill_compute") for name, e in
                (("prefill", prefill), ("decode", decode))}
    assert computed["decode"] == 2  # the last prompt token of each of its two requests
    assert computed["prefill"] == metric(prefill, "prompt_tokens_total") > prompt  # every prompt token
    assert prefill.disagg.rooms == {}  # fetched: nothing left waiting
    # the transfers' latency, as the real prefill side exports it: the KV bytes at the backend's rate
    # (modelled ms); the decode side does not declare it
    chat_prompt = prefill.disagg.counters.transfer_latency_ms.sum - prefill.disagg.transfer_s(prompt) * 1000
    assert metric(prefill, "kv_transfer_latency_ms_count") == 2 and 0 < chat_prompt < 1
    assert metric(decode, "kv_transfer_latency_ms_count") is None
    assert metric(decode, "num_bootstrap_failed_reqs_total") == 0


def test_a_prefill_out_of_reach_fails_the_request_and_a_health_check_runs_standalone(monkeypatch: Any) -> None:
    from ansible_collections.llmops.sglang.plugins.module_utils._engine import disagg

    monkeypatch.setattr(disagg, "CONNECT_ATTEMPTS", 1)
    _, decode = _engines(free_port())
    nowhere = free_port()
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 2}, "bootstrap_host": "127.0.0.1",
            "bootstrap_port": nowhere, "bootstrap_room": 1}
    fake = dict(body, bootstrap_host=FAKE_BOOTSTRAP_HOST)

    async def scenario(d: TestClient) -> tuple[int, str, int]:
        failed = await d.post("/generate", json=body)
        alone = await d.post("/generate", json=fake)
        return failed.status, await failed.text(), alone.status

    status, text, alone = asyncio.run(_serving((decode,), scenario))
    assert status == 500 and f"Failed to bootstrap room 1 with the prefill server 127.0.0.1:{nowhere}" in text
    assert alone == 200  # SGLang's fake bootstrap host: health checks and warm-up run standalone
    assert metric(decode, "num_bootstrap_failed_reqs_total") == 1
    assert bootstrap_of({"bootstrap_host": FAKE_BOOTSTRAP_HOST, "bootstrap_room": 0}) is None
    assert bootstrap_of({"text": "x"}) is None
    assert bootstrap_of({"bootstrap_host": "10.0.0.1", "bootstrap_port": None, "bootstrap_room": 3}) == \
        ("10.0.0.1", 0, 3)


def test_a_decode_with_hicache_is_refused_at_start_as_sglang_refuses_it(monkeypatch: Any,
                                                                        capsys: Any) -> None:
    """SGLang 0.5.17's PD hook makes a decode's KV a chunk cache, and ServerArgs then refuses
    HiCache: exit 1 with its ValueError (the plan leaves HiCache off decode instances: test_pd)."""
    from ansible_collections.llmops.sglang.plugins.module_utils._engine import cli

    monkeypatch.setenv("LLMOPS_SGLANG_RELEASE", "0.5.17")
    argv = ["--model-path", "/nowhere", "--disaggregation-mode", "decode", "--enable-hierarchical-cache"]
    assert cli.main(argv) == 1
    assert "ValueError: The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive" \
        in capsys.readouterr().err
    assert refused_args({"disaggregation_mode": "decode", "enable_hierarchical_cache": True,
                         "disaggregation_decode_enable_radix_cache": True}) is None
    assert refused_args({"disaggregation_mode": "prefill", "enable_hierarchical_cache": True}) is None
