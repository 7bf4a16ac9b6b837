# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""One engine process's state: its configuration (``config.EngineConfig``: the parsed argv resolved
against the plan), the request scheduler, the metrics, and where it is in its life (loading -> warmup -> ready ->
stopping)."""
from __future__ import annotations

import asyncio
import time

from ansible_collections.llmops.sglang.plugins.module_utils._engine.config import EngineConfig
from ansible_collections.llmops.sglang.plugins.module_utils._engine.disagg import Disagg
from ansible_collections.llmops.sglang.plugins.module_utils._engine.faults import FailureGate
from ansible_collections.llmops.sglang.plugins.module_utils._engine.log import Log
from ansible_collections.llmops.sglang.plugins.module_utils._engine.metrics import EngineMetrics
from ansible_collections.llmops.sglang.plugins.module_utils._engine.scheduler import RequestScheduler


class Engine:
    """The configuration and the parts that change while it serves."""

    def __init__(self, config: EngineConfig, log: Log) -> None:
        self.config = config
        self.log = log
        self.state = "loading"  # loading -> warmup -> ready -> stopping
        self.metrics = EngineMetrics(hicache_total=config.host_kv_tokens)
        self.scheduler = RequestScheduler(config, self.metrics, log)
        self.fail_gate = FailureGate(config.faults.fail_share)  # LLMOPS_SIM_FAIL_SHARE
        self.disagg = new_disagg(config)  # None unless --disaggregation-mode prefill|decode
        self.stop_event = asyncio.Event()
        self.started_wall = time.time()
        self.ready_wall: float | None = None


def new_disagg(config: EngineConfig) -> Disagg | None:
    """This instance's side of prefill/decode disaggregation (disagg.py), from its flags: the
    transfer at ``pd_rdma_gb_s`` for mooncake and nixl, ``pd_tcp_gb_s`` for mooncake_tcp."""
    args = config.args
    mode = str(args.get("disaggregation_mode") or "null")
    if mode not in ("prefill", "decode"):
        return None
    backend = str(args.get("disaggregation_transfer_backend") or "mooncake")
    consts = config.plan.constants
    gb_s = float(consts.get("pd_tcp_gb_s" if backend == "mooncake_tcp" else "pd_rdma_gb_s", 5.0))
    per_token = config.plan.shape.kv_bytes_per_token / max(config.plan.tp_size, 1)
    return Disagg(mode, str(args.get("host") or "127.0.0.1"), int(args.get("disaggregation_bootstrap_port") or 8998),
                  per_token, gb_s, config.time_scale)
