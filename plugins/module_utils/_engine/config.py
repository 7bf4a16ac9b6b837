# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""One engine's configuration, fixed at start-up: the parsed argv resolved against the plan
(``EngineConfig``), read by the engine and its scheduler."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.faults import Faults
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel import EnginePlan


@dataclass(frozen=True)
class EngineConfig:
    """What the engine serves, fixed at start-up."""

    args: dict[str, Any]  # every dest of the parsed argv
    plan: EnginePlan
    gpu_name: str
    release: str
    traits: dict[str, Any]
    model_config: dict[str, Any]
    time_scale: float  # wall seconds per modelled second
    model_path: str
    served_name: str
    hybrid: bool
    spec: bool
    context_len: int
    max_total_tokens: int
    max_running: int
    vocab_size: int
    mamba_slots: int
    graph_max_bs: int
    radix_cache: bool  # the prefix cache (off with --disable-radix-cache)
    host_kv_tokens: int = 0  # the HiCache host KV pool (0 without HiCache)
    faults: Faults = Faults()  # injected faults (LLMOPS_SIM_FAIL_SHARE, ..._DECODE_SLOWDOWN)
    startup_scale: float = 1.0  # wall seconds per modelled second of the start-up (load, pinning, warm-up)

    @classmethod
    def build(cls, *, args: dict[str, Any], plan: EnginePlan, gpu_name: str, release: str,
              traits: dict[str, Any], model_config: dict[str, Any], time_scale: float,
              faults: Faults | None = None, startup_scale: float | None = None) -> EngineConfig:
        model_path = str(args.get("model_path"))
        hybrid = plan.shape.is_hybrid
        return cls(
            args=args, plan=plan, gpu_name=gpu_name, release=release, traits=traits,
            model_config=model_config, time_scale=time_scale, model_path=model_path,
            served_name=str(args.get("served_model_name") or model_path), hybrid=hybrid,
            spec=bool(plan.spec_algorithm), context_len=int(plan.context_len),
            max_total_tokens=plan.max_total_num_tokens, max_running=plan.max_running_requests,
            vocab_size=int(model_config.get("vocab_size") or 32000),
            mamba_slots=plan.mamba_slots if hybrid else 0,  # at least the strategy's ratio
            graph_max_bs=int(plan.cuda_graph_max_bs),
            radix_cache=not args.get("disable_radix_cache"),
            host_kv_tokens=host_kv_tokens(plan),
            faults=faults or Faults(),
            startup_scale=time_scale if startup_scale is None else startup_scale,
        )


def host_kv_tokens(plan: EnginePlan) -> int:
    """Tokens of the HiCache host KV pool (0 without HiCache)."""
    return next((int(pool.tokens) for pool in plan.hicache_pools if pool.name == "kv"), 0)
