# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""A revision's files, as the Hub's tree listing gives them, and the completion marker's JSON."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._staging.errors import StageError
from ansible_collections.llmops.sglang.plugins.module_utils._staging.layout import safe_relpath

MARKER_VERSION = 1


@dataclass(frozen=True)
class RepoFile:
    """One file of a revision: ``sha256`` for LFS files (the Hub publishes it), else ``blob_id``
    (the git blob sha1 of the content)."""

    path: str
    size: int
    blob_id: str = ""
    sha256: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "blob_id": self.blob_id, "sha256": self.sha256}


@dataclass
class Listing:
    """The files of ``repo`` at ``commit``."""

    repo: str
    commit: str
    files: list[RepoFile] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def check(self) -> None:
        """Refuse a listing that could write outside the snapshot or that has no config.json."""
        for entry in self.files:
            if not safe_relpath(entry.path):
                raise StageError(f"the Hub listed a file path {entry.path!r} for {self.repo}@{self.commit} that would "
                                 "leave the snapshot folder: refusing it (check sglang_hf_endpoint)")
            if entry.size < 0:
                raise StageError(f"the Hub listed {entry.path!r} with a negative size {entry.size}")
        if not any(entry.path == "config.json" for entry in self.files):
            raise StageError(f"{self.repo}@{self.commit} has no config.json at its top level: not a model "
                             "repository SGLang can start from (check sglang_model.repo)")


def file_from_tree(entry: Any) -> RepoFile | None:
    """A ``huggingface_hub`` ``RepoFile`` (or a tree JSON dict) as ours; folders give None."""
    if isinstance(entry, dict):
        if entry.get("type") != "file":
            return None
        lfs = entry.get("lfs") or {}
        return RepoFile(path=str(entry["path"]), size=int(entry.get("size") or 0),
                        blob_id=str(entry.get("oid") or ""), sha256=str(lfs.get("oid") or ""))
    if not hasattr(entry, "size") or not hasattr(entry, "blob_id"):
        return None  # a RepoFolder
    lfs = getattr(entry, "lfs", None)
    return RepoFile(path=str(entry.path), size=int(entry.size or 0), blob_id=str(entry.blob_id or ""),
                    sha256=str(getattr(lfs, "sha256", "") or ""))


def marker_doc(listing: Listing, stats: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """The marker: the listing and, per file, the size and mtime (ns) it had when it checked, so
    that a later run can see a file changed since without hashing it again."""
    return {
        "version": MARKER_VERSION,
        "repo": listing.repo,
        "commit": listing.commit,
        "total_bytes": listing.total_bytes,
        "staged_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "files": [{**f.to_json(), "mtime_ns": stats[f.path][1]} for f in listing.files],
    }


def read_marker(path: str, repo: str, commit: str) -> tuple[Listing, dict[str, int]] | None:
    """The listing a marker records and each file's recorded mtime, or None when there is no
    usable marker (missing, unreadable, another repo or commit, another format)."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != MARKER_VERSION:
        return None
    if doc.get("repo") != repo or doc.get("commit") != commit or not isinstance(doc.get("files"), list):
        return None
    try:
        files = [RepoFile(path=str(f["path"]), size=int(f["size"]), blob_id=str(f.get("blob_id") or ""),
                          sha256=str(f.get("sha256") or "")) for f in doc["files"]]
        mtimes = {str(f["path"]): int(f["mtime_ns"]) for f in doc["files"]}
    except (KeyError, TypeError, ValueError):
        return None
    return Listing(repo=repo, commit=commit, files=files), mtimes


def write_marker(path: str, doc: dict[str, Any]) -> None:
    """Atomically (temp file + rename): a marker is whole or absent."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
