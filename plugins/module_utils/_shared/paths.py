# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Where the collection's data files live.

The same relative layout is used in a checkout, in an installed collection and in the copy
of the embedded engine that the server role installs on a host:
``<collection root>/plugins/module_utils/_shared/paths.py`` and ``<collection root>/data/``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DATA_ENV = "LLMOPS_SGLANG_DATA_DIR"


def collection_root() -> Path:
    """The collection's root folder (plugins/module_utils/_shared/paths.py: three levels up)."""
    return Path(__file__).resolve().parents[3]


def data_dir() -> Path:
    """The data folder; ``LLMOPS_SGLANG_DATA_DIR`` overrides it (tests, hosts)."""
    override = os.environ.get(DATA_ENV)
    return Path(override) if override else collection_root() / "data"


def load_json(relpath: str) -> Any:
    """Load a JSON data file by its path relative to the data folder."""
    with open(data_dir() / relpath, encoding="utf-8") as handle:
        return json.load(handle)
