"""A small OpenAI-shaped server for the generation job's tests: answers /v1/completions and
/v1/chat/completions with a usage block, after ``delay`` seconds; counts the requests per id
(the prompt, or the last message's content, is the id); fails the ids of ``fail`` with their
status, and ``flaky`` ids with 503 the first ``flaky_times`` times. Runs in a thread of the test
process (``start``), on loopback."""
from __future__ import annotations

import asyncio
import collections
import json
import threading
from typing import Any

from aiohttp import web


class FakeServer:
    def __init__(self, delay: float = 0.0, fail: dict[str, int] | None = None, flaky: set[str] | None = None,
                 flaky_times: int = 1, model: str | None = None) -> None:
        self.delay = delay
        self.fail = dict(fail or {})
        self.flaky = set(flaky or ())
        self.flaky_times = flaky_times
        self.model = model  # served at GET /v1/models when set (a router asks every body for one)
        self.seen: collections.Counter[str] = collections.Counter()
        self.tokens = [0, 0]  # prompt, completion: served at GET /metrics as SGLang's counters
        self.bodies: dict[str, dict[str, Any]] = {}
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @staticmethod
    def ident(body: dict[str, Any]) -> str:
        if "messages" in body:
            return str(body["messages"][-1]["content"])
        return str(body["prompt"])

    async def _models(self, _request: web.Request) -> web.Response:
        if not self.model:
            return web.json_response({"detail": "Not Found"}, status=404)
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _metrics(self, _request: web.Request) -> web.Response:
        labels = '{engine_type="unified",is_streaming="false",model_name="fake"}'
        return web.Response(text=f"# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{labels} "
                                 f"{float(self.tokens[0])}\n# TYPE sglang:generation_tokens_total counter\n"
                                 f"sglang:generation_tokens_total{labels} {float(self.tokens[1])}\n")

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.model and body.get("model") is None:
            return web.Response(status=422, text="Failed to deserialize the JSON body into the target type: "
                                                 "missing field `model` at line 1 column 33")
        ident = self.ident(body)
        self.seen[ident] += 1
        self.bodies[ident] = body
        if self.delay:
            await asyncio.sleep(self.delay)
        if ident in self.fail:
            return web.json_response({"object": "error", "message": f"no {ident}", "code": self.fail[ident]},
                                     status=self.fail[ident])
        if ident in self.flaky and self.seen[ident] <= self.flaky_times:
            return web.json_response({"object": "error", "message": "busy"}, status=503)
        words = int(body.get("max_tokens") or 4)
        self.tokens[0] += len(ident)
        self.tokens[1] += words
        chat = "messages" in body
        choice = ({"index": 0, "message": {"role": "assistant", "content": " w" * words}, "finish_reason": "length"}
                  if chat else {"index": 0, "text": " w" * words, "finish_reason": "length"})
        return web.json_response({"id": f"cmpl-{ident}", "object": "chat.completion" if chat else "text_completion",
                                  "model": "fake", "choices": [choice],
                                  "usage": {"prompt_tokens": len(ident), "completion_tokens": words,
                                            "total_tokens": len(ident) + words}})

    def start(self, port: int = 0) -> FakeServer:
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            app = web.Application()
            app.router.add_post("/v1/completions", self._handle)
            app.router.add_post("/v1/chat/completions", self._handle)
            app.router.add_get("/v1/models", self._models)
            app.router.add_get("/metrics", self._metrics)
            self._runner = web.AppRunner(app, access_log=None)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", port, reuse_address=True)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)


def write_input(path: Any, n: int, start: int = 0, chat_every: int = 3) -> list[str]:
    """``n`` lines, ids r<start>..; every ``chat_every``-th a batch chat line, the others plain prompts."""
    ids = []
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(start, start + n):
            ident = f"r{i}"
            ids.append(ident)
            if chat_every and i % chat_every == 0:
                line = {"custom_id": ident, "method": "POST", "url": "/v1/chat/completions",
                        "body": {"messages": [{"role": "user", "content": ident}], "max_tokens": 3}}
            else:
                line = {"id": ident, "prompt": ident}
            fh.write(json.dumps(line) + "\n")
    return ids
