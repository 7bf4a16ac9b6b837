# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The server's prefix cache around a level: ``flush`` (``POST /flush_cache?timeout=N``, which
SGLang refuses with 400 while a request runs, so the server is given ``flush_timeout`` seconds
to become idle), ``warm`` (each shared prefix sent once, not measured) and the client's view of
the hits (``client_cache``: the ``cached_tokens`` the responses reported).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._sweep.client import aiohttp
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import TIMEOUTS
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.trace import Trace

FLUSH_PATH = "/flush_cache"
# HiCache's storage tier: the current path in every pinned release (data/releases.json
# hicache_storage_clear; tests/unit/plugins/module_utils/_sweep/test_workloads.py holds them together)
CLEAR_STORAGE_PATH = "/hicache/storage-backend/clear"
CLEAR_STORAGE_TIMEOUT = 120.0  # seconds: the release deletes the folder's page files before it answers
WARM_IN_FLIGHT = 16  # warm-up prefixes sent at once


async def flush(session: Any, url: str, timeout: float) -> dict[str, Any]:
    """Flush the server's cache: ``{"ok", "status", "message", "seconds"}``; never raises (a
    failure is reported in the result, with what the server said)."""
    return await _post(session, f"{url}{FLUSH_PATH}", {"timeout": f"{timeout:g}"}, timeout + 30.0)


async def clear_storage(session: Any, url: str) -> dict[str, Any]:
    """Clear the server's HiCache storage tier, as ``flush`` reports."""
    return await _post(session, f"{url}{CLEAR_STORAGE_PATH}", None, CLEAR_STORAGE_TIMEOUT)


async def on_each(urls: list[str], call: Callable[[str], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """``call`` (``flush`` or ``clear_storage`` of one URL) on each of ``urls`` (the instances of a
    PD pair: the prefills hold the prefix cache), one result as each reports: ok when every one
    is, the first failure's status and each failure's message with its URL."""
    results = [await call(url) for url in urls]
    if len(results) == 1:
        return results[0]
    failed = [(url, r) for url, r in zip(urls, results, strict=True) if not r["ok"]]
    return {"ok": not failed, "status": failed[0][1]["status"] if failed else 200,
            "message": "; ".join(f"{url}: {r['message']}" for url, r in failed) or results[-1]["message"],
            "seconds": round(sum(r["seconds"] for r in results), 3)}


async def _post(session: Any, url: str, params: dict[str, str] | None, timeout: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    status: int | None = None
    try:
        async with session.post(url, params=params, timeout=_client_timeout(timeout)) as resp:
            status = resp.status
            message = (await resp.text())[:200].strip()
    except TIMEOUTS:
        message = f"no answer within {timeout:g}s"
    except Exception as exc:  # noqa: BLE001 - any client error is reported, not raised
        message = f"{type(exc).__name__}: {exc}"
    return {"ok": status == 200, "status": status, "message": message,
            "seconds": round(time.perf_counter() - t0, 3)}


def _client_timeout(total: float) -> Any:
    return aiohttp.ClientTimeout(total=total)


def _warning(concurrency: int, result: dict[str, Any], path: str, left: str, hints: dict[int, str]) -> str:
    """The warning of a POST before a level that failed: the answer, what the level ran with
    (``left``), and what to do for that status (``hints``; else: is the server up?)."""
    hint = hints.get(result["status"], "is the server up?")
    answer = f"HTTP {result['status']}" if result["status"] is not None else "no answer"
    return f"C={concurrency}: POST {path} failed ({answer}: {result['message']}); the level ran with {left}: {hint}"


def flush_warning(concurrency: int, result: dict[str, Any], timeout: float) -> str:
    """The warning of a flush that failed, with what to do."""
    elsewhere = "this server has no /flush_cache (a router in front? flush each engine, or leave flush_cache off)"
    return _warning(concurrency, result, FLUSH_PATH, "the cache as the previous level left it", {
        400: (f"the server was not idle within flush_timeout={timeout:g}s (or another flush ran): "
              "raise flush_timeout, or stop other traffic to this server"),
        404: elsewhere, 405: elsewhere})


def clear_storage_warning(concurrency: int, result: dict[str, Any]) -> str:
    """The warning of a storage clear that failed, with what to do."""
    elsewhere = (f"this server has no {CLEAR_STORAGE_PATH} (a router in front? clear each engine, or leave "
                 "clear_storage off)")
    return _warning(concurrency, result, CLEAR_STORAGE_PATH, "the storage tier as earlier levels left it", {
        400: "the server runs without HiCache, so it has no storage tier: leave clear_storage off for it",
        404: elsewhere, 405: elsewhere,
        401: "the server wants its API key (api_key)", 403: "the server wants its API key (api_key)"})


async def warm(client: Any, prompts: Sequence[str], deadline: float) -> dict[str, Any]:
    """Send each prompt once (max_tokens 1), WARM_IN_FLIGHT at a time, until ``deadline``:
    ``{"requests", "ok", "seconds"}``."""
    t0 = time.perf_counter()
    gate = asyncio.Semaphore(WARM_IN_FLIGHT)
    traces: list[Trace] = []

    async def one(i: int, prompt: str) -> None:
        async with gate:
            trace = Trace(level=-2, concurrency=WARM_IN_FLIGHT, index=i, worker=0)
            traces.append(trace)
            await client.send(trace, prompt, 1)

    try:
        await asyncio.wait_for(asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))),
                               max(deadline - time.perf_counter(), 0.001))
    except TIMEOUTS:
        pass
    return {"requests": len(prompts), "ok": sum(1 for t in traces if t.ok),
            "seconds": round(time.perf_counter() - t0, 3)}


def client_cache(traces: Sequence[Trace]) -> dict[str, Any]:
    """The hits the responses reported: ``cached_tokens`` over ``prompt_tokens`` of the requests
    that reported both (native: always; OpenAI: with the server's --enable-cache-report)."""
    both = [t for t in traces if t.cached_tokens is not None and t.prompt_tokens]
    prompt = sum(int(t.prompt_tokens or 0) for t in both)
    cached = sum(int(t.cached_tokens or 0) for t in both)
    return {"requests": len(both), "prompt_tokens": prompt, "cached_tokens": cached,
            "cache_hit_rate": round(cached / prompt, 4) if prompt else None}
