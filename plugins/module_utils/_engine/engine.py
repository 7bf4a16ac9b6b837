# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""One engine process's state: its configuration (``config.EngineConfig``: the parsed argv resolved
against the plan), the request scheduler, the metrics, and where it is in its life (loading -> warmup -> ready ->
stopping)."""
from __future__ import annotations

import asyncio
import time

from ansible_collections.llmops.sglang.plugins.module_utils._engine.config import EngineConfig
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
        self.stop_event = asyncio.Event()
        self.started_wall = time.time()
        self.ready_wall: float | None = None
