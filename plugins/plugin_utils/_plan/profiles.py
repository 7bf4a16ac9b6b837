# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Deployment profiles: ``data/profiles.yml`` with the user's profiles merged over them."""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._shared import paths as _paths
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import PlanError, closest, deep_merge
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.profileflags import PROFILE_FLAGS

PROFILES_FILE = "profiles.yml"
# A profile's keys: its description, what it extends, and one per flag row (profileflags.PROFILE_FLAGS).
PROFILE_KEYS = ("description", "extends", *(row.key for row in PROFILE_FLAGS))
SPECULATIVE_KEYS = ("algorithm", "steps", "topk", "draft_tokens")
HICACHE_KEYS = ("enabled", "size", "ratio", "write_policy", "io_backend", "mem_layout")


def _builtin_profiles() -> dict[str, Any]:
    import yaml  # controller-only data; PyYAML ships with ansible-core

    with open(_paths.data_dir() / PROFILES_FILE, encoding="utf-8") as handle:
        data = yaml.safe_load(handle) or {}
    profiles = data.get("profiles") if isinstance(data, Mapping) else None
    if not isinstance(profiles, Mapping):
        raise PlanError(f"{PROFILES_FILE} has no 'profiles' mapping")
    return dict(profiles)


def _check_keys(where: str, value: Mapping[str, Any], known: tuple[str, ...]) -> None:
    for key in value:
        if key not in known:
            raise PlanError(f"{where}: unknown key {key!r}{closest(str(key), known)}; known keys: "
                            f"{', '.join(known)}")


def load_profiles(user_profiles: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Built-in profiles with the user's merged over them (dicts merged key by key); a profile
    with ``extends: NAME`` starts from that profile. Returns every profile fully resolved."""
    raw: dict[str, Any] = _builtin_profiles()
    for name, body in (user_profiles or {}).items():
        if not isinstance(body, Mapping):
            raise PlanError(f"sglang_profiles: profile {name!r} must be a dict of settings, not "
                            f"{type(body).__name__}")
        raw[str(name)] = deep_merge(raw.get(name) or {}, body) if name in raw else copy.deepcopy(dict(body))

    resolved: dict[str, dict[str, Any]] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> dict[str, Any]:
        if name in resolved:
            return resolved[name]
        if name in chain:
            raise PlanError(f"profiles extend each other in a loop: {' -> '.join((*chain, name))}")
        if name not in raw:
            raise PlanError(f"profile {chain[-1]!r} extends unknown profile {name!r}; valid profiles: "
                            f"{', '.join(sorted(raw))}")
        body = dict(raw[name])
        parent = body.pop("extends", None)
        result = deep_merge(resolve(str(parent), (*chain, name)), body) if parent else body
        _check_keys(f"profile {name!r}", result, PROFILE_KEYS)
        for sub, keys in (("speculative", SPECULATIVE_KEYS), ("hicache", HICACHE_KEYS)):
            if isinstance(result.get(sub), Mapping):
                _check_keys(f"profile {name!r} {sub}", result[sub], keys)
            elif result.get(sub) is not None:
                raise PlanError(f"profile {name!r}: {sub} must be a dict or null, not {result[sub]!r}")
        resolved[name] = result
        return result

    for name in raw:
        resolve(name, ())
    return {name: copy.deepcopy(resolved[name]) for name in raw}


def resolve_profile(name: str, user_profiles: dict[str, Any] | None = None) -> dict[str, Any]:
    """One profile, resolved; an unknown name raises PlanError listing the valid ones."""
    profiles = load_profiles(user_profiles)
    if name not in profiles:
        raise PlanError(f"profile: unknown profile {name!r}{closest(str(name), sorted(profiles))}: valid profiles "
                        f"are {', '.join(sorted(profiles))} (-e profile=NAME, or define it in sglang_profiles)")
    result = profiles[name]
    result["name"] = name
    return result
