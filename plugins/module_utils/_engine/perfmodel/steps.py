# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""How long one scheduler step takes on the modelled GPU (docs/engine.md "Step time"): a decode
(or speculative draft + verify) round, a prefill of newly admitted requests, and the scheduler's
own CPU time; plus the tokens a request gains per verify step."""
from __future__ import annotations

import math

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.common import GB
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.plan import EnginePlan
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.shape import ModelShape


def _weight_read_bytes(shape: ModelShape, tokens: int, tp: int) -> float:
    """Weights read by one forward over ``tokens`` tokens (routed experts in proportion)."""
    embed = shape.vocab_size * shape.hidden_size * shape.dtype_bytes
    dense = shape.dense_params * shape.dtype_bytes - embed  # embedding rows are gathered
    experts = shape.expert_params * shape.dtype_bytes
    used = min(1.0, max(tokens, 1) * shape.experts_per_token_fraction) if experts else 0.0
    return (dense + experts * used) / tp


def _target_seconds(plan: EnginePlan, batch: int, context_tokens: int, tokens: int,
                    flops: float) -> float:
    """The target forward: decode, or verify of draft_tokens per request."""
    gpu, shape, tp = plan.gpu, plan.shape, plan.tp_size
    spec = plan.spec_algorithm is not None
    state = shape.mamba_state_bytes_per_slot / tp
    traffic = _weight_read_bytes(shape, tokens, tp)
    traffic += context_tokens * shape.kv_bytes_per_token / tp
    traffic += batch * 2 * state  # recurrent state read + written back
    if spec and shape.is_hybrid:
        traffic += tokens * shape.mamba_ssm_bytes_per_slot / tp  # intermediate states written
    t = gpu.step_overhead_s + traffic / gpu.eff_bandwidth
    t += tokens * 2.0 * shape.active_params_per_token / flops
    if batch > plan.cuda_graph_max_bs:
        t += gpu.eager_overhead_per_layer_s * shape.num_layers
    return t


def _draft_seconds(plan: EnginePlan, batch: int, context_tokens: int, flops: float) -> float:
    """The draft model: num_steps forwards of the MTP layer + its lm_head."""
    gpu, shape, tp = plan.gpu, plan.shape, plan.tp_size
    draft_bytes = shape.draft_layer_params * shape.dtype_bytes / tp + shape.lm_head_bytes / tp
    draft_bytes += context_tokens * shape.draft_kv_bytes_per_token / tp
    draft_flops = batch * plan.spec_topk * 2.0 * (
        shape.draft_layer_params + shape.lm_head_bytes / shape.dtype_bytes
    )
    one = gpu.draft_step_overhead_s + draft_bytes / gpu.eff_bandwidth + draft_flops / flops
    if batch > plan.cuda_graph_max_bs:
        one += gpu.eager_overhead_per_layer_s
    return plan.spec_steps * one


def decode_step_seconds(plan: EnginePlan, batch: int, context_tokens: int) -> float:
    """Modelled seconds of one decode step (or draft + verify round) for ``batch`` requests.

    ``context_tokens`` is the total context (prompt + generated) of the running requests.
    """
    if batch <= 0:
        return 0.0
    gpu, shape = plan.gpu, plan.shape
    flops = gpu.bf16_tflops * 1e12 * gpu.decode_compute_efficiency * plan.tp_size
    spec = plan.spec_algorithm is not None
    tokens = batch * (plan.spec_draft_tokens if spec else 1)
    t = _target_seconds(plan, batch, context_tokens, tokens, flops)
    if spec:
        t += _draft_seconds(plan, batch, context_tokens, flops)
    # sampling: one top-p/top-k pass over the vocabulary per request (the verify kernel
    # treats a request's draft positions in the same pass)
    t += batch * shape.vocab_size * float(plan.constants.get("sampling_s_per_vocab_row", 0.0))
    if plan.hicache_enabled:
        t *= 1.0 + float(plan.constants.get("hicache_step_overhead", 0.0))
    cpu = scheduler_cpu_seconds(plan, batch)
    # The overlap scheduler prepares step i+1 and processes step i's results while the GPU
    # runs: the step takes the longer of the two; without overlap they add up.
    return max(t, cpu) if plan.overlap_schedule else t + cpu


def scheduler_cpu_seconds(plan: EnginePlan, batch: int) -> float:
    """CPU seconds of one scheduler iteration (batch preparation, result processing, streaming)."""
    consts = plan.constants
    per_req = float(consts.get("cpu_per_request_s", 0.0))
    if plan.spec_algorithm is not None:
        per_req += float(consts.get("cpu_per_request_spec_s", 0.0))
    return float(consts.get("cpu_step_s", 0.0)) + batch * per_req


def _hicache_write_seconds(plan: EnginePlan, tokens: int, requests: int) -> float:
    """Write-through of the new prefixes to the host pools (KV of every prompt token, the draft
    KV with MTP, and each request's Mamba state), done before the next batch."""
    shape = plan.shape
    kv_cell = shape.kv_bytes_per_token
    if plan.spec_algorithm is not None:
        kv_cell += shape.draft_kv_bytes_per_token
    backup = tokens * kv_cell + max(requests, 1) * shape.mamba_state_bytes_per_slot
    return backup / plan.tp_size / (float(plan.constants.get("hicache_write_gb_s", 8.0)) * GB)


def _chunk_seconds(plan: EnginePlan, n: int) -> float:
    """The forward over one chunk of ``n`` prompt tokens (and the draft extend over them)."""
    gpu, shape, tp = plan.gpu, plan.shape, plan.tp_size
    flops = gpu.bf16_tflops * 1e12 * gpu.prefill_compute_efficiency * tp
    t = gpu.step_overhead_s + _weight_read_bytes(shape, n, tp) / gpu.eff_bandwidth
    t += n * 2.0 * shape.active_params_per_token / flops
    if plan.spec_algorithm is not None:  # draft extend over the same tokens
        t += gpu.draft_step_overhead_s + n * 2.0 * shape.draft_layer_params / flops
    return t


def prefill_seconds(plan: EnginePlan, tokens: int, requests: int = 1) -> float:
    """Modelled seconds to prefill ``tokens`` prompt tokens of ``requests`` newly admitted
    requests (chunked by chunked_prefill_size).

    Besides the forward itself, a prefill batch pays a fixed cost (building the extend batch,
    radix-cache matching, the non-graph extend launch, first-token sampling; with speculative
    decoding the draft extend and the first draft) and a cost per admitted request.
    """
    if tokens <= 0:
        return 0.0
    consts = plan.constants
    chunk = max(plan.chunked_prefill_size, 1)
    total = float(consts.get("prefill_overhead_s", 0.0))
    total += max(requests, 1) * float(consts.get("prefill_per_request_s", 0.0))
    if plan.spec_algorithm is not None:
        total += float(consts.get("spec_prefill_overhead_s", 0.0))
    if plan.hicache_enabled:
        total += _hicache_write_seconds(plan, tokens, requests)
    left = tokens
    while left > 0:
        n = min(left, chunk)
        total += _chunk_seconds(plan, n)
        left -= n
    if plan.hicache_enabled:
        total *= 1.0 + float(plan.constants.get("hicache_step_overhead", 0.0))
    return total


def load_back_seconds(plan: EnginePlan, tokens: int, requests: int = 1) -> float:
    """Loading ``tokens`` prefix tokens that hit the HiCache host pool back to the device (KV of
    every token, the draft KV with MTP, and each request's Mamba state on a hybrid model) at
    ``hicache_load_gb_s``, before the prefill's forward."""
    if tokens <= 0:
        return 0.0
    shape = plan.shape
    kv_cell = shape.kv_bytes_per_token
    if plan.spec_algorithm is not None:
        kv_cell += shape.draft_kv_bytes_per_token
    moved = tokens * kv_cell + max(requests, 1) * shape.mamba_state_bytes_per_slot
    return moved / plan.tp_size / (float(plan.constants.get("hicache_load_gb_s", 20.0)) * GB)


def accepted_tokens(accept_length: float, step_index: int) -> int:
    """Tokens a request gains at its ``step_index``-th verify step (0-based).

    floor((i+1)*a) - floor(i*a): integers whose running mean is exactly ``a``
    (3.2 gives 3,3,3,3,4, ...).
    """
    a = max(accept_length, 1.0)
    return int(math.floor((step_index + 1) * a + 1e-9) - math.floor(step_index * a + 1e-9))
