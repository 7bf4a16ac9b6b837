# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Start-up timings (docs/engine.md "Start-up plan" 8): process start, weight loading, CUDA-graph
capture and warm-up (``load_seconds``), then pinning the HiCache host pools (``pin_seconds``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.common import GB
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.defaults import PlanFlags
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.hostpools import HostPool
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.shape import ModelShape


@dataclass(frozen=True)
class StartupTimes:
    process_start: float  # launch to "Init torch distributed"
    weights_load: float
    draft_load: float
    graph_capture: float
    pin_rate: float  # host-pool bytes pinned per second
    pin_fixed: float  # one-off set-up, carried by the first pool
    pin_seconds: float
    load_seconds: float

    def pool_seconds(self, pool: HostPool, first: bool) -> float:
        """Pinning one pool (the first also carries the one-off set-up; run 1: KV 115 GB in
        110 s, Mamba 47.6 GB in 34 s; run 2: KV 5.67 GB in 13 s, Mamba 2.34 GB in 2 s)."""
        return pool.bytes / self.pin_rate + (self.pin_fixed if first else 0.0)


def _load_seconds(args: dict[str, Any], flags: PlanFlags, shape: ModelShape,
                  consts: dict[str, Any]) -> tuple[float, float]:
    """(target weights, draft weights) from disk; --load-format dummy skips the disk."""
    if str(args.get("load_format") or "auto") == "dummy":
        return float(consts.get("dummy_load_s", 0.2)), 0.01
    disk = float(consts.get("disk_gb_s", 2.0)) * GB
    w_load = shape.weight_bytes / flags.tp / disk
    d_load = (shape.draft_layer_params * shape.dtype_bytes / flags.tp / disk) if flags.spec else 0.0
    return w_load, d_load


def _capture_seconds(flags: PlanFlags, consts: dict[str, Any]) -> float:
    """CUDA-graph capture: prefill, then decode, or verify + draft decode + draft extend."""
    cap: dict[str, float] = dict(consts.get("graph_capture_s", {}))
    capture = cap.get("prefill", 79.0)
    if flags.spec:
        capture += cap.get("target_verify", 14.3) + cap.get("draft_decode", 5.5)
        capture += cap.get("draft_extend", 1.25)
    else:
        capture += cap.get("decode", 3.3)
    return capture


def startup_times(args: dict[str, Any], flags: PlanFlags, shape: ModelShape,
                  consts: dict[str, Any], pools: list[HostPool]) -> StartupTimes:
    w_load, d_load = _load_seconds(args, flags, shape, consts)
    capture = _capture_seconds(flags, consts)
    pin_rate = float(consts.get("pin_gb_s", 1.2)) * GB
    pin_fixed = float(consts.get("pin_fixed_s", 10.0)) if pools else 0.0
    t0 = float(consts.get("process_start_s", 24.0))
    load = t0 + w_load + d_load + 1.5 + capture + float(consts.get("tokenizer_warmup_s", 8.0))
    return StartupTimes(process_start=t0, weights_load=w_load, draft_load=d_load,
                        graph_capture=capture, pin_rate=pin_rate, pin_fixed=pin_fixed,
                        pin_seconds=pin_fixed + sum(p.bytes for p in pools) / pin_rate,
                        load_seconds=load)
