# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The one mapping from a play's variables to the server plan's inputs.

``REQUEST_VARIABLES``: each ``PlanRequest`` keyword and the role variable it is read from (the
same table names the variable in the request's error messages). ``ROLE_SETTINGS``: the other
role variables the server plan needs (engine, service manager, installation, environment,
readiness). ``read_inputs`` reads both through a ``get(name)`` callable (the action plugin's
templar over its task vars), plus what is derived from the inventory (the address other hosts
reach this one at, the hosts of a multi-node TP group).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import PlanError

# PlanRequest keyword -> the role variable it comes from
REQUEST_VARIABLES: dict[str, str] = {
    "profile": "sglang_profile", "release": "sglang_version", "model_path": "sglang_model_path",
    "model_arch": "sglang_model_arch", "tp_size": "sglang_tp_size", "gpus": "sglang_gpus",
    "base_port": "sglang_base_port", "nccl_port_base": "sglang_nccl_port_base",
    "host_address": "sglang_host_address", "base_dir": "sglang_base_dir",
    "hicache_size_gb": "sglang_hicache_size_gb", "hicache_fraction": "sglang_hicache_fraction",
    "hicache_reserve_gib": "sglang_hicache_reserve_gib", "hicache_storage": "sglang_hicache_storage",
    "pd": "sglang_pd",
    "extra_args": "sglang_extra_args",
    "user_profiles": "sglang_profiles", "force_busy": "sglang_force_busy_gpus",
    "max_running_requests": "sglang_max_running_requests", "served_model_name": "sglang_served_model_name",
    "draft_model_path": "sglang_draft_model_path", "dist_init_port": "sglang_dist_init_port",
}
# The folders the model role staged this run ({model, draft}): they win over sglang_model_path
# and sglang_draft_model_path, which an extra var (even "") would otherwise hold against the
# role's set_fact (-e sglang_model_path="" with -e sglang_model={...}: the Hub model is meant).
STAGED = "__sglang_model_paths"
# keywords that are not one role variable: what a message names for each
DERIVED: dict[str, str] = {
    "api_key_env": "sglang_api_key", "advertise_address": "ansible_host",
    "model_config": "the model's config.json", "tp_group_hosts": "sglang_tp_group (its hosts, in inventory order)",
    "tp_group_addresses": "ansible_host of the TP group's hosts", "inventory_host": "inventory_hostname",
}

# PlanSettings field -> the role variable it comes from
ROLE_SETTINGS: dict[str, str] = {
    "engine": "sglang_engine", "service_manager": "sglang_service_manager", "python": "sglang_python",
    "venv": "sglang_venv", "venv_python": "sglang_venv_python", "install": "sglang_install",
    "pip_packages": "sglang_pip_packages", "wheelhouse": "sglang_wheelhouse",
    "sim_aiohttp_version": "sglang_sim_aiohttp_version", "sim_time_scale": "sglang_sim_time_scale",
    "sim_accept_length": "sglang_sim_accept_length", "env": "sglang_env", "hf_token": "sglang_hf_token",
    "api_key": "sglang_api_key", "ready_timeout": "sglang_ready_timeout", "user": "sglang_user",
    "group": "sglang_group", "declared_gpus": "sglang_declared_gpus", "tp_group": "sglang_tp_group",
}


def variable_of(keyword: str) -> str:
    """The variable a message names for a PlanRequest keyword."""
    if keyword == "profile":
        return "profile (sglang_profile)"
    return REQUEST_VARIABLES.get(keyword) or DERIVED.get(keyword, keyword)


@dataclass(frozen=True)
class PlanInputs:
    """Everything the server plan reads from the play, before anything is read from the host."""

    request: dict[str, Any]  # PlanRequest keywords (model_config is added from the host)
    settings: dict[str, Any]  # ROLE_SETTINGS fields
    host: str


def read_inputs(get: Callable[[str], Any], inventory_host: str,
                addresses: Callable[[list[str]], list[str]], groups: Mapping[str, Any]) -> PlanInputs:
    """The plan's inputs: ``get(name)`` reads a (templated) variable, None when undefined;
    ``addresses(hosts)`` gives the address each inventory host is reached at."""
    request = {key: get(name) for key, name in REQUEST_VARIABLES.items()}
    staged = get(STAGED)
    if isinstance(staged, Mapping):  # the model role's staged folders win over the variables
        for keyword, role in (("model_path", "model"), ("draft_model_path", "draft")):
            if staged.get(role):
                request[keyword] = str(staged[role])
    settings = {key: get(name) for key, name in ROLE_SETTINGS.items()}
    api_key = settings.get("api_key") or ""
    request["api_key_env"] = len(str(api_key)) > 0
    request["advertise_address"] = get("ansible_host") or inventory_host
    request["inventory_host"] = inventory_host
    group = settings.get("tp_group") or ""
    if group and group not in groups:
        raise PlanError(f"sglang_tp_group={group!r}: no such inventory group (set it to the group whose hosts "
                        "form one TP group, or leave it empty)")
    hosts = list(groups.get(group) or []) if group else []
    request["tp_group_hosts"] = hosts
    request["tp_group_addresses"] = addresses(hosts) if hosts else []
    return PlanInputs(request=request, settings=settings, host=inventory_host)
