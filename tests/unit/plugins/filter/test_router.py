"""The public filter router_layout (plugins/filter/router.py): the router's layout for users' own
plays, the one owner being module_utils/_server/layout.py (tested in tests/unit/plugins/module_utils/_server/test_layout.py)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.filter.router import FilterModule
from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout


def test_router_layout_is_the_layouts_and_a_bad_port_names_the_filter() -> None:
    layout = FilterModule().filters()["router_layout"]
    got = layout("/opt/sglang-router", "0.0.0.0", "8000", "10.0.0.5")
    assert got == _layout.router_layout("/opt/sglang-router", "0.0.0.0", 8000, "10.0.0.5")
    assert got["connect_url"] == "http://127.0.0.1:8000" and got["advertise_url"] == "http://10.0.0.5:8000"
    with pytest.raises(AnsibleFilterError, match="router_layout: "):
        layout("/opt/sglang-router", "0.0.0.0", "eighty")
