# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The staging's progress file: one JSON line per update, appended with one write (a reader never
sees half a line), at most one line per ``every`` seconds plus one per finished file."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any


class Progress:
    """Counts bytes and files; ``line()`` is what the file gets and the play shows."""

    def __init__(self, path: str | None, labels: dict[str, Any], files_total: int, bytes_total: int,
                 every: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.labels = labels
        self.files_total = files_total
        self.bytes_total = bytes_total
        self.files_done = 0
        self.bytes_done = 0
        self.received = 0
        self.every = every
        self._clock = clock
        self._start = clock()
        self._last = 0.0
        self.current = ""

    def line(self, state: str) -> dict[str, Any]:
        elapsed = max(self._clock() - self._start, 1e-9)
        return {**self.labels, "state": state, "file": self.current, "files_done": self.files_done,
                "files_total": self.files_total, "bytes_done": self.bytes_done,
                "bytes_total": self.bytes_total, "received_bytes": self.received,
                "rate_bytes_s": round(self.received / elapsed, 1), "elapsed_s": round(elapsed, 3)}

    def emit(self, state: str) -> None:
        if not self.path:
            return
        data = (json.dumps(self.line(state), sort_keys=True) + "\n").encode("utf-8")
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self._last = self._clock()

    def add_bytes(self, n: int) -> None:
        self.bytes_done += n
        self.received += n
        if self._clock() - self._last >= self.every:
            self.emit("downloading")

    def file_done(self, size: int, counted: int) -> None:
        """A file checked: ``counted`` of its ``size`` bytes went through ``add_bytes``."""
        self.files_done += 1
        self.bytes_done += size - counted
        self.emit("downloading")


def describe(rec: dict[str, Any]) -> str:
    """``node1 Qwen/Qwen3-8B: 3/7 files, 1.20/16.38 GB, 112.4 MB/s (model-00002.safetensors)``."""
    gb = 1e9
    where = " ".join(str(rec[k]) for k in ("host", "repo") if rec.get(k))
    return (f"{where}: {rec.get('files_done')}/{rec.get('files_total')} files, "
            f"{(rec.get('bytes_done') or 0) / gb:.2f}/{(rec.get('bytes_total') or 0) / gb:.2f} GB, "
            f"{(rec.get('rate_bytes_s') or 0) / 1e6:.1f} MB/s, {rec.get('state')}"
            + (f" ({rec['file']})" if rec.get("file") else ""))
