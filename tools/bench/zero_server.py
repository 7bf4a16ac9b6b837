#!/usr/bin/env python
"""A zero-delay SGLang-shaped streaming server, to measure the ceiling of a benchmark client.

    python tools/bench/zero_server.py --port 34500 [--chunk-tokens 1]

POST /v1/completions (stream) and POST /generate (stream) answer at once with every SSE event
of the response written in ONE write (the body is built once per (api, max_tokens, usage) and
cached), so the server spends almost nothing per token and the client has to parse every event;
with --per-event-writes each event is its own write, with a yield to the other streams in
between (chunks then arrive as separate reads, as from a real server, and the server costs more).
Token chunks carry non-empty text (" tok", one word per token, so SGLang's bench_serving, which
ignores empty-text chunks, counts them), chunk_tokens tokens per event; the last token chunk has
finish_reason "length"; a usage chunk (choices: []) only when stream_options.include_usage, then
"data: [DONE]" -- the shape of SGLang 0.5.17's streams. A request without "stream" (as
generate.yml's job sends them) gets the whole JSON response, /v1/chat/completions too. Also: GET /v1/models, /server_info,
/get_server_info, /health, /health_generate, /get_model_info. Prints "PORT <n>" (the bound port: --port 0
picks a free one) at start-up, just before it listens.
Ids repeat between responses (cached bodies); nothing checks them.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time

from aiohttp import web

MODEL = "zero"


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Zero:
    def __init__(self, chunk_tokens: int, per_event: bool = False) -> None:
        self.m = max(1, chunk_tokens)
        self.per_event = per_event
        self.events: dict[bytes, list[bytes]] = {}
        self.cache: dict[tuple, bytes] = {}
        self.requests = 0
        self.tokens = 0

    def _openai(self, max_tokens: int, usage: bool, prompt_tokens: int) -> bytes:
        parts = []
        created = int(time.time())
        sent = 0
        while sent < max_tokens:
            n = min(self.m, max_tokens - sent)
            sent += n
            last = sent >= max_tokens
            parts.append(b"data: " + _dumps({
                "id": "zero", "object": "text_completion", "created": created, "model": MODEL,
                "choices": [{"index": 0, "text": " tok" * n, "logprobs": None,
                             "finish_reason": "length" if last else None,
                             "matched_stop": None}],
                "usage": None}) + b"\n\n")
        if usage:
            parts.append(b"data: " + _dumps({
                "id": "zero", "object": "text_completion", "created": created, "model": MODEL,
                "choices": [], "usage": {"prompt_tokens": prompt_tokens,
                                         "completion_tokens": max_tokens,
                                         "total_tokens": prompt_tokens + max_tokens}}) + b"\n\n")
        parts.append(b"data: [DONE]\n\n")
        return b"".join(parts)

    def _native(self, max_tokens: int, prompt_tokens: int) -> bytes:
        parts = []
        sent = 0
        while sent < max_tokens:
            n = min(self.m, max_tokens - sent)
            sent += n
            last = sent >= max_tokens
            parts.append(b"data: " + _dumps({
                "text": " tok" * sent, "output_ids": [7] * n,
                "meta_info": {"id": "zero", "finish_reason": {"type": "length", "length": max_tokens}
                              if last else None, "prompt_tokens": prompt_tokens,
                              "completion_tokens": sent, "cached_tokens": 0}}) + b"\n\n")
        parts.append(b"data: [DONE]\n\n")
        return b"".join(parts)

    async def _stream(self, request: web.Request, body: bytes, tokens: int) -> web.StreamResponse:
        self.requests += 1
        self.tokens += tokens
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        if self.per_event:
            # one write (one send) per SSE event, yielding to the other streams in between,
            # as a server that emits a chunk per decode step does (no sleep: zero delay)
            events = self.events.get(body)
            if events is None:
                events = self.events[body] = [e + b"\n\n" for e in body.split(b"\n\n") if e]
            for event in events:
                await resp.write(event)
                await asyncio.sleep(0)
        else:
            await resp.write(body)
        await resp.write_eof()
        return resp

    def _whole(self, chat: bool, n: int, pt: int) -> bytes:
        """A non-streamed response (generate.yml's job asks for those), cached per shape."""
        key = ("whole", chat, n, pt)
        body = self.cache.get(key)
        if body is None:
            choice = ({"index": 0, "message": {"role": "assistant", "content": " tok" * n}, "finish_reason": "length"}
                      if chat else {"index": 0, "text": " tok" * n, "logprobs": None, "finish_reason": "length"})
            body = self.cache[key] = _dumps({
                "id": "zero", "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                "model": MODEL, "choices": [choice],
                "usage": {"prompt_tokens": pt, "completion_tokens": n, "total_tokens": pt + n}})
        return body

    async def chat(self, request: web.Request) -> web.Response:
        req = await request.json()
        n = int(req.get("max_tokens") or 16)
        pt = sum(len(str(m.get("content") or "").split()) for m in req.get("messages") or [])
        self.requests += 1
        self.tokens += n
        return web.Response(body=self._whole(True, n, pt), content_type="application/json")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        req = await request.json()
        n = int(req.get("max_tokens") or 16)
        usage = bool((req.get("stream_options") or {}).get("include_usage"))
        prompt = req.get("prompt")
        pt = len(prompt) if isinstance(prompt, list) else len(str(prompt or "").split())
        if not req.get("stream"):
            self.requests += 1
            self.tokens += n
            return web.Response(body=self._whole(False, n, pt), content_type="application/json")
        key = ("openai", n, usage, pt)
        body = self.cache.get(key)
        if body is None:
            body = self.cache[key] = self._openai(n, usage, pt)
        return await self._stream(request, body, n)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        req = await request.json()
        sp = req.get("sampling_params") or {}
        n = int(sp.get("max_new_tokens") or 16)
        text = req.get("text")
        pt = len(req["input_ids"]) if req.get("input_ids") else len(str(text or "").split())
        key = ("native", n, pt)
        body = self.cache.get(key)
        if body is None:
            body = self.cache[key] = self._native(n, pt)
        return await self._stream(request, body, n)

    async def models(self, _r: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": MODEL, "object": "model", "created": 0, "owned_by": "sglang", "root": MODEL,
             "max_model_len": 1 << 20}]})

    async def info(self, _r: web.Request) -> web.Response:
        return web.json_response({"version": "0.5.17", "model_path": MODEL,
                                  "max_running_requests": 1 << 20,
                                  "internal_states": [{"max_running_requests": 1 << 20}],
                                  "zero_server": {"requests": self.requests,
                                                  "tokens": self.tokens}})

    async def model_info(self, _r: web.Request) -> web.Response:
        return web.json_response({"model_path": MODEL, "tokenizer_path": MODEL,
                                  "is_generation": True})

    async def ok(self, _r: web.Request) -> web.Response:
        return web.Response(status=200)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=34500)
    ap.add_argument("--chunk-tokens", type=int, default=1)
    ap.add_argument("--per-event-writes", action="store_true",
                    help="one write per SSE event (else the whole response in one write)")
    a = ap.parse_args()
    z = Zero(a.chunk_tokens, a.per_event_writes)
    app = web.Application(client_max_size=1 << 24)
    app.add_routes([web.post("/v1/completions", z.completions), web.post("/v1/chat/completions", z.chat),
                    web.post("/generate", z.generate),
                    web.get("/v1/models", z.models), web.get("/server_info", z.info),
                    web.get("/get_server_info", z.info), web.get("/get_model_info", z.model_info),
                    web.get("/health", z.ok), web.get("/health_generate", z.ok)])

    # the socket is bound here, before the port is announced: with --port 0 the kernel picks a free
    # one and no other process can take it between the announcement and the listen (two CI stages
    # running the same tests side by side did, when the test picked the port itself)
    sock = socket.socket(socket.AF_INET6 if ":" in a.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((a.host, a.port))
    port = sock.getsockname()[1]

    async def _announce(_app: web.Application) -> None:
        print(f"PORT {port}", flush=True)

    app.on_startup.append(_announce)
    web.run_app(app, sock=sock, access_log=None, print=None)


if __name__ == "__main__":
    main()
