# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The model sources of a host (controller side): what ``sglang_model`` / ``sglang_draft_model``
(or the older ``sglang_model_path`` / ``sglang_draft_model_path``) say, checked at once, and,
once the Hub revisions are resolved to commits, the folders the plan starts.

A source is one of:

- ``{repo: org/name, revision: <branch, tag or commit>}`` (revision default ``main``): staged
  from the Hub into ``<cache_dir>/models--org--name/snapshots/<commit>`` on the host;
- ``{path: /abs/folder}``: a folder already on the host (as ``sglang_model_path``);
- ``{from_host: <inventory host>, path: /abs/folder}``: copied from that peer to the same path on
  the host (through the controller, verified at the far end); on the peer itself a plain path.

With ``sglang_model_stage_from: controller`` or ``<seed host>`` a Hub revision is staged once (on
the controller, or on the seed) and copied to the other hosts: ``transfers`` plans, per host,
what it receives from where (module ``model_receive`` and ``roles/model/tasks/fanout.yml`` do it). The action ``model_plan``
plans every host of the play at once (``play_sources``, ``hub_refs``, ``play_plan``).
"""
from __future__ import annotations

import base64
import json
import posixpath
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._staging.layout import REPO_ID, Layout, is_commit

KEYS = {"hub": {"repo", "revision"}, "path": {"path"}, "peer": {"from_host", "path"}}
ROLES = (("model", "sglang_model", "sglang_model_path"), ("draft", "sglang_draft_model", "sglang_draft_model_path"))


class SourceError(ValueError):
    """Bad input: the message names the variable, the value, the rule and the fix."""


def _one(role: str, var: str, value: Any, hosts: list[str], host: str = "") -> dict[str, Any]:
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
        if peer != host:
            return {"role": role, "kind": "peer", "from_host": peer, "path": path.rstrip("/") or "/"}
    return {"role": role, "kind": "path", "path": path.rstrip("/") or "/"}


def sources(model: Any, draft: Any = None, model_path: str = "", draft_model_path: str = "",
            hosts: list[str] | None = None, host: str = "") -> list[dict[str, Any]]:
    """The host's sources (model first, then the draft), or SourceError for the first bad one.
    An empty ``sglang_model`` falls back to ``sglang_model_path`` (a folder, as before). A
    ``from_host`` that is ``host`` itself is a plain path."""
    out = []
    for (role, var, path_var), value, path in zip(ROLES, (model, draft), (model_path, draft_model_path), strict=True):
        if value:
            if path:
                raise SourceError(f"both {var} and {path_var} are set: keep one ({var} stages the model and "
                                  f"sets {path_var} to the staged folder)")
            out.append(_one(role, var, value, list(hosts or []), host))
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


CONTROLLER = "localhost"


def stage_from(value: Any, play_hosts: list[str]) -> str:
    """``hub``, ``controller`` or a seed host of the play; SourceError otherwise."""
    if value in ("hub", "controller"):
        return str(value)
    if isinstance(value, str) and value in play_hosts:
        return value
    raise SourceError(f"sglang_model_stage_from={value!r}: use hub (every host downloads), controller (one download "
                      "on the controller, copied to the hosts) or a host of this play that stages it from the Hub "
                      f"and is copied from (the play's hosts: {', '.join(sorted(play_hosts)) or 'none'})")


def _relay_dir(controller_cache_dir: str, origin: str, path: str) -> str:
    return posixpath.join(controller_cache_dir, "copies", origin, path.lstrip("/"))


def transfers(pinned: list[dict[str, Any]], host: str, mode: str, play: dict[str, dict[str, Any]],
              controller_cache_dir: str) -> list[dict[str, Any]]:
    """What ``host`` receives, one entry per copy: from where (``origin``: the controller as
    ``localhost``, the seed, or a peer), through which folder of the controller (``relay_dir``:
    the controller's own staged snapshot, or the copy fetched there from a host), into which
    folder of the host. ``play`` maps each host of the play to ``{pinned, cache_dir}``.

    - ``mode`` hub: Hub sources are staged by each host (no transfer).
    - ``controller``: every host receives each Hub revision from the controller's cache.
    - a seed: every host but the seed receives it from the seed (through the controller).
    - ``{from_host, path}`` sources, whatever the mode: from that host, to the same path.
    """
    mode = stage_from(mode, list(play))
    own = play.get(host, {}).get("cache_dir", "")
    if not own:
        raise SourceError(f"{host}: its sglang_model_cache_dir is not known to the play")
    out = []
    for src in pinned:
        if src["kind"] == "hub":
            if mode == "hub" or mode == host:
                continue
            ref = f"{src['repo']}@{src['commit']}"
            args = {"repo": src["repo"], "revision": src["commit"]}
            relay = Layout(controller_cache_dir, src["repo"], src["commit"]).snapshot
            if mode == "controller":
                origin, origin_cache = CONTROLLER, controller_cache_dir
            else:
                seed = play.get(mode)
                if seed is None:
                    raise SourceError(f"sglang_model_stage_from={mode!r} is not a host of this play")
                if not any(s.get("kind") == "hub" and s.get("repo") == src["repo"] and s.get("commit") == src["commit"]
                           for s in seed.get("pinned", [])):
                    raise SourceError(f"{host} stages {ref} but the seed {mode} does not (its sglang_model / "
                                      "sglang_draft_model differ): give the seed the same model, or stage from hub")
                origin, origin_cache = mode, seed["cache_dir"]
            out.append({
                "id": f"{origin}:{ref}", "role": src["role"], "kind": "hub", "origin": origin,
                "origin_args": {**args, "cache_dir": origin_cache},
                "origin_dir": Layout(origin_cache, src["repo"], src["commit"]).snapshot,
                "relay": origin != CONTROLLER, "relay_args": {**args, "cache_dir": controller_cache_dir},
                "relay_dir": relay, "dest_args": {**args, "cache_dir": own},
                "dest_dir": Layout(own, src["repo"], src["commit"]).snapshot})
        elif src["kind"] == "peer":
            origin, path = src["from_host"], src["path"]
            origin_cache = play.get(origin, {}).get("cache_dir") or own
            relay = _relay_dir(controller_cache_dir, origin, path)
            out.append({
                "id": f"{origin}:{path}", "role": src["role"], "kind": "peer", "origin": origin,
                "origin_args": {"path": path, "cache_dir": origin_cache}, "origin_dir": path,
                "relay": True, "relay_args": {"path": relay, "cache_dir": controller_cache_dir},
                "relay_dir": relay, "dest_args": {"path": path, "cache_dir": own}, "dest_dir": path})
    return out


REQUEST_KEYS = ("model", "draft", "model_path", "draft_model_path", "cache_dir", "stage_from")


def play_sources(requests: dict[str, dict[str, Any]], hosts: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Every play host's sources (``requests``: host -> its variables, ``REQUEST_KEYS``), checked
    at once: SourceError naming each host and what is wrong with it."""
    out: dict[str, list[dict[str, Any]]] = {}
    problems = []
    for host, req in requests.items():
        try:
            out[host] = sources(req.get("model"), req.get("draft"), req.get("model_path") or "",
                                req.get("draft_model_path") or "", hosts, host)
        except SourceError as err:
            problems.append(f"{host}: {err}")
    if problems:
        raise SourceError("; ".join(problems))
    return out


def hub_refs(play: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The Hub references (``repo@revision``) of the play's sources, once each, in order."""
    return list(dict.fromkeys(src["ref"] for srcs in play.values() for src in srcs if src["kind"] == "hub"))


def play_plan(requests: dict[str, dict[str, Any]], play: dict[str, list[dict[str, Any]]], resolved: dict[str, str],
              controller_cache_dir: str) -> dict[str, dict[str, Any]]:
    """Per host of the play, once the Hub revisions are resolved: its sources pinned to their
    commits, what it receives by copy and from where (``transfers``) and the folders its plan
    starts (``paths``)."""
    pinned = {host: pin(play[host], resolved, str(requests[host].get("cache_dir") or "")) for host in play}
    shared = {host: {"pinned": pinned[host], "cache_dir": requests[host].get("cache_dir") or ""} for host in play}
    return {host: {"sources": play[host], "pinned": pinned[host],
                   "transfers": transfers(pinned[host], host, requests[host].get("stage_from") or "hub", shared,
                                          controller_cache_dir),
                   "paths": paths(pinned[host])} for host in play}


def deployed_commits(deployments: dict[str, Any], repo: str) -> dict[str, str]:
    """host -> the commit of ``repo`` its last deployment serves: the snapshot folder
    (``.../models--org--name/snapshots/<commit>``) of an instance's ``--model-path`` in the host's
    manifest (the ``sglang_deployment`` fact a deploy or status leaves). Hosts whose deployment
    serves no snapshot of ``repo`` are left out."""
    folder = "/" + posixpath.join(Layout("", repo, "").root.lstrip("/"), "snapshots") + "/"
    out: dict[str, str] = {}
    for host, manifest in deployments.items():
        instances = manifest.get("instances") if isinstance(manifest, dict) else None
        for inst in instances if isinstance(instances, list) else []:
            if not isinstance(inst, dict):
                continue
            argv = [str(word) for word in inst.get("argv") or []]
            path = argv[argv.index("--model-path") + 1] if "--model-path" in argv[:-1] else ""
            at = path.find(folder)
            commit = path[at + len(folder):].split("/", 1)[0] if at >= 0 else ""
            if is_commit(commit):
                out[host] = commit
                break
    return out


def slurped_manifest(slurped: Any) -> dict[str, Any] | None:
    """The manifest in a registered ``slurp`` of a host's deployment.json, or None (not there,
    unreadable, not a manifest)."""
    if not isinstance(slurped, dict) or not slurped.get("content"):
        return None
    try:
        manifest = json.loads(base64.b64decode(str(slurped["content"])).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return manifest if isinstance(manifest, dict) else None


def offline_fallback(ref: str, hub_message: str, deployed: dict[str, str]) -> tuple[str | None, str]:
    """The Hub did not answer for ``ref`` (``repo@revision``): (the commit to go on with, the
    warning saying so) when the hosts' deployments serve one commit of the repo, else (None, the
    failure naming the fixes)."""
    repo, revision = ref.split("@", 1)
    commits = sorted(set(deployed.values()))
    if len(commits) == 1:
        hosts = ", ".join(sorted(deployed))
        return commits[0], (
            f"the Hub did not answer for {ref} ({hub_message}); going on with commit {commits[0]}, the one "
            f"deployed on {hosts} (whether {revision!r} still names it could not be checked). To say so, pin "
            f"it: sglang_model: {{repo: {repo}, revision: {commits[0]}}}")
    seen = ("; the hosts' deployments serve different commits of it: "
            + ", ".join(f"{h} {c}" for h, c in sorted(deployed.items()))) if commits else ""
    return None, (
        f"cannot resolve {ref} to a commit: the Hub did not answer ({hub_message}){seen}. To deploy without "
        f"it, pin a commit that is staged on the hosts (sglang_model: {{repo: {repo}, revision: <40-hex "
        f"commit>}}: the folders under <sglang_model_cache_dir>/{Layout('', repo, '').root.lstrip('/')}/snapshots/ "
        "are the staged commits) and set sglang_hf_offline: true to make no request; or point "
        "sglang_hf_endpoint (HF_ENDPOINT) at a mirror that answers")
