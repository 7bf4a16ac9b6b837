# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.server_plan: one host's whole server plan in one task (documentation:
plugins/modules/server_plan.py; the plan itself: plugins/plugin_utils/_plan/server.py).

It reads the host once (module host_facts: the host's facts, the deployment under the base
folder with its manifest, the model's config.json), reads the role's variables from the task vars through one mapping
(``_plan/taskvars.py``), plans and validates on the controller, and with ``preflight`` runs the
pre-flight module on the host. Given the ``plan`` of an earlier run of this action in the same
playbook run (the deploy gate's), it returns that plan and reads nothing: the plan that was
checked is the plan that is deployed.
"""
from __future__ import annotations

from typing import Any

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import PlanError, plain
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.engine import engine_archive
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.modelconfig import load_slurped_config
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.server import server_plan
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.storage import storage_request
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.summary import plan_summary
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.taskvars import read_inputs
from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import documented_args

display = Display()
# keys of a registered result that are Ansible's, not the plan's
_RESULT_KEYS = ("changed", "failed", "skipped", "msg", "ansible_facts", "modules_run", "invocation",
                "_ansible_no_log", "_ansible_verbose_always", "warnings", "deprecations")


class ActionModule(ActionBase):
    """Read the host once, plan on the controller, optionally pre-flight on the host."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        host = str(task_vars.get("inventory_hostname"))
        args = documented_args(self, "server_plan")
        given = args.get("plan")
        if given:
            return self._shown(self._reuse(result, plain(given), host), args["show"])
        inputs = read_inputs(self._var(task_vars), host, self._addresses(task_vars),
                             plain(task_vars.get("groups") or {}))
        base_dir = str(inputs.request.get("base_dir") or "")
        modules_run: list[str] = []
        model_path = str(inputs.request.get("model_path") or "")
        try:  # the storage tier's folder: its file system is read with the host
            storage = storage_request(inputs.request.get("hicache_storage"), base_dir)
        except PlanError as exc:
            raise AnsibleActionFail(str(exc)) from None
        # one module run reads the host: its facts, the deployment under base_dir (its processes
        # and its manifest), the model's config.json and the storage tier's file system
        facts = self._module("llmops.sglang.host_facts", modules_run, task_vars,
                             declared_gpus=inputs.settings.get("declared_gpus") or [], deployment_dir=base_dir,
                             **({"model_path": model_path} if model_path else {}),
                             **({"storage_paths": [storage.root]} if storage and storage.root else {}))
        host_facts = facts["ansible_facts"]["sglang_host"]
        try:
            config = self._model_config(model_path, facts.get("model_config"))
            plan = server_plan(inputs, host_facts, {"manifest": facts.get("manifest"),
                                                    "manifest_problem": facts.get("manifest_problem")}, config)
        except PlanError as exc:
            raise AnsibleActionFail(str(exc)) from None
        if plan.get("engine_files"):
            # the embedded engine's files as one archive in this run's controller tmp (engine.yml
            # unpacks it on a host whose stamp does not say it holds them)
            plan["engine_files"] = engine_archive(plan["engine_files"], C.DEFAULT_LOCAL_TMP)
        result.update(plan)
        result.update(changed=False, modules_run=modules_run, ansible_facts={"sglang_host": host_facts})
        if args["preflight"]:
            spec = plan["preflight"]
            owner = plan["owner"]["user"]
            checked = self._module("llmops.sglang.preflight", modules_run, task_vars, deployment_dir=base_dir,
                                   ports=spec["ports"], files=spec["files"], executables=spec["executables"],
                                   **({"user": owner} if owner else {}),
                                   **({"commands": spec["commands"]} if spec.get("commands") else {}),
                                   **({"folders": spec["folders"]} if spec.get("folders") else {}),
                                   **({"packages": spec["packages"]} if spec.get("packages") else {}))
            # the venv holds the pinned packages already: the role skips pip (it would change nothing)
            result["install"] = {**plan["install"], "current": bool(checked.get("packages_current"))}
        return self._shown(result, args["show"])

    @staticmethod
    def _shown(result: dict[str, Any], show: bool) -> dict[str, Any]:
        """With ``show``, ``plan_summary``: what the deploy would do to each instance and why
        (``_plan/summary.py``; the role prints it, ``-v`` prints the whole plan)."""
        if show:
            result["plan_summary"] = plan_summary(result)
        return result

    # ------------------------------------------------------------------------------------------

    def _var(self, task_vars: dict[str, Any]) -> Any:
        def get(name: str) -> Any:
            if name not in task_vars:
                return None
            return plain(self._templar.template(task_vars[name]))
        return get

    def _addresses(self, task_vars: dict[str, Any]) -> Any:
        def addresses(hosts: list[str]) -> list[str]:
            hostvars = task_vars.get("hostvars") or {}
            out = []
            for name in hosts:
                host_vars = hostvars[name] if name in hostvars else {}
                address = host_vars.get("ansible_host") if hasattr(host_vars, "get") else None
                out.append(str(address or name))
            return out
        return addresses

    def _module(self, name: str, modules_run: list[str], task_vars: dict[str, Any], **args: Any) -> dict[str, Any]:
        """Run one module on the host; its failure is this task's, with its message."""
        res = self._execute_module(module_name=name, module_args=args, task_vars=task_vars)
        modules_run.append(name.rsplit(".", 1)[-1])
        if res.get("failed") or res.get("unreachable"):
            raise AnsibleActionFail(str(res.get("msg") or f"{name} failed"), result=res)
        return res

    @staticmethod
    def _model_config(model_path: str, content: str | None) -> dict | None:
        """The model's config.json as host_facts read it (base64); None where it could not be read
        (the plan then asks for sglang_model_arch). A file that is there but is not a JSON object is
        refused, naming it (issue 16 #6)."""
        if not model_path or content is None:
            return None
        return load_slurped_config(content, model_path)

    def _reuse(self, result: dict[str, Any], given: dict[str, Any], host: str) -> dict[str, Any]:
        """The plan made earlier in this run (the deploy gate's): returned as it was."""
        if not isinstance(given, dict) or "instances" not in given:
            raise AnsibleActionFail("plan: not a plan made by llmops.sglang.server_plan (no instances)")
        if given.get("host") != host:
            raise AnsibleActionFail(f"plan: made for host {given.get('host')!r}, not {host!r}: each host "
                                    "deploys its own plan")
        plan = {key: value for key, value in given.items() if key not in _RESULT_KEYS}
        result.update(plan)
        result.update(changed=False, modules_run=[], reused=True)
        display.vvv(f"server_plan: {host}: the plan made earlier in this run, host not read again")
        return result
