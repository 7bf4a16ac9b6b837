# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""An action's argument spec read from its documentation (``plugins/modules/<name>.py``, the stub
``ansible-doc`` shows): the options documented are the options accepted, with the documented
types, choices, defaults and required flags. One owner for each: a default written in the doc is
the default the action gets, and an option the doc does not name is refused."""
from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Mapping
from functools import cache
from pathlib import Path
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


def fragment_options(name: str) -> dict[str, Any]:
    """The options of this collection's doc fragment ``llmops.sglang.<file>[.<variable>]``."""
    parts = name.split(".")
    if parts[:2] != ["llmops", "sglang"] or len(parts) < 3:
        raise ValueError(f"{name}: only this collection's doc fragments are read")
    module = importlib.import_module(f"ansible_collections.llmops.sglang.plugins.doc_fragments.{parts[2]}")
    var = parts[3].upper() if len(parts) > 3 else "DOCUMENTATION"
    return dict((yaml.safe_load(getattr(module.ModuleDocFragment, var)) or {}).get("options") or {})


@cache
def module_documentation(name: str) -> dict[str, Any]:
    """The DOCUMENTATION of the collection's module ``name``, read from its file without running
    it (a module file imports its module_utils: throughput_sweep's import took 0.5 s)."""
    spec = importlib.util.find_spec(f"ansible_collections.llmops.sglang.plugins.modules.{name}")
    if spec is None or not spec.origin:
        raise ValueError(f"no module {name} in this collection")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", "") == "DOCUMENTATION" for target in node.targets):
            return dict(yaml.safe_load(ast.literal_eval(node.value)) or {})
    raise ValueError(f"plugins/modules/{name}.py has no DOCUMENTATION")


@cache
def documented_options(name: str) -> dict[str, Any]:
    """The documented options of the collection's plugin ``name``: its doc fragments' merged under
    its own, as ansible-doc shows them."""
    doc = module_documentation(name)
    options: dict[str, Any] = {}
    fragments = doc.get("extends_documentation_fragment") or []
    for fragment in [fragments] if isinstance(fragments, str) else fragments:
        options.update(fragment_options(str(fragment)))
    options.update(doc.get("options") or {})
    return options


def argument_spec(name: str) -> dict[str, dict[str, Any]]:
    """The argument spec the action ``name`` validates its task's arguments with."""
    return options_spec(documented_options(name))
