# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Filters of the model role: thin shells over plugin_utils/_modelsource.py; documented in the
.yml files beside this one."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.plugin_utils import _modelsource


def _sources(model: Any, draft: Any = None, model_path: str = "", draft_model_path: str = "",
             hosts: list[str] | None = None, host: str = "") -> list[dict[str, Any]]:
    try:
        return _modelsource.sources(model, draft, model_path, draft_model_path, hosts, host)
    except _modelsource.SourceError as err:
        raise AnsibleFilterError(str(err)) from err


def _pin(host_sources: list[dict[str, Any]], resolved: dict[str, str], cache_dir: str) -> list[dict[str, Any]]:
    try:
        return _modelsource.pin(host_sources, resolved, cache_dir)
    except _modelsource.SourceError as err:
        raise AnsibleFilterError(str(err)) from err


def _paths(pinned: list[dict[str, Any]]) -> dict[str, str]:
    return _modelsource.paths(pinned)


def _transfers(pinned: list[dict[str, Any]], host: str, stage_from: str, play: dict[str, dict[str, Any]],
               controller_cache_dir: str) -> list[dict[str, Any]]:
    try:
        return _modelsource.transfers(pinned, host, stage_from, play, controller_cache_dir)
    except _modelsource.SourceError as err:
        raise AnsibleFilterError(str(err)) from err


def _fetches(relays: list[dict[str, Any]], manifests: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    try:
        return _modelsource.fetches(relays, manifests)
    except _modelsource.SourceError as err:
        raise AnsibleFilterError(str(err)) from err


class FilterModule:
    """llmops.sglang model source filters."""

    def filters(self) -> dict[str, Any]:
        return {"model_sources": _sources, "model_pin": _pin, "model_paths": _paths,
                "model_transfers": _transfers, "model_fetches": _fetches}
