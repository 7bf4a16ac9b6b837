# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What every part of ``_detached`` shares: /proc's path, the service marker, the poll interval
and ``DetachedServiceError``.
"""
from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")
MARKER_ENV = "LLMOPS_DETACHED_SERVICE"
POLL_S = 0.05


class DetachedServiceError(Exception):
    """A failure a person can act on; ``log_tail`` holds the service's last log lines."""

    def __init__(self, msg: str, log_tail: list[str] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.log_tail = log_tail or []
