# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""An action's argument spec read from its documentation (``plugins/modules/<name>.py``, the stub
``ansible-doc`` shows): the options documented are the options accepted, with the documented
types, choices, defaults and required flags. One owner for each: a default written in the doc is
the default the action gets, and an option the doc does not name is refused."""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache
from typing import Any

import yaml

_KEYS = ("type", "elements", "choices", "default", "required", "no_log", "aliases")


def options_spec(options: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The argument spec of documented ``options`` (their ``suboptions`` as nested ``options``)."""
    spec: dict[str, dict[str, Any]] = {}
    for name, option in options.items():
        entry = {key: option[key] for key in _KEYS if key in option}
        if isinstance(option.get("suboptions"), Mapping):
            entry["options"] = options_spec(option["suboptions"])
        spec[str(name)] = entry
    return spec


@cache
def documented_options(name: str) -> dict[str, Any]:
    """The ``options`` of the collection's plugin ``name``'s DOCUMENTATION."""
    module = importlib.import_module(f"ansible_collections.llmops.sglang.plugins.modules.{name}")
    return dict((yaml.safe_load(module.DOCUMENTATION) or {}).get("options") or {})


def argument_spec(name: str) -> dict[str, dict[str, Any]]:
    """The argument spec the action ``name`` validates its task's arguments with."""
    return options_spec(documented_options(name))
