# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The action plugins' bases (the one place below module_utils and plugin_utils that imports
ansible-core):

- ``StepAction``: an action whose task names a step (``server_rollout``, ``tune_search``): the
  task's arguments validated against the action's documentation (``_docspec``: its types, choices
  and defaults), the step run as the method ``step_<name>(args, task_vars)`` with those arguments,
  and the errors the rules raise for bad input turned into a failed task that names the step;
- ``RoleOptionsAction``: the action in front of a module whose task may say ``options_from_role:
  <role>`` (``throughput_sweep``, ``generate_job``): every documented option the task does not give
  is taken from the role's ``sglang_<role>_<option>`` (``_roleoptions``), so a role passes options,
  not one keyword per option; then the module runs as it would without the action (``async``
  included)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

from ansible_collections.llmops.sglang.plugins.plugin_utils._declared import role_options
from ansible_collections.llmops.sglang.plugins.plugin_utils._docspec import argument_spec, documented_options
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import plain
from ansible_collections.llmops.sglang.plugins.plugin_utils._roleoptions import MISSING, options_from_role


def documented_args(action: ActionBase, name: str) -> dict[str, Any]:
    """The task's arguments validated against the action's documentation (``plugins/modules/<name>.py``
    and its doc fragments, ``_docspec``): the documented types, choices and defaults; an argument
    the documentation does not name fails the task."""
    return dict(action.validate_argument_spec(argument_spec=argument_spec(name))[1])


class StepAction(ActionBase):
    """Run the task's ``step``; nothing runs on the host unless a step asks for it."""

    TRANSFERS_FILES = False
    # the action's name: its documentation (plugins/modules/<NAME>.py) is its argument spec
    NAME = ""
    STEPS: tuple[str, ...] = ()
    # the rules' errors for bad input: a failed task, not a traceback
    ERRORS: tuple[type[Exception], ...] = ()
    # what a failure's message starts with, before the step's name
    LABEL = ""

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        step = self._task.args.get("step")
        if step not in self.STEPS:
            raise AnsibleActionFail(f"step {step!r} is not one of {', '.join(self.STEPS)}")
        args: Mapping[str, Any] = documented_args(self, self.NAME)
        try:
            out = getattr(self, f"step_{step}")(args, task_vars or {})
        except self.ERRORS as err:
            return {**result, "failed": True, "changed": False, "msg": f"{self.LABEL}{step}: {err}"}
        return {**result, "changed": False, **out}


class RoleOptionsAction(ActionBase):
    """Set ``NAME`` (the module's short name: its documentation is read); override ``task_args``
    to change the task's arguments before the role's options are added, ``module_args`` after."""

    _supports_check_mode = True
    _supports_async = True
    NAME = ""

    def task_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """The task's arguments as the role's options see them (before they are added)."""
        return args

    def module_args(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return args

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self.task_args(dict(self._task.args))
        role = args.pop("options_from_role", None)
        if role:
            def get(name: str) -> Any:
                return plain(self._templar.template(task_vars[name])) if name in task_vars else MISSING

            args = options_from_role(str(role), documented_options(self.NAME), args, get, role_options(str(role)))
        args = self.module_args(args, task_vars)
        wrap_async = self._task.async_val and not self._connection.has_native_async
        result = merge_hash(result, self._execute_module(module_name=f"llmops.sglang.{self.NAME}", module_args=args,
                                                         task_vars=task_vars, wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
