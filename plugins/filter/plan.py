# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Filters ``llmops.sglang.hicache_plan`` and ``llmops.sglang.instance_plan``: thin shells over
``plugins/plugin_utils/_plan`` (documented in the sidecar files hicache_plan.yml and
instance_plan.yml beside this one)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import (
    hicache_plan,
    instance_plan,
    validate_plan,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import plain
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.request import declared

# hicache_plan's keywords that default to the server role's variables (hicache_plan.yml)
HICACHE_DEFAULTS = {"reserve_gib": "hicache_reserve_gib", "fraction": "hicache_fraction"}


def hicache_plan_filter(facts: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
    """``sglang_host | llmops.sglang.hicache_plan(release=..., instances=..., ...)``."""
    try:
        defaults = {key: declared(keyword) for key, keyword in HICACHE_DEFAULTS.items()}
        return hicache_plan(plain(facts), **{**defaults, **plain(kwargs)})
    except ValueError as exc:  # PlanError, UnknownReleaseError and bad values
        raise AnsibleFilterError(str(exc)) from None
    except TypeError as exc:
        raise AnsibleFilterError(f"llmops.sglang.hicache_plan: bad arguments: {exc}") from None


def instance_plan_filter(facts: Mapping[str, Any], validate: bool = True, on_error: str = "raise",
                         **kwargs: Any) -> dict[str, Any]:
    """``sglang_host | llmops.sglang.instance_plan(profile=..., model_path=..., ...)``; the plan's
    argv is checked against the release's flag schema unless ``validate=false``. With
    ``on_error='return'`` a plan that cannot be made comes back as ``{error: message}`` (for a
    ``fail`` task whose message starts with the value, the variable and the fix, without the
    templating error's prefix)."""
    try:
        plan = instance_plan(plain(facts), **plain(kwargs))
        if validate:
            validate_plan(plan)
        return plan
    except ValueError as exc:  # PlanError and bad values
        if on_error == "return":
            return {"error": str(exc)}
        raise AnsibleFilterError(str(exc)) from None
    except TypeError as exc:
        raise AnsibleFilterError(f"llmops.sglang.instance_plan: bad arguments: {exc}") from None


class FilterModule:
    """Deployment planning filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "hicache_plan": hicache_plan_filter,
            "instance_plan": instance_plan_filter,
        }
