# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.router_workers: which workers a router gets, then the module on the
router's host (documentation: plugins/modules/router_workers.py).

Why an action: which URL a router reaches an instance at depends on inventory names (an instance
on the router's own host at its ``connect_url``, one elsewhere at its ``advertise_url``) and on
the other hosts' deployments (their ``sglang_deployment`` facts), which only the controller knows.
The action turns ``deployment_hosts`` and ``deployments`` into worker URLs
(``plugin_utils/_routing.py``, the one owner of the rule), adds them to ``workers`` and runs the
module with those, where the task runs (the router's host)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.sglang.plugins.module_utils._router.workers import RouterError
from ansible_collections.llmops.sglang.plugins.plugin_utils import _routing

DEPLOYMENT_FACT = "sglang_deployment"


def gather(hosts: list[str], hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """Each host's deployment manifest (its ``sglang_deployment`` fact; None: no deployment),
    ``_routing.NOT_READ`` for a host whose fact is not set (left out of the play, or failed)."""
    found: dict[str, Any] = {}
    for host in hosts:
        host_vars = hostvars[host] if host in hostvars else {}
        found[str(host)] = host_vars[DEPLOYMENT_FACT] if DEPLOYMENT_FACT in host_vars else _routing.NOT_READ
    return found


def resolve(args: dict[str, Any], hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """The module's arguments: ``deployment_hosts`` and ``deployments`` become worker URLs after
    ``workers`` (each once), ``router_host`` is dropped. Raises RouterError naming every host and
    instance that cannot be registered (a partial list must never replace a router's workers)."""
    args = dict(args)
    hosts = args.pop("deployment_hosts", None) or []
    deployments = args.pop("deployments", None) or {}
    router_host = args.pop("router_host", None)
    if not isinstance(hosts, list) or not isinstance(deployments, Mapping):
        raise AnsibleActionFail("deployment_hosts must be a list of inventory hosts and deployments a dict "
                                f"(host: manifest), not {type(hosts).__name__} and {type(deployments).__name__}")
    if not (hosts or deployments):
        return args
    if not router_host:
        raise AnsibleActionFail("router_host (the router's inventory host) is required with deployment_hosts or "
                                "deployments: an instance on that host is reached at its connect_url, one elsewhere "
                                "at its advertise_url")
    found = gather([str(h) for h in hosts], hostvars)
    found.update({str(h): d for h, d in deployments.items()})
    urls = _routing.worker_urls(found, str(router_host))
    args["workers"] = list(dict.fromkeys([str(u) for u in args.get("workers") or []] + urls))
    types = _routing.worker_types(found, str(router_host))
    if types:
        router_vars = hostvars.get(str(router_host)) or {}
        if not bool(router_vars.get("sglang_router_pd_disaggregation", False)):
            raise RouterError(f"the deployments of {', '.join(sorted(found))} are prefill/decode instances (sglang_pd), "
                              f"and the router on {router_host} is not in PD mode: set "
                              "sglang_router_pd_disaggregation: true for it")
        args["worker_types"] = {**types, **(args.get("worker_types") or {})}
    return args


class ActionModule(ActionBase):
    """Resolve the deployments into worker URLs on the controller; reconcile on the router's host."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        try:
            args = resolve(dict(self._task.args), task_vars.get("hostvars") or {})
        except RouterError as err:
            return {**result, "failed": True, "changed": False, "msg": str(err)}
        result.update(self._execute_module(module_name="llmops.sglang.router_workers", module_args=args,
                                           task_vars=task_vars))
        return result
