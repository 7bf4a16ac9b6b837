# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.bench_plan: the bench role's plan for one host, made on the controller
(documentation: plugins/modules/bench_plan.py; the rules: plugins/plugin_utils/_benchplan.py).
Nothing runs on the host."""
from __future__ import annotations

import time
from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.llmops.sglang.plugins.lookup.controller_pid import controller_pid
from ansible_collections.llmops.sglang.plugins.plugin_utils import _benchplan
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import plain
from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import documented_args


class ActionModule(ActionBase):
    """Plan one host's sweeps from the bench role's variables and the host's manifest."""

    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = documented_args(self, "bench_plan")

        def var(name: str) -> Any:
            return plain(self._templar.template(task_vars[name])) if name in task_vars else None

        req = _benchplan.BenchHost(
            host=str(task_vars.get("inventory_hostname")),
            manifest=plain(args["manifest"]) or {},
            variables={name: var(name) for name in _benchplan.VARIABLES},
            through_router=bool(args["through_router"]),
            health=plain(args["health"]),
            workers=plain(args["workers"]),
            host_python=var("ansible_python_interpreter"),
            controller_python=str(var("ansible_playbook_python") or "python3"),
        )
        pid = controller_pid()
        try:
            plan = _benchplan.plan(req, controller_started=_benchplan.process_started(pid), now=time.time(),
                                   controller_pid=pid)
        except _benchplan.BenchPlanError as err:
            return {**result, "failed": True, "changed": False, "msg": str(err)}
        for warning in plan["warnings"]:
            self._display.warning(warning)
        return {**result, "changed": False, "plan": plan}
