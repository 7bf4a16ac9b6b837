# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.generate_job: the module with, when the task says ``options_from_role:
generate``, every documented option it does not give taken from the role's
``sglang_generate_<option>`` (``_stepaction.RoleOptionsAction``). The module then runs as it would without this
action (``async`` included)."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import RoleOptionsAction


class ActionModule(RoleOptionsAction):
    NAME = "generate_job"
