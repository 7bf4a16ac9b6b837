# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""HiCache sizing: the largest ``--hicache-size`` (decimal GB per rank) whose host pools fit
the host's memory budget, counting what the release pins beyond the size."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._shared import paths as _paths
from ansible_collections.llmops.sglang.plugins.module_utils._shared.releases import (
    UnknownReleaseError,
    release_traits,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import (
    GB,
    GIB,
    PlanError,
    as_int,
    gb,
    host_of,
)

DEFAULT_DRAFT_HOST_POOL_FACTOR = 0.19  # measured on 0.5.17 (1.44 GB on 8, 3.61 GB on 20), rounded up
PERFMODEL_FILE = "perfmodel.json"  # owns the pinning speed (pin_fixed_s, pin_gb_s), shared with the engine


def available_bytes(host: Mapping[str, Any]) -> tuple[int, str]:
    """The smaller of MemAvailable and the cgroup headroom, and which one it was."""
    memory = host.get("memory")
    if not isinstance(memory, Mapping):
        raise PlanError("the host facts have no 'memory': gather them with llmops.sglang.host_facts first")
    effective = memory.get("effective_available_bytes")
    if effective is not None:
        return int(effective), str(memory.get("limited_by") or "meminfo")
    available = memory.get("available_bytes")
    if available is None:
        raise PlanError("the host facts have no memory.available_bytes: gather them with llmops.sglang.host_facts")
    cgroup = memory.get("cgroup") or {}
    limit = cgroup.get("available_bytes") if isinstance(cgroup, Mapping) else None
    if limit is not None and int(limit) < int(available):
        return int(limit), "cgroup"
    return int(available), "meminfo"


def pin_seconds(pinned_bytes: float) -> int:
    """Seconds to pin `pinned_bytes` of HiCache host pools: a fixed start plus a rate, the
    same constants as the embedded engine (measured on a real H200 host: 9.43 GB in 20 s,
    191.87 GB in 168 s; see docs/PERFORMANCE.md, "Real GPU")."""
    consts = _paths.load_json(PERFMODEL_FILE)
    if pinned_bytes <= 0:
        return 0
    return math.ceil(float(consts["pin_fixed_s"]) + pinned_bytes / (float(consts["pin_gb_s"]) * GB))


def _pools_per_rank(release: str, traits: Mapping[str, Any], hybrid: bool, spec: bool) -> tuple[int, float]:
    """(pools sized by --hicache-size per rank, extra factor of the draft model's KV host pool)."""
    per_pool = traits.get("hicache_hybrid_semantics") == "per_pool"
    pools = 2 if (hybrid and per_pool) else 1
    draft = float(traits.get("draft_host_pool_factor", DEFAULT_DRAFT_HOST_POOL_FACTOR)) \
        if (spec and traits.get("draft_host_pool", True)) else 0.0
    return pools, draft


def _reasoning(available: int, limited_by: str, reserve_gib: float, reserve: int, fraction: float, budget: int,
               instances: int, tp_size: int, release: str, pools: int, draft: float, largest: int) -> list[str]:
    """The sizing arithmetic, a line per step, for people (the plan's ``reasoning``)."""
    ranks = instances * tp_size
    per_gb = pools + draft
    return [
        f"available: {gb(available)} (limited by {limited_by}; the smaller of MemAvailable and the "
        "cgroup headroom)",
        f"budget: ({gb(available)} - reserve {reserve_gib:g} GiB = {gb(reserve)}) x {fraction:g} = {gb(budget)}",
        f"ranks: {instances} instance(s) x TP {tp_size} = {ranks}; each rank may pin {gb(budget / ranks)}",
        "each rank pins size x ("
        + (f"{pools} pools: release {release} gives --hicache-size to the KV pool and to the Mamba pool"
           if pools == 2 else "1 pool: the size covers the rank's host pools")
        + (f" + {draft:g} for the draft model's KV host pool" if draft else "")
        + f") = {per_gb:g} x size",
        f"largest size that fits: floor({gb(budget / ranks)} / {per_gb:g}) = {largest} GB",
    ]


def _checked_inputs(instances: Any, tp_size: Any, fraction: Any, reserve_gib: Any) -> tuple[int, int, float, float]:
    """The counts, fraction and reserve of ``hicache_plan`` as numbers, or PlanError."""
    instances = as_int(instances, "instances") or 0
    tp_size = as_int(tp_size, "tp_size") or 0
    if instances < 1 or tp_size < 1:
        raise PlanError(f"instances ({instances}) and tp_size ({tp_size}) must be at least 1")
    fraction = float(fraction)
    if not 0 < fraction <= 1:
        raise PlanError(f"hicache fraction must be in (0, 1], not {fraction}")
    reserve_gib = float(reserve_gib)
    if reserve_gib < 0:
        raise PlanError(f"hicache reserve must not be negative, not {reserve_gib} GiB")
    return instances, tp_size, fraction, reserve_gib


def _choose_size(explicit_size_gb: int | None, keep_size_gb: int | None, size_from: str, release: str,
                 reasoning: list[str], pinned_rank: Callable[[int], int], n: dict[str, Any]) -> int:
    """The size: the explicit one (PlanError when it does not fit), the running servers' while
    it fits the hard limit, else the largest that fits the budget (PlanError under 1 GB).
    ``n``: the numbers of ``hicache_plan`` (budget, hard limit, largest, ranks, per_gb,
    available, reserve_gib, fraction). Adds its reason to ``reasoning``."""
    budget, hard_limit, largest, ranks = n["budget"], n["hard_limit"], n["largest"], n["ranks"]
    per_gb, available, reserve_gib, fraction = n["per_gb"], n["available"], n["reserve_gib"], n["fraction"]
    arithmetic = (f"({gb(available)} available - {reserve_gib:g} GiB reserve) x {fraction:g}")
    if explicit_size_gb is not None:
        size = as_int(explicit_size_gb, "hicache size") or 0
        if size < 1:
            raise PlanError(f"hicache size must be at least 1 GB, not {explicit_size_gb!r}")
        total = pinned_rank(size) * ranks
        if total > budget:
            fit = (f"the largest size that fits is {largest} GB" if largest >= 1 else
                   "no size fits: disable HiCache (a profile without it) or run fewer instances")
            raise PlanError(
                f"{size_from}{' ' if size_from.startswith('--') else '='}{size} oversubscribes host memory on "
                f"release {release}: {size} GB x {per_gb:g} per rank x {ranks} rank(s) = {gb(total)} pinned > "
                f"budget {gb(budget)} = {arithmetic}; {fit} (set 0 to size it from the facts)"
            )
        reasoning.append(f"explicit size {size} GB: {gb(total)} pinned <= budget {gb(budget)}")
    elif keep_size_gb and keep_size_gb > 0 and pinned_rank(keep_size_gb) * ranks <= hard_limit:
        size = keep_size_gb
        reasoning.append(f"kept {size} GB, the size the running servers have: it still fits the hard limit "
                         f"({gb(pinned_rank(size) * ranks)} pinned <= {gb(available)} available - reserve); the "
                         f"target size now is {largest} GB (stop them, or set sglang_hicache_size_gb, to resize)")
    else:
        size = largest
        if keep_size_gb:
            reasoning.append(f"the running servers' size {keep_size_gb} GB no longer fits: resized to {size} GB")
        if size < 1:
            raise PlanError(
                f"not enough host memory for HiCache: {gb(available)} available - {reserve_gib:g} GiB "
                f"reserve, x {fraction:g} = budget {gb(budget)}, over {ranks} rank(s) at {per_gb:g} x size "
                "leaves less than 1 GB per rank; disable HiCache (choose a profile without it) or run "
                "fewer instances" + (f" ({n['available_note']}: lower sglang_hicache_storage.segment_gib)"
                                     if n.get("available_note") else "")
            )
    return size


def _less_lent(available: int, limited_by: str, lent: int) -> tuple[int, str]:
    """What is available to the host tier once the storage tier's store has its segments."""
    if not lent:
        return available, limited_by
    return available - lent, f"{limited_by}, less {gb(lent)} of segments lent to the storage tier's store"


def hicache_plan(
    facts: dict[str, Any],
    *,
    release: str,
    instances: int,
    tp_size: int,
    hybrid: bool,
    spec: bool,
    reserve_gib: float,
    fraction: float,
    explicit_size_gb: int | None = None,
    traits: dict[str, Any] | None = None,
    size_from: str = "--hicache-size",
    keep_size_gb: int | None = None,
    lent_bytes: int = 0,
) -> dict[str, Any]:
    """Size ``--hicache-size`` (decimal GB per rank) so that every pool of every rank fits.

    budget = (min(MemAvailable, cgroup headroom) - reserve) x fraction; each rank may pin
    budget / (instances x tp_size); a rank pins size x (pools_per_rank + draft_factor), where
    pools_per_rank is 2 for a hybrid model on a per-pool release (0.5.10 gives the size to the
    KV pool and to the Mamba pool) and draft_factor is the release's draft-model KV host pool
    (speculative decoding only). An explicit size that does not fit raises PlanError with the
    arithmetic and the largest size that fits (``size_from`` names where the size came from);
    so does a plan with less than 1 GB per rank. Without an explicit size, ``keep_size_gb`` (the
    size the deployment's running servers have) is kept while what it pins stays within
    available - reserve (the fraction is the target for new sizes, not a reason to restart
    servers), so that a re-run does not restart them because MemAvailable moved. ``lent_bytes``
    (mooncake's segments, _plan/storage.py) is taken out of what is available first.
    """
    host = host_of(facts)
    try:
        traits = release_traits(release) if traits is None else traits
    except UnknownReleaseError as exc:
        raise PlanError(str(exc)) from None
    instances, tp_size, fraction, reserve_gib = _checked_inputs(instances, tp_size, fraction, reserve_gib)
    lent = max(int(lent_bytes), 0)
    available, limited_by = _less_lent(*available_bytes(host), lent)
    reserve = int(round(reserve_gib * GIB))
    budget = max(int((available - reserve) * fraction), 0)
    pools, draft = _pools_per_rank(release, traits, hybrid, spec)
    per_gb = pools + draft
    ranks = instances * tp_size

    def pinned_rank(size_gb: int) -> int:
        return math.ceil(size_gb * GB * per_gb)

    largest = math.floor(budget / ranks / (GB * per_gb)) if budget > 0 else 0
    while largest > 0 and pinned_rank(largest) * ranks > budget:
        largest -= 1
    reasoning = _reasoning(available, limited_by, reserve_gib, reserve, fraction, budget, instances, tp_size,
                           release, pools, draft, largest)
    hard_limit = max(available - reserve, 0)
    size = _choose_size(explicit_size_gb, keep_size_gb, size_from, release, reasoning, pinned_rank, {
        "budget": budget, "hard_limit": hard_limit, "largest": largest, "ranks": ranks, "per_gb": per_gb,
        "available": available, "reserve_gib": reserve_gib, "fraction": fraction,
        "available_note": f"available after {gb(lent)} of segments lent to the storage tier's store" if lent else ""})
    per_instance = pinned_rank(size) * tp_size
    total = per_instance * instances
    reasoning.append(
        f"size {size} GB: pins {gb(pinned_rank(size))} per rank, {gb(per_instance)} per instance, "
        f"{gb(total)} for the host (budget {gb(budget)}, {gb(budget - total)} left)"
    )
    return {
        "size_gb": size, "largest_size_gb": largest,
        "pinned_per_rank_bytes": pinned_rank(size),
        "pinned_per_instance_bytes": per_instance,
        "pinned_total_bytes": total,
        "budget_bytes": budget,
        "available_bytes": available, "limited_by": limited_by, "lent_bytes": lent,
        "reserve_bytes": reserve, "fraction": fraction,
        "instances": instances, "tp_size": tp_size,
        "pools_per_rank": pools, "draft_factor": draft,
        "explicit": explicit_size_gb is not None,
        "fits": total <= budget,
        "kept_running_size": bool(keep_size_gb) and size == keep_size_gb and explicit_size_gb is None,
        "pin_seconds_estimate": pin_seconds(per_instance),
        "reasoning": reasoning,
    }
