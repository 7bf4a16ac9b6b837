# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The deployment manifest (``<base>/deployment.json``): the one writer and the one reader.

The server role writes it after every deploy; status, stop, bench and the router read it.
``load`` reads it whatever state it is in: a manifest of an older schema is brought to the
current one; a missing or unreadable one is rebuilt from the instance folders
(``_layout.discover``: launch scripts and pid files), so that stop and status still find
the servers that run.

Stdlib only, Python >= 3.10 (``llmops.sglang.server_status`` ships it to hosts).
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout

SCHEMA_VERSION = 2
BACKENDS = ("process", "systemd")


class ManifestError(ValueError):
    """The file is not a deployment manifest; the message says what is wrong with it."""


# --------------------------------------------------------------------------------------------
# Reading


def _instance_v2(inst: dict[str, Any], base_dir: str) -> dict[str, Any]:
    """One instance record in the current shape (fields of schema 1 mapped over)."""
    name = str(inst["name"])
    out = dict(inst)
    paths = _layout.instance_paths(base_dir, name)
    given = inst.get("paths") if isinstance(inst.get("paths"), dict) else {}
    for key in paths:
        if key in inst and key != "dir":  # schema 1 kept the paths at the top of the record
            paths[key] = inst[key] or paths[key]
            out.pop(key, None)
    paths.update({k: v for k, v in given.items() if isinstance(v, str) and v})
    out["paths"] = paths
    if "connect_url" not in out:
        out["connect_url"] = out.pop("url", None)
    out.pop("url", None)
    out.setdefault("advertise_url", None)
    out.setdefault("unit", None)
    out["service"] = out.get("service") or _layout.service_name(name)
    out.setdefault("gpus", [])
    out.setdefault("node_rank", 0)
    out.setdefault("nnodes", 1)
    out.setdefault("rank0", True)
    out.setdefault("previous", None)
    return out


def normalize(data: Any, base_dir: str) -> dict[str, Any]:
    """A manifest of schema 1 or 2 in the current shape; ManifestError when it is not one."""
    if not isinstance(data, dict):
        raise ManifestError(f"a manifest is a JSON object, not {type(data).__name__}")
    instances = data.get("instances")
    if not isinstance(instances, list) or not all(isinstance(i, dict) and i.get("name") for i in instances):
        raise ManifestError("a manifest has a list of instances, each with a name")
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ManifestError(f"manifest schema_version {version!r} is newer than this collection "
                            f"reads ({SCHEMA_VERSION}): upgrade llmops.sglang")
    out = dict(data)
    out["schema_version"] = SCHEMA_VERSION
    out["base_dir"] = str(data.get("base_dir") or base_dir)
    out["instances"] = [_instance_v2(i, out["base_dir"]) for i in instances]
    out.setdefault("service_manager", "process")
    return out


def _launch_args(script: str) -> dict[str, str]:
    """--host / --port of a rendered launch script (its ``args=( ... )`` block)."""
    try:
        with open(script, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return {}
    start = text.find("args=(")
    end = text.find("\n)", start)
    if start < 0 or end < 0:
        return {}
    try:
        words = shlex.split(text[start + len("args=("):end], comments=True)
    except ValueError:
        return {}
    found = {}
    for flag in ("--host", "--port"):
        if flag in words[:-1]:
            found[flag] = words[words.index(flag) + 1]
    return found


def folder_record(base_dir: str, name: str, service_manager: str = "process") -> dict[str, Any]:
    """An instance record made from its folder alone: name, paths and unit from the layout, the
    URL from its launch script (no GPUs, no pid: the manifest that knew them is not there)."""
    paths = _layout.instance_paths(base_dir, name)
    args = _launch_args(paths["launch_script"])
    url = None
    if "--port" in args and args["--port"].isdigit():
        url = _layout.connect_url(args.get("--host", "127.0.0.1"), int(args["--port"]))
    backend = "process" if os.path.exists(paths["pid_file"]) else service_manager
    return {
        "name": name,
        "gpus": [],
        "connect_url": url,
        "advertise_url": None,
        "unit": _layout.unit_name(name) if backend == "systemd" else None,
        "service": _layout.service_name(name),
        "paths": paths,
        "node_rank": 0,
        "nnodes": 1,
        "rank0": True,
    }


def from_folders(base_dir: str, service_manager: str = "process") -> dict[str, Any]:
    """A manifest rebuilt from the instance folders, for when deployment.json is gone or
    unreadable: names, paths and units from the layout, the URL from each launch script."""
    instances = []
    for name in _layout.discover(base_dir):
        instances.append(folder_record(base_dir, name, service_manager))
    return {
        "schema_version": SCHEMA_VERSION,
        "base_dir": base_dir,
        "service_manager": service_manager,
        "rebuilt_from_folders": True,
        "instances": instances,
    }


def load(base_dir: str, service_manager: str = "process", running: list[str] | None = None) -> dict[str, Any]:
    """Read ``<base>/deployment.json`` whatever its state.

    Returns {state, problem, manifest, unlisted}: state ``ok``; ``missing`` or ``unreadable``
    with the manifest rebuilt from the instance folders (``problem`` says what was wrong);
    ``absent`` when there is neither a manifest nor an instance folder (manifest None).

    ``running``: the instance folders with live processes (``_ownership``). Any of them that the
    manifest does not list (a deploy interrupted after starting it, before writing the manifest)
    is part of the deployment all the same: added to the manifest's instances from its folder,
    marked ``in_manifest: false``, and named in ``unlisted`` and ``problem``; status reports it,
    stop stops it, the next deploy replaces or removes it.
    """
    found = _read(base_dir, service_manager)
    manifest = found["manifest"]
    listed = {i["name"] for i in (manifest or {}).get("instances", [])}
    live = set(running or [])
    unlisted = [n for n in _layout.discover(base_dir) if n in live and n not in listed] if live else []
    found["unlisted"] = unlisted
    if not unlisted:
        return found
    if manifest is None:  # not reached: a folder that discover finds rebuilds the manifest
        return found
    manifest["instances"] = manifest["instances"] + [
        dict(folder_record(base_dir, n, manifest.get("service_manager") or service_manager), in_manifest=False)
        for n in unlisted]
    manifest["unlisted"] = unlisted
    note = (f"instance folder(s) {', '.join(unlisted)} under {base_dir} have live processes but are not in "
            f"{found['path']} (a deploy interrupted after starting them?): they are part of the deployment all the "
            "same: status reports them, stop.yml stops them, the next deploy replaces or removes them")
    found["problem"] = f"{found['problem']}; {note}" if found["problem"] else note
    return found


def _read(base_dir: str, service_manager: str) -> dict[str, Any]:
    path = _layout.manifest_path(base_dir)
    try:
        with open(path, encoding="utf-8") as handle:
            raw = handle.read()
    except FileNotFoundError:
        rebuilt = from_folders(base_dir, service_manager)
        if not rebuilt["instances"]:
            return {"state": "absent", "problem": "", "manifest": None, "path": path}
        return {"state": "missing", "manifest": rebuilt, "path": path,
                "problem": f"{path} does not exist; found instance folder(s) "
                           f"{', '.join(i['name'] for i in rebuilt['instances'])} under {base_dir}"}
    except OSError as exc:
        raw, problem = None, f"cannot read {path}: {exc.strerror or exc}"
    else:
        try:
            return {"state": "ok", "problem": "", "manifest": normalize(json.loads(raw), base_dir), "path": path}
        except ValueError as exc:  # JSONDecodeError and ManifestError
            problem = f"{path} is not a deployment manifest ({exc})"
    rebuilt = from_folders(base_dir, service_manager)
    names = ", ".join(i["name"] for i in rebuilt["instances"]) or "none"
    return {"state": "unreadable", "manifest": rebuilt, "path": path,
            "problem": f"{problem}; using the instance folders found under {base_dir}: {names}"}


# --------------------------------------------------------------------------------------------
# Writing


def reclaim_pinned(facts: dict[str, Any], previous: dict[str, Any] | None,
                   running: list[str] | None) -> dict[str, Any]:
    """Facts for re-planning a host whose own servers already pin HiCache memory.

    MemAvailable on a host running this deployment excludes what its instances pinned; if
    the plan did not add that back, every re-run would size smaller and restart them. Only
    the instances that are still running (`running`: their names) are added back. The
    embedded engine (engine "sim") models its host pools without allocating them, so
    nothing is added back for it.

    ``memory.running_hicache_size_gb`` is the size the running instances were started with
    (None when none of them runs): the plan keeps it while it still fits, so that MemAvailable
    moving by a few hundred MB between runs does not restart healthy servers.
    """
    out = json.loads(json.dumps(facts))
    hicache = (previous or {}).get("hicache") or {}
    names = {i.get("name") for i in (previous or {}).get("instances", [])}
    count = len([n for n in (running or []) if n in names])
    pinned = {} if (previous or {}).get("engine") == "sim" else hicache
    reclaimed = int(pinned.get("pinned_per_instance_bytes") or 0) * count
    mem = out.setdefault("memory", {})
    for key in ("available_bytes", "effective_available_bytes"):
        if isinstance(mem.get(key), int):
            mem[key] += reclaimed
    mem["reclaimed_pinned_bytes"] = reclaimed
    size = hicache.get("size_gb")
    mem["running_hicache_size_gb"] = int(size) if count and isinstance(size, int) and size > 0 else None
    out["hicache_storage_running"] = running_storage(previous, running)
    return out


def running_storage(previous: dict[str, Any] | None, running: list[str] | None) -> dict[str, Any] | None:
    """The storage tier the running instances were started with ({root, caps: {instance: bytes}}),
    from the previous deployment.json; None where none of its instances with a tier runs. The plan
    keeps their size while it fits, as it keeps the host tier's."""
    tier = (previous or {}).get("hicache_storage") or {}
    names = set(running or [])
    caps = {str(name): int(item.get("cap_bytes") or 0) for name, item in (tier.get("instances") or {}).items()
            if name in names and isinstance(item, dict)}
    return {"root": tier.get("root"), "caps": caps} if caps else None


def build(
    *,
    host: str,
    plan: dict[str, Any],
    engine: str,
    service_manager: str,
    services: dict[str, dict[str, Any]],
    ready: dict[str, dict[str, Any]],
    previous: dict[str, Any] | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """deployment.json: what runs where, read by bench, status, stop and the router.

    ``plan``: the instance plan (each instance carries its paths, unit, service and URLs);
    ``services``: name -> {pid, started (bool: (re)started this run)}; ``ready``: name -> wait
    result. An instance that did not restart keeps its earlier ready time from ``previous``,
    and while no server restarted the HiCache arithmetic of the run that started them is kept
    (MemAvailable moves between runs and would rewrite the manifest).
    """
    earlier = {i["name"]: i for i in (previous or {}).get("instances", []) if isinstance(i, dict)}
    any_started = any(services.get(i["name"], {}).get("started") for i in plan["instances"])
    hicache = plan.get("hicache")
    prev_hicache = (previous or {}).get("hicache")
    if (not any_started and prev_hicache and hicache
            and prev_hicache.get("size_gb") == hicache.get("size_gb")):
        hicache = prev_hicache
    # the storage tier's arithmetic likewise (free space moves between runs): kept while no server
    # restarted and every instance's cap is the same
    storage = plan.get("hicache_storage")
    prev_storage = (previous or {}).get("hicache_storage")
    if not any_started and prev_storage and storage and _caps(prev_storage) == _caps(storage):
        storage = prev_storage
    instances = []
    for inst in plan["instances"]:
        name = inst["name"]
        svc = services.get(name, {})
        rdy = ready.get(name, {})
        before = earlier.get(name, {})
        if svc.get("started") or not before.get("ready_at"):
            ready_at, ready_after, warmup = rdy.get("ready_at"), rdy.get("waited_s"), rdy.get("warmup_s")
        else:
            ready_at, ready_after, warmup = before.get("ready_at"), before.get("ready_after_s"), before.get("warmup_s")
        instances.append({
            "name": name,
            "gpus": inst.get("gpu_ids", []),
            "port": inst["port"],
            "connect_url": inst["connect_url"],
            "advertise_url": inst.get("advertise_url"),
            "pid": svc.get("pid"),
            "unit": inst["unit"] if service_manager == "systemd" else None,
            "service": inst["service"],
            "paths": inst["paths"],
            "node_rank": inst.get("node_rank", 0),
            "nnodes": inst.get("nnodes", 1),
            "rank0": inst.get("rank0", True),
            "argv": inst.get("argv", []),
            "pd_role": inst.get("pd_role"), "bootstrap_port": inst.get("bootstrap_port"),  # the router's pairing
            "env_digest": env_digest(inst.get("env")),
            "hicache": hicache,
            "ready_at": ready_at,
            "ready_after_s": ready_after,
            # of ready_after_s, the readiness warm-up request (sglang_ready_warmup): a cold server's
            # first sampled request (100-140 s on an H200 with SGLang 0.5.17) is paid here
            "warmup_s": warmup,
        })
    return {
        "schema_version": SCHEMA_VERSION,
        "host": host,
        "profile": plan.get("profile"),
        "release": plan.get("release"),
        "engine": engine,
        "service_manager": service_manager,
        "base_dir": plan["base_dir"],
        "python": python,
        "hicache": hicache,
        "hicache_storage": storage,
        "kvstore": kvstore_record(plan.get("kvstore")),
        "instances": instances,
    }


def kvstore_record(kvstore: dict[str, Any] | None) -> dict[str, Any] | None:
    """The storage tier's master this host runs, as stop.yml stops it after the instances."""
    if not kvstore:
        return None
    return {key: kvstore[key] for key in ("name", "pid_file", "log_file", "match", "address", "dir")}


def _caps(tier: dict[str, Any]) -> dict[str, Any]:
    return {name: (item or {}).get("cap_bytes") for name, item in (tier.get("instances") or {}).items()}


# --------------------------------------------------------------------------------------------
# The previous configuration: what an instance served before, to go back to without planning

# What makes a configuration: the server's command line, its environment (as a digest: the
# values may name paths and devices, never secrets, which go through the --config file), the
# model's revision and the SGLang release.
CONFIG_KEYS = ("argv", "env_digest", "model_revision", "release")


def env_digest(env: Mapping[str, Any] | None) -> str | None:
    """sha256 of an instance's environment (sorted ``KEY=value`` lines); None without one."""
    if not isinstance(env, Mapping):
        return None
    text = "\n".join(f"{k}={env[k]}" for k in sorted(env))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def served_config(inst: Mapping[str, Any], manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration an instance record runs: argv, env digest (the record's, else the
    digest of its ``env``), model revision (the record's, else the manifest's) and release,
    plus when it became ready (None: it never served)."""
    digest = inst.get("env_digest") or env_digest(inst.get("env"))
    revision = inst.get("model_revision") or manifest.get("model_revision")
    return {"argv": list(inst.get("argv") or []), "env_digest": digest, "model_revision": revision,
            "release": inst.get("release") or manifest.get("release"), "ready_at": inst.get("ready_at")}


def same_config(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """The same configuration on every key both records know (an older manifest has no env
    digest or model revision: those keys are not compared)."""
    return all(one.get(k) == other.get(k) for k in CONFIG_KEYS
               if one.get(k) is not None and other.get(k) is not None)


def with_previous(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """``new`` (a manifest about to be written) with each instance's ``previous``: the last
    configuration that served. An instance whose configuration changed gets the old record's
    (when the old one became ready); one that kept its configuration keeps its old
    ``previous``; a new instance has none. Pure: neither argument is modified."""
    earlier = {i.get("name"): i for i in (old or {}).get("instances", []) if isinstance(i, Mapping)}
    out = dict(new)
    instances = []
    for inst in new.get("instances", []):
        record = dict(inst)
        record.setdefault("env_digest", env_digest(inst.get("env")))
        before = earlier.get(inst.get("name"))
        previous = None
        if before is not None:
            was = served_config(before, old or {})
            if not same_config(was, served_config(record, new)):
                previous = was if was["ready_at"] else before.get("previous")
            else:
                previous = before.get("previous")
        record["previous"] = previous
        instances.append(record)
    out["instances"] = instances
    return out


def rollback_targets(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Which instances of ``new`` can go back, and to what: ``[{name, can_roll_back, to, reason}]``.

    ``old``: the manifest before the rollout (None: unknown). An instance whose configuration
    differs from the one it had in ``old`` goes back to that one (if it served); else to its
    ``previous`` record; else it cannot (new, or never had another configuration). An
    instance of ``old`` that ``new`` no longer has is listed with its old configuration."""
    earlier = {i.get("name"): i for i in (old or {}).get("instances", []) if isinstance(i, Mapping)}
    names = set()
    out = []
    for inst in new.get("instances", []):
        name = inst.get("name")
        names.add(name)
        now = served_config(inst, new)
        before = earlier.get(name)
        was = served_config(before, old or {}) if before is not None else None
        if was is not None and not same_config(was, now) and was["ready_at"]:
            out.append({"name": name, "can_roll_back": True, "to": was,
                        "reason": "its configuration changed since the old manifest: back to that one"})
        elif inst.get("previous"):
            out.append({"name": name, "can_roll_back": True, "to": dict(inst["previous"]),
                        "reason": "back to its previous record (the last configuration that served)"})
        elif was is not None and not same_config(was, now):
            out.append({"name": name, "can_roll_back": False, "to": None,
                        "reason": "its old configuration never became ready: nothing served to go back to"})
        else:
            out.append({"name": name, "can_roll_back": False, "to": None,
                        "reason": "new instance" if was is None else "no earlier configuration recorded"})
    for name, before in earlier.items():
        if name not in names and before.get("ready_at"):
            out.append({"name": name, "can_roll_back": True, "to": served_config(before, old or {}),
                        "reason": "removed by the rollout: start it again with its old configuration"})
    return out


def restore(new: Mapping[str, Any], old: Mapping[str, Any] | None, names: Iterable[str]) -> dict[str, Any]:
    """``new`` (the manifest of this run) with the records of ``names`` put back to ``old``'s:
    the instances a rollback returned to their previous configuration. Each keeps this run's
    pid and ready time (it restarted, or kept running on the old configuration) and gains
    ``rolled_back``: the configuration it left. When every instance went back, the manifest's
    profile and release are ``old``'s too. Pure."""
    earlier = {i.get("name"): i for i in (old or {}).get("instances", []) if isinstance(i, Mapping)}
    wanted = set(names)
    out = dict(new)
    instances = []
    back = 0
    for inst in new.get("instances", []):
        before = earlier.get(inst.get("name"))
        if inst.get("name") not in wanted or before is None:
            instances.append(dict(inst))
            continue
        record = dict(before)
        record.update({key: inst[key] for key in ("pid", "ready_at", "ready_after_s") if inst.get(key) is not None})
        left = served_config(inst, new)
        left.pop("ready_at", None)
        record["rolled_back"] = left
        instances.append(record)
        back += 1
    out["instances"] = instances
    if old and instances and back == len(instances):
        out.update({key: old.get(key) for key in ("profile", "release")})
    return out
