# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Filters used by the server role to turn a plan into batches, services and a manifest.
Thin shells over module_utils (_manifest) and plugin_utils (_rollout); documented in the .yml files beside this one."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils import _layout, _manifest
from ansible_collections.llmops.sglang.plugins.plugin_utils import _rollback
from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import rollout_batches


def _main_pid(result: dict[str, Any]) -> int | None:
    main_pid = (result.get("status") or {}).get("MainPID")
    return int(main_pid) if str(main_pid or "").isdigit() and int(main_pid) > 0 else None


def _service_records(services: dict[str, Any], restarted: list[str] | None = None,
                     units: dict[str, Any] | None = None) -> dict[str, Any]:
    """The start tasks' loop results -> name -> {pid, started}. detached_service returns the
    pid whether it started the server or found it running; for systemd the pid is the MainPID
    of ``units`` (a systemd_service query after the start: the start's own result carries the
    state from before it)."""
    main_pids = {(r.get("item") or {}).get("name"): _main_pid(r)
                 for r in (units or {}).get("results", []) or [] if not r.get("skipped")}
    records: dict[str, Any] = {}
    # detached_service with services (one run for the batch): its per-service results, named by
    # the plan's service name (sglang-<instance>); the systemd backend's loop: one per item
    by_service = [{**res, "item": {"name": str(res.get("name", "")).removeprefix(_layout.SERVICE_PREFIX)}}
                  for res in (services or {}).get("services", []) or []]
    for res in by_service or (services or {}).get("results", []) or []:
        name = (res.get("item") or {}).get("name")
        if not name or res.get("skipped"):
            continue
        pid = res.get("pid")
        if pid is None:
            pid = main_pids.get(name) or _main_pid(res)
        records[name] = {"pid": pid, "started": bool(res.get("changed")) or name in (restarted or [])}
    return records


def _deployment_manifest(plan: dict[str, Any], *, host: str, engine: str, service_manager: str,
                         services: dict[str, Any], ready: dict[str, Any],
                         previous: dict[str, Any] | None = None, python: str | None = None,
                         restored: list[str] | None = None) -> dict[str, Any]:
    try:
        built = _manifest.build(host=host, plan=plan, engine=engine, service_manager=service_manager,
                                services=services or {}, ready=ready or {}, previous=previous or None,
                                python=python)
        kept = _manifest.with_previous(built, previous or None)
        return _manifest.restore(kept, previous or None, restored) if restored else kept
    except (KeyError, TypeError, ValueError) as err:
        raise AnsibleFilterError(f"deployment_manifest: malformed plan or service data: {err}") from err


def _deployment_diff(plan: dict[str, Any], previous: dict[str, Any] | None, changed: list[str] | None,
                     engine_changed: bool = False) -> dict[str, Any]:
    """What a deploy does to each instance: {restart: [names whose script, environment or
    engine changed: stopped, then started again], remove: [records of the previous manifest
    that the plan no longer has], keep: [names]}. Instances that are not running are started
    by the start phase whatever this says. A live instance the previous manifest did not list
    (``in_manifest: false``: left by an interrupted deploy) is replaced when planned: what it
    runs is not known."""
    planned = [i["name"] for i in plan.get("instances", [])]
    unlisted = {i.get("name") for i in (previous or {}).get("instances", []) or [] if i.get("in_manifest") is False}
    touched = set(planned) if engine_changed else (set(changed or []) | unlisted) & set(planned)
    restart = [name for name in planned if name in touched]
    remove = [i for i in (previous or {}).get("instances", []) or [] if i.get("name") not in planned]
    return {"restart": restart, "remove": remove, "keep": [n for n in planned if n not in touched]}


def _rollout_batches(plan: dict[str, Any], restart: list[str], running: list[str], *, policy: str = "parallel",
                     routed: bool = False, at_once: int = 1, canary: int = 0, canary_s: float = 0.0,
                     guard_s: float = 0.0, canary_alone: bool = True) -> dict[str, Any]:
    """The batches a host's instances are started and replaced in (plugin_utils/_rollout.py)."""
    batches, warnings = rollout_batches(plan, restart or [], running or [], policy=str(policy),
                                        routed=bool(routed), at_once=int(at_once), canary=int(canary or 0),
                                        canary_s=float(canary_s or 0), guard_s=float(guard_s or 0),
                                        canary_alone=bool(canary_alone))
    return {"batches": batches, "warnings": warnings}


def _endpoint(instance: dict[str, Any]) -> dict[str, Any]:
    """An instance -> {name, url} (its connect_url), for wait_idle."""
    return {"name": instance["name"], "url": instance["connect_url"]}


def _rollback_plan(manifest: dict[str, Any] | None, running: list[str] | None = None, *, ready_timeout: Any = 0,
                   time_scale: Any = 1.0, only: list[str] | None = None) -> dict[str, Any]:
    """A host's manifest -> what its rollback restarts (plugin_utils/_rollback.py)."""
    try:
        return _rollback.plan(manifest, running or [], ready_timeout=ready_timeout, time_scale=time_scale,
                              only=only or None)
    except _rollback.RollbackError as err:
        raise AnsibleFilterError(f"rollback_plan: {err}") from err


def _deployment_rolled_back(manifest: dict[str, Any], names: list[str], services: dict[str, Any] | None = None,
                            ready: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manifest after a rollback on demand (plugin_utils/_rollback.py)."""
    return _rollback.rolled_back(manifest, names or [], services or {}, ready or {})


class FilterModule:
    """Deployment filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "deployment_manifest": _deployment_manifest,
            "deployment_diff": _deployment_diff,
            "service_records": _service_records,
            "rollout_batches": _rollout_batches,
            "rollback_plan": _rollback_plan,
            "deployment_rolled_back": _deployment_rolled_back,
            "endpoint": _endpoint,
        }
