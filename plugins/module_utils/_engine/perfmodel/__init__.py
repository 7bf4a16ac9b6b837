# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The embedded engine's performance model: what a simulated SGLang server allocates at
start-up, what it logs, how long it takes to become ready and how long each scheduler step
takes. Pure standard library; the physics and SGLang's own memory rules are described, with
every constant's origin, in docs/engine.md. Constants are data: ``data/gpus.json``,
``data/perfmodel.json``, release traits in ``data/releases.json`` (``_releases``).

One job per file:

- ``gpus``: GPU specs and the look-up by nvidia-smi name;
- ``shape``: a model's sizes from its config.json (hybrid or not: ``_models.is_hybrid``);
- ``plan``: ``EnginePlan`` and ``plan_engine``, which runs the stages below in order:
  ``defaults`` (flags with SGLang's defaults), ``memory`` (the GPU memory budget and the KV
  pool), ``mamba`` (the Mamba state pool), ``running`` (``max_running_requests``), ``hostpools``
  (HiCache host pools and the host-memory check), ``timings`` (start-up times), ``loglines``
  (the start-up log);
- ``steps``: the modelled time of a decode, verify or prefill step;
- ``batching``: ``Scheduler``, continuous batching on a virtual clock, and ``simulate_level``;
- ``common``: units, ``data/perfmodel.json`` and ``EngineStartError``.
"""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.batching import (
    Scheduler,
    StepResult,
    simulate_level,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.common import (
    GB,
    GIB,
    MIB,
    EngineStartError,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.gpus import (
    GpuSpec,
    UnknownGpuError,
    find_gpu,
    load_gpu_specs,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.hostpools import HostPool
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.plan import (
    EnginePlan,
    plan_engine,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.shape import (
    ModelConfigError,
    ModelShape,
    load_model_config,
    model_shape_from_config,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.steps import (
    accepted_tokens,
    decode_step_seconds,
    prefill_seconds,
    scheduler_cpu_seconds,
)

__all__ = [
    "GB", "GIB", "MIB", "EnginePlan", "EngineStartError", "GpuSpec", "HostPool", "ModelConfigError",
    "ModelShape", "Scheduler", "StepResult", "UnknownGpuError", "accepted_tokens", "decode_step_seconds",
    "find_gpu", "load_gpu_specs", "load_model_config", "model_shape_from_config", "plan_engine",
    "prefill_seconds", "scheduler_cpu_seconds", "simulate_level",
]
