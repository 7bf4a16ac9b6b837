"""The router_worker_urls filter (plugins/filter/router.py) over plugin_utils/_routing."""
from __future__ import annotations

import pytest

from ..module_utils.test_router import _instance


def test_router_worker_urls_filter_reads_each_hosts_fact() -> None:
    from ansible.errors import AnsibleFilterError

    from ansible_collections.llmops.sglang.plugins.filter.router import FilterModule

    urls = FilterModule().filters()["router_worker_urls"]
    hostvars = {"a": {"sglang_deployment": {"instances": [_instance("gpu0", 30000, "http://10.0.0.1:30000")]}},
                "b": {"sglang_deployment": None}, "c": {}}
    assert urls(["a", "b"], hostvars, "r") == ["http://10.0.0.1:30000"]
    with pytest.raises(AnsibleFilterError, match="the deployment of c was not read"):
        urls(["a", "b", "c"], hostvars, "r")
