# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.generate_plan: the generation job's plan, computed on the controller from
the play's hosts (documentation: plugins/modules/generate_plan.py; the rules:
plugins/plugin_utils/_generateplan.py)."""
from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.llmops.sglang.plugins.plugin_utils import _generateplan
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import plain


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        hostvars = task_vars.get("hostvars") or {}
        play_hosts = [str(h) for h in task_vars.get("ansible_play_hosts_all") or task_vars.get("ansible_play_hosts") or []]

        def of(host: str, name: str) -> Any:
            value = hostvars[host].get(name) if host in hostvars else None
            return plain(self._templar.template(value)) if value is not None else None

        fleet = _generateplan.Fleet(
            deployments={h: of(h, "__sglang_generate_manifest") for h in play_hosts if of(h, "__sglang_generate_manifest")},
            tuned={h: of(h, "sglang_tuned") for h in play_hosts},
            sweeps={h: of(h, "sglang_sweeps") for h in play_hosts},
            routers={h: of(h, "sglang_router_client") for h in play_hosts if of(h, "sglang_router_client")},
            dirs={h: {"sglang_generate_dir": of(h, "sglang_generate_dir"), "sglang_base_dir": of(h, "sglang_base_dir")}
                  for h in play_hosts},
        )
        variables = {name: plain(self._templar.template(task_vars[name])) for name in _generateplan.VARIABLES
                     if name in task_vars}
        try:
            plan = _generateplan.plan(variables, fleet, play_hosts)
        except (_generateplan.GeneratePlanError, OSError) as exc:
            return {**result, "failed": True, "changed": False, "msg": str(exc)}
        if plan["warnings"]:
            result["warnings"] = result.get("warnings", []) + plan["warnings"]
        return {**result, "changed": False, "plan": plan}
