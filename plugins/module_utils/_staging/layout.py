# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Where a staged revision lives under the cache dir.

::

    <cache_dir>/models--<org>--<name>/
        snapshots/<commit>/<file>        the model folder SGLang is started with (real files)
        partial/<commit>/<file>          bytes of a file being downloaded (kept across runs: resume)
        complete/<commit>.json           the completion marker: written only when every file checked

The folder name is the Hub cache's (``models--org--name``) so an operator recognises it; the
snapshot holds real files (no blob symlinks), so it can be copied to a peer as it is.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

COMMIT = re.compile(r"^[0-9a-f]{40}$")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def is_commit(revision: str) -> bool:
    """A resolved revision: 40 lowercase hex digits (what the Hub's ``sha`` is)."""
    return bool(COMMIT.match(revision or ""))


def repo_folder(repo: str) -> str:
    """``Qwen/Qwen3-8B`` -> ``models--Qwen--Qwen3-8B``."""
    return "models--" + repo.replace("/", "--")


def safe_relpath(path: str) -> bool:
    """A repo file path that stays inside the snapshot (no absolute path, no ``..``)."""
    if not path or path.startswith("/") or "\\" in path:
        return False
    parts = path.split("/")
    return all(part not in ("", ".", "..") for part in parts)


@dataclass(frozen=True)
class Layout:
    """The paths of one (repo, commit) under one cache dir."""

    cache_dir: str
    repo: str
    commit: str

    @property
    def root(self) -> str:
        return os.path.join(self.cache_dir, repo_folder(self.repo))

    @property
    def snapshot(self) -> str:
        return os.path.join(self.root, "snapshots", self.commit)

    @property
    def partial(self) -> str:
        return os.path.join(self.root, "partial", self.commit)

    @property
    def marker(self) -> str:
        return os.path.join(self.root, "complete", self.commit + ".json")

    def file(self, path: str) -> str:
        return os.path.join(self.snapshot, *path.split("/"))

    def part(self, path: str) -> str:
        return os.path.join(self.partial, *path.split("/"))


def file_stat(path: str) -> tuple[int, int] | None:
    """(size, mtime in ns) of a file, None when it is not there: what a marker records."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns
