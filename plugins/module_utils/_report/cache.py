# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The workload line and the "Prefix cache" table of an instance: per level, the cache state the
sweep set (flushed, the storage tier cleared, prefixes warmed), the server's hit rates from its
/metrics (all, device, HiCache host, the storage tier) and the hits the responses reported
(``cached_tokens``). The storage columns are there when a level has a storage tier.
"""
from __future__ import annotations

from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._report.common import (
    MISSING,
    dig,
    fmt,
    level_cell,
    level_header,
    md_row,
    points_of,
)

CACHE_HEADER: tuple[str, ...] = (
    "C", "flushed", "warmed", "server hit", "device hit", "host hit", "client hit", "cached tok (client)",
)


def workload_line(sweep: dict[str, Any]) -> str | None:
    """``Workload: shared_prefix (groups 256, ...), seed 1``; None for the default random one."""
    work = dig(sweep, "options.workload")
    if not isinstance(work, dict):
        return None
    extra = {k: v for k, v in work.items() if k not in ("kind", "seed", "chars_per_token")}
    if work.get("kind") == "random" and not extra:
        return None
    settings = ", ".join(f"{k} {v}" for k, v in extra.items())
    cache = [name for name in ("flush_cache", "clear_storage", "warm") if dig(sweep, f"options.{name}")]
    return (f"Workload: {work.get('kind')}" + (f" ({settings})" if settings else "")
            + f", seed {work.get('seed')}" + (f"; {' and '.join(cache)} before each level" if cache else "") + ".")


def _flag(state: Any, key: str) -> str:
    part = state.get(key) if isinstance(state, dict) else None
    if not isinstance(part, dict):
        return MISSING
    if key in ("flush", "clear_storage"):
        return "yes" if part.get("ok") else f"failed ({part.get('status')})"
    return f"{part.get('ok')}/{part.get('requests')}"


def _rate(value: Any) -> str:
    return MISSING if value is None else f"{float(value) * 100:.1f}%"


def render_cache_table(sweep: dict[str, Any]) -> str | None:
    """The "Prefix cache" table; None when no level has a cache state set or reported hits."""
    points = [p for p in points_of(sweep)
              if p.get("cache_state") or dig(p, "client_cache.requests") or dig(p, "server_metrics.cache_hit_rate")]
    if not points:
        return None
    cleared = any(isinstance(dig(p, "cache_state.clear_storage"), dict) for p in points)
    storage = any(dig(p, "server_metrics.cache_hit_rate_storage") is not None for p in points)
    header = list(CACHE_HEADER)
    if cleared:
        header.insert(header.index("flushed") + 1, "storage cleared")
    if storage:
        header.insert(header.index("host hit") + 1, "storage hit")
    lines = [md_row(level_header(tuple(header), points)), md_row(["---"] * len(header))]
    for point in points:
        server = point.get("server_metrics") or {}
        client = point.get("client_cache") or {}
        state = point.get("cache_state")
        lines.append(md_row([
            level_cell(point),
            _flag(state, "flush"),
            *([_flag(state, "clear_storage")] if cleared else []),
            _flag(state, "warm"),
            _rate(server.get("cache_hit_rate")),
            _rate(server.get("cache_hit_rate_device")),
            _rate(server.get("cache_hit_rate_host")),
            *([_rate(server.get("cache_hit_rate_storage"))] if storage else []),
            _rate(client.get("cache_hit_rate")),
            fmt(client.get("cached_tokens"), 0) if client.get("requests") else MISSING,
        ]))
    return "\n".join(lines)
