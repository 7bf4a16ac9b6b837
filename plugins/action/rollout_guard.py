# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.rollout_guard: watch a batch of replaced instances against the old
configuration, and decide (documentation: plugins/modules/rollout_guard.py).

Why an action: the sides come from every server host's plan and this run's start results
(hostvars, on the controller), the window is measured on the router's host (module
llmops.sglang.rollout_window, run where the task is delegated), and the verdict
(plugins/plugin_utils/_guard.py) and its report are made on the controller."""
from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.sglang.plugins.plugin_utils import _canary, _guard
from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import documented_args


class ActionModule(ActionBase):
    """Pick the sides, measure the window on the router's host, judge, keep the report."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = documented_args(self, "rollout_guard")
        host = str(task_vars.get("inventory_hostname"))
        router_host = str(args.get("router_host") or "")
        if not router_host:
            raise AnsibleActionFail("router_host is required: the guard compares instances as a router reaches them")
        try:
            seconds = float(args["seconds"])
            interval = float(args["interval"])
            _guard.thresholds(args.get("thresholds") or {})
            on_inconclusive = _canary.check_on_inconclusive(args["on_inconclusive"])
            rate = _canary.probe_rate(args["probe_rate"], args.get("thresholds") or {}, seconds)
            hostvars = task_vars.get("hostvars") or {}
            servers = list((task_vars.get("groups") or {}).get("sglang_servers") or [])
            picked = _canary.sides(hostvars, servers, host, list(args.get("canary") or []), router_host)
        except (_guard.GuardError, TypeError, ValueError) as err:
            return {**result, "failed": True, "changed": False, "msg": f"rollout guard: {err}"}
        if self._play_context.check_mode:
            return {**result, "changed": False, "skipped": True, "msg": "check mode: nothing watched", "sides": picked}
        window = self._execute_module(
            module_name="llmops.sglang.rollout_window", task_vars=task_vars,
            module_args={"urls": picked["canary"] + picked["baseline"], "seconds": seconds, "interval": interval,
                         "probe_rate": rate,
                         "router_metrics_url": args.get("router_metrics_url") or None,
                         **({"api_key": args["api_key"]} if args.get("api_key") else {})})
        if window.get("failed") or window.get("unreachable"):
            return {**result, **window, "failed": True, "changed": False}
        try:
            verdict = _canary.judge(window, picked, args.get("thresholds") or {}, on_inconclusive)
        except _guard.GuardError as err:
            return {**result, "failed": True, "changed": False, "msg": f"rollout guard: {err}"}
        verdict["host"], verdict["phase"] = host, str(args["phase"])
        services = (task_vars.get("hostvars") or {}).get(host, {}).get("__sglang_services") or {}
        verdict["restore"] = _canary.to_restore(list(args.get("changed") or []), services, list(args.get("canary") or []))
        report = self._keep(verdict, args.get("report_dir"))
        if report:
            verdict["lines"].append(f"  report: {report}")
        stop = _canary.stop_lines(verdict, host, list(args.get("canary") or [])) if verdict["rollback"] else []
        return {**result, "changed": False, "_ansible_verbose_always": True, "decision": verdict["decision"],
                "rollback": verdict["rollback"], "restore": verdict["restore"], "reason": verdict["reason"], "lines": verdict["lines"],
                "stop": stop, "step": args.get("step"), "report": report, "verdict": verdict}

    @staticmethod
    def _keep(verdict: dict[str, Any], folder: Any) -> str | None:
        """The verdict as JSON in ``folder`` on the controller (None without one)."""
        if not folder:
            return None
        os.makedirs(str(folder), exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path = os.path.join(str(folder), f"rollout-guard-{verdict['host']}-{verdict['phase']}-{stamp}.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(verdict, handle, indent=2, sort_keys=True, default=str)
        return path
