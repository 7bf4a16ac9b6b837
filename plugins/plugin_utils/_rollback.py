# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""A rollback on demand (playbooks/rollback.yml), from a host's manifest alone: no planning
input, no download (controller side; the action ``server_rollout``'s steps ``rollback_plan``
and ``rolled_back``, from the server role's ``tasks_from: rollback.yml``).

The manifest keeps, per instance, ``previous``: the last configuration that served (argv,
env digest, model revision, release), and the host keeps that configuration's files in each
instance's ``previous/`` folder (module server_files). ``plan`` turns the manifest into what the
role's batch steps need (instances with their readiness waits, the backend, which instances
can go back); ``rolled_back`` is the manifest afterwards.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout
from ansible_collections.llmops.sglang.plugins.module_utils._server import manifest as _manifest
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.server import (
    idle_spec,
    process_spec,
    wait_spec,
)


class RollbackError(ValueError):
    """A manifest that cannot be rolled back; the message names the host and the fix."""


def plan(manifest: Mapping[str, Any] | None, running: Iterable[str], *, ready_timeout: Any,
         time_scale: Any = 1.0, only: Iterable[str] | None = None) -> dict[str, Any]:
    """``{backend, engine, python, base_dir, manifest_path, previous, running, instances,
    targets, not_targets, summary}``: ``targets`` are the instances (of ``only``, default every one) whose
    manifest record has a previous configuration; ``not_targets`` says why each other one is
    left alone."""
    if not manifest or not manifest.get("instances"):
        raise RollbackError("no deployment manifest on this host: nothing to roll back (deploy first)")
    backend = str(manifest.get("service_manager") or "process")
    settings = {"engine": manifest.get("engine"), "ready_timeout": ready_timeout, "sim_time_scale": time_scale}
    wanted = None if only is None else set(only)
    instances, targets, others = [], [], {}
    for record in manifest["instances"]:
        inst = dict(record)
        inst["gpu_ids"] = list(record.get("gpus") or [])
        inst["wait"] = wait_spec(inst, manifest, settings, backend)
        inst["process"] = process_spec(inst)
        inst["idle"] = idle_spec(inst)
        instances.append(inst)
        name = inst["name"]
        if wanted is not None and name not in wanted:
            others[name] = "not asked for"
        elif not inst.get("rank0", True) or int(inst.get("nnodes") or 1) > 1:
            others[name] = "part of a multi-node TP group: roll its hosts back with a deploy of the old variables"
        elif not inst.get("previous") and inst.get("rolled_back"):
            others[name] = ("already rolled back: it serves the configuration it had before the last change (the one it "
                            "left is kept in its rolled-back/ folder); rollback.yml goes one step back only: to go "
                            "further, or forward again, deploy.yml with that configuration's variables")
        elif not inst.get("previous"):
            others[name] = "no previous configuration recorded (it never had another one that served)"
        else:
            targets.append(name)
    return {"backend": backend, "engine": manifest.get("engine"), "python": manifest.get("python"),
            "base_dir": manifest.get("base_dir"), "manifest_path": _layout.manifest_path(str(manifest.get("base_dir"))),
            "previous": dict(manifest), "running": [n for n in running if n in {i["name"] for i in instances}],
            "instances": instances, "targets": targets, "not_targets": others,
            "summary": ([f"back to the previous configuration: {', '.join(targets) or 'none'}"]
                        + [f"{name} stays: {why}" for name, why in others.items()])}


def rolled_back(manifest: Mapping[str, Any], names: Iterable[str], services: Mapping[str, Any],
                ready: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest after instances ``names`` went back: each gets its previous configuration
    (argv, env digest, model revision, release), this run's pid and ready time, ``previous``
    cleared (the configuration it left is in ``rolled_back``, and its files in ``rolled-back/``)."""
    back = set(names)
    out = dict(manifest)
    instances = []
    for record in manifest.get("instances") or []:
        rec = dict(record)
        if rec.get("name") in back and rec.get("previous"):
            prev = dict(rec["previous"])
            left = _manifest.served_config(rec, manifest)
            left.pop("ready_at", None)
            rec.update({"argv": prev.get("argv") or rec.get("argv"), "env_digest": prev.get("env_digest"),
                        "model_revision": prev.get("model_revision"), "release": prev.get("release"),
                        "previous": None, "rolled_back": left})
            rec.pop("candidate", None)  # back on what served: nothing left to judge
            svc, rdy = services.get(rec["name"]) or {}, ready.get(rec["name"]) or {}
            rec["pid"] = svc.get("pid", rec.get("pid"))
            if rdy.get("ready_at"):
                rec["ready_at"], rec["ready_after_s"] = rdy.get("ready_at"), rdy.get("waited_s")
        instances.append(rec)
    out["instances"] = instances
    if not any(i.get("candidate") for i in instances):
        out.pop("rollout", None)  # a candidate manifest's marker (_deployment.candidate_manifest)
    return out
