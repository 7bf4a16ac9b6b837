# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Filters used by the server role to turn a plan into services, a wait list and a manifest.
Thin shells over module_utils (_manifest, _deploy); documented in the .yml files beside this one."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.module_utils import _layout, _manifest
from ansible_collections.llmops.sglang.plugins.module_utils._deploy import ready_timeout
from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import rollout_batches


def _instance_paths(base_dir: str, name: str) -> dict[str, str]:
    """The files of instance ``name`` under ``base_dir`` (``_layout``, the one owner); with
    name ``%i`` the paths of a systemd template unit."""
    return _layout.instance_paths(str(base_dir), str(name))


def _wait_spec(instance: dict[str, Any], plan: dict[str, Any], engine: str = "sglang",
               explicit: float = 0, time_scale: float = 1.0, backend: str = "process") -> dict[str, Any]:
    """A plan instance -> one entry of llmops.sglang.wait_ready's ``instances`` (with its pid
    file on the process backend, its unit on systemd: how a death while loading is seen)."""
    hicache = plan.get("hicache") or {}
    try:
        spec = {
            "name": instance["name"],
            "url": instance["connect_url"],
            "timeout": ready_timeout(engine=engine, pin_seconds=float(hicache.get("pin_seconds_estimate") or 0),
                                     explicit_s=float(explicit or 0), time_scale=float(time_scale)),
            "log_file": instance["paths"]["log_file"],
        }
        if backend == "systemd":
            spec["unit"] = instance["unit"]
        else:
            spec["pid_file"] = instance["paths"]["pid_file"]
        return spec
    except (KeyError, TypeError) as err:
        raise AnsibleFilterError(f"wait_spec: not an instance of the plan ({err})") from err


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
    for res in (services or {}).get("results", []) or []:
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
                         previous: dict[str, Any] | None = None, python: str | None = None) -> dict[str, Any]:
    try:
        return _manifest.build(host=host, plan=plan, engine=engine, service_manager=service_manager,
                               services=services or {}, ready=ready or {}, previous=previous or None,
                               python=python)
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


def _preflight_spec(plan: dict[str, Any], *, engine: str, python: str, install: bool,
                    venv_python: str = "python3") -> dict[str, Any]:
    """What llmops.sglang.preflight checks for a plan: every HTTP and NCCL port of its
    instances, the model's config.json (a local model path), and the interpreter that will
    run the servers (or, when the role creates the venv, the one that creates it)."""
    ports = []
    for inst in plan.get("instances", []):
        ports.append({"port": inst["port"], "instance": inst["name"], "what": "HTTP"})
        if inst.get("nccl_port"):
            ports.append({"port": inst["nccl_port"], "instance": inst["name"], "what": "NCCL"})
    files = []
    model_path = str((plan.get("model") or {}).get("path") or "")
    if model_path.startswith("/"):
        files.append({"path": model_path.rstrip("/") + "/config.json", "what": "the model's config",
                      "fix": f"sglang_model_path={model_path} must be the model's folder on this host"})
    if install:
        executables = [{"path": venv_python, "what": "the Python that creates the venv (sglang_venv_python)"}]
    else:
        executables = [{"path": python, "what": f"the {engine} server's Python (sglang_python)",
                        "fix": "point sglang_python at an existing installation, or set sglang_install: true"}]
    return {"ports": ports, "files": files, "executables": executables}


def _host_addresses(hosts: list[str], hostvars: Any) -> list[str]:
    """The address other hosts reach each inventory host at: its ``ansible_host``, else its
    inventory name (a TP group's nodes meet at rank 0's address)."""
    out = []
    for name in hosts or []:
        host_vars = hostvars[name] if name in hostvars else {}
        address = host_vars.get("ansible_host") if hasattr(host_vars, "get") else None
        out.append(str(address or name))
    return out


def _rollout_batches(plan: dict[str, Any], restart: list[str], running: list[str], *, policy: str = "parallel",
                     routed: bool = False, at_once: int = 1) -> dict[str, Any]:
    """The batches a host's instances are started and replaced in (plugin_utils/_rollout.py)."""
    batches, warnings = rollout_batches(plan, restart or [], running or [], policy=str(policy),
                                        routed=bool(routed), at_once=int(at_once))
    return {"batches": batches, "warnings": warnings}


def _endpoint(instance: dict[str, Any]) -> dict[str, Any]:
    """An instance -> {name, url} (its connect_url), for wait_idle."""
    return {"name": instance["name"], "url": instance["connect_url"]}


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
    if status.get("in_manifest") is False:
        parts.append("NOT IN THE MANIFEST (left by an interrupted deploy: stop.yml stops it, deploy.yml replaces it)")
    return " ".join(parts)


def _reclaim_pinned(facts: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """Host facts with the HiCache memory pinned by this deployment's running instances added
    back (``facts.deployment`` says which run: host_facts with deployment_dir)."""
    deployment = (facts or {}).get("deployment") or {}
    running = [i["name"] for i in deployment.get("instances", []) if i.get("running")]
    return _manifest.reclaim_pinned(facts, previous or {}, running)


class FilterModule:
    """Deployment filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "instance_paths": _instance_paths,
            "wait_spec": _wait_spec,
            "deployment_manifest": _deployment_manifest,
            "deployment_diff": _deployment_diff,
            "service_records": _service_records,
            "preflight_spec": _preflight_spec,
            "host_addresses": _host_addresses,
            "rollout_batches": _rollout_batches,
            "endpoint": _endpoint,
            "status_line": _status_line,
            "reclaim_pinned": _reclaim_pinned,
        }
