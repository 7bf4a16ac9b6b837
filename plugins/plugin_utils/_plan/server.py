# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The server role's whole plan for one host, computed once (action ``llmops.sglang.server_plan``).

``server_plan`` takes what was read from the host (host facts, the current deployment, the
model's config.json) and the play's inputs (``taskvars.read_inputs``) and returns everything the
role renders and runs: the instances (argv, full environment, paths, waits), the service
backend (``auto`` resolved here, once), the Python that runs the servers, the packages to
install, the pre-flight checks and the previous deployment. Templates render its fields; they
decide nothing. Secret values are never in it: ``env_secrets`` and ``secrets`` name the variable
that holds each.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout
from ansible_collections.llmops.sglang.plugins.module_utils._server import manifest as _manifest
from ansible_collections.llmops.sglang.plugins.module_utils._server.deploy import ready_timeout
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import PlanError
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.engine import engine_bundle
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.instances import instance_plan
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.taskvars import PlanInputs
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.validate import validate_plan

BACKENDS = ("systemd", "process")
SERVICE_MANAGERS = ("auto", *BACKENDS)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _number(settings: Mapping[str, Any], key: str, variable: str, default: float) -> float:
    value = settings.get(key)
    if value in (None, ""):
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        raise PlanError(f"{variable}={value!r}: must be a number") from None


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1", "y", "t")
    return bool(value)


def backend_of(service_manager: Any, host_service_manager: Any) -> str:
    """The service backend: sglang_service_manager, or with ``auto`` systemd where systemd runs
    as PID 1 (the host facts' ``service_manager``), the process backend everywhere else."""
    choice = _text(service_manager) or "auto"
    if choice not in SERVICE_MANAGERS:
        raise PlanError(f"sglang_service_manager={choice!r}: must be one of {', '.join(SERVICE_MANAGERS)}")
    if choice != "auto":
        return choice
    return "systemd" if host_service_manager == "systemd" else "process"


def python_of(settings: Mapping[str, Any]) -> str:
    """The Python that runs the servers: sglang_python, else the venv's."""
    return _text(settings.get("python")) or f"{_text(settings.get('venv'))}/bin/python"


def plan_packages(plan: Mapping[str, Any]) -> list[dict[str, str]]:
    """The packages the plan's parts need in the engine's Python beyond SGLang, pinned by the
    release traits: the mooncake storage tier's, the PD transfer backend's ({package, import,
    what}; one entry per package)."""
    found: dict[str, dict[str, str]] = {}
    for part, what in ((plan.get("hicache_storage"), "SGLang's mooncake storage backend"),
                       (plan.get("pd"), "the PD transfer backend")):
        if part and part.get("package"):
            found.setdefault(str(part["package"]), {"package": str(part["package"]), "import": str(part["import"]),
                                                    "what": what})
    return list(found.values())


def install_spec(settings: Mapping[str, Any], extra: Sequence[Mapping[str, str]] = ()) -> dict[str, Any]:
    """What the role installs into the venv (pip), when sglang_install is true: the engine, the
    packages of the plan's parts (``plan_packages``; the real engine only), then sglang_pip_packages."""
    engine = _text(settings.get("engine")) or "sglang"
    packages = ([f"aiohttp=={_text(settings.get('sim_aiohttp_version'))}"] if engine == "sim"
                else [f"sglang=={_text(settings.get('release'))}"])
    if engine == "sglang":
        packages += [item["package"] for item in extra]
    extra = settings.get("pip_packages") or []
    if not isinstance(extra, (list, tuple)):
        raise PlanError(f"sglang_pip_packages={extra!r}: must be a list of pip requirements")
    wheelhouse = _text(settings.get("wheelhouse"))
    return {
        "enabled": _flag(settings.get("install", True)),
        "venv": _text(settings.get("venv")),
        "venv_command": f"{_text(settings.get('venv_python')) or 'python3'} -m venv",
        "packages": packages + [str(p) for p in extra],
        "extra_args": f"--no-index --find-links {wheelhouse}" if wheelhouse else None,
    }


def environment(instance: Mapping[str, Any], plan: Mapping[str, Any], settings: Mapping[str, Any],
                gpu_names: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """An instance's whole environment file: the plan's variables, then sglang_env, then (the
    embedded engine) its PYTHONPATH, release, GPUs and time scale; and the secret variables
    (name -> the role variable holding the value), which only the env file gets."""
    env: dict[str, str] = {str(k): str(v) for k, v in (instance.get("env") or {}).items()}
    user_env = settings.get("env") or {}
    if not isinstance(user_env, Mapping):
        raise PlanError(f"sglang_env={user_env!r}: must be a dict of variable: value")
    tier = ((plan.get("hicache_storage") or {}).get("instances") or {}).get(instance.get("name")) or {}
    given = sorted(set(map(str, user_env)) & set(tier.get("env") or {}))
    if given:
        raise PlanError(f"sglang_env sets {', '.join(given)}, which sglang_hicache_storage sets for each instance "
                        "(its folder, cap and free-space floor): remove it from sglang_env (or set "
                        "sglang_hicache_storage: {})")
    env.update({str(k): _text(v) for k, v in user_env.items()})
    if settings.get("engine") == "sim":
        extra_path = f":{_text(user_env['PYTHONPATH'])}" if "PYTHONPATH" in user_env else ""
        env.update({
            "PYTHONPATH": f"{plan['engine_root']}{extra_path}",
            "LLMOPS_SGLANG_RELEASE": str(plan["release"]),
            "LLMOPS_SIM_GPUS": ",".join(gpu_names),
            "LLMOPS_SIM_TIME_SCALE": _text(settings.get("sim_time_scale")),
        })
        accept = _number(settings, "sim_accept_length", "sglang_sim_accept_length", 0.0)
        if accept > 0:
            env["LLMOPS_SIM_ACCEPT_LENGTH"] = _text(settings.get("sim_accept_length"))
    secrets = {"HF_TOKEN": "sglang_hf_token"} if settings.get("hf_token") else {}
    for name in secrets:
        env.pop(name, None)
    return env, secrets


def wait_spec(instance: Mapping[str, Any], plan: Mapping[str, Any], settings: Mapping[str, Any],
              backend: str) -> dict[str, Any]:
    """One entry of llmops.sglang.wait_ready's ``instances``: its URL, its timeout (load plus
    HiCache pinning), its log, and its pid file (process backend) or unit (systemd): how a
    death while loading is seen; with a storage tier, its prime (the tier's first prefill)."""
    hicache = plan.get("hicache") or {}
    spec = {
        "name": instance["name"],
        "url": instance["connect_url"],
        "timeout": ready_timeout(engine=_text(settings.get("engine")) or "sglang",
                                 pin_seconds=float(hicache.get("pin_seconds_estimate") or 0),
                                 explicit_s=_number(settings, "ready_timeout", "sglang_ready_timeout", 0.0),
                                 time_scale=_number(settings, "sim_time_scale", "sglang_sim_time_scale", 1.0)),
        "log_file": instance["paths"]["log_file"],
    }
    if backend == "systemd":
        spec["unit"] = instance["unit"]
    else:
        spec["pid_file"] = instance["paths"]["pid_file"]
    storage = plan.get("hicache_storage") or {}
    if storage.get("prime"):  # the storage tier's first prefill, inside the readiness gate (_plan/storage.py)
        spec["prime"] = storage["prime"]
    if instance.get("pd_role") == "prefill" and instance.get("bootstrap_port"):  # where decodes fetch its KV
        spec["bootstrap"] = f"{_layout.connect_url(_text(plan.get('host_address')), int(instance['bootstrap_port']))}/health"
    return spec


def process_spec(instance: Mapping[str, Any]) -> dict[str, Any]:
    """One entry of llmops.sglang.detached_service's ``services`` (the process backend starts a
    batch in one run of it): the instance's service name, its launch script, folder, pid file and
    log file."""
    paths = instance["paths"]
    return {"name": instance["service"], "command": [paths["launch_script"]], "chdir": paths["dir"],
            "pid_file": paths["pid_file"], "log_file": paths["log_file"]}


def idle_spec(instance: Mapping[str, Any]) -> dict[str, Any]:
    """One entry of llmops.sglang.wait_idle's ``instances`` (a batch drained before it is
    replaced): the instance's name and the URL it is reached at on its host."""
    return {"name": instance["name"], "url": instance["connect_url"]}


def preflight_spec(plan: Mapping[str, Any], settings: Mapping[str, Any], python: str,
                   install: bool, packages: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What llmops.sglang.preflight checks: every HTTP and NCCL port of the instances, the
    model's config.json (a local model path), and the interpreter that will run the servers (or,
    when the role creates the venv, the one that creates it). With ``packages`` ({venv,
    requirements}: the install spec's), it also says whether the venv holds them already, so
    that the role runs pip only when pip would change something."""
    ports = []
    for inst in plan.get("instances", []):
        ports.append({"port": inst["port"], "instance": inst["name"], "what": "HTTP"})
        if inst.get("nccl_port"):
            ports.append({"port": inst["nccl_port"], "instance": inst["name"], "what": "NCCL"})
        if inst.get("bootstrap_port"):  # a prefill instance's bootstrap server (sglang_pd)
            ports.append({"port": inst["bootstrap_port"], "instance": inst["name"], "what": "PD bootstrap",
                          "fix": "or choose another sglang_pd.bootstrap_port"})
    files = []
    model_path = str((plan.get("model") or {}).get("path") or "")
    if model_path.startswith("/"):
        files.append({"path": model_path.rstrip("/") + "/config.json", "what": "the model's config",
                      "fix": f"sglang_model_path={model_path} must be the model's folder on this host"})
    engine = _text(settings.get("engine")) or "sglang"
    if install:
        venv_python = _text(settings.get("venv_python")) or "python3"
        executables = [{"path": venv_python, "what": "the Python that creates the venv (sglang_venv_python)"}]
    else:
        executables = [{"path": python, "what": f"the {engine} server's Python (sglang_python)",
                        "fix": "point sglang_python at an existing installation, or set sglang_install: true"}]
    spec: dict[str, Any] = {"ports": ports, "files": files, "executables": executables}
    page_hash_checks(spec, plan, engine, python if not install else _text(settings.get("venv_python")) or "python3",
                     missing_ok=install)
    storage = (plan.get("hicache_storage") or {}).get("instances") or {}
    folders = [{"path": item["dir"], "what": f"the HiCache storage folder of {name}",
                "fix": "give sglang_hicache_storage.path on a writable file system"}
               for name, item in storage.items() if item.get("dir")]
    if folders:  # server_files makes each instance's folder of pages: where it can
        spec["folders"] = folders
    store_checks(spec, plan, engine, python, install, settings.get("env") or {})
    if install and packages:
        spec["packages"] = {"venv": packages["venv"], "requirements": list(packages["requirements"])}
    return spec


def store_checks(spec: dict[str, Any], plan: Mapping[str, Any], engine: str, python: str, install: bool,
                 user_env: Mapping[str, Any]) -> None:
    """The pre-flight of the plan's packages and the mooncake tier: each package in the server's
    Python (the real engine; the role installs them with sglang_install), the ports of the master this host runs (free, or held by that
    master: a process working in its folder), or the master another host runs reachable from here."""
    if engine == "sglang" and not install:  # else pip installs them, pinned
        for item in plan_packages(plan):
            spec.setdefault("commands", []).append({
                "argv": [python, "-c", f"import {item['import']}"],
                "env": {str(k): _text(v) for k, v in user_env.items()},  # as the servers run (sglang_env)
                "what": f"{item['package']} in the server's Python ({item['what']} imports {item['import']})",
                "fix": f"set sglang_install: true (the role installs {item['package']}), or pip install "
                       f"{item['package']} there"})
    master = (plan.get("hicache_storage") or {}).get("master") or {}
    if not master:
        return
    if master.get("local"):
        folder = _layout.kvstore_paths(str(plan["base_dir"]))["dir"]
        for key, what in (("port", "RPC"), ("metrics_port", "metrics")):
            spec["ports"].append({"port": int(master[key]), "instance": "kvstore", "what": f"mooncake master {what}",
                                  "ours_dir": folder,
                                  "fix": f"or choose another sglang_hicache_storage.{'master_port' if key == 'port' else key}"})
        return
    probe = ("import socket, sys; h, _, p = sys.argv[1].rpartition(':'); "
             "socket.create_connection((h.strip('[]'), int(p)), timeout=5).close()")
    spec.setdefault("commands", []).append({
        "argv": [python, "-c", probe, str(master["address"])], "missing_ok": False,
        "what": f"the storage tier's master at {master['address']} (sglang_hicache_storage.master), reachable from here",
        "fix": "start it first (the server role of its host, with an empty master, runs one), or fix the address"})


def page_hash_checks(spec: dict[str, Any], plan: Mapping[str, Any], engine: str, python: str,
                     missing_ok: bool = False) -> None:
    """The storage tier's run-time needs on the host (issue 30): SGLang 0.5.17's file backend hashes
    pages with a C++ extension that torch compiles at the first prefill (release trait
    ``page_hash: jit_cpp``), with no Python fallback; a host without a C++ compiler, Python's
    headers or OpenSSL's kills the scheduler then, after the server counted as ready. So the
    pre-flight asks for all three before anything changes (the real engine only: the embedded
    engine compiles nothing). ``python``: the server's (or the venv's base) interpreter."""
    storage = plan.get("hicache_storage") or {}
    backend = str(storage.get("backend") or "")
    tier = ((plan.get("traits") or {}).get("hicache_storage") or {}).get(backend) or {}
    if engine != "sglang" or tier.get("page_hash") != "jit_cpp":
        return
    why = f"SGLang {plan.get('release')} builds its HiCache page-hash extension with it at the first prefill"
    leave = "or leave sglang_hicache_storage off"
    spec["executables"].append({"path": "c++", "what": f"a C++ compiler ({why})",
                                "fix": f"install one (Debian/Ubuntu: apt-get install g++), {leave}"})
    spec["files"].append({"path": "/usr/include/openssl/sha.h", "what": f"OpenSSL's headers ({why}: <openssl/sha.h>)",
                          "fix": f"install them (Debian/Ubuntu: apt-get install libssl-dev), {leave}"})
    probe = ("import os, sys, sysconfig; h = os.path.join(sysconfig.get_paths()['include'], 'Python.h'); "
             "sys.exit(0 if os.path.exists(h) else 'no ' + h)")
    spec.setdefault("commands", []).append({
        "argv": [python, "-c", probe], "what": f"Python's headers ({why}: <Python.h>)", "missing_ok": missing_ok,
        "fix": f"install them (Debian/Ubuntu: apt-get install python3-dev, for the server's Python version), {leave}"})


def server_plan(inputs: PlanInputs, facts: Mapping[str, Any], current: Mapping[str, Any] | None,
                model_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The whole plan of one host (see the module docstring). ``facts``: host_facts'
    ``sglang_host`` (with ``deployment``); ``current``: the deployment's manifest as host_facts
    read it, ``{manifest, manifest_problem}``; ``model_config``: the model's config.json as read on the host (None when unreadable)."""
    settings = dict(inputs.settings)
    previous = dict((current or {}).get("manifest") or {})
    deployment = facts.get("deployment") or {}
    running = [str(i["name"]) for i in deployment.get("instances", []) or [] if i.get("running")]
    backend = backend_of(settings.get("service_manager"), facts.get("service_manager"))
    reclaimed = _manifest.reclaim_pinned(dict(facts), previous, running)
    plan = instance_plan(reclaimed, **inputs.request, model_config=dict(model_config) if model_config else None)
    validate_plan(plan)
    settings["release"] = plan["release"]
    python = python_of(settings)
    install = install_spec(settings, plan_packages(plan))
    gpu_names = [str(gpu.get("name") or "") for gpu in facts.get("gpus", []) or []]
    for inst in plan["instances"]:
        inst["env"], inst["env_secrets"] = environment(inst, plan, settings, gpu_names)
        inst["wait"] = wait_spec(inst, plan, settings, backend)
        inst["process"] = process_spec(inst)
        inst["idle"] = idle_spec(inst)
    user = _text(settings.get("user"))
    plan.update({
        "host": inputs.host,
        "engine": _text(settings.get("engine")) or "sglang",
        "backend": backend,
        "python": python,
        "install": install,
        "owner": {"user": user, "group": _text(settings.get("group")) if user else ""},
        "unit_paths": _layout.instance_paths(plan["base_dir"], "%i"),
        "preflight": preflight_spec(plan, settings, python, install["enabled"],
                                    {"venv": install["venv"], "requirements": install["packages"]}),
        "previous": previous,
        # the manifest was read as it is on the host (no problem): a run that deploys exactly it
        # does not write it again
        "previous_intact": bool(previous) and not (current or {}).get("manifest_problem"),
        "running": running,
        # instances whose current configuration served (ready in the manifest): their files are
        # kept in <dir>/previous/ when this run changes them, for a rollback (server_files)
        "served": [i.get("name") for i in (previous or {}).get("instances") or []
                   if isinstance(i, dict) and i.get("ready_at") and i.get("name")],
        "engine_files": engine_bundle(plan["release"], plan["engine_root"]) if settings.get("engine") == "sim" else None,
    })
    plan["kvstore"] = kvstore_spec(plan, python, settings.get("env") or {})
    return plan


# The stand-in for mooncake_master that the embedded engine's instances talk to (same flags)
SIM_KVSTORE_MODULE = "ansible_collections.llmops.sglang.plugins.module_utils._engine.kvstore"


def kvstore_spec(plan: Mapping[str, Any], python: str, user_env: Mapping[str, Any]) -> dict[str, Any] | None:
    """The storage tier's master when this host runs it (mooncake with an empty ``master``): one
    detached service beside the instances, started before them, stopped after them: the pinned
    package's ``mooncake_master`` (its ``mooncake.cli`` execs the binary with the flags) or, for the
    embedded engine, its stand-in, which takes the same flags; with the engine's sglang_env (an
    existing installation's PYTHONPATH, say). None otherwise."""
    storage = plan.get("hicache_storage") or {}
    master = storage.get("master") or {}
    if not master.get("local"):
        return None
    bind = str(master["bind"])
    flags = [f"--rpc_port={master['port']}", f"--rpc_address={bind}", f"--metrics_port={master['metrics_port']}",
             f"--metrics_host={bind}"]
    paths = _layout.kvstore_paths(str(plan["base_dir"]))
    if plan.get("engine") == "sim":
        argv, env, match = [python, "-m", SIM_KVSTORE_MODULE, *flags], {"PYTHONPATH": str(plan["engine_root"])}, \
            SIM_KVSTORE_MODULE
    else:
        command = str(((plan.get("traits") or {}).get("hicache_storage") or {}).get("mooncake", {}).get(
            "master_command") or "mooncake.cli")
        argv = [python, "-c", f"import sys; from {command} import main; sys.exit(main())", *flags]
        env, match = {str(k): _text(v) for k, v in user_env.items()}, "mooncake_master"
    return {"name": _layout.KVSTORE_SERVICE, "command": argv, "env": env, "match": match, "chdir": paths["dir"],
            "pid_file": paths["pid_file"], "log_file": paths["log_file"], "dir": paths["dir"],
            "address": master["address"],
            "health": {"name": "the storage tier's master", "url": _layout.connect_url(bind, master["metrics_port"]),
                       "path": "/health", "timeout": 60, "log_file": paths["log_file"],
                       "pid_file": paths["pid_file"]}}
