# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Filters used by the server role to turn a plan into services and a manifest."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils._deploy import (
    build_manifest,
    ready_timeout,
    reclaim_pinned,
)


def _ready_timeout(instance: dict[str, Any], plan: dict[str, Any], engine: str = "sglang",
                   explicit: float = 0, time_scale: float = 1.0) -> int:
    hicache = plan.get("hicache") or {}
    return ready_timeout(engine=engine, pin_seconds=float(hicache.get("pin_seconds_estimate") or 0),
                         explicit_s=float(explicit or 0), time_scale=float(time_scale))


def _wait_spec(instance: dict[str, Any], plan: dict[str, Any], *, base_dir: str, engine: str = "sglang",
               explicit: float = 0, time_scale: float = 1.0) -> dict[str, Any]:
    name = instance["name"]
    return {
        "name": name,
        "url": f"http://{_connect_address(plan.get('host_address', '127.0.0.1'))}:{instance['port']}",
        "timeout": _ready_timeout(instance, plan, engine, explicit, time_scale),
        "log_file": f"{base_dir}/{name}/server.log",
        "pid_file": f"{base_dir}/{name}/server.pid",
    }


def _connect_address(bind: str) -> str:
    """Where to reach a server bound to `bind` from its own host."""
    return "127.0.0.1" if bind in ("0.0.0.0", "", None) else ("[::1]" if bind == "::" else bind)


def _deployment_manifest(plan: dict[str, Any], *, host: str, engine: str, service_manager: str,
                         base_dir: str, services: dict[str, Any], ready: dict[str, Any],
                         previous: dict[str, Any] | None = None, python: str | None = None) -> dict[str, Any]:
    try:
        return build_manifest(host=host, plan=plan, engine=engine, service_manager=service_manager,
                              base_dir=base_dir, services=services or {}, ready=ready or {},
                              previous=previous or None, python=python)
    except (KeyError, TypeError, ValueError) as err:
        raise AnsibleFilterError(f"deployment_manifest: malformed plan or service data: {err}") from err


def _service_records(services: dict[str, Any], backend: str, base_dir: str,
                     restarted: list[str] | None = None) -> dict[str, Any]:
    """name -> {pid, unit, log_file, pid_file, started} from the start tasks' results
    (detached_service returns the pid whether it started the server or found it running)."""
    records: dict[str, Any] = {}
    for res in (services or {}).get("results", []) or []:
        item = res.get("item") or {}
        name = item.get("name")
        if not name:
            continue
        records[name] = {
            "pid": res.get("pid"),
            "unit": f"sglang@{name}.service" if backend == "systemd" else None,
            "log_file": f"{base_dir}/{name}/server.log",
            "pid_file": f"{base_dir}/{name}/server.pid" if backend == "process" else None,
            "started": bool(res.get("changed")) or name in (restarted or []),
        }
    return records


def _status_line(status: dict[str, Any]) -> str:
    """One line per instance for people: up/down, version, limits, accept length."""
    state = "up" if status.get("up") else "DOWN"
    parts = [f"{status.get('name')}: {state} {status.get('url')}", f"process={status.get('process')}"]
    if status.get("version"):
        parts.append(f"sglang={status['version']}")
    if status.get("max_running_requests") is not None:
        parts.append(f"max_running_requests={status['max_running_requests']}")
    if status.get("avg_spec_accept_length") is not None:
        parts.append(f"accept_length={status['avg_spec_accept_length']}")
    if not status.get("up"):
        parts.append(f"health={status.get('health')}")
    return " ".join(parts)


def _reclaim_pinned(facts: dict[str, Any], previous: dict[str, Any] | None,
                    status: list[dict[str, Any]] | None) -> dict[str, Any]:
    running = [s["name"] for s in (status or []) if s.get("process") == "running"]
    return reclaim_pinned(facts, previous or {}, running)


class FilterModule:
    """Deployment filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "ready_timeout": _ready_timeout,
            "wait_spec": _wait_spec,
            "deployment_manifest": _deployment_manifest,
            "service_records": _service_records,
            "status_line": _status_line,
            "reclaim_pinned": _reclaim_pinned,
        }
