# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.generate_job: the module with, when the task says ``options_from_role:
generate``, every documented option it does not give taken from the role's
``sglang_generate_<option>`` (``_roleoptions``), so the generate role passes options, not one
keyword per option. The module then runs as it would without this action (``async`` included)."""
from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

from ansible_collections.llmops.sglang.plugins.plugin_utils._declared import role_options
from ansible_collections.llmops.sglang.plugins.plugin_utils._docspec import documented_options
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import plain
from ansible_collections.llmops.sglang.plugins.plugin_utils._roleoptions import MISSING, options_from_role

MODULE = "llmops.sglang.generate_job"


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        role = args.pop("options_from_role", None)
        if role:
            def get(name: str) -> Any:
                return plain(self._templar.template(task_vars[name])) if name in task_vars else MISSING

            args = options_from_role(str(role), documented_options("generate_job"), args, get, role_options(str(role)))
        wrap_async = self._task.async_val and not self._connection.has_native_async
        result = merge_hash(result, self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars,
                                                         wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
