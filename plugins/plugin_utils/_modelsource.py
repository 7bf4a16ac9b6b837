# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The model sources of a host (controller side): what ``sglang_model`` / ``sglang_draft_model``
(or the older ``sglang_model_path`` / ``sglang_draft_model_path``) say, checked at once, and,
once the Hub revisions are resolved to commits, the folders the plan starts.

A source is one of:

- ``{repo: org/name, revision: <branch, tag or commit>}`` (revision default ``main``): staged
  from the Hub into ``<cache_dir>/models--org--name/snapshots/<commit>`` on the host;
- ``{path: /abs/folder}``: a folder already on the host (as ``sglang_model_path``);
- ``{from_host: <inventory host>, path: /abs/folder}``: copied from a peer (not staged yet by
  this collection: refused with a message until it is).
"""
from __future__ import annotations

import posixpath
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._staging.layout import REPO_ID, Layout, is_commit

KEYS = {"hub": {"repo", "revision"}, "path": {"path"}, "peer": {"from_host", "path"}}
ROLES = (("model", "sglang_model", "sglang_model_path"), ("draft", "sglang_draft_model", "sglang_draft_model_path"))


class SourceError(ValueError):
    """Bad input: the message names the variable, the value, the rule and the fix."""


def _one(role: str, var: str, value: Any, hosts: list[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SourceError(f"{var} must be a mapping ({{repo, revision}}, {{path}} or {{from_host, path}}), "
                          f"got {value!r}")
    keys = set(value)
    kind = "hub" if "repo" in keys else "peer" if "from_host" in keys else "path" if "path" in keys else None
    if kind is None:
        raise SourceError(f"{var}={value!r} names no source: give repo (a Hub id), path (a folder on the host) or "
                          "from_host + path (a peer's folder)")
    extra = keys - KEYS[kind]
    if extra:
        raise SourceError(f"{var} has keys {sorted(extra)} that a {kind} source does not take "
                          f"(it takes {sorted(KEYS[kind])})")
    if kind == "hub":
        repo, revision = value.get("repo"), value.get("revision", "main")
        if not isinstance(repo, str) or not REPO_ID.match(repo):
            raise SourceError(f"{var}.repo={repo!r} is not a Hub repository id: write it as org/name")
        if not isinstance(revision, str) or not revision.strip():
            raise SourceError(f"{var}.revision={revision!r} must be a branch, tag or commit")
        return {"role": role, "kind": kind, "repo": repo, "revision": revision.strip(),
                "ref": f"{repo}@{revision.strip()}"}
    path = value.get("path")
    if not isinstance(path, str) or not posixpath.isabs(path):
        raise SourceError(f"{var}.path={path!r} must be an absolute folder on the host")
    if kind == "peer":
        peer = value.get("from_host")
        if peer not in hosts:
            raise SourceError(f"{var}.from_host={peer!r} is not an inventory host: name a host of the inventory "
                              "that has the folder")
        raise SourceError(f"{var}: copying from a peer (from_host) is not implemented yet: stage from the Hub "
                          "(repo, revision) or copy the folder and give its path")
    return {"role": role, "kind": kind, "path": path.rstrip("/") or "/"}


def sources(model: Any, draft: Any = None, model_path: str = "", draft_model_path: str = "",
            hosts: list[str] | None = None) -> list[dict[str, Any]]:
    """The host's sources (model first, then the draft), or SourceError for the first bad one.
    An empty ``sglang_model`` falls back to ``sglang_model_path`` (a folder, as before)."""
    out = []
    for (role, var, path_var), value, path in zip(ROLES, (model, draft), (model_path, draft_model_path), strict=True):
        if value:
            if path:
                raise SourceError(f"both {var} and {path_var} are set: keep one ({var} stages the model and "
                                  f"sets {path_var} to the staged folder)")
            out.append(_one(role, var, value, list(hosts or [])))
        elif path:
            out.append({"role": role, "kind": "path", "path": str(path)})
    return out


def pin(host_sources: list[dict[str, Any]], resolved: dict[str, str], cache_dir: str) -> list[dict[str, Any]]:
    """Each Hub source with the commit resolved on the controller and its snapshot folder."""
    out = []
    for src in host_sources:
        if src["kind"] == "hub":
            commit = resolved.get(src["ref"], src["revision"] if is_commit(src["revision"]) else None)
            if commit is None:
                raise SourceError(f"{src['ref']} was not resolved to a commit on the controller")
            src = {**src, "commit": commit, "path": Layout(cache_dir, src["repo"], commit).snapshot}
        out.append(src)
    return out


def paths(pinned: list[dict[str, Any]]) -> dict[str, str]:
    """``{model: folder, draft: folder}`` of the sources there are."""
    return {src["role"]: src["path"] for src in pinned}
