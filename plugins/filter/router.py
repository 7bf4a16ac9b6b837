# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The router's layout as a filter, for users' own plays and the router role: a thin shell over
module_utils/_server/layout.py; documented in router_layout.yml beside this one. (Which worker URLs a
router gets is the action router_workers', plugins/action/router_workers.py.)"""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout


def _router_layout(base_dir: str, host: str, port: int | str, host_address: str | None = None) -> dict[str, Any]:
    """The router's files, service names, connect and advertise URLs (``_layout``, the one owner)."""
    try:
        return _layout.router_layout(str(base_dir), str(host), int(port), str(host_address) if host_address else None)
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError(f"router_layout: {err}") from err


class FilterModule:
    """Router filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "router_layout": _router_layout,
        }
