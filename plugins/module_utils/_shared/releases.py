# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The SGLang releases this collection supports: the default one and each one's traits.

The one owner of both. Traits are data (``data/releases.json``: flag names, HiCache semantics,
speculative-decoding defaults, endpoints), checked against the released packages; a release is
supported when it has traits and a flag schema (``data/flag_schemas/sglang-<release>.json``).
Read by the planner on the controller and by the embedded engine on hosts.

Stdlib only, Python >= 3.10.
"""
from __future__ import annotations

import copy
import difflib
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._shared import paths as _paths

# The release rendered and checked when none is given (the newest one supported).
DEFAULT_RELEASE = "0.5.23"
RELEASES_FILE = "releases.json"
SCHEMA_DIR = "flag_schemas"


class UnknownReleaseError(ValueError):
    """A release this collection has no traits or flag schema for; the message lists the known ones."""


def version_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in str(release).split("."))


def load_releases() -> dict[str, dict[str, Any]]:
    """Release -> traits, for every release in ``data/releases.json``."""
    data = _paths.load_json(RELEASES_FILE)
    return {key: value for key, value in data.items() if not key.startswith("_") and isinstance(value, dict)}


def supported_releases() -> list[str]:
    """Releases with both traits and a flag schema, oldest first."""
    schemas = _paths.data_dir() / SCHEMA_DIR
    return sorted((r for r in load_releases() if (schemas / f"sglang-{r}.json").is_file()), key=version_key)


def release_traits(release: str | None = None) -> dict[str, Any]:
    """The traits of ``release`` (default: DEFAULT_RELEASE); an unknown release raises
    UnknownReleaseError naming the supported ones and the closest."""
    key = str(release or DEFAULT_RELEASE)
    releases = load_releases()
    if key not in releases:
        known = sorted(releases, key=version_key)
        match = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
        hint = f" (did you mean {match[0]!r}?)" if match else ""
        raise UnknownReleaseError(f"SGLang release {key!r} is not supported: supported releases are "
                                  f"{', '.join(known)}{hint}")
    return copy.deepcopy(releases[key])
