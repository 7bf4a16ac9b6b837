# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The HTTP servers (aiohttp, the one file of the engine that needs it).

``HttpServer``: SGLang's API on node rank 0: the application, its middlewares (uvicorn-style
access log and HTTP metrics, ``--api-key``), the routes, and the server's life: the modelled
start-up log (with several nodes, their meeting: ``fleet.Rendezvous``), listening, warm-up,
ready, SIGTERM, shutdown. ``PlaceholderServer``: what a node of rank > 0 serves on its
``--port`` (``launch_dummy_health_check_server``; its life is ``follower``'s)."""
from __future__ import annotations

import asyncio
import functools
import os
import random
import secrets
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web

from ansible_collections.llmops.sglang.plugins.module_utils._engine import (
    api_native,
    api_openai,
    fleet,
    info,
    loads,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.engine import Engine
from ansible_collections.llmops.sglang.plugins.module_utils._engine.prometheus import render_metrics
from ansible_collections.llmops.sglang.plugins.module_utils._engine.replies import Reply, Stream, json_dumps
from ansible_collections.llmops.sglang.plugins.module_utils._engine.requests import ApiRequest
from ansible_collections.llmops.sglang.plugins.module_utils._engine.scheduler import TIMEOUTS, clear_storage
from ansible_collections.llmops.sglang.plugins.module_utils._engine.startup import (
    WARMUP_SECONDS,
    Schedule,
    play_lines,
)

ApiHandler = Callable[[Engine, ApiRequest], Awaitable["Reply | Stream"]]
_OPEN_PREFIXES = ("/health", "/ready", "/metrics")  # no API key needed (SGLang's auth.py)
FAILSAFE_S = 30.0  # a failed scheduler's SIGQUIT ends the process long before this
FLUSHED = ("Cache flushed.\nPlease check backend logs for more details. (When there are running "
           "or waiting requests, the operation will not be performed.)\n")
FLUSH_POLL_S = 0.01


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=json_dumps(obj), status=status, content_type="application/json")


async def _headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["server"] = "uvicorn"
    response.headers["vary"] = "Origin"


async def _uvicorn_header(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["server"] = "uvicorn"


@web.middleware
async def _fastapi_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """FastAPI's 404 / 405 bodies (405 with its ``allow`` header)."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        headers = {"allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return web.Response(text=json_dumps({"detail": exc.reason}), status=exc.status,
                            content_type="application/json", headers=headers)


async def _sse(request: web.Request, stream: Stream) -> web.StreamResponse:
    """Each event as ``data: <json>``, then ``data: [DONE]``; a client that goes away cancels
    the requests behind the stream."""
    resp = web.StreamResponse(status=200, headers={
        "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    try:
        async for obj in stream.events:
            await resp.write(f"data: {json_dumps(obj)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
    except (ConnectionError, asyncio.CancelledError):
        stream.abort()
        raise
    return resp


def _client(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "-"


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


async def clear_storage_route(engine: Engine, request: web.Request) -> web.StreamResponse:
    """POST /hicache/storage-backend/clear (and the deprecated path): the storage tier's files go;
    200 with HiCache on, else 400 and the scheduler's warning."""
    ok = clear_storage(engine.scheduler)
    text = "Hierarchical cache storage backend cleared.\n"
    if request.path != "/hicache/storage-backend/clear":
        text = "Deprecated endpoint. Use POST /hicache/storage-backend/clear.\n" + text
    return web.Response(text=text, status=200 if ok else 400)


class HttpServer:
    """SGLang's HTTP surface over one engine (docs/engine-api.md "HTTP surface")."""

    def __init__(self, engine: Engine, meeting: fleet.Rendezvous | None = None) -> None:
        self.engine = engine
        self.log = engine.log
        self.traits = engine.config.traits
        self.meeting = meeting  # node rank 0 of several: the other nodes meet it
        self._watcher: asyncio.Future[None] | None = None

    # -- the application -------------------------------------------------------------
    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._mw_common, self._mw_auth],
                              client_max_size=64 * 1024 * 1024)
        app.on_response_prepare.append(_headers)
        add = app.router.add_route
        add("GET", "/health", self.h_health)
        add("GET", "/health_generate", self.h_health)
        add("GET", "/get_model_info", self.h_model_info)
        add("GET", "/model_info", self.h_model_info)
        add("GET", "/v1/models", self.h_models)
        info_path = str(self.traits.get("server_info_path") or "/get_server_info")
        add("GET", info_path, self.h_server_info)
        old_path = self.traits.get("server_info_deprecated_path")
        if old_path and old_path != info_path:
            add("GET", str(old_path), self.h_server_info)
        add("POST", "/v1/completions", self._api(api_openai.completions))
        add("POST", "/v1/chat/completions", self._api(api_openai.chat))
        add("POST", "/generate", self._api(api_native.generate))
        add("PUT", "/generate", self._api(api_native.generate))
        if self.traits.get("get_load"):
            add("GET", "/get_load", self.h_get_load)
        if self.traits.get("v1_loads"):
            add("GET", "/v1/loads", self.h_v1_loads)
        if self.engine.config.args.get("enable_metrics"):
            add("GET", "/metrics", self.h_metrics)
        add("GET", "/flush_cache", self.h_flush_cache)
        add("POST", "/flush_cache", self.h_flush_cache)
        for path, methods in (self.traits.get("hicache_storage_clear") or {}).items():
            for method in methods:
                add(method, path, functools.partial(clear_storage_route, self.engine))
        return app

    @web.middleware
    async def _mw_common(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """HTTP metrics, FastAPI's error bodies, and the access line of every response."""
        route = request.match_info.route.resource
        endpoint = route.canonical if route is not None else None
        if endpoint:
            self.engine.metrics.http_started(endpoint, request.method)
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            detail = exc.reason if exc.status in (404, 405) else exc.text
            return json_response({"detail": detail}, exc.status)
        finally:
            if endpoint:
                self.engine.metrics.http_finished(endpoint, request.method, status)
            self.log.access(f'INFO:     {_client(request)} - "{request.method} {request.path_qs} HTTP/'
                            f'{request.version.major}.{request.version.minor}" {status} {_phrase(status)}')

    @web.middleware
    async def _mw_auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """``--api-key``: ``Authorization: Bearer <key>`` or ``x-api-key: <key>``."""
        api_key = self.engine.config.args.get("api_key")
        if not api_key or request.method == "OPTIONS" or request.path.startswith(_OPEN_PREFIXES):
            return await handler(request)
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        ok = scheme.lower() == "bearer" and secrets.compare_digest(token, str(api_key))
        x_key = request.headers.get("x-api-key")
        ok = ok or bool(x_key and secrets.compare_digest(x_key, str(api_key)))
        if not ok:
            return json_response({"error": "Unauthorized"}, 401)
        return await handler(request)

    def _api(self, handler: ApiHandler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """An API handler (``api_openai``, ``api_native``) as an aiohttp handler."""
        async def serve(request: web.Request) -> web.StreamResponse:
            answer = await handler(self.engine, ApiRequest(request.method, request.path,
                                                           await request.read()))
            if isinstance(answer, Stream):
                return await _sse(request, answer)
            return json_response(answer.body, answer.status)
        return serve

    def _deprecated(self, old: str, new: str) -> None:
        if self.traits.get("server_info_deprecated_path"):
            self.log.info(f"Endpoint '{old}' is deprecated and will be removed in a future "
                          f"version. Please use '{new}' instead.")

    # -- handlers ----------------------------------------------------------------------
    async def h_health(self, request: web.Request) -> web.StreamResponse:
        """503 until ready and while stopping; else a one-token generation."""
        if self.engine.state == "stopping":
            self.log.info("Health check request received during shutdown. Returning 503.")
            return web.Response(status=503)
        if self.engine.state != "ready":
            return web.Response(status=503)
        if not await self.engine.scheduler.one_token() or self.engine.state != "ready":
            return web.Response(status=503)
        return web.Response(status=200)

    async def h_model_info(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/get_model_info":
            self._deprecated("/get_model_info", "/model_info")
        return json_response(info.model_info(self.engine))

    async def h_server_info(self, request: web.Request) -> web.StreamResponse:
        if request.path == self.traits.get("server_info_deprecated_path"):
            self._deprecated(request.path, str(self.traits.get("server_info_path")))
        return json_response(info.server_info(self.engine))

    async def h_get_load(self, request: web.Request) -> web.StreamResponse:
        self.log.warning(loads.DEPRECATION)
        return json_response(loads.get_load(self.engine))

    async def h_v1_loads(self, request: web.Request) -> web.StreamResponse:
        answer = loads.v1_loads(self.engine, request.query)
        if isinstance(answer, str):
            return web.Response(text=answer, headers={"Content-Type": loads.PROMETHEUS_TYPE})
        return json_response(answer.body, answer.status)

    async def h_models(self, request: web.Request) -> web.StreamResponse:
        return json_response(info.models_list(self.engine))

    async def h_metrics(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=render_metrics(self.engine), content_type="text/plain",
                            charset="utf-8", headers={"X-Content-Type-Options": "nosniff"})

    async def h_flush_cache(self, request: web.Request) -> web.StreamResponse:
        """GET|POST /flush_cache?timeout=S: flushed at once when idle (200); not idle: 400 with
        timeout 0, else wait up to S seconds for idle ("Timed out waiting for idle state.");
        one waiting flush at a time ("Another flush_cache is already in progress.")."""
        try:
            timeout = float(request.query.get("timeout", "0"))
        except ValueError:
            return json_response({"detail": [{
                "type": "float_parsing", "loc": ["query", "timeout"],
                "msg": "Input should be a valid number, unable to parse string as a number",
                "input": request.query.get("timeout")}]}, 422)
        scheduler = self.engine.scheduler
        if scheduler.flushing:
            return web.Response(text="Another flush_cache is already in progress.", status=400)
        if timeout > 0 and not scheduler.is_idle():
            scheduler.flushing = True
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            try:
                while not scheduler.is_idle() and loop.time() < deadline:
                    await asyncio.sleep(FLUSH_POLL_S)
            finally:
                scheduler.flushing = False
            if not scheduler.is_idle():
                self.log.warning("Deferred flush_cache timed out while waiting for idle state.")
                return web.Response(text="Timed out waiting for idle state.", status=400)
        if scheduler.flush():
            return web.Response(text=FLUSHED, status=200)
        return web.Response(text=FLUSHED, status=400)

    # -- lifecycle ---------------------------------------------------------------------
    async def run(self, sock: socket.socket, schedule: Schedule, listen_early: bool) -> int:
        """Serve until SIGTERM / SIGINT (or a stop): the start-up log at its modelled times,
        listening (early: at once, as uvicorn binds before the model loads; else at ready),
        the warm-up, ready; then the shutdown. Returns the exit code."""
        engine = self.engine
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        loop_task = asyncio.create_task(engine.scheduler.run())
        runner = web.AppRunner(self.build_app(), access_log=None, handle_signals=False,
                               shutdown_timeout=0.25)
        await runner.setup()
        if engine.disagg is not None:  # a prefill's bootstrap server listens from the start
            await engine.disagg.start()
        site: web.SockSite | None = None
        if listen_early:
            site = web.SockSite(runner, sock)
            await site.start()
        try:
            if await self._start_up(schedule, loop.time()):
                return await self._shutdown(runner, loop_task)
            if site is None:
                site = web.SockSite(runner, sock)
                await site.start()
            self._uvicorn_lines()
            if await self._warm_up():
                return await self._shutdown(runner, loop_task)
            engine.state = "ready"
            engine.ready_wall = time.time()
            self.log.info("The server is fired up and ready to roll!")
            await engine.stop_event.wait()
        except asyncio.CancelledError:
            pass
        return await self._shutdown(runner, loop_task)

    async def _start_up(self, schedule: Schedule, start: float) -> bool:
        """The start-up lines, each at its modelled time (and, with several nodes, the nodes
        meeting); True when a stop came first."""
        scale = self.engine.config.startup_scale
        moved = await play_lines(schedule, self.log, start, scale, self._sleep_until,
                                 self._meet if self.meeting is not None else None)
        if moved is None:
            return True
        return await self._sleep_until(moved + schedule.uvicorn_at * scale)

    async def _meet(self) -> float | None:
        """Rank 0 meets the other nodes (after ``Init torch distributed begin.``): the wall
        seconds it took; None when a stop came first or they did not meet (the scheduler's
        failure: its SIGQUIT ends the process), then the nodes are watched."""
        meeting = self.meeting
        if meeting is None:
            return 0.0
        meet = asyncio.ensure_future(meeting.meet())
        stop = asyncio.ensure_future(self.engine.stop_event.wait())
        await asyncio.wait({meet, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not meet.done():
            meet.cancel()
            await asyncio.gather(meet, return_exceptions=True)
            return None
        try:
            waited = meet.result()
        except fleet.MeetingError as exc:
            fleet.scheduler_exception(self.log, str(exc))
            await asyncio.sleep(FAILSAFE_S)
            return None
        self._watcher = asyncio.ensure_future(self._watch_nodes(meeting))
        return waited

    async def _watch_nodes(self, meeting: fleet.Rendezvous) -> None:
        """A node that goes away fails rank 0's scheduler, as a broken gloo group does."""
        line = await meeting.watch()
        if self.engine.state != "stopping":
            fleet.scheduler_exception(self.log, line)

    def _uvicorn_lines(self) -> None:
        args = self.engine.config.args
        host, port = args.get("host") or "127.0.0.1", args.get("port")
        self.log.info(f"INFO:     Started server process [{os.getpid()}]")
        self.log.info("INFO:     Waiting for application startup.")
        self.log.info("INFO:     Application startup complete.")
        self.log.info(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")

    async def _warm_up(self) -> bool:
        """The real server's one-token warm-up request, then the recorded wait until ready;
        True when a stop came first."""
        self.engine.state = "warmup"
        warm_start = asyncio.get_running_loop().time()
        await self.engine.scheduler.one_token()
        self.log.access(f"INFO:     127.0.0.1:{random.randint(32768, 60999)} - "
                        '"POST /generate HTTP/1.1" 200 OK')
        return await self._sleep_until(warm_start + WARMUP_SECONDS * self.engine.config.startup_scale)

    def _on_signal(self, sig: int) -> None:
        engine = self.engine
        if engine.stop_event.is_set():
            return
        name = "SIGTERM" if sig == signal.SIGTERM else "SIGINT"
        self.log.info(f"{name} received. signum=None frame=None. Draining requests and "
                      "shutting down...")
        engine.state = "stopping"
        engine.stop_event.set()

    async def _sleep_until(self, deadline: float) -> bool:
        """Sleep until the loop time reaches deadline; True when a stop was requested."""
        delay = deadline - asyncio.get_running_loop().time()
        if delay <= 0:
            return self.engine.stop_event.is_set()
        try:
            await asyncio.wait_for(self.engine.stop_event.wait(), timeout=delay)
        except TIMEOUTS:
            return False
        return True

    async def _shutdown(self, runner: web.AppRunner, loop_task: asyncio.Task[None]) -> int:
        """In-flight requests get up to 1 s; then the server and the scheduler loop stop."""
        self.engine.state = "stopping"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1.0
        while self.engine.scheduler.reqs and loop.time() < deadline:
            await asyncio.sleep(0.02)
        await runner.cleanup()
        if self.engine.disagg is not None:
            await self.engine.disagg.stop()
        loop_task.cancel()
        try:
            await loop_task
        except asyncio.CancelledError:
            pass
        if self.meeting is not None:
            if self._watcher is not None:
                self._watcher.cancel()
            await self.meeting.close(shutdown=bool(self.traits.get("rank0_shutdown_broadcast")))
        return 0


class PlaceholderServer:
    """What a node of rank > 0 serves on its ``--port`` (utils/common.py
    ``launch_dummy_health_check_server``, a FastAPI app run by uvicorn at log level warning):
    ``GET /ping``, ``/health``, ``/health_generate``: 200 with an empty body whatever the
    state; with ``--enable-metrics`` a ``/metrics`` mount (prometheus_client's multiprocess
    registry: empty here, as no scheduler of a rank > 0 exports metrics); anything else
    FastAPI's 404 / 405 (HEAD included). No access log, no CORS header, no API key."""

    def __init__(self, enable_metrics: bool) -> None:
        self.enable_metrics = enable_metrics
        self._runner: web.AppRunner | None = None

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[_fastapi_errors])
        app.on_response_prepare.append(_uvicorn_header)
        for path in ("/ping", "/health", "/health_generate"):
            app.router.add_route("GET", path, self._ok)
        if self.enable_metrics:
            app.router.add_route("*", r"/metrics{tail:.*}", self._metrics)
        return app

    async def _ok(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=200)

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"", headers={"Content-Type": loads.PROMETHEUS_TYPE})

    async def start(self, sock: socket.socket) -> None:
        """Listen on the socket bound at start-up (connections were refused until now)."""
        self._runner = web.AppRunner(self.build_app(), access_log=None, handle_signals=False,
                                     shutdown_timeout=0.25)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
