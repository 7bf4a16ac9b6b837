# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""One verified copy fanned out to other hosts (``sglang_model_stage_from: controller | <seed>``,
and ``{from_host, path}`` sources): the host side of the three steps the module
``llmops.sglang.model_receive`` runs.

- ``manifest`` (at the origin): the files to send, with their size and hash. For a staged Hub
  revision it is the origin's completion marker (its files checked quick first: a marker never
  lies); for a folder every file's sha256, computed there (kept in ``<cache_dir>/manifests/``
  with each file's size and mtime, so a re-run hashes only the files that changed).
- ``check`` (at a receiver, before anything is sent): the receiver's own marker for this copy,
  with every file as it recorded: complete, nothing is sent. Else the room for the bytes still
  missing is checked (need, have, where) before the first byte.
- ``verify`` (at a receiver, after the copy): every file's size, then its sha256 (or git blob
  id) against the manifest; a bad or missing file is deleted (the next copy sends it again), and
  the receiver's marker is written only when every file checked.

The receiver's marker is the staging's marker format (listing.marker_doc): for a Hub revision
it is ``complete/<commit>.json`` of the layout, so that model_stage trusts the received copy
exactly as one it downloaded; for a folder it is ``<cache_dir>/copies/<sha1 of the folder>.json``
naming the origin and the manifest's digest (a changed source folder is a new digest).
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._staging import disk, verify
from ansible_collections.llmops.sglang.plugins.module_utils._staging.errors import StageError
from ansible_collections.llmops.sglang.plugins.module_utils._staging.layout import (
    Layout,
    file_stat,
    safe_relpath,
)
from ansible_collections.llmops.sglang.plugins.module_utils._staging.listing import (
    Listing,
    RepoFile,
    marker_doc,
    read_marker,
    write_marker,
)

MANIFEST_VERSION = 1


@dataclass(frozen=True)
class Target:
    """Where one copy lives on one machine: a Hub revision's snapshot under a cache dir, or a
    folder (a ``{from_host, path}`` source) with its marker under the cache dir."""

    cache_dir: str
    repo: str = ""
    commit: str = ""
    path: str = ""

    def __post_init__(self) -> None:
        if bool(self.repo) == bool(self.path):
            raise StageError("give either repo + revision (a staged Hub revision) or path (a folder), not both")
        if self.repo and not self.commit:
            raise StageError(f"{self.repo}: the revision (a commit) is missing")
        if self.path and not os.path.isabs(self.path):
            raise StageError(f"path={self.path!r} must be an absolute folder")

    @property
    def folder(self) -> str:
        if self.repo:
            return Layout(self.cache_dir, self.repo, self.commit).snapshot
        return self.path.rstrip("/") or "/"

    @property
    def key(self) -> str:
        return hashlib.sha1(self.folder.encode()).hexdigest()  # noqa: S324 - a file name, not security

    @property
    def marker(self) -> str:
        if self.repo:
            return Layout(self.cache_dir, self.repo, self.commit).marker
        return os.path.join(self.cache_dir, "copies", self.key + ".json")

    @property
    def manifest_cache(self) -> str:
        return os.path.join(self.cache_dir, "manifests", self.key + ".json")

    def file(self, rel: str) -> str:
        return os.path.join(self.folder, *rel.split("/"))


@dataclass
class Manifest:
    """The files of one copy, as the origin has them."""

    files: list[RepoFile] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def digest(self) -> str:
        """One hash of every path, size and hash: the identity of a folder's content."""
        text = json.dumps([f.to_json() for f in sorted(self.files, key=lambda f: f.path)], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def to_json(self) -> list[dict[str, Any]]:
        return [f.to_json() for f in self.files]

    @classmethod
    def from_json(cls, files: Any) -> Manifest:
        if not isinstance(files, list) or not files:
            raise StageError(f"the manifest must be a non-empty list of files, got {files!r:.200}")
        out = []
        for item in files:
            try:
                entry = RepoFile(path=str(item["path"]), size=int(item["size"]),
                                 blob_id=str(item.get("blob_id") or ""), sha256=str(item.get("sha256") or ""))
            except (KeyError, TypeError, ValueError) as exc:
                raise StageError(f"a manifest entry is not {{path, size, sha256 | blob_id}}: {item!r:.200}") from exc
            if not safe_relpath(entry.path):
                raise StageError(f"the manifest names {entry.path!r}, which would leave the folder: refusing it")
            if not (entry.sha256 or entry.blob_id):
                raise StageError(f"the manifest has no hash for {entry.path!r}: the far end could not verify it")
            out.append(entry)
        return cls(out)


def _listing(target: Target, manifest: Manifest) -> Listing:
    if target.repo:
        return Listing(repo=target.repo, commit=target.commit, files=list(manifest.files))
    return Listing(repo="folder:" + target.folder, commit=manifest.digest, files=list(manifest.files))


# ---- manifest (at the origin)


def _walk(folder: str) -> list[str]:
    """The folder's regular files, relative, sorted (links and hidden files left out)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            full = os.path.join(root, name)
            if name.startswith(".") or os.path.islink(full) or not os.path.isfile(full):
                continue
            found.append(os.path.relpath(full, folder).replace(os.sep, "/"))
    return sorted(found)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(verify.CHUNK)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def folder_manifest(target: Target, *, full: bool = False, write_cache: bool = True) -> tuple[Manifest, int]:
    """Every file of a folder with its sha256, and how many files were hashed now (the others
    are taken from the cached manifest, their size and mtime unchanged; ``full``: all hashed)."""
    if not os.path.isdir(target.folder):
        raise StageError(f"{target.folder} is not a folder on this host: it cannot be the source of a copy "
                         "(check sglang_model.path and from_host)")
    cached: dict[str, dict[str, Any]] = {}
    if not full:
        try:
            with open(target.manifest_cache, encoding="utf-8") as fh:
                doc = json.load(fh)
            if doc.get("version") == MANIFEST_VERSION and doc.get("folder") == target.folder:
                cached = {str(f["path"]): f for f in doc["files"]}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            cached = {}
    files, rows, hashed = [], [], 0
    for rel in _walk(target.folder):
        st = file_stat(target.file(rel))
        if st is None:
            continue
        old = cached.get(rel)
        if old and old.get("size") == st[0] and old.get("mtime_ns") == st[1] and old.get("sha256"):
            sha = str(old["sha256"])
        else:
            sha = _sha256(target.file(rel))
            hashed += 1
        files.append(RepoFile(path=rel, size=st[0], sha256=sha))
        rows.append({"path": rel, "size": st[0], "mtime_ns": st[1], "sha256": sha})
    if not files:
        raise StageError(f"{target.folder} holds no file to copy")
    if write_cache and (hashed or len(cached) != len(files)):
        os.makedirs(os.path.dirname(target.manifest_cache), exist_ok=True)
        tmp = f"{target.manifest_cache}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"version": MANIFEST_VERSION, "folder": target.folder, "files": rows}, fh, indent=1)
        os.replace(tmp, target.manifest_cache)
    return Manifest(files), hashed


def revision_manifest(target: Target, *, full: bool = False) -> Manifest:
    """The files a complete staged revision's marker records, each checked (size and mtime as
    recorded, else hashed; ``full``: hashed): the origin never sends what it could not vouch for."""
    found = read_marker(target.marker, target.repo, target.commit)
    if found is None:
        raise StageError(f"{target.repo}@{target.commit} is not completely staged under {target.cache_dir} "
                         "on the origin (no completion marker): stage it there first")
    listing, mtimes = found
    for entry in listing.files:
        st = file_stat(target.file(entry.path))
        if st is None or st[0] != entry.size or full or st[1] != mtimes.get(entry.path):
            bad = verify.problem(target.file(entry.path), entry)
            if bad is not None:
                raise StageError(f"{target.file(entry.path)} on the origin no longer matches its marker ({bad}): "
                                 "stage the revision there again before copying it")
    return Manifest(list(listing.files))


# ---- check (at a receiver, before the copy)


@dataclass
class Check:
    complete: bool
    folder: str
    marker: str
    files: int
    total_bytes: int
    need_bytes: int = 0
    free_bytes: int | None = None
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _marked(target: Target, manifest: Manifest, full: bool) -> tuple[bool, bool]:
    """(complete, moved): the receiver's marker names exactly this manifest and every file checks
    (size and mtime as recorded; a file that moved is hashed; ``full``: every file hashed);
    ``moved``: some good file's mtime is not the recorded one (the marker is to be rewritten)."""
    listing = _listing(target, manifest)
    found = read_marker(target.marker, listing.repo, listing.commit)
    if found is None:
        return False, False
    recorded, mtimes = found
    if {f.path: f for f in recorded.files} != {f.path: f for f in manifest.files}:
        return False, False
    moved = False
    for entry in manifest.files:
        st = file_stat(target.file(entry.path))
        if st is None or st[0] != entry.size:
            return False, False
        if full or st[1] != mtimes.get(entry.path):
            if verify.problem(target.file(entry.path), entry) is not None:
                return False, False
            moved = moved or st[1] != mtimes.get(entry.path)
    return True, moved


def complete(target: Target, manifest: Manifest, *, full: bool = False) -> bool:
    """The receiver has this copy complete: its marker names exactly this manifest, every file checks."""
    return _marked(target, manifest, full)[0]


def check(target: Target, manifest: Manifest, *, reserve_bytes: int = 0, full: bool = False) -> Check:
    """Complete already (send nothing), or the room for what is missing (StageError when short)."""
    out = Check(complete=False, folder=target.folder, marker=target.marker, files=len(manifest.files),
                total_bytes=manifest.total_bytes)
    if complete(target, manifest, full=full):
        out.complete = True
        return out
    for entry in manifest.files:
        st = file_stat(target.file(entry.path))
        if st is None or st[0] != entry.size:
            out.missing.append(entry.path)
            out.need_bytes += entry.size - (st[0] if st and st[0] < entry.size else 0)
    out.free_bytes = disk.check_room(out.need_bytes, reserve_bytes, target.folder)
    return out


def fetches(manifest: Manifest, origin_dir: str, folder: str) -> list[dict[str, Any]]:
    """What the controller fetches from the origin into ``folder`` (a relay copy), one entry per
    file of the manifest: ``{path, size, src: <origin_dir>/<path>, dest: <folder>/<path>}``."""
    return [{"path": e.path, "size": e.size, "src": posixpath.join(origin_dir, e.path),
             "dest": posixpath.join(folder, e.path)} for e in manifest.files]


# ---- verify (at a receiver, after the copy)


@dataclass
class Received:
    complete: bool
    folder: str
    marker: str
    bad: list[dict[str, str]] = field(default_factory=list)
    changed: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def receive(target: Target, manifest: Manifest, *, check_mode: bool = False) -> Received:
    """Every received file against the manifest; bad ones deleted (sent again by the next copy);
    the marker written, atomically and last, only when every file checked. Never a marker for a
    copy that does not check: an old one goes first."""
    out = Received(complete=False, folder=target.folder, marker=target.marker)
    done, moved = _marked(target, manifest, False)
    if done:  # a file touched but with the same bytes (sent again): its new mtime recorded
        if moved and not check_mode:
            _mark(target, manifest)
            out.changed = True
        out.complete = True
        return out
    for entry in manifest.files:
        bad = verify.problem(target.file(entry.path), entry)
        if bad is not None:
            out.bad.append({"path": entry.path, "problem": bad})
    if check_mode:
        out.complete = not out.bad
        return out
    if os.path.lexists(target.marker):
        os.unlink(target.marker)
        out.changed = True
    for item in out.bad:
        if os.path.lexists(target.file(item["path"])):
            os.unlink(target.file(item["path"]))
            out.changed = True
    if out.bad:
        return out
    _mark(target, manifest)
    out.complete = out.changed = True
    return out


def _mark(target: Target, manifest: Manifest) -> None:
    stats = {}
    for entry in manifest.files:
        st = file_stat(target.file(entry.path))
        if st is None:
            raise StageError(f"{target.file(entry.path)} vanished while it was verified")
        stats[entry.path] = st
    write_marker(target.marker, marker_doc(_listing(target, manifest), stats))
