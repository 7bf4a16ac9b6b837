# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.router_plan: the router's plan, and its pre-flight on the router's host
(documentation: plugins/modules/router_plan.py).

Why an action: the plan is made on the controller from the role's variables (one mapping,
``_routerplan.VARIABLES``), and what only the host can tell (who holds the router's ports, is
its Python there, does its installed parser accept the flags, which service manager runs) is
asked in one module run on the host (``llmops.sglang.preflight``), before anything changes."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.sglang.plugins.plugin_utils import _routerplan


class ActionModule(ActionBase):
    """Plan the router from the task's variables; check on the host that it can start."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("preflight", "show"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        full = self._task.args.get("preflight", True)
        if not isinstance(full, bool):
            raise AnsibleActionFail(f"preflight must be true or false, not {full!r}")
        wanted = list(_routerplan.VARIABLES.values()) + list(_routerplan.SECRET_VARIABLES)
        values = {name: self._templar.template(task_vars[name]) for name in wanted if name in task_vars}
        try:
            request = _routerplan.RouterRequest.from_vars(values, api_key=values.get("sglang_api_key"))
        except _routerplan.RouterPlanError as err:
            return {**result, "failed": True, "changed": False, "msg": str(err), "problems": err.problems}
        host_address = self._templar.template(task_vars.get("ansible_host", task_vars.get("inventory_hostname")))
        plan = _routerplan.plan(request, str(host_address) if host_address else None)
        spec = plan.pop("preflight")
        if not full:  # stop, status: only the service manager is asked of the host
            spec = {"service_manager": spec["service_manager"]}
        checked = self._execute_module(module_name="llmops.sglang.preflight",
                                       module_args={**spec, "subject": "the router"}, task_vars=task_vars)
        if checked.get("failed") or checked.get("unreachable") or "service_manager" not in checked:
            return {**result, **checked, "failed": True, "changed": False}
        plan["backend"] = checked["service_manager"]
        result = {**result, "changed": False, "plan": plan}
        if self._task.args.get("show"):  # printed as the task's result, as debug prints
            result.update(_ansible_verbose_always=True, summary={
                "router": f"{plan['description']} ({plan['backend']} backend)", "python": plan["python"],
                "argv": plan["argv"], "url": plan["connect_url"]})
        return result
