# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.router_plan: the router's plan, and its pre-flight on the router's host
(documentation: plugins/modules/router_plan.py).

Why an action: the plan is made on the controller from the role's variables (one mapping,
``_routerplan.VARIABLES``), and what only the host can tell (who holds the router's ports, is
its Python there, does its installed parser accept the flags, which service manager runs) is
asked in one module run on the host (``llmops.sglang.preflight``), before anything changes.

With ``rollout`` (deploy.yml's gate, through the role's ``plan.yml``) it also checks the
fleet's rollout from every planned server host's plan and variables (``_rolloutcheck``): a
capacity floor that cannot hold fails the task before any host changes, and the rollout time
estimate comes back (and is printed with ``show``)."""
from __future__ import annotations

from typing import Any

from ansible import context
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.vars import load_extra_vars

from ansible_collections.llmops.sglang.plugins.plugin_utils import _rolloutcheck, _routerplan
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import plain
from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import RolloutError
from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import documented_args


class ActionModule(ActionBase):
    """Plan the router from the task's variables; check on the host that it can start."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = documented_args(self, "router_plan")
        full = args["preflight"]
        if not isinstance(full, bool):
            raise AnsibleActionFail(f"preflight must be true or false, not {full!r}")
        wanted = list(_routerplan.VARIABLES.values()) + list(_routerplan.SECRET_VARIABLES)
        values = {name: self._templar.template(task_vars[name]) for name in wanted if name in task_vars}
        try:
            request = _routerplan.RouterRequest.from_vars(values, api_key=values.get("sglang_api_key"))
        except _routerplan.RouterPlanError as err:
            return {**result, "failed": True, "changed": False, "msg": str(err), "problems": err.problems}
        rollout = args["rollout"]
        if not isinstance(rollout, bool):
            raise AnsibleActionFail(f"rollout must be true or false, not {rollout!r}")
        checked_rollout = None
        if rollout:  # before the host is asked anything: a floor that cannot hold stops here
            try:
                checked_rollout = self._rollout(task_vars, request.pd_disaggregation)
            except RolloutError as err:
                return {**result, "failed": True, "changed": False, "msg": f"rollout refused: {err}"}
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
        if checked_rollout:
            result.update(rollout={k: v for k, v in checked_rollout.items() if k not in ("lines", "estimate")},
                          rollout_estimate=checked_rollout["lines"])
        if args["show"]:  # printed as the task's result, as debug prints
            result.update(_ansible_verbose_always=True, summary={
                "router": f"{plan['description']} ({plan['backend']} backend)", "python": plan["python"],
                "argv": plan["argv"], "url": plan["connect_url"]})
        return result

    def _rollout(self, task_vars: dict[str, Any], pd_mode: bool) -> dict[str, Any] | None:
        """The fleet's rollout check from the server hosts' hostvars (templated on access, each
        under its own host's variables), the router's mode against their instances (``pd_mode``:
        sglang_router_pd_disaggregation); None without a planned server host."""
        hostvars = task_vars.get("hostvars") or {}
        servers = [str(h) for h in (task_vars.get("groups") or {}).get("sglang_servers") or []]
        views = {}
        for host in servers:
            if host not in hostvars:
                continue
            host_vars = hostvars[host]
            views[host] = {name: plain(host_vars[name]) for name in _rolloutcheck.WANTED if name in host_vars}
        forks = context.CLIARGS.get("forks") if context.CLIARGS else None
        _rolloutcheck.router_mode_check(views, servers, pd_mode=pd_mode,
                                        router_host=str(task_vars.get("inventory_hostname") or ""))
        return _rolloutcheck.rollout_check(views, servers, extra_vars=plain(load_extra_vars(self._loader)),
                                           forks=int(forks) if forks else None)
