# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The deployment plan (controller side): host facts + profile + release traits + model config
-> the instances of one host. One job per file:

- ``request``: the user's inputs, typed and checked in one place (``PlanRequest``);
- ``profiles``: data/profiles.yml with the user's profiles merged over it;
- ``gpus``: the GPU groups of the instances, refusing foreign-busy GPUs;
- ``settings``: what every instance of the host shares (speculative decoding, running limits,
  Mamba strategy, HiCache);
- ``hicache``: the HiCache host-pool size from the host's memory;
- ``instances``: each instance built by small functions (ports, argv, env, paths, URLs);
- ``validate``: every argv checked against the release's flag schema;
- ``modelconfig``: the model's config.json (as the host read it) parsed, or a message naming it.

Pure functions: the only I/O is loading the collection's data files. See docs/planning.md.
"""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import GB, GIB, PlanError
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.hicache import hicache_plan, pin_seconds
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.instances import Instance, instance_plan
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.modelconfig import (
    load_model_config,
    load_slurped_config,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.profiles import (
    load_profiles,
    resolve_profile,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.request import OWNED_FLAGS, PlanRequest
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.validate import validate_plan

__all__ = [
    "GB", "GIB", "OWNED_FLAGS", "Instance", "PlanError", "PlanRequest", "hicache_plan", "instance_plan",
    "load_model_config", "load_profiles", "load_slurped_config", "pin_seconds", "resolve_profile", "validate_plan",
]
