# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The GPU memory budget in GiB, like SGLang's "avail mem" figures (docs/engine.md "Start-up
plan" 2 and 4): weights, the draft worker, the static fraction, the KV pool, and what is left
at the end of start-up."""
from __future__ import annotations

from dataclasses import dataclass

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.common import (
    GIB,
    EngineStartError,
    not_enough_memory,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.defaults import PlanFlags
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.gpus import GpuSpec
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.shape import ModelShape


@dataclass(frozen=True)
class GpuBudget:
    total: float  # the GPU's memory
    avail_start: float  # free after the CUDA context ("Load weight begin. avail mem=")
    weights: float  # target weights per GPU
    draft_weights: float  # the MTP/draft worker's weights (0 without speculative decoding)
    avail_weights: float  # free after the target weights
    avail_draft: float  # free after the draft weights
    rest: float  # for the Mamba and KV pools: what the static fraction leaves of it


def gpu_budget(flags: PlanFlags, gpu: GpuSpec, shape: ModelShape) -> GpuBudget:
    """Weights and the static fraction taken from the GPU; raises EngineStartError when the
    weights do not fit or nothing is left for the pools."""
    tp, mf = flags.tp, flags.mem_fraction
    total = gpu.memory_gib
    avail0 = total - gpu.cuda_context_gib
    weights = shape.weight_bytes / tp / GIB
    draft_w = shape.draft_weight_bytes / tp / GIB if flags.spec else 0.0
    if weights > avail0:
        need = shape.weight_bytes / tp / GIB
        raise EngineStartError(
            "torch.OutOfMemoryError: CUDA out of memory while loading weights: the model needs "
            f"{need:.2f} GiB per GPU but only {avail0:.2f} GiB is free on {gpu.name} "
            f"(tp_size={tp}). Use more GPUs (--tp-size) or a quantized model."
        )
    avail1 = avail0 - weights
    avail2 = avail1 - draft_w
    rest = avail2 - total * (1.0 - mf)
    if rest <= 0:
        raise not_enough_memory(mf)
    return GpuBudget(total=total, avail_start=avail0, weights=weights, draft_weights=draft_w,
                     avail_weights=avail1, avail_draft=avail2, rest=rest)


def kv_pool_tokens(rest: float, flags: PlanFlags, shape: ModelShape) -> int:
    """Tokens of the KV pool in ``rest`` GiB (before the speculative reserve)."""
    kv_cell = shape.kv_bytes_per_token / flags.tp
    kv_tokens = int(rest * GIB // kv_cell) if kv_cell > 0 else 0
    if kv_tokens <= 0:
        raise not_enough_memory(flags.mem_fraction)
    return kv_tokens


def draft_kv_gib(flags: PlanFlags, shape: ModelShape, kv_tokens: int) -> float:
    """The draft worker's KV pool (one layer for every KV token)."""
    return kv_tokens * shape.draft_kv_bytes_per_token / flags.tp / GIB if flags.spec else 0.0


def available_after_start(budget: GpuBudget, flags: PlanFlags, shape: ModelShape, kv_tokens: int,
                          intermediate_bytes: float) -> float:
    """``available_gpu_mem`` of the summary line: the non-static share less the draft KV pool,
    the CUDA graphs and the intermediate Mamba caches (at least 0.5 GiB)."""
    graph_mem = 0.6 + (0.3 if flags.spec else 0.0)
    draft_kv = draft_kv_gib(flags, shape, kv_tokens)
    end_avail = budget.total * (1.0 - flags.mem_fraction) - draft_kv - graph_mem - intermediate_bytes / GIB
    return max(end_avail, 0.5)
