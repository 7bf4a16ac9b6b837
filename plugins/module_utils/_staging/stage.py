# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The staging of one (repo, commit) into one cache dir, in this order:

1. A complete marker for the commit, and every file it records with the size and mtime it
   recorded (``verify: full``: and the hash): done, no request, nothing written (changed=False).
   A file changed since the marker is hashed; a bad one drops the marker and is fetched again.
2. Offline: a complete snapshot was the only way; fail naming the commit and the cache dir.
3. The listing (one request; paged by the client for big repos): sizes and hashes.
4. Room: the bytes still missing (listed size minus what is already in the snapshot, verified,
   or in partial/) plus the reserve must fit on the cache dir's file system: else fail with
   need, have, where, before the first byte.
5. Per file not yet good: download into partial/ (resuming there), verify (size, then sha256 or
   git blob sha1), move into the snapshot; a bad file is deleted and fetched once more; still bad:
   fail, and no marker.
6. The marker, atomically, when every file checked.

Every write (5 and 6) under the repository folder's lock (``<cache_dir>/models--org--name/.stage.lock``,
an flock, the holder's pid in it): one stager writes a repository of a cache dir at a time. A
second one (a re-run while an interrupted run's job still downloads) waits for the first, up to
``lock_wait`` seconds, then looks again: a marker the first one wrote ends it (it adopts that
staging), else it fetches what is still missing. Before (issue 28 item 10) two stagers appended
to the same partial file: a file twice its size, with a completion marker beside it.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._staging import disk, hub, verify
from ansible_collections.llmops.sglang.plugins.module_utils._staging.errors import StageError
from ansible_collections.llmops.sglang.plugins.module_utils._staging.layout import (
    Layout,
    file_stat,
    is_commit,
)
from ansible_collections.llmops.sglang.plugins.module_utils._staging.listing import (
    Listing,
    RepoFile,
    marker_doc,
    read_marker,
    write_marker,
)
from ansible_collections.llmops.sglang.plugins.module_utils._staging.progress import Progress


@dataclass
class Request:
    """What to stage, where, from where. ``token`` is never echoed anywhere."""

    repo: str
    commit: str
    cache_dir: str
    endpoint: str = hub.DEFAULT_ENDPOINT
    token: str | None = None
    offline: bool = False
    verify: str = "quick"  # quick: size + mtime against the marker; full: every hash again
    reserve_bytes: int = 0
    progress_file: str | None = None
    attempts: int = 2  # downloads of one file before its mismatch fails the staging
    labels: dict[str, Any] = field(default_factory=dict)
    check_mode: bool = False
    lock_wait: float = 3600.0  # seconds to wait while another stager holds the repository's lock

    def validate(self) -> None:
        if not is_commit(self.commit):
            raise StageError(f"revision {self.commit!r} of {self.repo} is not a commit (40 hex digits): resolve the "
                             "branch or tag on the controller first (the model role does)")
        if self.verify not in ("quick", "full"):
            raise StageError(f"verify={self.verify!r}: use quick or full")
        if self.attempts < 1:
            raise StageError(f"attempts={self.attempts}: at least 1")


@dataclass
class Result:
    """What the module returns (no token in here)."""

    path: str
    commit: str
    changed: bool = False
    files: int = 0
    total_bytes: int = 0
    downloaded_bytes: int = 0
    downloaded_files: list[str] = field(default_factory=list)
    refetched: list[dict[str, str]] = field(default_factory=list)
    need_bytes: int = 0
    free_bytes: int | None = None
    requests: str = "none"  # none | listing
    marker: str = ""
    waited_for: dict[str, Any] | None = None  # {pid, seconds}: another stager held the lock first

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _marker_good(req: Request, lay: Layout) -> tuple[Listing, list[RepoFile]] | None:
    """The marker's listing and the files whose size/mtime moved since (to hash), or None."""
    found = read_marker(lay.marker, req.repo, req.commit)
    if found is None:
        return None
    listing, mtimes = found
    moved = []
    for entry in listing.files:
        st = file_stat(lay.file(entry.path))
        if st is None or st[0] != entry.size:
            return None
        if req.verify == "full" or st[1] != mtimes.get(entry.path):
            moved.append(entry)
    return listing, moved


def _good_files(listing: Listing, lay: Layout, hashed: dict[str, str | None]) -> set[str]:
    """The snapshot's files that are the listed ones (hashing those not hashed yet)."""
    good = set()
    for entry in listing.files:
        if entry.path not in hashed:
            hashed[entry.path] = verify.problem(lay.file(entry.path), entry) if os.path.exists(lay.file(entry.path)) \
                else "missing"
        if hashed[entry.path] is None:
            good.add(entry.path)
    return good


def _need(listing: Listing, lay: Layout, good: set[str]) -> int:
    need = 0
    for entry in listing.files:
        if entry.path in good:
            continue
        part = file_stat(lay.part(entry.path))
        need += entry.size - (part[0] if part and part[0] <= entry.size else 0)
    return need


def _fetch_one(req: Request, lay: Layout, entry: RepoFile, progress: Progress, result: Result) -> None:
    """Download (resuming), verify, refetch a bad one, move into the snapshot."""
    part = lay.part(entry.path)
    counted = 0
    for attempt in range(1, req.attempts + 1):
        progress.current = entry.path
        counted += hub.download(req.endpoint, req.repo, req.commit, entry.path, entry.size, part, req.token,
                                progress.add_bytes)
        bad = verify.problem(part, entry)
        if bad is None:
            break
        os.unlink(part)
        progress.bytes_done -= counted
        counted = 0
        result.refetched.append({"path": entry.path, "problem": bad, "attempt": str(attempt)})
        if attempt == req.attempts:
            raise StageError(f"{entry.path} of {req.repo}@{req.commit} does not match the revision after "
                             f"{attempt} downloads ({bad}): refusing it; no completion marker written "
                             "(is sglang_hf_endpoint a faithful mirror?)", path=entry.path, problem=bad)
    dest = lay.file(entry.path)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    os.replace(part, dest)
    result.downloaded_files.append(entry.path)
    result.downloaded_bytes += entry.size
    progress.file_done(entry.size, counted)


def _finish(listing: Listing, lay: Layout, result: Result) -> Result:
    stats = {}
    for entry in listing.files:
        st = file_stat(lay.file(entry.path))
        if st is None:
            raise StageError(f"{lay.file(entry.path)} vanished while staging")
        stats[entry.path] = st
    write_marker(lay.marker, marker_doc(listing, stats))
    shutil.rmtree(lay.partial, ignore_errors=True)
    result.marker = lay.marker
    return result


LOCK_NAME = ".stage.lock"


@contextlib.contextmanager
def repo_lock(lay: Layout, wait_s: float, result: Result, poll: float = 0.2) -> Iterator[None]:
    """The repository folder's staging lock, held for the block (waits up to ``wait_s``)."""
    os.makedirs(lay.root, exist_ok=True)
    path = os.path.join(lay.root, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        started = time.monotonic()
        holder = ""
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not holder:
                    with contextlib.suppress(OSError):
                        holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
                if time.monotonic() - started >= wait_s:
                    raise StageError(
                        f"another staging of {lay.repo} into {lay.cache_dir} (pid {holder or '?'}) still runs after "
                        f"{wait_s:g} s: let it finish (a re-run then finds it complete), or stop it") from None
                time.sleep(poll)
        if holder or time.monotonic() - started > poll:
            result.waited_for = {"pid": holder or None, "seconds": round(time.monotonic() - started, 2)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def stage(req: Request) -> Result:
    """Stage ``req`` (see the module docstring for the order); raises StageError."""
    req.validate()
    lay = Layout(req.cache_dir, req.repo, req.commit)
    result = Result(path=lay.snapshot, commit=req.commit, marker=lay.marker)
    if req.progress_file and not req.check_mode and os.path.lexists(req.progress_file):
        os.unlink(req.progress_file)  # the lines are this run's: a watcher never shows a past run's
    hashed: dict[str, str | None] = {}
    marked = _marker_good(req, lay)
    if marked is not None:
        listing, moved = marked
        hashed = {entry.path: verify.problem(lay.file(entry.path), entry) for entry in moved}
        if all(problem is None for problem in hashed.values()):
            if moved and not req.check_mode:  # touched but the same bytes: record the new mtimes
                _finish(listing, lay, result)
            result.files, result.total_bytes = len(listing.files), listing.total_bytes
            return result
        result.refetched = [{"path": p, "problem": str(v), "attempt": "0"} for p, v in hashed.items() if v]
        if not req.check_mode:
            os.unlink(lay.marker)  # a marker never lies: it goes before anything is fetched again
    if req.offline:
        raise StageError(f"offline (sglang_hf_offline / HF_HUB_OFFLINE) and {req.repo}@{req.commit} is not completely "
                         f"staged under {req.cache_dir}: stage it once online, or copy it from a peer")
    listing = hub.list_files(req.endpoint, req.repo, req.commit, req.token)
    result.requests = "listing"
    result.files, result.total_bytes = len(listing.files), listing.total_bytes
    good = _good_files(listing, lay, hashed)
    result.need_bytes = _need(listing, lay, good)
    result.free_bytes = disk.check_room(result.need_bytes, req.reserve_bytes, req.cache_dir)
    todo = [entry for entry in listing.files if entry.path not in good]
    result.changed = True
    if req.check_mode:
        result.downloaded_files = [entry.path for entry in todo]
        return result
    with repo_lock(lay, req.lock_wait, result):
        if result.waited_for is not None:  # another stager wrote meanwhile: look again
            marked = _marker_good(req, lay)
            if marked is not None and not marked[1]:
                result.changed = False  # it staged this very commit: adopted, nothing fetched here
                return result
            good = _good_files(listing, lay, {})
            todo = [entry for entry in listing.files if entry.path not in good]
        return _download(req, lay, listing, good, todo, result)


def _download(req: Request, lay: Layout, listing: Listing, good: set[str], todo: list[RepoFile],
              result: Result) -> Result:
    progress = Progress(req.progress_file, {**req.labels, "repo": req.repo, "commit": req.commit},
                        len(listing.files), listing.total_bytes)
    progress.files_done = len(good)
    progress.bytes_done = sum(e.size for e in listing.files if e.path in good)
    progress.emit("started")
    for entry in todo:
        if os.path.lexists(lay.file(entry.path)):
            os.unlink(lay.file(entry.path))
        _fetch_one(req, lay, entry, progress, result)
    _finish(listing, lay, result)
    progress.current = ""
    progress.emit("complete")
    return result
