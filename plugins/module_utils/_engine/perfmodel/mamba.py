# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The Mamba state pool of a hybrid model (docs/engine.md "Start-up plan" 3): with speculative
decoding an intermediate-state reserve first, then ``mamba_share_of_rest`` of what remains, in
whole slots."""
from __future__ import annotations

from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.common import (
    GIB,
    EngineStartError,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.defaults import PlanFlags
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.shape import ModelShape


def _spec_reserve_requests(flags: PlanFlags, consts: dict[str, Any]) -> int:
    """Requests the intermediate-state reserve is sized for: --max-running-requests, else the
    release's ``spec_intermediate_reserve_requests``, else the speculative default."""
    if flags.explicit_max_running is not None:
        return int(flags.explicit_max_running)
    reserve = consts.get("spec_intermediate_reserve_requests")
    return int(reserve) if reserve is not None else flags.spec_max_running_default


def mamba_pool(rest: float, flags: PlanFlags, shape: ModelShape, consts: dict[str, Any],
               ) -> tuple[int, float]:
    """(slots, GiB left for the KV pool); (0, rest) for a dense model. Raises EngineStartError
    when fewer slots than one running request needs fit."""
    if not shape.is_hybrid:
        return 0, rest
    state = shape.mamba_state_bytes_per_slot / flags.tp
    if flags.spec:
        rest -= state * _spec_reserve_requests(flags, consts) * flags.draft_tokens / GIB
    share = float(consts.get("mamba_share_of_rest", 0.4737))
    mamba_raw = max(rest, 0.0) * share
    slots = int(mamba_raw * GIB // state) if state > 0 else 0
    rest -= slots * state / GIB
    if slots < flags.mamba_ratio:
        raise EngineStartError(
            "RuntimeError: Not enough memory for the Mamba state cache: "
            f"max_mamba_cache_size={slots}. Please try to increase "
            f"--mem-fraction-static. Current value: mem_fraction_static={flags.mem_fraction}"
        )
    return slots, rest
