# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What a deploy does to a host's instances, and what it leaves in the manifest (controller side;
the action ``server_rollout``): the diff against the previous deployment, the started services'
records, the manifest built from the plan and those records, and whether it must be written.
The batches themselves are ``_rollout.rollout_batches``; a rollback on demand, ``_rollback``."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout
from ansible_collections.llmops.sglang.plugins.module_utils._server import manifest as _manifest


def diff(plan: Mapping[str, Any], previous: Mapping[str, Any] | None, changed: Iterable[str] | None,
         engine_changed: bool = False) -> dict[str, Any]:
    """What a deploy does to each instance: {restart: [names whose script, environment or
    engine changed: stopped, then started again], remove: [records of the previous manifest
    that the plan no longer has], keep: [names], new: [names]}. Instances that are not running
    are started by the start phase whatever this says. A live instance the previous manifest did
    not list (``in_manifest: false``: left by an interrupted deploy) is replaced when planned:
    what it runs is not known.

    Given ``previous`` (the manifest as the host read it when planning, with the live instance
    folders it did not list added, or rebuilt from the folders when it is missing or unreadable;
    ``{}`` when there is neither), an instance it does not have is ``new``, never restarted: it
    has no folder of this deployment, so nothing of it can run (a server is found by its
    folder), and a stop and a drain for it would be module runs for nothing (on a first deploy,
    the engine's unpack "changes" every instance; issue 27). ``previous`` None (not known: a
    rollback's batches) leaves every planned instance as it was."""
    planned = [i["name"] for i in plan.get("instances", [])]
    before = set(planned) if previous is None else {i.get("name") for i in previous.get("instances", []) or []}
    # a candidate (its rollout stopped while the guard watched it, ``candidate``) is replaced
    # too: it serves a configuration nothing judged
    unlisted = {i.get("name") for i in (previous or {}).get("instances", []) or []
                if i.get("in_manifest") is False or i.get("candidate")}
    touched = (set(planned) if engine_changed else (set(changed or []) | unlisted) & set(planned)) & before
    restart = [name for name in planned if name in touched]
    remove = [i for i in (previous or {}).get("instances", []) or [] if i.get("name") not in planned]
    return {"restart": restart, "remove": remove, "keep": [n for n in planned if n in before and n not in touched],
            "new": [n for n in planned if n not in before]}


def _main_pid(result: Mapping[str, Any]) -> int | None:
    main_pid = (result.get("status") or {}).get("MainPID")
    return int(main_pid) if str(main_pid or "").isdigit() and int(main_pid) > 0 else None


def service_records(services: Mapping[str, Any] | None, restarted: Iterable[str] | None = None,
                    units: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A batch's start result -> name -> {pid, started}. ``detached_service`` with ``services``
    (one run for the batch) returns the pid whether it started the server or found it running,
    per service (named ``sglang-<instance>``); for systemd (the start task's loop, one result per
    item) the pid is the MainPID of ``units`` (a systemd_service query after the start: the
    start's own result carries the state from before it). ``started``: (re)started by this run,
    or one of ``restarted`` (stopped by the batch, then started)."""
    main_pids = {(r.get("item") or {}).get("name"): _main_pid(r)
                 for r in (units or {}).get("results", []) or [] if not r.get("skipped")}
    by_service = [{**res, "item": {"name": str(res.get("name", "")).removeprefix(_layout.SERVICE_PREFIX)}}
                  for res in (services or {}).get("services", []) or []]
    records: dict[str, Any] = {}
    for res in by_service or (services or {}).get("results", []) or []:
        name = (res.get("item") or {}).get("name")
        if not name or res.get("skipped"):
            continue
        pid = res.get("pid")
        if pid is None:
            pid = main_pids.get(name) or _main_pid(res)
        records[name] = {"pid": pid, "started": bool(res.get("changed")) or name in set(restarted or [])}
    return records


def manifest(plan: Mapping[str, Any], *, host: str, services: Mapping[str, Any] | None,
             ready: Mapping[str, Any] | None, restored: Iterable[str] | None = None) -> dict[str, Any]:
    """deployment.json from the plan (its engine, backend, Python and the manifest read when
    planning, ``previous``) and the services' records and readiness (``_manifest.build``); the
    previous configurations kept; with ``restored`` (the guard rolled those back), their records
    on their previous configuration."""
    previous = plan.get("previous") or None
    built = _manifest.build(host=host, plan=dict(plan), engine=str(plan.get("engine") or "sglang"),
                            service_manager=str(plan.get("backend") or "process"), services=dict(services or {}),
                            ready=dict(ready or {}), previous=previous, python=plan.get("python"))
    kept = _manifest.with_previous(built, previous)
    names = list(restored or [])
    return _manifest.restore(kept, previous, names) if names else kept


def candidate_manifest(plan: Mapping[str, Any], *, host: str, services: Mapping[str, Any] | None,
                       ready: Mapping[str, Any] | None, candidates: Iterable[str]) -> dict[str, Any]:
    """deployment.json while the guard watches a batch (issue 28 item 7: an interrupt there left
    the canary serving the new configuration under the old manifest, and rollback.yml found "no
    previous configuration recorded"): what runs at this moment. The instances this run started
    (``services``) with their new records, each of ``candidates`` marked ``candidate: true`` (not
    judged yet); the instances it has not reached yet as the previous manifest has them; each
    record with its ``previous``. The manifest written at the end of the rollout replaces it."""
    previous = dict(plan.get("previous") or {})
    built = manifest(plan, host=host, services=services, ready=ready)
    earlier = {i.get("name"): i for i in previous.get("instances") or [] if isinstance(i, Mapping)}
    done, watched = set(services or {}), set(candidates)
    instances = []
    for record in built["instances"]:
        name = record["name"]
        if name in done:
            instances.append({**record, "candidate": True} if name in watched else record)
        elif name in earlier:
            instances.append(dict(earlier[name]))
    return {**built, "instances": instances, "rollout": {"candidates": sorted(watched), "state": "watching"}}


def must_write(plan: Mapping[str, Any], built: Mapping[str, Any]) -> bool:
    """False where the manifest read when planning was intact and is exactly what this run
    deployed (a no-change run): there is nothing to write."""
    return not (plan.get("previous_intact") and dict(built) == dict(plan.get("previous") or {}))
