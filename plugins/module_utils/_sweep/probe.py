# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Server probes around the levels: /server_info snapshots, /metrics histograms, the model
name, connection warm-up.
"""
from __future__ import annotations

import asyncio
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server import info as _serverinfo
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.client import aiohttp
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import (
    AUTH_STATUSES,
    METRICS_PATH,
    PROBE_TIMEOUT_S,
    SERVER_INFO_PATHS,
    TIMEOUTS,
    utc_now_iso,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.histograms import parse_histograms
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.options import SweepOptions


def server_summary(info: dict[str, Any]) -> dict[str, Any]:
    """What a snapshot keeps from /server_info (``_serverinfo.summarize``, shared with status)."""
    return _serverinfo.summarize(info)


class Probe:
    def __init__(self, opts: SweepOptions, session: Any) -> None:
        self.opts = opts
        self.session = session
        self.path: str | None = None
        self.timeout = aiohttp.ClientTimeout(total=min(PROBE_TIMEOUT_S, opts.timeout))
        self.denied: int | None = None  # the 401/403 status of a probe the server refused

    async def get_json(self, path: str) -> tuple[int | None, Any, str | None]:
        try:
            async with self.session.get(self.opts.url + path, timeout=self.timeout) as resp:
                if resp.status in AUTH_STATUSES:
                    self.denied = resp.status
                if resp.status != 200:
                    return resp.status, None, f"HTTP {resp.status}"
                return resp.status, await resp.json(content_type=None), None
        except (*TIMEOUTS, aiohttp.ClientError, OSError, ValueError) as exc:
            return None, None, f"{type(exc).__name__}: {exc}"

    async def server_info(self) -> dict[str, Any]:
        """A snapshot from /server_info, falling back to /get_server_info (SGLang < 0.5.x names)."""
        paths = [self.path] if self.path else list(SERVER_INFO_PATHS)
        error = None
        for path in paths:
            status, obj, error = await self.get_json(path)
            if isinstance(obj, dict):
                self.path = path
                return {**server_summary(obj), "ok": True, "path": path, "at": utc_now_iso()}
            if status is None:
                break  # unreachable: no point trying the other name
        return {**server_summary({}), "ok": False, "path": None, "error": error, "at": utc_now_iso()}

    async def metrics_text(self, url: str | None = None) -> tuple[str | None, str | None]:
        """The /metrics text of the swept server (or of ``url``: a worker behind it), or (None, why)."""
        try:
            async with self.session.get((url or self.opts.url) + METRICS_PATH, timeout=self.timeout) as resp:
                if resp.status != 200:
                    return None, f"HTTP {resp.status}"
                return await resp.text(), None
        except (*TIMEOUTS, aiohttp.ClientError, OSError, ValueError) as exc:
            return None, f"{type(exc).__name__}: {exc}"

    async def metrics(self) -> tuple[dict[str, dict[str, Any]] | None, str | None]:
        """The server's latency histograms from /metrics (parse_histograms), or (None, why)."""
        text, error = await self.metrics_text()
        return (None, error) if text is None else (parse_histograms(text), None)

    async def model(self) -> tuple[str | None, str | None]:
        status, obj, error = await self.get_json("/v1/models")
        if isinstance(obj, dict) and isinstance(obj.get("data"), list) and obj["data"]:
            first = obj["data"][0]
            if isinstance(first, dict) and first.get("id"):
                return str(first["id"]), None
        return None, error or "no model listed"

    async def warm_connections(self, count: int) -> None:
        """Open ``count`` keep-alive connections (concurrent cheap GETs) before a level."""

        async def one() -> None:
            await self.get_json("/v1/models")

        await asyncio.gather(*(one() for _ in range(count)), return_exceptions=True)
