# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""``max_running_requests`` and what it sizes (docs/engine.md "Start-up plan" 4 and 5): the
speculative KV reserve, the intermediate Mamba caches and the effective CUDA-graph batch size."""
from __future__ import annotations

from dataclasses import dataclass

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.defaults import PlanFlags
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.shape import ModelShape


@dataclass(frozen=True)
class RunningLimit:
    max_running: int
    kv_tokens: int  # the KV pool, the speculative reserve included
    inter_ssm: float  # bytes of the intermediate SSM states (hybrid with speculative decoding)
    inter_conv: float  # bytes of the intermediate conv windows
    graph_bs: int  # cuda_graph_max_bs, capped at max_running

    @property
    def intermediate_bytes(self) -> float:
        return self.inter_ssm + self.inter_conv


def _max_running(flags: PlanFlags, shape: ModelShape, kv_tokens: int, mamba_slots: int) -> int:
    """Explicit, else the speculative default, else from the KV pool; hybrid: at most the Mamba
    slots over the strategy's ratio."""
    if flags.explicit_max_running is not None:
        mrr = int(flags.explicit_max_running)
    elif flags.spec:
        mrr = flags.spec_max_running_default
    else:
        mrr = min(max(int(kv_tokens / flags.context_len * 512), 2048), 4096)
    if shape.is_hybrid:
        mrr = min(mrr, mamba_slots // flags.mamba_ratio)
    return max(mrr, 1)


def running_limit(flags: PlanFlags, shape: ModelShape, kv_tokens: int, mamba_slots: int,
                  ) -> RunningLimit:
    mrr = _max_running(flags, shape, kv_tokens, mamba_slots)
    inter_ssm = inter_conv = 0.0
    if flags.spec:
        kv_tokens += mrr * flags.steps * flags.topk + mrr * flags.draft_tokens + 100
        layers = shape.linear_attention_layers
        ssm_layer = shape.mamba_ssm_bytes_per_slot / max(layers, 1)
        if shape.is_hybrid:
            inter_ssm = (mrr + 1) * flags.draft_tokens * ssm_layer * layers
            conv_layer = shape.mamba_conv_bytes_per_slot / max(layers, 1)
            inter_conv = (mrr + 1) * flags.draft_tokens * conv_layer / 3 * layers
    return RunningLimit(max_running=mrr, kv_tokens=kv_tokens, inter_ssm=inter_ssm,
                        inter_conv=inter_conv, graph_bs=min(flags.graph_bs, mrr))
