# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""A module's options taken from a role's variables: ``sglang_<role>_<option>`` for each option the
module documents and the task does not give (the bench role's sweep: ``sglang_bench_timeout`` is
``timeout``). One rule for what "unset" means: an option the module documents without a default
(None: the module's own rule applies, e.g. requests = max(2*C, 8)) is left out while the role's
variable holds the role's declared default for it (its sentinel: 0, "", [], {}, or the value the
module would use anyway) or an empty string (an empty key is no key). Pure: the caller reads the variables (``get``) and the declarations."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

MISSING = object()


def variable(role: str, option: str) -> str:
    return f"sglang_{role}_{option}"


def options_from_role(role: str, documented: Mapping[str, Mapping[str, Any]], given: Mapping[str, Any],
                      get: Callable[[str], Any], role_declared: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The task's arguments ``given`` plus, for each documented option it lacks, the role's variable
    (``get(name)`` returns MISSING for an undefined one)."""
    out = dict(given)
    for option, doc in documented.items():
        if option in out:
            continue
        value = get(variable(role, option))
        if value is MISSING or value is None:
            continue
        declared = role_declared.get(variable(role, option), {})
        if "default" not in doc and (value == "" or ("default" in declared and same_default(value, declared["default"]))):
            continue  # the role's "unset" (or an empty string): the module's own rule applies
        out[option] = value
    return out


def same_default(a: Any, b: Any) -> bool:
    """Equal as a default: 900 is 900.0 and (1, 4) is [1, 4], but True is not 1 and "10" is not 10."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_default(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b
