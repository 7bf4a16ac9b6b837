# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The generation job's plan (action llmops.sglang.generate_plan, run once by the generate role):
where the job runs and with which Python, its folder, where its input goes, and its targets with
their concurrency. Pure: the action gathers the hosts' deployments, tuned results, sweeps and
routers from hostvars; the input is checked here, on the controller, before anything moves.

Targets (``sglang_generate_target``):

- ``router``: one target, the router of the first host of ``sglang_routers`` (its
  ``sglang_router_client``); the job runs on that host, its concurrency is the sum of the
  instances' (the router spreads it);
- ``instances``: every rank-0 instance of every server host, each its own target, reached at its
  ``connect_url`` on the job's host and its ``advertise_url`` from another; the job runs on
  ``sglang_generate_host`` (the first server host when unset);
- ``auto``: ``router`` when the play has a router host, else ``instances``.

An instance's concurrency (``concurrency_for``): ``sglang_generate_concurrency`` when > 0, else
the host's tuned result (``sglang_tuned.at_concurrency``), else its last sweep's knee (or peak)
concurrency (``sglang_sweeps``), else its ``max_running_requests`` from the manifest, else
``sglang_generate_fallback_concurrency``; the source is in the plan.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._generate import inputs as _inputs
from ansible_collections.llmops.sglang.plugins.plugin_utils._declared import role_default
from ansible_collections.llmops.sglang.plugins.plugin_utils._routing import node_rank, worker_url

VARIABLES = ("sglang_generate_job", "sglang_generate_input", "sglang_generate_input_on_host", "sglang_generate_target",
             "sglang_generate_host", "sglang_generate_dir", "sglang_generate_concurrency", "sglang_generate_python",
             "sglang_generate_defaults", "sglang_base_dir", "sglang_generate_action",
             "sglang_generate_fallback_concurrency")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class GeneratePlanError(ValueError):
    """A plan that cannot be made; the message names the value, the rule and the fix."""


@dataclass(frozen=True)
class Fleet:
    """What the plan reads of the play's hosts (host -> value; absent where a host has none)."""

    deployments: dict[str, Any] = field(default_factory=dict)
    tuned: dict[str, Any] = field(default_factory=dict)
    sweeps: dict[str, Any] = field(default_factory=dict)
    routers: dict[str, Any] = field(default_factory=dict)  # router host -> sglang_router_client
    # host -> its own sglang_generate_dir / sglang_base_dir where its inventory sets them (the job's
    # folder is on the job's host: its values, not those of the host the plan ran for)
    dirs: dict[str, dict[str, Any]] = field(default_factory=dict)


def job_name(variables: dict[str, Any]) -> str:
    name = str(variables.get("sglang_generate_job") or "")
    if not name:
        stem = os.path.basename(str(variables.get("sglang_generate_input") or ""))
        name = re.sub(r"\.jsonl?$", "", stem)
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "job"
    if not name or name == "job" and not variables.get("sglang_generate_input"):
        raise GeneratePlanError("neither sglang_generate_job nor sglang_generate_input is set: name the job "
                                "(-e sglang_generate_job=<name>) or give its input (-e sglang_generate_input=prompts.jsonl)")
    if not _NAME.match(name):
        raise GeneratePlanError(f"sglang_generate_job {name!r}: a job name is letters, digits, '.', '_' and '-' "
                                "(it names the job's folder); give another")
    return name


def fallback_concurrency(variables: dict[str, Any]) -> int:
    """sglang_generate_fallback_concurrency, else its declared default."""
    value = variables.get("sglang_generate_fallback_concurrency")
    return int(value if value is not None else role_default("generate", "sglang_generate_fallback_concurrency"))


def concurrency_for(host: str, instance: dict[str, Any], fleet: Fleet, given: int,
                    fallback: int) -> tuple[int, str]:
    """An instance's concurrency and where it came from (the module's docstring)."""
    if given > 0:
        return given, "sglang_generate_concurrency"
    tuned = fleet.tuned.get(host)
    if isinstance(tuned, dict) and int(tuned.get("at_concurrency") or 0) > 0:
        return int(tuned["at_concurrency"]), "sglang_tuned.at_concurrency"
    sweep = (fleet.sweeps.get(host) or {}).get(str(instance.get("name"))) if isinstance(fleet.sweeps.get(host), dict) else None
    if isinstance(sweep, dict):
        for key in ("knee", "peak"):
            point = sweep.get(key)
            if isinstance(point, dict) and int(point.get("concurrency") or 0) > 0:
                return int(point["concurrency"]), f"sglang_sweeps {key}"
    mrr = instance.get("max_running_requests")
    if isinstance(mrr, int) and mrr > 0:
        return mrr, "max_running_requests"
    return fallback, "fallback"


def _instances(fleet: Fleet) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for host, manifest in fleet.deployments.items():
        for inst in (manifest or {}).get("instances") or []:
            if inst.get("rank0") is False or node_rank(inst) > 0 or inst.get("in_manifest") is False:
                continue
            out.append((host, inst))
    return out


def _input(variables: dict[str, Any], folder: str) -> dict[str, Any]:
    path = str(variables.get("sglang_generate_input") or "")
    if not path:
        raise GeneratePlanError("sglang_generate_input is not set: give the JSONL of requests to generate "
                                "(-e sglang_generate_input=prompts.jsonl; docs/generate.md \"Input\")")
    if variables.get("sglang_generate_input_on_host"):
        return {"src": None, "path": path, "checked": False}
    if not os.path.isfile(path):
        raise GeneratePlanError(f"sglang_generate_input {path} is not a file on the controller: give its path, or set "
                                "sglang_generate_input_on_host=true when it is on the job's host")
    scanned = _inputs.scan(path, variables.get("sglang_generate_defaults") or {})
    if not scanned.ok:
        raise GeneratePlanError(scanned.message())
    if not scanned.requests:
        raise GeneratePlanError(f"sglang_generate_input {path} has no request: nothing to generate")
    return {"src": os.path.abspath(path), "path": f"{folder}/input-{scanned.digest[:16]}.jsonl", "checked": True,
            "digest": scanned.digest, "requests": scanned.requests, "endpoints": scanned.endpoints}


def plan(variables: dict[str, Any], fleet: Fleet, play_hosts: list[str]) -> dict[str, Any]:
    """The plan (docs in plugins/modules/generate_plan.py)."""
    name = job_name(variables)
    target = str(variables.get("sglang_generate_target") or "auto")
    routers = [h for h in fleet.routers if fleet.routers.get(h)]
    if target == "auto":
        target = "router" if routers else "instances"
    given = int(variables.get("sglang_generate_concurrency") or 0)
    if given < 0:
        raise GeneratePlanError(f"sglang_generate_concurrency {given}: give a count > 0, or 0 to take it from the fleet")
    fallback = fallback_concurrency(variables)
    if fallback < 1:
        raise GeneratePlanError(f"sglang_generate_fallback_concurrency {fallback}: give a count >= 1")
    instances = _instances(fleet)
    if not instances:
        raise GeneratePlanError("no SGLang instance is deployed on the play's hosts "
                                f"({', '.join(fleet.deployments) or 'none read'}): run deploy.yml first")
    warnings: list[str] = []
    if target == "router":
        if not routers:
            raise GeneratePlanError("sglang_generate_target=router, and the play has no router host (sglang_routers): add "
                                    "one (deploy.yml starts the router there), or set sglang_generate_target=instances")
        host = str(variables.get("sglang_generate_host") or routers[0])
        if host not in fleet.routers:
            raise GeneratePlanError(f"sglang_generate_host {host} is not a router host of the play ({', '.join(routers)}): "
                                    "through the router the job runs on a router host")
        client = fleet.routers[host]
        per = [concurrency_for(h, i, fleet, given, fallback) for h, i in instances]
        total = sum(c for c, _ in per)
        sources = sorted({s for _, s in per})
        targets = [{"name": "router", "url": str(client["url"]), "concurrency": total,
                    "source": f"sum of {len(per)} instances' ({', '.join(sources)})"}]
        # behind the router: each instance's /metrics gives its share (as the router's host reaches it)
        behind = [{"name": f"{h}/{i['name']}", "url": worker_url(i, h, host)} for h, i in instances]
        behind = [b for b in behind if b["url"]]
        python = str(variables.get("sglang_generate_python") or client.get("python") or "python3")
    else:
        host = str(variables.get("sglang_generate_host") or instances[0][0])
        if host not in play_hosts:
            raise GeneratePlanError(f"sglang_generate_host {host} is not a host of this play ({', '.join(play_hosts)}): "
                                    "name one of them")
        targets = []
        behind = []
        for h, inst in instances:
            url = worker_url(inst, h, host)
            if not url:
                raise GeneratePlanError(f"instance {inst.get('name')} of {h} listens on loopback only, which the job on "
                                        f"{host} cannot reach: bind the servers to an address other hosts reach "
                                        "(sglang_host_address), or run the job there (sglang_generate_host)")
            conc, source = concurrency_for(h, inst, fleet, given, fallback)
            targets.append({"name": f"{h}/{inst['name']}", "url": url, "concurrency": conc, "source": source})
        manifest = fleet.deployments.get(host) or {}
        python = str(variables.get("sglang_generate_python") or manifest.get("python") or "python3")
    sending = variables.get("sglang_generate_action", "run") in ("run", "resume")
    if sending and (any(t["source"] == "fallback" for t in targets) or "fallback" in targets[0]["source"]):
        warnings.append(f"no tuned result, sweep or max_running_requests for some instances: they get concurrency "
                        f"{fallback} (sglang_generate_fallback_concurrency); run bench.yml or tune.yml first, or set sglang_generate_concurrency")
    own = {k: v for k, v in (fleet.dirs.get(host) or {}).items() if v}
    where = {**variables, **own}
    base = str(where.get("sglang_generate_dir") or f"{str(where.get('sglang_base_dir') or '/opt/sglang').rstrip('/')}/generate")
    folder = f"{base.rstrip('/')}/{name}"
    return {"job": name, "host": host, "via": target, "python": python, "folder": folder,
            "input": _input(variables, folder) if sending else None,
            "targets": targets, "instances": behind,
            "concurrency": sum(int(t["concurrency"]) for t in targets), "warnings": warnings}
