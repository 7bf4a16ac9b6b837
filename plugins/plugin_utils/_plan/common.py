# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What every part of the plan shares: its error, units and small value helpers."""
from __future__ import annotations

import copy
import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._shared.models import ARCH_KINDS

GB = 10**9  # --hicache-size is in decimal GB (size * 1e9 bytes)
GIB = 2**30  # the reserve is in GiB, as SGLang's own "available - 10 GiB" check


class PlanError(ValueError):
    """A plan that cannot be made; the message says what to change."""


def plain(value: Any) -> Any:
    """Templated values as plain Python containers (Ansible 2.19 hands tagged subclasses): what
    the plan's callers (action server_plan, filters instance_plan / hicache_plan) pass in."""
    if isinstance(value, Mapping) or hasattr(value, "items"):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, str):
        return str(value)
    return value


def gb(value: float) -> str:
    return f"{value / GB:.2f} GB"


def closest(word: str, choices: list[str] | tuple[str, ...]) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def host_of(facts: Mapping[str, Any]) -> Mapping[str, Any]:
    """Accept the ``sglang_host`` facts themselves or a dict holding them (ansible_facts)."""
    if not isinstance(facts, Mapping):
        raise PlanError(f"host facts must be a dict (the sglang_host facts), not {type(facts).__name__}")
    inner = facts.get("sglang_host")
    return inner if isinstance(inner, Mapping) else facts


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def by_arch(value: Any, arch: str) -> Any:
    """A profile value given as {dense: X, hybrid: Y} picks the model's kind."""
    if isinstance(value, Mapping) and value and set(value) <= set(ARCH_KINDS):
        return value.get(arch)
    return value


def as_int(value: Any, what: str) -> int | None:
    """An integer (from an int, or a string of digits as -e gives it); None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise PlanError(f"{what} must be an integer, not {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        try:
            number_f = float(value)
        except (TypeError, ValueError):
            raise PlanError(f"{what} must be an integer, not {value!r}") from None
        if number_f != int(number_f):
            raise PlanError(f"{what} must be a whole number, not {value!r}") from None
        return int(number_f)
    if number != float(value):
        raise PlanError(f"{what} must be a whole number, not {value!r}")
    return number


def render(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def flag_values(argv: Sequence[Any]) -> dict[str, str | None]:
    """``--flag value ...`` (or ``--flag=value``) -> {flag: value (the words up to the next flag),
    or None for a switch}: the one reading of a rendered command line (the summary's changes, the
    storage tier's page layout)."""
    out: dict[str, str | None] = {}
    flag = ""
    for word in (str(w) for w in argv):
        if word.startswith("--"):
            flag, eq, value = word.partition("=")
            out[flag] = value if eq else None
        elif flag:
            out[flag] = word if out[flag] is None else f"{out[flag]} {word}"
    return out


def option_dict(variable: str, value: Any, known: Sequence[str], off: str) -> Mapping[str, Any] | None:
    """A role variable that is a dict of declared keys ({} for ``off``): the dict, None when it is
    empty, or PlanError naming the variable, what it takes and the unknown keys."""
    if value in (None, "", {}):
        return None
    if not isinstance(value, Mapping):
        raise PlanError(f"{variable}={value!r}: must be a dict (its keys: {', '.join(known)}), or {{}} for {off}")
    unknown = sorted(set(map(str, value)) - set(known))
    if unknown:
        raise PlanError(f"{variable}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(known)}")
    return value
