# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Prefill/decode disaggregation as SGLang 0.5.17 runs it (``--disaggregation-mode``; docs/engine.md
"Prefill and decode"): the router sends each request to a prefill and a decode instance with the
same ``bootstrap_host``/``bootstrap_port``/``bootstrap_room`` (sglang-router 0.3.2 adds them to the
body it sends both); the prefill instance computes the prompt (one token out) and hands its KV over,
the decode instance fetches it from the prefill's bootstrap server and generates the tokens.

Modelled: the prefill side serves a bootstrap server on ``--disaggregation-bootstrap-port`` of its
``--host`` (``GET /health`` "OK", ``GET /route``, as SGLang's; the KV hand-over itself, which the
transfer engine does in SGLang, is ``GET /llmops/kv/<room>`` here: it answers once the room's KV
is computed and its modelled transfer time, the KV bytes at ``pd_transfer_gb_s``, has passed). The
decode side admits a request only once its KV arrived, then does no prefill work for it (its whole
prompt is in the KV it received). A request without a bootstrap room, or with SGLang's fake host
(``2.2.2.2``, health checks and warm-up), runs standalone on either side. A prefill that cannot be
reached fails the request (``num_bootstrap_failed_reqs_total``), as it fails in SGLang after its
retries. Counted: the prefill's rooms waiting to be fetched, the decode's requests waiting for
their KV, bootstrap and transfer failures, transfer latency. Stdlib + aiohttp, Python >= 3.10.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.metrics import Histogram

if TYPE_CHECKING:  # aiohttp is imported where it is used: the engine's host has it, a module's may not
    from aiohttp import web

FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # SGLang's disaggregation/utils.py: health checks and warm-up
WAIT_TIMEOUT_S = 300.0  # SGLANG_DISAGGREGATION_WAITING_TIMEOUT / _BOOTSTRAP_TIMEOUT: 300 s
CONNECT_ATTEMPTS = 3  # a prefill that does not answer: tried this often, a second apart


@dataclass
class Room:
    tokens: int
    ready_at: float  # loop time: computed and transferred
    event: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Prepared:
    """What an API call submits with: its token limit, whether its KV came from a prefill, what
    to do when it finishes; or the error to answer with."""
    max_new: int
    transferred: bool = False
    on_done: Callable[[Any], None] | None = None
    error: str | None = None


# sglang:kv_transfer_latency_ms's buckets (0.5.17 observability/metrics_collector.py), observed on the prefill side
KV_LATENCY_BUCKETS_MS = (1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0)


@dataclass
class PdCounters:
    bootstrap_failed: int = 0
    transfer_failed: int = 0
    transferred_reqs: int = 0
    transfer_latency_ms: Histogram = field(default_factory=lambda: Histogram(KV_LATENCY_BUCKETS_MS))
    transfer_mb: float = 0.0
    waiting: int = 0  # decode: requests waiting for their KV


def refused_args(args: Mapping[str, Any]) -> str | None:
    """What SGLang 0.5.17's ServerArgs raises at start for a PD instance's flags (its ValueError's
    text), or None: a decode runs a chunk cache (``disable_radix_cache``, set by the PD hook unless
    ``--disaggregation-decode-enable-radix-cache``), which HiCache refuses."""
    if (args.get("disaggregation_mode") == "decode" and args.get("enable_hierarchical_cache")
            and not args.get("disaggregation_decode_enable_radix_cache")):
        return ("The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive and cannot "
                "be used at the same time. Please use only one of them.")
    return None


def bootstrap_of(body: Mapping[str, Any]) -> tuple[str, int, int] | None:
    """The router's (host, port, room) of a request; None without one or for SGLang's fake host."""
    host, port, room = body.get("bootstrap_host"), body.get("bootstrap_port"), body.get("bootstrap_room")
    if not host or room is None or str(host) == FAKE_BOOTSTRAP_HOST:
        return None
    try:
        return str(host), int(port) if port is not None else 0, int(room)
    except (TypeError, ValueError):
        return None


class Disagg:
    """One instance's side of PD: its rooms (prefill) or its fetches (decode), and the counters."""

    def __init__(self, mode: str, host: str, bootstrap_port: int, kv_bytes_per_token: float, gb_s: float,
                 time_scale: float = 1.0) -> None:
        self.mode = mode
        self.time_scale = max(float(time_scale), 0.0)  # wall seconds per modelled second
        self.host = host
        self.bootstrap_port = bootstrap_port
        self.kv_bytes_per_token = max(float(kv_bytes_per_token), 0.0)
        self.gb_s = max(float(gb_s), 1e-6)
        self.rooms: dict[int, Room] = {}
        self.counters = PdCounters()
        self._runner: web.AppRunner | None = None

    # -- the prefill side --------------------------------------------------------------------
    def transfer_s(self, tokens: int) -> float:
        """A prompt's KV transfer in modelled seconds (its bytes at the backend's rate)."""
        return tokens * self.kv_bytes_per_token / (self.gb_s * 1e9)

    def _room(self, room: int) -> Room:
        return self.rooms.setdefault(room, Room(tokens=0, ready_at=float("inf")))

    def computed(self, room: int, tokens: int) -> None:
        """The prefill of a room's prompt is done: its KV is there after the transfer time."""
        now = asyncio.get_running_loop().time()
        entry = self._room(room)
        entry.tokens, entry.ready_at = tokens, now + self.transfer_s(tokens) * self.time_scale
        entry.event.set()
        self.counters.transferred_reqs += 1
        self.counters.transfer_latency_ms.observe(self.transfer_s(tokens) * 1000)
        self.counters.transfer_mb += tokens * self.kv_bytes_per_token / 1e6

    async def _kv(self, request: web.Request) -> web.StreamResponse:
        """The hand-over: once the room's KV is computed and transferred (or a 404 at the timeout)."""
        from aiohttp import web

        room = int(request.match_info["room"])
        entry = self._room(room)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(entry.event.wait(), timeout=WAIT_TIMEOUT_S)
        except asyncio.TimeoutError:  # noqa: UP041 - Python 3.10's name
            self.rooms.pop(room, None)
            return web.json_response({"error": f"room {room}: no prefill within {WAIT_TIMEOUT_S:g} s"}, status=404)
        await asyncio.sleep(max(entry.ready_at - loop.time(), 0.0))
        self.rooms.pop(room, None)
        return web.json_response({"room": room, "tokens": entry.tokens})

    async def start(self) -> None:
        """The prefill side's bootstrap server on ``--host``:``--disaggregation-bootstrap-port``."""
        if self.mode != "prefill":
            return
        from aiohttp import web

        app = web.Application()

        async def ok(_: web.Request) -> web.StreamResponse:
            return web.Response(text="OK")

        async def route(_: web.Request) -> web.StreamResponse:
            return web.json_response({"bootstrap_port": self.bootstrap_port, "mode": self.mode})

        app.router.add_route("GET", "/health", ok)
        app.router.add_route("*", "/route", route)
        app.router.add_route("GET", "/llmops/kv/{room}", self._kv)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.25)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.bootstrap_port, reuse_address=True).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- an API call on either side ----------------------------------------------------------
    async def prepare(self, body: Mapping[str, Any], max_new: int) -> Prepared:
        """Before a request is submitted: the prefill side computes one token and registers its
        room when done; the decode side waits for the room's KV from the prefill's bootstrap
        server. Standalone (no room, or the fake host): as a unified server."""
        found = bootstrap_of(body)
        if found is None:
            return Prepared(max_new)
        host, port, room = found
        if self.mode == "prefill":
            return Prepared(1, on_done=lambda req: self.computed(room, int(req.prompt_tokens)))
        return await self._fetch(host, port or self.bootstrap_port, room, max_new)

    async def _fetch(self, host: str, port: int, room: int, max_new: int) -> Prepared:
        import aiohttp

        url = f"http://{host}:{port}/llmops/kv/{room}"
        started = time.monotonic()
        self.counters.waiting += 1
        try:
            timeout = aiohttp.ClientTimeout(total=WAIT_TIMEOUT_S + 10)
            for attempt in range(CONNECT_ATTEMPTS):
                try:
                    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as reply:
                        text = await reply.text()
                        if reply.status == 200:
                            return Prepared(max_new, transferred=True)
                        self.counters.transfer_failed += 1
                        return Prepared(max_new, error=f"KV transfer of room {room} from {host}:{port} failed: "
                                                       f"{reply.status} {text[:200]}")
                except (aiohttp.ClientError, OSError) as exc:
                    if attempt + 1 == CONNECT_ATTEMPTS:
                        self.counters.bootstrap_failed += 1
                        return Prepared(max_new, error=f"Failed to bootstrap room {room} with the prefill server "
                                                       f"{host}:{port} after {time.monotonic() - started:.1f} s: "
                                                       f"{exc}")
                    await asyncio.sleep(1.0)
            return Prepared(max_new, error="unreachable")  # pragma: no cover - the loop returns
        finally:
            self.counters.waiting -= 1

    def info(self) -> dict[str, Any]:
        """What /server_info says of it (the router reads ``disaggregation_mode`` from there)."""
        return {"disaggregation_mode": self.mode, "disaggregation_bootstrap_port": self.bootstrap_port}

    def gauges(self) -> dict[str, float]:
        pending = sum(1 for room in self.rooms.values() if room.event.is_set())
        if self.mode == "prefill":
            return {"num_prefill_bootstrap_queue_reqs": 0.0, "num_prefill_inflight_queue_reqs": float(pending)}
        return {"num_decode_prealloc_queue_reqs": 0.0, "num_decode_transfer_queue_reqs": float(self.counters.waiting)}

    def to_json(self) -> str:
        latency = self.counters.transfer_latency_ms
        return json.dumps({"mode": self.mode, "rooms": len(self.rooms),
                           **{**self.counters.__dict__, "transfer_latency_ms": {"count": latency.total,
                                                                                "sum": latency.sum}}})


async def prepare(engine: Any, body: Mapping[str, Any], max_new: int) -> Prepared:
    """An API call's ``Prepared``: as a unified server's unless the engine is one side of PD."""
    disagg = getattr(engine, "disagg", None)
    if disagg is None:
        return Prepared(max_new)
    return await disagg.prepare(body, max_new)
