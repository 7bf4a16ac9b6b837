# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Filters used by the bench role to key sweep results by instance and label them."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


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


class FilterModule:
    """Bench filters."""

    def filters(self) -> dict[str, Any]:
        return {"sweeps_by_instance": _sweeps_by_instance, "report_items": _report_items}
