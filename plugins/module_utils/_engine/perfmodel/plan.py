# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""``plan_engine``: what the real server of a release would allocate and report at start-up,
resolved stage by stage (flag defaults, GPU memory, Mamba pool, KV pool, running limit, HiCache
host pools, timings, log lines; docs/engine.md "Start-up plan")."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.common import (
    EngineStartError,
    perf_constants,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.defaults import resolve_flags
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.gpus import GpuSpec
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.hostpools import (
    HostPool,
    check_host_memory,
    hicache_enabled,
    hicache_semantics,
    host_pools,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.loglines import (
    LogInputs,
    startup_log_lines,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.mamba import mamba_pool
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.memory import (
    available_after_start,
    gpu_budget,
    kv_pool_tokens,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.running import running_limit
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.shape import (
    ModelShape,
    model_shape_from_config,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.timings import startup_times
from ansible_collections.llmops.sglang.plugins.module_utils._shared import releases as _releases


@dataclass
class EnginePlan:
    release: str
    gpu: GpuSpec
    shape: ModelShape
    tp_size: int
    mem_fraction_static: float
    max_total_num_tokens: int
    max_running_requests: int
    mamba_slots: int
    cuda_graph_max_bs: int
    spec_algorithm: str | None
    spec_steps: int
    spec_topk: int
    spec_draft_tokens: int
    accept_length: float
    hicache_pools: list[HostPool]
    hicache_total_bytes: int
    load_seconds: float
    pin_seconds: float
    context_len: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    available_gpu_mem_gb: float
    log_lines: list[tuple[float, str]] = field(default_factory=list)
    mamba_strategy: str | None = None
    mamba_ratio: int = 1
    hicache_enabled: bool = False
    hicache_semantics: str = "split"
    host_available_bytes: int | None = None
    host_oversubscribed: bool = False
    model_path: str = ""
    constants: dict[str, Any] = field(default_factory=dict)
    overlap_schedule: bool = True

    @property
    def ready_seconds(self) -> float:
        """Modelled seconds from launch until the server can answer (load + pinning)."""
        return self.load_seconds + self.pin_seconds


def _traits(release: str) -> dict[str, Any]:
    try:
        return _releases.release_traits(release)
    except _releases.UnknownReleaseError as exc:
        raise EngineStartError(str(exc)) from exc


def plan_engine(
    args: dict[str, Any],
    model_config: dict[str, Any],
    gpu: GpuSpec,
    release: str,
    host_available_bytes: int | None,
    traits: dict[str, Any] | None = None,
) -> EnginePlan:
    """Resolve what the real server of ``release`` would allocate and report at start-up
    (``traits``: the release's, ``_releases.release_traits``, by default)."""
    traits = _traits(release) if traits is None else traits
    consts = perf_constants(release)
    shape = model_shape_from_config(model_config)
    flags = resolve_flags(args, gpu, shape, consts, traits)
    budget = gpu_budget(flags, gpu, shape)
    mamba_slots, rest = mamba_pool(budget.rest, flags, shape, consts)
    running = running_limit(flags, shape, kv_pool_tokens(rest, flags, shape), mamba_slots)
    pools = host_pools(args, flags, shape, traits, running, mamba_slots)
    oversub = check_host_memory(pools, host_available_bytes, consts)
    times = startup_times(args, flags, shape, consts, pools)
    end_avail = available_after_start(budget, flags, shape, running.kv_tokens, running.intermediate_bytes)
    semantics = hicache_semantics(traits)
    lines = startup_log_lines(LogInputs(release, args, flags, shape, budget, mamba_slots, running,
                                        pools, semantics, times, end_avail))
    spec = flags.spec
    return EnginePlan(
        release=release, gpu=gpu, shape=shape, tp_size=flags.tp,
        mem_fraction_static=flags.mem_fraction, max_total_num_tokens=running.kv_tokens,
        max_running_requests=running.max_running, mamba_slots=mamba_slots,
        cuda_graph_max_bs=running.graph_bs, spec_algorithm=spec, spec_steps=flags.steps,
        spec_topk=flags.topk, spec_draft_tokens=flags.draft_tokens,
        accept_length=(min(float(consts.get("mtp_accept_length", 3.2)), float(flags.draft_tokens))
                       if spec else 1.0),
        hicache_pools=pools, hicache_total_bytes=sum(p.bytes for p in pools),
        load_seconds=times.load_seconds, pin_seconds=times.pin_seconds,
        context_len=flags.context_len, chunked_prefill_size=flags.chunked,
        max_prefill_tokens=flags.max_prefill, available_gpu_mem_gb=round(end_avail, 2),
        log_lines=lines, mamba_strategy=flags.strategy, mamba_ratio=flags.mamba_ratio,
        hicache_enabled=hicache_enabled(args), hicache_semantics=semantics,
        host_available_bytes=host_available_bytes, host_oversubscribed=oversub,
        model_path=str(args.get("model_path") or ""), constants=consts,
        overlap_schedule=flags.overlap_schedule,
    )
