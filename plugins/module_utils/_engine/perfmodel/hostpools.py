# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""HiCache host pools and the host-memory check (docs/engine.md "Start-up plan" 6 and 7): the
KV pool, the Mamba pool of a hybrid model and the draft KV pool, sized by ``--hicache-size``
(per pool or split, as the release does) or by ``--hicache-ratio``."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.common import (
    GB,
    EngineStartError,
    arg,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.defaults import PlanFlags
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.running import RunningLimit
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.shape import ModelShape


@dataclass
class HostPool:
    name: str  # "kv" | "mamba" | "draft_kv"
    tokens: int  # tokens (kv, draft_kv) or state slots (mamba)
    bytes: int


def hicache_enabled(args: dict[str, Any]) -> bool:
    return bool(arg(args, "enable_hierarchical_cache", "enable_hicache"))


def hicache_semantics(traits: dict[str, Any]) -> str:
    """How the release reads --hicache-size on a hybrid model: "per_pool" or "split"."""
    return str(traits.get("hicache_hybrid_semantics", "split"))


def _host_sizes(args: dict[str, Any], flags: PlanFlags, shape: ModelShape, semantics: str,
                running: RunningLimit, mamba_slots: int) -> tuple[int, int]:
    """(host KV tokens, host Mamba slots)."""
    tp = flags.tp
    size_gb = int(arg(args, "hicache_size") or 0)
    kv_pt = shape.kv_bytes_per_token / tp
    slot_b = shape.mamba_state_bytes_per_slot / tp
    if size_gb <= 0:
        hratio = float(arg(args, "hicache_ratio") or 2.0)
        return (int(running.kv_tokens * hratio),
                int(mamba_slots * hratio) if shape.is_hybrid else 0)
    size_b = size_gb * GB
    if shape.is_hybrid and semantics == "split":
        kv_dev_bytes = running.kv_tokens * shape.kv_bytes_per_token / tp
        mamba_dev_bytes = (mamba_slots * shape.mamba_state_bytes_per_slot / tp
                           + running.inter_ssm + running.inter_conv)
        kv_share = kv_dev_bytes / (kv_dev_bytes + mamba_dev_bytes)
        return int(size_b * kv_share // kv_pt), math.ceil(size_b * (1.0 - kv_share) / slot_b)
    return int(size_b // kv_pt), (math.ceil(size_b / slot_b) if shape.is_hybrid else 0)


def host_pools(args: dict[str, Any], flags: PlanFlags, shape: ModelShape, traits: dict[str, Any],
               running: RunningLimit, mamba_slots: int) -> list[HostPool]:
    """The host pools HiCache pins, in the order the server allocates them ([] without HiCache)."""
    if not hicache_enabled(args):
        return []
    tp = flags.tp
    host_kv_tokens, host_slots = _host_sizes(args, flags, shape, hicache_semantics(traits),
                                             running, mamba_slots)
    kv_pt = shape.kv_bytes_per_token / tp
    pools = [HostPool("kv", host_kv_tokens, int(host_kv_tokens * kv_pt))]
    if shape.is_hybrid:
        slot_b = shape.mamba_state_bytes_per_slot / tp
        pools.append(HostPool("mamba", host_slots, int(host_slots * slot_b)))
    if flags.spec and traits.get("draft_host_pool", False) and shape.draft_kv_bytes_per_token:
        dt = host_kv_tokens + 1
        pools.append(HostPool("draft_kv", dt, int(dt * shape.draft_kv_bytes_per_token / tp)))
    return pools


def check_host_memory(pools: list[HostPool], host_available_bytes: int | None,
                      consts: dict[str, Any]) -> bool:
    """Each pool checks requested <= MemAvailable - 10 GiB on its own (the release's check);
    raises EngineStartError with the release's message. True when the pools together exceed
    MemAvailable (the host would be OOM-killed later)."""
    if host_available_bytes is None or not pools:
        return False
    free_b = host_available_bytes - int(consts.get("host_reserve_bytes", 10 * (1 << 30)))
    for pool in pools:
        if pool.bytes > free_b:
            raise EngineStartError(
                "ValueError: Not enough host memory available. Requesting "
                f"{pool.bytes / GB:.2f} GB but only have {free_b / GB:.2f} GB free. "
                "Please reduce the size of the hierarchical cache."
            )
    return sum(p.bytes for p in pools) > host_available_bytes
