# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The shape of an action whose task names a step (``server_rollout``, ``tune_search``): the task's
arguments validated against the action's documentation (``_docspec``: its types, choices and
defaults), the step run as the method ``step_<name>(args, task_vars)`` with those arguments, and
the errors the rules raise for bad input turned into a failed task that names the step."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.sglang.plugins.plugin_utils._docspec import argument_spec


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
