# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The server log in the real format, ``[YYYY-MM-DD HH:MM:SS] message``: engine lines on
stderr, uvicorn-style access lines on stdout."""
from __future__ import annotations

import sys
import time
from typing import Any


class Log:
    """``--log-level warning|error`` silences the info and access lines (``error`` the warning
    lines too)."""

    def __init__(self, level: str = "info") -> None:
        self.info_enabled = level.lower() in ("debug", "info")
        self.warning_enabled = self.info_enabled or level.lower() == "warning"

    @staticmethod
    def _ts() -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())

    def _write(self, stream: Any, msg: str) -> None:
        try:
            stream.write(f"[{self._ts()}] {msg}\n")
            stream.flush()
        except (OSError, ValueError):
            pass

    def info(self, msg: str) -> None:
        if self.info_enabled:
            self._write(sys.stderr, msg)

    def warning(self, msg: str) -> None:
        if self.warning_enabled:
            self._write(sys.stderr, msg)

    def error(self, msg: str) -> None:
        self._write(sys.stderr, msg)

    def access(self, msg: str) -> None:
        if self.info_enabled:
            self._write(sys.stdout, msg)
