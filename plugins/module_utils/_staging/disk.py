# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Free space at the cache dir, and the room check made before the first byte is downloaded."""
from __future__ import annotations

import os

from ansible_collections.llmops.sglang.plugins.module_utils._staging.errors import StageError

# Test seam: the free bytes to assume instead of statvfs (tests cannot shrink a disk as non-root).
FREE_BYTES_ENV = "LLMOPS_SGLANG_STAGE_FREE_BYTES"
GIB = 1024 ** 3


def existing_ancestor(path: str) -> str:
    """``path`` or its nearest existing parent: where the files will land before they exist."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still use on the file system holding ``path``."""
    seam = os.environ.get(FREE_BYTES_ENV)
    if seam:
        return int(seam)
    st = os.statvfs(existing_ancestor(path))
    return st.f_bavail * st.f_frsize


def check_room(need: int, reserve: int, path: str) -> int:
    """Fail unless ``need`` bytes plus ``reserve`` fit at ``path``; returns the free bytes."""
    have = free_bytes(path)
    if need > 0 and need + reserve > have:
        where = existing_ancestor(path)
        raise StageError(
            f"not enough disk space at {where} to stage the model: need {need} bytes ({need / GIB:.2f} GiB) "
            f"+ reserve {reserve} bytes ({reserve / GIB:.2f} GiB), have {have} bytes ({have / GIB:.2f} GiB). "
            "Free space there, or set sglang_model_cache_dir to a larger disk (or lower "
            "sglang_model_disk_reserve_gib); nothing was downloaded",
            need_bytes=need, reserve_bytes=reserve, free_bytes=have, where=where)
    return have
