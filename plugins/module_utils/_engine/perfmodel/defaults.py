# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The flags the plan depends on, with SGLang's own defaults filled in (docs/engine.md
"Start-up plan" 1 and 5): speculative decoding, chunked prefill, CUDA-graph batch size, context
length, ``mem_fraction_static`` (``_handle_gpu_memory_settings``, ``adjust_mem_fraction_for_vlm``)
and the Mamba radix-cache strategy."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.common import arg
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.gpus import GpuSpec
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.shape import ModelShape


@dataclass(frozen=True)
class PlanFlags:
    """Resolved flags. ``explicit_max_running`` is --max-running-requests as given (None: unset)."""

    tp: int
    spec: str | None
    steps: int
    topk: int
    draft_tokens: int
    chunked: int
    max_prefill: int
    graph_bs: int
    context_len: int
    mem_fraction: float
    explicit_max_running: Any
    spec_max_running_default: int
    strategy: str | None
    mamba_ratio: int
    overlap_schedule: bool


def _chunk_default(gpu: GpuSpec) -> int:
    if gpu.memory_mib < 35 * 1024:
        return 2048
    if gpu.memory_mib < 160 * 1024:
        return 8192
    return 16384


def _default_mem_fraction(
    gpu: GpuSpec, tp: int, chunked: int, graph_bs: int, spec: str | None
) -> float:
    """SGLang 0.5.x ``_handle_gpu_memory_settings`` (reserved MiB -> fraction)."""
    gpu_mem = float(gpu.memory_mib)
    reserved = 512.0 + max(chunked, 2048) * 1.5 + graph_bs * 2 + tp / 8 * 1024
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024.0)
    if spec is not None:
        if spec == "STANDALONE":
            reserved += 6 * 1024
        elif spec != "NGRAM":
            reserved += 2 * 1024
    return round((gpu_mem - reserved) / gpu_mem, 3)


def _vlm_factor(shape: ModelShape, consts: dict[str, Any]) -> float:
    """SGLang ``adjust_mem_fraction_for_vlm``: scale the default fraction for a ViT."""
    if not shape.is_multimodal:
        return 1.0
    v = consts.get("vlm_mem_fraction", {})
    base_score = float(v.get("baseline_layers", 24)) * float(v.get("baseline_hidden", 1024)) ** 2
    score = shape.vision_layers * shape.vision_hidden**2
    ratio = score / base_score if base_score > 0 else 1.0
    dyn = 1.0 - float(v.get("sensitivity", 0.1)) * (ratio - 1.0)
    dyn = max(float(v.get("min", 0.8)), min(float(v.get("max", 1.05)), dyn))
    return float(v.get("base", 0.95)) * dyn


def _resolve_strategy(args: dict[str, Any]) -> str:
    strategy = arg(args, "mamba_radix_cache_strategy", "mamba_scheduler_strategy") or "auto"
    strategy = str(strategy)
    if strategy == "auto":
        # Modelled as extra_buffer: the seed's no-spec run reported 96 slots and 19 requests,
        # i.e. the extra_buffer ratio of 5.
        strategy = "extra_buffer"
    return strategy


def _mamba_ratio(strategy: str, args: dict[str, Any]) -> int:
    """SGLang ``_calculate_mamba_ratio``: Mamba slots a running request may hold."""
    if args.get("disable_radix_cache"):
        return 1
    if strategy.startswith("extra_buffer"):
        return 3 + (1 if args.get("disable_overlap_schedule") else 2)
    return 3


def _overlap_schedule(args: dict[str, Any], spec: str | None, consts: dict[str, Any]) -> bool:
    """Whether the scheduler's CPU work overlaps the GPU forward (SGLang's overlap scheduler)."""
    if args.get("disable_overlap_schedule"):
        return False
    if spec is not None:
        return bool(consts.get("spec_overlap_schedule", True))
    return True


def _spec_flags(args: dict[str, Any]) -> tuple[str | None, int, int, int]:
    """(algorithm, num_steps, eagle_topk, num_draft_tokens); EAGLE's 3 / 1 / steps + 1 by default."""
    spec_raw = arg(args, "speculative_algorithm")
    spec: str | None = str(spec_raw).upper() if spec_raw else None
    steps = int(arg(args, "speculative_num_steps") or (3 if spec else 0))
    topk = int(arg(args, "speculative_eagle_topk") or (1 if spec else 0))
    draft_tokens = int(arg(args, "speculative_num_draft_tokens") or (steps + 1 if spec else 0))
    return spec, steps, topk, draft_tokens


def resolve_flags(args: dict[str, Any], gpu: GpuSpec, shape: ModelShape, consts: dict[str, Any],
                  traits: dict[str, Any]) -> PlanFlags:
    tp = int(arg(args, "tp_size") or 1)
    spec, steps, topk, draft_tokens = _spec_flags(args)
    chunked = int(arg(args, "chunked_prefill_size") or _chunk_default(gpu))
    graph_bs_arg = arg(args, "cuda_graph_max_bs_decode", "cuda_graph_max_bs")
    graph_bs = int(graph_bs_arg) if graph_bs_arg else gpu.cuda_graph_max_bs_default
    ctx_arg = arg(args, "context_length")
    mf_arg = arg(args, "mem_fraction_static")
    if mf_arg is not None:
        mf = float(mf_arg)
    else:
        mf = _default_mem_fraction(gpu, tp, chunked, graph_bs, spec)
        mf = round(mf * _vlm_factor(shape, consts), 3)
    strategy = _resolve_strategy(args) if shape.is_hybrid else None
    return PlanFlags(
        tp=tp, spec=spec, steps=steps, topk=topk, draft_tokens=draft_tokens, chunked=chunked,
        max_prefill=int(arg(args, "max_prefill_tokens") or 16384), graph_bs=graph_bs,
        context_len=int(ctx_arg) if ctx_arg else shape.context_len, mem_fraction=mf,
        explicit_max_running=arg(args, "max_running_requests"),
        spec_max_running_default=int(traits.get("spec_max_running_default", 48)),
        strategy=strategy, mamba_ratio=_mamba_ratio(strategy, args) if strategy else 1,
        overlap_schedule=_overlap_schedule(args, spec, consts),
    )
