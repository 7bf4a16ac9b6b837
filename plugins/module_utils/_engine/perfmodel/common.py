# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Units, the model's constants (``data/perfmodel.json``) and the start-up error shared by the
performance model's files."""
from __future__ import annotations

from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._shared.paths import load_json

GIB = float(1 << 30)
GB = 1e9
MIB = float(1 << 20)


class EngineStartError(RuntimeError):
    """The real server would fail to start with these arguments (message as it prints)."""


def perf_constants(release: str) -> dict[str, Any]:
    """data/perfmodel.json: the top-level constants with the release's overrides (over
    ``releases._default``) merged in."""
    raw: dict[str, Any] = load_json("perfmodel.json")
    rel = raw.get("releases", {})
    merged = {**rel.get("_default", {}), **rel.get(release, {})}
    out = {k: v for k, v in raw.items() if k != "releases" and not k.startswith("_")}
    out.update(merged)
    return out


def arg(args: dict[str, Any], *keys: str) -> Any:
    """The first of ``keys`` (a flag's dest, then its older names) that is set in ``args``."""
    for key in keys:
        value = args.get(key)
        if value is not None:
            return value
    return None


def not_enough_memory(mem_fraction: float) -> EngineStartError:
    return EngineStartError(
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        f"Current value: mem_fraction_static={mem_fraction}"
    )
