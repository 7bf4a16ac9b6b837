# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The service log's last lines, with secrets redacted.
"""
from __future__ import annotations

import os
import re

# Secrets a server may print (SGLang logs its whole server_args, api_key included): a log tail
# the collection shows (a failed start, a readiness timeout) never repeats them.
_SECRET_PATTERNS = (
    re.compile(r"((?:admin_)?api_key\s*=\s*)('[^']*'|\"[^\"]*\"|[^,\s)]+)"),  # server_args=ServerArgs(api_key='...')
    re.compile(r"(\"(?:admin_)?api_key\"\s*:\s*)(\"[^\"]*\")"),  # JSON
    re.compile(r"(--(?:admin-)?api-key[ =])(\S+)"),  # a command line
    re.compile(r"(Bearer\s+)(\S+)", re.IGNORECASE),
    re.compile(r"((?:HF_TOKEN|HUGGING_FACE_HUB_TOKEN|SGLANG_API_KEY)\s*[=:]\s*)(\S+)"),
    re.compile(r"()(hf_[A-Za-z0-9]{20,})"),
)
REDACTED = "<redacted>"


def redact(line: str) -> str:
    """A log line with the secrets it may hold replaced by <redacted> (None values kept)."""
    for pattern in _SECRET_PATTERNS:
        line = pattern.sub(lambda m: m.group(1) + (m.group(2) if m.group(2) in ("None", "null") else REDACTED), line)
    return line


def log_tail(path: str, lines: int, offset: int = 0) -> list[str]:
    """The last ``lines`` lines of the log written after byte ``offset`` (the whole log's tail
    when nothing was written after it), secrets redacted (``redact``)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            start = offset if 0 < offset < size else 0
            # Read at most the last 256 KiB: enough for any tail a person reads.
            start = max(start, size - 256 * 1024)
            handle.seek(start)
            data = handle.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace").splitlines()
    return [redact(line) for line in text[-lines:]] if lines > 0 else []
