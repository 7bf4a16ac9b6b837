# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""A streaming test server with an exactly known rate, speaking SGLang 0.5.17's wire format.

Model: K slots (``slots``) served first come, first served. A request waits for a slot, then
spends ``prefill_s`` (P) before its first token, then produces tokens at ``rate`` (R) tokens/s,
sent ``chunk_tokens`` (M) per SSE event: chunk j leaves at slot_start + P + min((j+1)*M, T)/R,
scheduled against absolute times so nothing drifts. One request holds its slot for
S = P + T/R, so a closed-loop level of n requests at concurrency C takes ceil(n / min(C, K))
waves of S and delivers n*T / (ceil(n / min(C, K)) * S) tokens/s: ``expected_output_tok_s``.

Chunks copy the fields of the real 0.5.17 recordings in
``tests/fixtures/sglang-0.5.17-h200/*/stream_{completions,generate}.txt``: OpenAI completion
chunks with ``"text": ""`` allowed, ``"usage": null``, the finish chunk with
``finish_reason: "length"``, then (only when ``stream_options.include_usage``) a usage chunk with
``choices: []``, then ``data: [DONE]``; native chunks with the cumulative text, output_ids and
``meta_info.completion_tokens``. /server_info answers the recorded body with the knobs replaced.

Faults (counted over generation requests since the last /_config): every ``fail_http_every``-th
request gets HTTP 500, every ``fail_stream_every``-th sends an in-stream ``{"error": ...}`` after
half of its tokens (then [DONE], as SGLang does), every ``short_every``-th stops at half with
``finish_reason: "stop"``; ``hang`` sends headers and then nothing. ``fail_http_below_tokens``
fails (HTTP 500) every request asking for fewer tokens than that (the sweep's level warm-up
rounds). Drift: requests after the ``slow_after``-th run at ``rate * slow_factor``. A killed
server: the ``die_after_requests``-th request gets its headers and first token chunk, then the
process exits at once (``os._exit``, as under SIGKILL): streams in flight break, and every later
request finds nothing listening.

What it served, in its own time: GET /_served lists every generation request since the last
/_config in the order received, with its prompt, max_tokens, tokens sent and ``time.monotonic()``
stamps: ``received`` (the handler's first line: after the client sent it), ``slot`` (its slot
began), ``done`` (just before ``[DONE]`` is written: before the client can read the end). Tests
compare the sweep's figures with these, which no load on the machine can make disagree.

Run: ``python knownrate_server.py [--port 0] [--slots 4 ...]``: prints ``PORT <n>`` once
listening. POST /_config with a JSON object of ServerConfig fields reconfigures it (and resets
the counters); GET /_stats returns the counters.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import socket
import sys
import time
import uuid
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from aiohttp import web


@dataclass
class ServerConfig:
    slots: int = 4  # K
    rate: float = 1000.0  # R tokens/s per request
    chunk_tokens: int = 1  # M tokens per SSE event
    prefill_s: float = 0.05  # P
    empty_text_chunks: int = 1  # leading token chunks whose text is "" (as recorded)
    fail_http_every: int = 0
    fail_stream_every: int = 0
    short_every: int = 0
    hang: bool = False
    hang_s: float = 60.0
    legacy_server_info: bool = False  # answer only /get_server_info
    spec_accept_length: float | None = None
    fail_http_below_tokens: int = 0
    slow_after: int = 0  # 0 = never
    slow_factor: float = 1.0
    die_after_requests: int = 0  # 0 = never; else the process exits during that request
    model: str = "/models/knownrate"
    version: str = "0.5.17"
    prompt_tokens: int = 9

    def service_time(self, max_tokens: int) -> float:
        return self.prefill_s + max_tokens / self.rate


def expected_output_tok_s(cfg: ServerConfig, concurrency: int, requests: int, max_tokens: int) -> float:
    """Analytic full-run throughput of a closed-loop level (see the module docstring)."""
    parallel = min(concurrency, cfg.slots)
    waves = math.ceil(requests / parallel)
    return requests * max_tokens / (waves * cfg.service_time(max_tokens))


def expected_steady_tok_s(cfg: ServerConfig, concurrency: int, max_tokens: int) -> float:
    """Analytic throughput while every slot in use stays busy: min(C, K) * T / S."""
    return min(concurrency, cfg.slots) * max_tokens / cfg.service_time(max_tokens)


RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200"


def _recorded_server_info() -> dict[str, Any]:
    """The body /server_info answered on a real 0.5.17 server (dense recording)."""
    text = (RECORDING / "dense" / "ep_server_info.txt").read_text()
    return json.loads(text[text.index("{"):])


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class KnownRateServer:
    def __init__(self, cfg: ServerConfig) -> None:
        self.info_template = _recorded_server_info()
        self.configure(cfg)

    def configure(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self.slots = asyncio.Semaphore(cfg.slots)
        self.received = 0
        self.completed = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.generated = 0
        self.max_tokens_seen: dict[int, int] = {}
        self.served: list[dict[str, Any]] = []
        old = getattr(self, "release_hang", None)
        if old is not None:
            old.set()
        self.release_hang = asyncio.Event()

    # -- control -------------------------------------------------------------------------------

    async def h_config(self, request: web.Request) -> web.Response:
        body = await request.json()
        known = {f.name for f in fields(ServerConfig)}
        unknown = set(body) - known
        if unknown:
            return web.json_response({"error": f"unknown fields {sorted(unknown)}"}, status=400)
        self.configure(ServerConfig(**body))
        return web.json_response(asdict(self.cfg))

    async def h_stats(self, _request: web.Request) -> web.Response:
        return web.json_response(
            {
                "received": self.received,
                "completed": self.completed,
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "generated": self.generated,
                "max_tokens_seen": self.max_tokens_seen,
            }
        )

    async def h_served(self, _request: web.Request) -> web.Response:
        return web.json_response(self.served)

    # -- info ----------------------------------------------------------------------------------

    async def h_models(self, _request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.cfg.model,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "sglang",
                        "root": self.cfg.model,
                        "parent": None,
                        "max_model_len": 32768,
                    }
                ],
            }
        )

    def _server_info(self) -> dict[str, Any]:
        info = json.loads(json.dumps(self.info_template))
        info["version"] = self.cfg.version
        info["max_running_requests"] = self.cfg.slots
        info["model_path"] = self.cfg.model
        states = info.get("internal_states") or [{}]
        state = states[0]
        state["max_running_requests"] = self.cfg.slots
        state["effective_max_running_requests_per_dp"] = self.cfg.slots
        if self.cfg.spec_accept_length is not None:
            state["avg_spec_accept_length"] = self.cfg.spec_accept_length
        else:
            state.pop("avg_spec_accept_length", None)
        info["internal_states"] = states
        return info

    async def h_server_info(self, _request: web.Request) -> web.Response:
        if self.cfg.legacy_server_info:
            raise web.HTTPNotFound()
        return web.json_response(self._server_info())

    async def h_get_server_info(self, _request: web.Request) -> web.Response:
        return web.json_response(self._server_info())

    async def h_health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200)

    # -- generation ----------------------------------------------------------------------------

    def _fault(self, number: int) -> str | None:
        cfg = self.cfg
        if cfg.hang:
            return "hang"
        if cfg.fail_http_every and number % cfg.fail_http_every == 0:
            return "http"
        if cfg.fail_stream_every and number % cfg.fail_stream_every == 0:
            return "stream"
        if cfg.short_every and number % cfg.short_every == 0:
            return "short"
        return None

    async def _generate(self, request: web.Request, api: str) -> web.StreamResponse:
        received = time.monotonic()
        body = await request.json()
        self.received += 1
        number = self.received
        cfg = self.cfg
        if api == "openai":
            max_tokens = int(body.get("max_tokens") or 16)
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        else:
            max_tokens = int((body.get("sampling_params") or {}).get("max_new_tokens") or 128)
            include_usage = False
        served: dict[str, Any] = {"prompt": body.get("prompt" if api == "openai" else "text"),
                                  "max_tokens": max_tokens, "received": received, "slot": None,
                                  "done": None, "tokens": 0, "body": body}
        self.served.append(served)
        self.max_tokens_seen[max_tokens] = self.max_tokens_seen.get(max_tokens, 0) + 1
        fault = self._fault(number)
        if cfg.fail_http_below_tokens and max_tokens < cfg.fail_http_below_tokens:
            fault = "http"
        rate = cfg.rate * (cfg.slow_factor if cfg.slow_after and number > cfg.slow_after else 1.0)
        if fault == "http":
            return web.json_response(
                {
                    "object": "error",
                    "message": f"injected fault on request {number}",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                },
                status=500,
            )
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        if fault == "hang":
            release = self.release_hang
            try:
                await asyncio.wait_for(release.wait(), cfg.hang_s)
            except TimeoutError:
                pass
            return resp
        rid = uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        stop_at = max_tokens // 2 if fault in ("stream", "short") else max_tokens
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            async with self.slots:
                t0 = loop.time()
                served["slot"] = time.monotonic()
                sent = 0
                j = 0
                while sent < stop_at:
                    upto = min(sent + cfg.chunk_tokens, stop_at)
                    due = t0 + cfg.prefill_s + upto / rate
                    delay = due - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    finished = upto >= stop_at
                    if fault == "stream" and finished:
                        await resp.write(
                            b"data: "
                            + _dumps(
                                {
                                    "error": {
                                        "object": "error",
                                        "message": "injected in-stream fault",
                                        "type": "InternalServerError",
                                        "param": None,
                                        "code": 500,
                                    }
                                }
                            )
                            + b"\n\n"
                        )
                        break
                    reason = ("stop" if fault == "short" else "length") if finished else None
                    text = "" if j < cfg.empty_text_chunks or j % 3 == 2 else f" tok{j}"
                    if api == "openai":
                        chunk = self._openai_chunk(rid, text, reason)
                    else:
                        chunk = self._native_chunk(rid, j, upto, reason, max_tokens)
                    await resp.write(b"data: " + _dumps(chunk) + b"\n\n")
                    if cfg.die_after_requests and number >= cfg.die_after_requests:
                        os._exit(137)  # killed: no cleanup, every connection dropped
                    self.generated += upto - sent
                    sent = upto
                    served["tokens"] = sent
                    j += 1
                if api == "openai" and include_usage and fault != "stream":
                    usage = {
                        "prompt_tokens": cfg.prompt_tokens,
                        "total_tokens": cfg.prompt_tokens + sent,
                        "completion_tokens": sent,
                        "reasoning_tokens": 0,
                    }
                    final = {
                        "id": rid,
                        "object": "text_completion",
                        "created": int(time.time()),
                        "model": cfg.model,
                        "choices": [],
                        "usage": usage,
                    }
                    await resp.write(b"data: " + _dumps(final) + b"\n\n")
                served["done"] = time.monotonic()  # before the end is written: the client reads it later
                await resp.write(b"data: [DONE]\n\n")
                self.completed += 1
        except (ConnectionError, RuntimeError):
            pass  # client went away
        finally:
            self.in_flight -= 1
        return resp

    def _openai_chunk(self, rid: str, text: str, reason: str | None) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.cfg.model,
            "choices": [
                {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "matched_stop": None}
            ],
            "usage": None,
        }

    def _native_chunk(self, rid: str, j: int, count: int, reason: str | None, max_tokens: int) -> dict[str, Any]:
        cfg = self.cfg
        words = [f" tok{i}" for i in range(j + 1) if not (i < cfg.empty_text_chunks or i % 3 == 2)]
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": None,
            "prompt_tokens": cfg.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": count,
            "cached_tokens": 0,
            "cached_tokens_details": {"device": 0, "host": 0},
            "dp_rank": None,
        }
        if reason == "length":
            meta["finish_reason"] = {"type": "length", "length": max_tokens}
        elif reason is not None:
            meta["finish_reason"] = {"type": reason, "matched": 2}
        return {"text": "".join(words), "output_ids": [1000 + i for i in range(count)], "meta_info": meta}

    async def h_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "openai")

    async def h_generate(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "native")


def make_app(cfg: ServerConfig | None = None) -> web.Application:
    server = KnownRateServer(cfg or ServerConfig())
    app = web.Application()
    app["server"] = server
    app.router.add_get("/v1/models", server.h_models)
    app.router.add_get("/server_info", server.h_server_info)
    app.router.add_get("/get_server_info", server.h_get_server_info)
    app.router.add_get("/health", server.h_health)
    app.router.add_post("/v1/completions", server.h_completions)
    app.router.add_post("/generate", server.h_generate)
    app.router.add_post("/_config", server.h_config)
    app.router.add_get("/_stats", server.h_stats)
    app.router.add_get("/_served", server.h_served)
    return app


async def _serve(host: str, port: int, cfg: ServerConfig) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    runner = web.AppRunner(make_app(cfg), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.SockSite(runner, sock, backlog=1024).start()
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--chunk-tokens", type=int, default=1)
    parser.add_argument("--prefill-s", type=float, default=0.05)
    args = parser.parse_args(argv)
    cfg = ServerConfig(slots=args.slots, rate=args.rate, chunk_tokens=args.chunk_tokens, prefill_s=args.prefill_s)
    asyncio.run(_serve(args.host, args.port, cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
