# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The one exception model staging raises: its message is what the operator reads."""
from __future__ import annotations

from typing import Any


class StageError(Exception):
    """A staging failure. ``details`` go into the module's result (numbers, paths: never a token)."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details
