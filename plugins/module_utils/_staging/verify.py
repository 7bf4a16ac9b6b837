# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""A file on disk against its listing entry: the size, then the content hash the Hub publishes
(sha256 for LFS files, the git blob sha1 for the others)."""
from __future__ import annotations

import hashlib
import os

from ansible_collections.llmops.sglang.plugins.module_utils._staging.listing import RepoFile

CHUNK = 4 * 1024 * 1024


def digest(path: str, entry: RepoFile) -> tuple[str, str]:
    """(algorithm, hex digest) of the file, in the form ``entry`` publishes."""
    if entry.sha256:
        h = hashlib.sha256()
    else:
        h = hashlib.sha1()  # noqa: S324 - git's blob id is a sha1 by definition
        h.update(f"blob {os.path.getsize(path)}\0".encode())
    with open(path, "rb") as fh:
        while True:
            block = fh.read(CHUNK)
            if not block:
                break
            h.update(block)
    return ("sha256" if entry.sha256 else "git-sha1"), h.hexdigest()


def problem(path: str, entry: RepoFile) -> str | None:
    """None when the file is the listed one, else what is wrong with it."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return "missing"
    if size != entry.size:
        return f"size {size} bytes, the revision lists {entry.size}"
    expected = entry.sha256 or entry.blob_id
    if not expected:
        return None  # nothing published to compare with: the size is all there is
    algo, got = digest(path, entry)
    if got != expected.lower():
        return f"{algo} {got}, the revision lists {expected}"
    return None
