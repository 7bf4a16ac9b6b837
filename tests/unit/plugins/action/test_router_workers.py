"""The router_workers action (plugins/action/router_workers.py): deployment_hosts and deployments
become the worker URLs the module reconciles (the rule itself: plugin_utils/_routing.py, tested in
tests/unit/plugins/module_utils/_router/test_workers.py)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.sglang.plugins.action.router_workers import resolve
from ansible_collections.llmops.sglang.plugins.module_utils._router.workers import RouterError

from ..module_utils._router.test_workers import _instance

HOSTVARS = {"a": {"sglang_deployment": {"instances": [_instance("gpu0", 30000, "http://10.0.0.1:30000")]}},
            "b": {"sglang_deployment": None}, "c": {}}


def test_deployment_hosts_read_each_hosts_fact_after_the_given_workers() -> None:
    args = resolve({"router_url": "http://r:8000", "workers": ["http://10.0.0.9:30000"],
                    "deployment_hosts": ["a", "b"], "router_host": "r", "state": "exact"}, HOSTVARS)
    assert args == {"router_url": "http://r:8000", "state": "exact",
                    "workers": ["http://10.0.0.9:30000", "http://10.0.0.1:30000"]}


def test_a_host_whose_deployment_was_not_read_fails_naming_it() -> None:
    with pytest.raises(RouterError, match="the deployment of c was not read"):
        resolve({"router_url": "http://r", "deployment_hosts": ["a", "b", "c"], "router_host": "r"}, HOSTVARS)


def test_deployments_as_data_on_the_routers_own_host_use_the_connect_url() -> None:
    inst = _instance("gpu1", 30001, "http://10.0.0.1:30001")
    args = resolve({"router_url": "http://r", "deployments": {"a": {"instances": [inst]}}, "router_host": "a"}, {})
    assert args["workers"] == [inst["connect_url"].rstrip("/")]
    # another router host: the advertise URL
    assert resolve({"router_url": "http://r", "deployments": {"a": {"instances": [inst]}}, "router_host": "r"},
                   {})["workers"] == ["http://10.0.0.1:30001"]


def test_without_deployments_the_arguments_pass_through_and_router_host_is_needed_with_them() -> None:
    assert resolve({"router_url": "http://r", "workers": [], "deployment_hosts": [], "deployments": {},
                    "router_host": "r"}, {}) == {"router_url": "http://r", "workers": []}
    with pytest.raises(AnsibleActionFail, match="router_host"):
        resolve({"router_url": "http://r", "deployment_hosts": ["a"]}, HOSTVARS)
