# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The bench role's plan for one host (action llmops.sglang.bench_plan, run by
roles/bench/tasks/sweep.yml): the run's id, the instances to sweep and in which batches, the URL
each sweep is sent to, where the sweeps run and with which Python, and their waits. Computed here
once, from the role's variables and the host's deployment manifest, instead of in the role's
Jinja."""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils import _detached

# The role variables the plan reads (each declared in roles/bench/meta/argument_specs.yml).
VARIABLES = ("sglang_bench_instances", "sglang_bench_parallel_instances", "sglang_bench_run_on",
             "sglang_bench_python", "sglang_bench_progress_poll", "sglang_bench_sweep_timeout",
             "sglang_bench_run_id", "sglang_bench_heartbeat_limit", "sglang_bench_target")
# How much longer than the sweep's own limit (sglang_bench_sweep_timeout) its async job and
# sweep_wait wait: a sweep stopped by its limit still reports what it measured.
JOB_GRACE_S = 120
# A remote sweep stops when nobody refreshed its heartbeat file for sglang_bench_heartbeat_limit,
# by default (0) max(HEARTBEAT_MIN_S, HEARTBEAT_POLLS x the progress poll): several polls may be
# missed (a slow connection, a busy controller) before it gives up.
HEARTBEAT_MIN_S = 30.0
HEARTBEAT_POLLS = 5
# A host whose instances' local URL is the controller's too.
LOCAL_HOSTS = ("localhost", "127.0.0.1")
ID_FORMAT = "%Y%m%dT%H%M%SZ"
FILES = "/tmp/llmops-sglang-sweep-{key}-{host}-{{instance}}.{kind}"


class BenchPlanError(ValueError):
    """A plan that cannot be made; the message names the value, the rule and the fix."""


@dataclass(frozen=True)
class BenchHost:
    """What the plan of one host is made from."""

    host: str
    manifest: dict[str, Any]
    variables: dict[str, Any]
    through_router: bool = False  # the manifest is the router's one target: sglang_bench_instances does not apply
    health: list[dict[str, Any]] | None = None  # server_status's probed instances: those down are not swept
    workers: list[dict[str, Any]] | None = None  # through_router: {host, manifest} of the deployments behind it
    host_python: str | None = None  # the host's ansible_python_interpreter
    controller_python: str = "python3"  # ansible_playbook_python


def run_id(given: str, controller_started: float | None, now: float) -> str:
    """The run's id (its report folder): ``sglang_bench_run_id``, else the time the controller's
    ansible-playbook started, which every host of every play of the run computes alike (the
    workers' play and the routers' play write to one folder), else ``now``."""
    if given:
        return str(given)
    return time.strftime(ID_FORMAT, time.gmtime(controller_started if controller_started is not None else now))


def sweep_url(instance: dict[str, Any], host: str, run_on: str) -> str:
    """Next to the server, the URL it listens on; from the controller, the one other hosts use."""
    if run_on == "host" or host in LOCAL_HOSTS:
        return str(instance["connect_url"])
    return str(instance.get("advertise_url") or instance["connect_url"])


def sweep_python(req: BenchHost) -> str:
    """The Python that runs the sweeps: the controller's with sglang_bench_run_on controller; on
    the host, sglang_bench_python, else the deployment's engine venv (it has aiohttp), else the
    host's interpreter."""
    if req.variables["sglang_bench_run_on"] == "controller":
        return req.controller_python
    return str(req.variables.get("sglang_bench_python") or req.manifest.get("python") or req.host_python or "python3")


def _selected(req: BenchHost) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(instances to sweep, instances down, warnings)."""
    instances = list(req.manifest.get("instances") or [])
    have = [str(i["name"]) for i in instances]
    wanted = [] if req.through_router else [str(n) for n in req.variables.get("sglang_bench_instances") or []]
    warnings = []
    if wanted:
        missing = [n for n in wanted if n not in have]
        if len(missing) == len(wanted):
            raise BenchPlanError(
                f"sglang_bench_instances is {wanted}, and the deployment on {req.host} has none of them (its "
                f"instances: {', '.join(have) or 'none'}): name instances it has, or set [] to sweep every one")
        if missing:
            warnings.append(f"sglang_bench_instances names {', '.join(missing)}, which {req.host} does not have "
                            f"(its instances: {', '.join(have)}): swept there: {', '.join(n for n in wanted if n in have)}")
        instances = [i for i in instances if i["name"] in wanted]
    down: list[dict[str, Any]] = []
    if req.health is not None and not req.through_router:  # a router is swept whatever its workers
        names = {i["name"] for i in instances}
        probed = [i for i in req.health if i.get("name") in names]
        down = [{**i, "host": req.host} for i in probed if not i.get("up")]
        up = {i["name"] for i in probed if i.get("up")}
        instances = [i for i in instances if i["name"] in up]
    return instances, down, warnings


def worker_metrics(workers: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The router's workers whose /metrics its sweep reads (throughput_sweep's ``worker_metrics``):
    every rank-0 instance, with its side, when the deployments behind it are prefill/decode ones
    (the router's own /metrics says nothing of the engines); none for a unified fleet."""
    instances = [(str(w.get("host") or ""), i) for w in workers or []
                 for i in (w.get("manifest") or {}).get("instances") or [] if i.get("rank0", True)]
    if not any(i.get("pd_role") for _, i in instances):
        return []
    return [{"name": f"{host}/{i['name']}", "url": str(i.get("advertise_url") or i["connect_url"]),
             "side": str(i.get("pd_role") or "unified")} for host, i in instances]


def pd_targets(req: BenchHost, instances: list[dict[str, Any]], run_on: str) -> tuple[list[dict[str, Any]], str]:
    """A PD host's instances swept directly: one sweep of the pair they are (throughput_sweep's
    ``pd``: each request to a prefill and a decode with a bootstrap room, as the router sends it),
    named after its instances ("gpu1+gpu0", decodes first), with each side's /metrics read; every
    PD instance of the host that is up takes part, whichever of them sglang_bench_instances named (a
    side alone cannot serve). A host with one side only (its pairs span hosts) cannot pair here:
    each is swept unpaired, with the warning ((targets, warning))."""
    every = req.manifest.get("instances") or []
    up = {i["name"] for i in every} if req.health is None else {i.get("name") for i in req.health if i.get("up")}
    members = [i for i in every if i.get("pd_role") and i.get("rank0", True) and i["name"] in up]
    sides = {side: [i for i in members if i["pd_role"] == side] for side in ("decode", "prefill")}
    if not sides["decode"] or not sides["prefill"]:
        missing = "decode" if not sides["decode"] else "prefill"
        named = ", ".join(f"{i['name']} ({i.get('pd_role') or 'unified'})" for i in instances)
        return ([{"name": str(i["name"]), "url": sweep_url(i, req.host, run_on)} for i in instances],
                f"{req.host}: {named} are prefill/decode "
                f"instances (sglang_pd) with no {missing} instance up on this host to pair with: swept on its own "
                "each runs unpaired, without a KV hand-over, so these numbers are not the pair's; sweep through "
                "the PD router (-e sglang_bench_target=router) for the pair's and each side's")
    ordered = sides["decode"] + sides["prefill"]
    pd = {"prefill": [{"url": sweep_url(i, req.host, run_on), "bootstrap_port": int(i["bootstrap_port"])}
                      for i in sides["prefill"]],
          "decode": [sweep_url(i, req.host, run_on) for i in sides["decode"]]}
    return [{"name": "+".join(str(i["name"]) for i in ordered), "url": pd["decode"][0], "pd": pd,
             "worker_metrics": [{"name": f"{req.host}/{i['name']}", "url": sweep_url(i, req.host, run_on),
                                 "side": i["pd_role"]} for i in ordered]}], ""


def plan(req: BenchHost, *, controller_started: float | None, now: float, controller_pid: int) -> dict[str, Any]:
    """The plan of one host's sweeps (the action's result; docs in plugins/modules/bench_plan.py)."""
    variables = req.variables
    run_on = str(variables["sglang_bench_run_on"])
    poll = float(variables["sglang_bench_progress_poll"])
    if not poll > 0:
        raise BenchPlanError(f"sglang_bench_progress_poll must be > 0 seconds, got {variables['sglang_bench_progress_poll']!r}")
    heartbeat_timeout = float(variables.get("sglang_bench_heartbeat_limit") or 0)
    if heartbeat_timeout < 0:
        raise BenchPlanError(f"sglang_bench_heartbeat_limit must be > 0 seconds, or 0 for max({HEARTBEAT_MIN_S:g}, "
                             f"{HEARTBEAT_POLLS} x sglang_bench_progress_poll), got {heartbeat_timeout:g}")
    # names this host's progress and heartbeat files: never a leftover of an earlier run or play
    run_key = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}{int(now * 1e6) % 1_000_000:06d}-{controller_pid}"
    progress = FILES.format(key=run_key, host=req.host, kind="jsonl")
    heartbeat = FILES.format(key=run_key, host=req.host, kind="heartbeat")
    instances, down, warnings = _selected(req)
    targets = [{"name": str(i["name"]), "url": sweep_url(i, req.host, run_on)} for i in instances]
    if not req.through_router and any(i.get("pd_role") for i in instances):
        targets, warning = pd_targets(req, instances, run_on)
        warnings += [warning] if warning else []
    elif req.through_router:
        targets = [dict(t, worker_metrics=worker_metrics(req.workers)) for t in targets]
    sweeps = [{**t, "progress_file": progress.replace("{instance}", t["name"]),
               "heartbeat_file": heartbeat.replace("{instance}", t["name"])} for t in targets]
    parallel = bool(variables["sglang_bench_parallel_instances"])
    return {
        "run_id": run_id(str(variables.get("sglang_bench_run_id") or ""), controller_started, now),
        "run_key": run_key,
        "sweeps": sweeps,
        "batches": ([sweeps] if sweeps else []) if parallel else [[s] for s in sweeps],
        "down": down,
        "python": sweep_python(req),
        "delegate_to": "localhost" if run_on == "controller" else req.host,
        "heartbeat_timeout": heartbeat_timeout or max(HEARTBEAT_MIN_S, HEARTBEAT_POLLS * poll),
        "job_timeout": int(float(variables["sglang_bench_sweep_timeout"])) + JOB_GRACE_S,
        "progress_file": progress,
        "heartbeat_file": heartbeat,
        "warnings": warnings,
    }


def process_started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), the same whoever asks: from /proc
    through ``_detached`` (as the run lock's holder record reads the controller), else from
    ``ps -o lstart`` (a controller on macOS or a BSD); None when neither tells."""
    stat = _detached.read_stat(pid)
    if stat is not None:
        return _detached.start_epoch(stat.starttime)
    try:
        out = subprocess.run(["ps", "-o", "lstart=", "-p", str(int(pid))], capture_output=True, text=True,
                             timeout=10, env={**os.environ, "LC_ALL": "C"}, check=True).stdout
        return time.mktime(time.strptime(" ".join(out.split()), "%a %b %d %H:%M:%S %Y"))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
