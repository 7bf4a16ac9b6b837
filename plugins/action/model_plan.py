# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.model_plan: the model sources of every host of the play, planned once on
the controller (documentation: plugins/modules/model_plan.py).

Why an action: the plan needs every host at once (a seed's copy goes to the others, a
``from_host`` source names a peer) and each Hub revision resolved to one commit, once, on the
controller - not per host. The model role gives it each play host's variables (its
``__sglang_model_request``); the action checks them all (every bad one named), runs
``llmops.sglang.model_revision`` once per Hub reference where the task runs (the controller:
``delegate_to: localhost``), and returns per host its pinned sources, the copies it receives
and the folders its plan starts (``plugin_utils/_modelsource.py`` holds the rules)."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.sglang.plugins.plugin_utils import _modelsource
from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import documented_args


class ActionModule(ActionBase):
    """Check every host's sources, resolve the Hub revisions, plan each host."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = documented_args(self, "model_plan")
        requests = args.get("requests")
        if not isinstance(requests, dict) or not all(isinstance(r, dict) for r in requests.values()):
            raise AnsibleActionFail("requests must map each host of the play to its model variables "
                                    f"({', '.join(_modelsource.REQUEST_KEYS)})")
        hosts = [str(h) for h in args.get("hosts") or list(requests)]
        try:
            play = _modelsource.play_sources({str(h): r for h, r in requests.items()}, hosts)
        except _modelsource.SourceError as err:
            return {**result, "failed": True, "changed": False, "msg": f"bad model sources: {err}"}
        resolved: dict[str, str] = {}
        for ref in _modelsource.hub_refs(play):
            repo, revision = ref.split("@", 1)
            module_args = {"repo": repo, "revision": revision, "offline": bool(args["offline"])}
            for name in ("endpoint", "token_file"):
                if args.get(name):
                    module_args[name] = args[name]
            got = self._execute_module(module_name="llmops.sglang.model_revision", module_args=module_args,
                                       task_vars=task_vars)
            if got.get("failed") and got.get("unreachable"):
                # the Hub did not answer: what the hosts serve already may go on (saying so)
                commit, message = _modelsource.offline_fallback(
                    ref, str(got.get("msg", "")), _modelsource.deployed_commits(self._deployments(task_vars, hosts), repo))
                if commit is None:
                    return {**result, "failed": True, "changed": False, "resolved": resolved, "msg": message}
                result.setdefault("warnings", []).append(message)
                resolved[ref] = commit
                continue
            if got.get("failed") or not got.get("commit"):
                return {**result, "failed": True, "changed": False, "resolved": resolved,
                        "msg": f"cannot resolve {ref} to a commit: {got.get('msg', 'no commit returned')}"}
            resolved[ref] = str(got["commit"])
        try:
            plans = _modelsource.play_plan({str(h): r for h, r in requests.items()}, play, resolved,
                                           str(args.get("controller_cache_dir") or ""))
        except _modelsource.SourceError as err:
            return {**result, "failed": True, "changed": False, "resolved": resolved, "msg": str(err)}
        result.update(changed=False, resolved=resolved, hosts=plans)
        return result

    @staticmethod
    def _deployments(task_vars: dict[str, Any], hosts: list[str]) -> dict[str, Any]:
        """host -> the manifest of the deployment it serves: the role read each play host's
        deployment.json (``__sglang_model_deployed``, a slurp) before this task."""
        hostvars = task_vars.get("hostvars") or {}
        out: dict[str, Any] = {}
        for host in hosts:
            facts = hostvars[host] if host in hostvars else {}
            manifest = _modelsource.slurped_manifest(facts.get("__sglang_model_deployed") if hasattr(facts, "get") else None)
            if manifest is not None:
                out[host] = manifest
        return out
