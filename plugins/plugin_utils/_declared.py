# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The roles' variables as they are declared: each role's ``meta/argument_specs.yml`` (its entry
points merged) is the one place a role variable's type, default and description are written.
Controller-side Python that needs a role variable's default (the plan's filters, the rollout
check, which read no role defaults of their own) reads it here; ``tools/gen_declared.py`` writes
the roles' ``defaults/main.yml`` from the same declarations."""
from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

# plugins/plugin_utils/_declared.py -> the collection's root (a checkout or an installed collection)
ROOT = Path(__file__).resolve().parents[2]


class DeclarationError(ValueError):
    """A role's argument specs say two things of one variable, or name none that was asked for."""


def merged_options(specs: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """Every variable of a role's argument specs, in order: a variable of several entry points
    once (two entry points that default it differently are a DeclarationError)."""
    out: dict[str, dict[str, Any]] = {}
    for entry, spec in (specs.get("argument_specs") or {}).items():
        for name, option in ((spec or {}).get("options") or {}).items():
            if name in out and out[name].get("default") != option.get("default"):
                raise DeclarationError(f"{where}: {name} has two defaults ({out[name].get('default')!r}, "
                                       f"{option.get('default')!r} in the entry point {entry}): give it one")
            out.setdefault(name, option)
    return out


@cache
def role_options(role: str) -> dict[str, dict[str, Any]]:
    """The declared variables of this collection's role ``role``."""
    path = ROOT / "roles" / role / "meta" / "argument_specs.yml"
    return merged_options(yaml.safe_load(path.read_text()) or {}, f"roles/{role}/meta/argument_specs.yml")


def role_default(role: str, variable: str) -> Any:
    """The declared default of a role variable."""
    option = role_options(role).get(variable)
    if option is None or "default" not in option:
        raise DeclarationError(f"roles/{role}/meta/argument_specs.yml declares no default for {variable}")
    return option["default"]
