# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Filters used by the bench role to key sweep results by instance and label them."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils import _fleet, _report
from ansible_collections.llmops.sglang.plugins.plugin_utils import _capacity


def _sweeps_by_instance(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Loop results of throughput_sweep -> {instance name: sglang_sweep}."""
    out: dict[str, Any] = {}
    for res in results or []:
        if res.get("skipped"):
            continue
        item = res.get("item") or {}
        # async_status results carry the original loop item one level down
        if "item" in item and isinstance(item["item"], dict):
            item = item["item"]
        sweep = (res.get("ansible_facts") or {}).get("sglang_sweep")
        if sweep is None:
            raise AnsibleFilterError(f"sweeps_by_instance: no sglang_sweep in the result for {item.get('name')}")
        out[item.get("name", f"instance{len(out)}")] = sweep
    return out


def _report_items(sweeps: dict[str, Any], manifest: dict[str, Any], host: str) -> list[dict[str, Any]]:
    """{name: sweep} + the manifest -> [{meta, sweep}] items for sweep_report."""
    by_name = {i["name"]: i for i in manifest.get("instances", [])}
    items = []
    for name, sweep in sweeps.items():
        inst = by_name.get(name, {})
        items.append({
            "meta": {
                "host": host,
                "instance": name,
                "profile": manifest.get("profile"),
                "release": manifest.get("release"),
                "engine": manifest.get("engine"),
                "gpus": inst.get("gpus", []),
                "url": inst.get("connect_url") or inst.get("url"),
            },
            "sweep": sweep,
        })
    return items


def _router_report_items(sweeps: list[dict[str, Any]], host: str, url: str,
                         workers: list[dict[str, Any]] | None = None,
                         down: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A router's sweeps (sglang_sweep facts) -> [{meta, sweep}] items for sweep_report, the
    meta marking them as a router's (``_fleet.router_meta``) next to the workers' items, with
    the workers that were down (not swept)."""
    if not isinstance(sweeps, list):
        raise AnsibleFilterError(f"router_report_items: expected a list of sweeps, got {type(sweeps).__name__}")
    meta = _fleet.router_meta(str(host), str(url), workers or [], down or [])
    return [{"meta": dict(meta), "sweep": sweep} for sweep in sweeps]


def _sweep_failures(items: list[dict[str, Any]]) -> list[str]:
    """Report items ({meta, sweep}) -> one line per instance whose levels had failed requests."""
    try:
        return _report.failed_levels(_report.normalize(items or []))
    except ValueError as exc:
        raise AnsibleFilterError(f"sweep_failures: {exc}") from exc


def _bench_capacity(items: list[dict[str, Any]], hostvars: Any, hosts: list[str], target_rps: Any) -> dict[str, Any]:
    """Report items + hostvars (their sglang_host facts) + the inventory's hosts + the target
    (req/s) -> the sglang_capacity fact (plugin_utils/_capacity.py)."""
    facts = {}
    for host in hosts or []:
        host_vars = hostvars.get(host) or {}
        fact = (host_vars.get("ansible_facts") or {}).get("sglang_host") or host_vars.get("sglang_host")
        facts[str(host)] = dict(fact) if isinstance(fact, dict) else {}
    try:
        return _capacity.capacity(items or [], facts, target_rps)
    except _capacity.CapacityError as exc:
        raise AnsibleFilterError(f"bench_capacity: {exc}") from exc


class FilterModule:
    """Bench filters."""

    def filters(self) -> dict[str, Any]:
        return {"sweeps_by_instance": _sweeps_by_instance, "report_items": _report_items,
                "router_report_items": _router_report_items, "sweep_failures": _sweep_failures,
                "bench_capacity": _bench_capacity, "capacity_markdown": _capacity.render_markdown}
