# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Old revisions of a repo removed down to ``keep``, never one in use.

Run after a staging: the revision just staged and every revision named in the ``in_use`` texts
(the host's deployment manifest: the folders its servers run) are kept whatever ``keep`` says;
the rest are kept newest first (by their completion marker's time) up to ``keep`` revisions in
all. So with ``keep: 2`` the revision that serves stays until the next one serves, and a rollback
needs no download. A revision without a marker (a staging that never completed) is not a
rollback target: it goes unless in use.
"""
from __future__ import annotations

import os
import shutil

from ansible_collections.llmops.sglang.plugins.module_utils._staging.layout import Layout, is_commit


def _marker_time(lay: Layout) -> float | None:
    try:
        return os.stat(lay.marker).st_mtime
    except OSError:
        return None


def candidates(cache_dir: str, repo: str) -> list[str]:
    """The commits with anything under the repo's folder (snapshot, partial bytes or marker)."""
    root = Layout(cache_dir, repo, "0" * 40).root
    found: set[str] = set()
    for sub in ("snapshots", "partial"):
        try:
            found.update(name for name in os.listdir(os.path.join(root, sub)) if is_commit(name))
        except OSError:
            pass
    try:
        found.update(name[:-5] for name in os.listdir(os.path.join(root, "complete"))
                     if name.endswith(".json") and is_commit(name[:-5]))
    except OSError:
        pass
    return sorted(found)


def plan(cache_dir: str, repo: str, keep: int, current: str, in_use: list[str]) -> list[str]:
    """The commits to remove (none when ``keep`` < 1: pruning off)."""
    if keep < 1:
        return []
    commits = candidates(cache_dir, repo)
    protected = {c for c in commits if c == current or any(c in text for text in in_use)}
    complete = sorted((c for c in commits if c not in protected and _marker_time(Layout(cache_dir, repo, c))),
                      key=lambda c: _marker_time(Layout(cache_dir, repo, c)) or 0.0, reverse=True)
    room = max(keep - len(protected), 0)
    kept = protected | set(complete[:room])
    return [c for c in commits if c not in kept]


def remove(cache_dir: str, repo: str, commit: str) -> None:
    """The marker first (a half-removed revision is never taken for complete), then its folders."""
    lay = Layout(cache_dir, repo, commit)
    if os.path.exists(lay.marker):
        os.unlink(lay.marker)
    shutil.rmtree(lay.snapshot, ignore_errors=True)
    shutil.rmtree(lay.partial, ignore_errors=True)
