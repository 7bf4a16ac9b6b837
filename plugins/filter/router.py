# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Filters of the router role: its layout, and the worker URLs a router registers. Thin shells
over module_utils/_layout.py and plugin_utils/_routing.py; documented in the .yml files beside
this one."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils import _layout
from ansible_collections.llmops.sglang.plugins.module_utils._router import RouterError
from ansible_collections.llmops.sglang.plugins.plugin_utils import _routing


def _router_layout(base_dir: str, host: str, port: int | str, host_address: str | None = None) -> dict[str, Any]:
    """The router's files, service names, connect and advertise URLs (``_layout``, the one owner)."""
    try:
        return _layout.router_layout(str(base_dir), str(host), int(port), str(host_address) if host_address else None)
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError(f"router_layout: {err}") from err


def _router_worker_urls(servers: list[str], hostvars: Mapping[str, Any], router: str,
                        fact: str = "sglang_deployment") -> list[str]:
    """Server host names -> the worker URLs the router on inventory host ``router`` registers,
    from each server host's fact ``fact`` (its deployment manifest, set by the server role's
    status tasks)."""
    deployments: dict[str, Any] = {}
    for host in servers or []:
        host_vars = hostvars[host] if host in hostvars else {}
        deployments[str(host)] = host_vars[fact] if fact in host_vars else _routing.NOT_READ
    try:
        return _routing.worker_urls(deployments, str(router))
    except (RouterError, TypeError, ValueError) as err:
        raise AnsibleFilterError(str(err)) from err


def _router_workers_of(instances: list[dict[str, Any]], server_host: str, router: str) -> list[str]:
    """Instances of server host ``server_host`` -> the worker URLs the router on ``router``
    knows them by (the rollout's per-batch registration; same rules as router_worker_urls)."""
    try:
        return _routing.worker_urls({str(server_host): {"instances": list(instances or [])}}, str(router))
    except (RouterError, TypeError, ValueError) as err:
        raise AnsibleFilterError(str(err)) from err


class FilterModule:
    """Router filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "router_layout": _router_layout,
            "router_worker_urls": _router_worker_urls,
            "router_workers_of": _router_workers_of,
        }
