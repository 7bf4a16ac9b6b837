# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.server_rollout: one step of a host's rollout, on the controller
(documentation: plugins/modules/server_rollout.py; the rules: plugin_utils/_deployment.py,
_rollout.py and _rollback.py).

Why an action: each step is a decision made from the plan the server role already has and the
results of the tasks before it (the files written, the services started, the readiness waits);
only the manifest's write runs on the host (``llmops.sglang.server_files``), and only when there
is something to write."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.sglang.plugins.plugin_utils import _deployment, _rollback
from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import RolloutError, rollout_batches
from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import StepAction


def _plan(args: Mapping[str, Any]) -> dict[str, Any]:
    plan = args.get("plan")
    if not isinstance(plan, Mapping) or not isinstance(plan.get("instances"), list):
        raise AnsibleActionFail("plan must be the server role's plan (a dict with instances)")
    return dict(plan)


def batches(args: Mapping[str, Any]) -> dict[str, Any]:
    """What restarts, what goes, what stays (against ``previous``), and the batches (``args``
    validated: every documented option is there, with its documented default)."""
    plan = _plan(args)
    # previous given (the plan's, ``{}`` on a first deploy): instances it lacks are new; omitted: not known
    change = _deployment.diff(plan, args.get("previous"), args.get("restart") or [], args["engine_changed"])
    found, warnings = rollout_batches(plan, change["restart"], list(args.get("running") or plan.get("running") or []),
                                      policy=args["policy"], routed=args["routed"], at_once=args["at_once"],
                                      canary=args["canary"], canary_s=args["canary_s"], guard_s=args["guard_s"],
                                      canary_alone=args["canary_alone"])
    if args.get("replaced_only"):
        found = [b for b in found if b.get("restart")]
    # not "warnings": Ansible takes that key of a result as the task's own warnings
    return {"diff": change, "batches": found, "rollout_warnings": warnings}


def records(args: Mapping[str, Any]) -> dict[str, Any]:
    """The batch's services: name -> {pid, started}, and the names (re)started."""
    recs = _deployment.service_records(args.get("start") or {}, args.get("restart") or [], args.get("units") or {})
    return {"records": recs, "started": [name for name, rec in recs.items() if rec["started"]]}


class ActionModule(StepAction):
    """Run the named step; the manifest steps write it on the host when it changed."""

    NAME = "server_rollout"
    STEPS = ("batches", "records", "manifest", "candidate", "rollback_plan", "rolled_back")
    ERRORS = (RolloutError, _rollback.RollbackError, KeyError, TypeError, ValueError)

    def step_batches(self, args: Mapping[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return batches(args)

    def step_records(self, args: Mapping[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return records(args)

    def step_rollback_plan(self, args: Mapping[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return {"plan": _rollback.plan(args.get("manifest") or None, list(args.get("running") or []),
                                       ready_timeout=args["ready_timeout"], time_scale=args["time_scale"],
                                       only=args.get("only") if args.get("only") else None)}

    def step_manifest(self, args: Mapping[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return self._manifest("manifest", args, task_vars)

    def step_candidate(self, args: Mapping[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return self._manifest("candidate", args, task_vars)

    def step_rolled_back(self, args: Mapping[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return self._manifest("rolled_back", args, task_vars)

    def _manifest(self, step: str, args: Mapping[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        """Build the manifest (``manifest``: from the plan; ``rolled_back``: the previous one with
        the restored instances back), then write it with server_files when it must be."""
        plan = _plan(args)
        restored = list(args.get("restored") or [])
        host = str(args.get("host") or task_vars.get("inventory_hostname"))
        if step == "manifest":
            built = _deployment.manifest(plan, host=host, services=args.get("services"), ready=args.get("ready"),
                                         restored=restored)
            write = _deployment.must_write(plan, built)
        elif step == "candidate":
            built = _deployment.candidate_manifest(plan, host=host, services=args.get("services"), ready=args.get("ready"),
                                                   candidates=list(args.get("candidates") or []))
            write = True
        else:
            built = _rollback.rolled_back(plan.get("previous") or {}, restored, dict(args.get("services") or {}),
                                          dict(args.get("ready") or {}))
            write = bool(restored)
        out: dict[str, Any] = {"manifest": built, "written": False, "changed": False}
        if write:
            wrote = self._execute_module(module_name="llmops.sglang.server_files",
                                         module_args={"manifest_path": plan["manifest_path"], "manifest": built},
                                         task_vars=task_vars)
            if wrote.get("failed"):
                return {**wrote, "manifest": built}
            out.update(written=True, changed=bool(wrote.get("changed")))
        return out
