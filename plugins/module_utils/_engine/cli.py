# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""``main(argv)``: the engine's start-up, in the real server's order, and its exit code.

argv is parsed with the emulated release's own flag schema (``_flags``; exit 2 on an error,
0 for ``--help``); then the model's config.json, the GPU, the host's memory and the plan
(``perfmodel``; exit 1 with the real server's lines when it would fail), the listening socket,
SGLang's child processes (``procs``), and the HTTP server (``server``) until SIGTERM. With
``--nnodes`` > 1 the nodes meet at rank 0's ``--dist-init-addr`` (``fleet``); a node of rank > 0
serves only the placeholder routes (``follower``).

Environment (never SGLang flags): LLMOPS_SGLANG_RELEASE, LLMOPS_SIM_GPUS, CUDA_VISIBLE_DEVICES,
LLMOPS_SIM_TIME_SCALE, LLMOPS_SIM_STARTUP_SCALE, LLMOPS_SIM_HOST_MEM_AVAILABLE_GB, LLMOPS_SIM_ACCEPT_LENGTH,
LLMOPS_SIM_LISTEN, and the injected faults LLMOPS_SIM_FAIL_SHARE and LLMOPS_SIM_DECODE_SLOWDOWN
(``faults``). See docs/engine-api.md.
"""
from __future__ import annotations

import asyncio
import os
import socket
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine import (
    configfile,
    disagg,
    fleet,
    host,
    perfmodel,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.config import EngineConfig
from ansible_collections.llmops.sglang.plugins.module_utils._engine.engine import Engine
from ansible_collections.llmops.sglang.plugins.module_utils._engine.faults import Faults
from ansible_collections.llmops.sglang.plugins.module_utils._engine.follower import Follower
from ansible_collections.llmops.sglang.plugins.module_utils._engine.log import Log
from ansible_collections.llmops.sglang.plugins.module_utils._engine.procs import EngineProcs
from ansible_collections.llmops.sglang.plugins.module_utils._engine.startup import (
    server_args_line,
    startup_schedule,
    warn_deprecated_flags,
)
from ansible_collections.llmops.sglang.plugins.module_utils._shared import flags as _flags
from ansible_collections.llmops.sglang.plugins.module_utils._shared import releases as _releases

if TYPE_CHECKING:
    from types import ModuleType


@dataclass(frozen=True)
class Started:
    """Everything start-up resolved before the engine serves."""

    args: dict[str, Any]
    release: str
    traits: dict[str, Any]
    model_config: dict[str, Any]
    gpu_name: str
    plan: perfmodel.EnginePlan
    sock: socket.socket
    time_scale: float
    startup_scale: float  # LLMOPS_SIM_STARTUP_SCALE: the start-up's own scale (load, pinning, warm-up)
    topology: fleet.Topology | None  # several nodes: where this one stands
    faults: Faults  # LLMOPS_SIM_FAIL_SHARE, LLMOPS_SIM_DECODE_SLOWDOWN


def _parse(argv: list[str], release: str) -> tuple[dict[str, Any], dict[str, Any]] | int:
    """(args, release traits), or the exit code: 2 for an unknown release or a bad argv,
    argparse's for ``--help``."""
    try:
        parser = _flags.build_parser(release)
        traits = _releases.release_traits(release)
    except Exception as exc:  # unknown release: nothing the real server would print
        sys.stderr.write(f"llmops embedded engine: cannot emulate SGLang {release}: {exc}\n")
        return 2
    try:
        argv = configfile.merge(argv, parser)  # --config FILE, as the real server merges it
    except (configfile.ConfigFileError, OSError) as exc:  # the real server's uncaught ValueError
        sys.stderr.write(f"Traceback (most recent call last):\nValueError: {exc}\n")
        return 1
    try:
        namespace = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage + message on stderr, exit 2 (or 0 for -h)
        return int(exc.code) if isinstance(exc.code, int) else 2
    refused = disagg.refused_args(vars(namespace))
    if refused:  # ServerArgs' __post_init__ raises before anything starts
        sys.stderr.write(f"Traceback (most recent call last):\nValueError: {refused}\n")
        return 1
    return vars(namespace), traits


def _time_scale(log: Log, name: str = "LLMOPS_SIM_TIME_SCALE", default: str = "1.0") -> float | None:
    raw = os.environ.get(name, default)
    try:
        time_scale = float(raw)
        if time_scale < 0:
            raise ValueError(time_scale)
    except ValueError:
        log.error(f"invalid {name}={raw!r}")
        return None
    return time_scale


def _model_and_gpu(args: dict[str, Any]) -> tuple[dict[str, Any], str, perfmodel.GpuSpec]:
    try:
        model_config = perfmodel.load_model_config(str(args.get("model_path")))
    except perfmodel.ModelConfigError as exc:
        raise host.StartupError(f"OSError: {exc}") from exc
    gpu_name, _count = host.visible_gpu(args)
    try:
        gpu = perfmodel.find_gpu(gpu_name)
    except perfmodel.UnknownGpuError as exc:
        raise host.StartupError(f"RuntimeError: unknown GPU {gpu_name!r} (LLMOPS_SIM_GPUS): "
                                f"{exc}") from exc
    return model_config, gpu_name, gpu


def _plan(args: dict[str, Any], model_config: dict[str, Any], gpu: perfmodel.GpuSpec,
          release: str, log: Log) -> perfmodel.EnginePlan | None:
    """The plan; None when the real server would fail to start (its lines are logged)."""
    try:
        plan = perfmodel.plan_engine(args, model_config, gpu, release, host.host_available_bytes())
    except perfmodel.ModelConfigError as exc:
        raise host.StartupError(f"OSError: {exc}") from exc
    except perfmodel.EngineStartError as exc:
        log.info(server_args_line(args))
        log.error("Scheduler hit an exception: Traceback (most recent call last):")
        sys.stderr.write(f"{exc}\n")
        log.error("SIGQUIT received. signum=None, frame=None. It usually means one child "
                  "failed.")
        return None
    return host.apply_accept_length(plan)


def _start(args: dict[str, Any], release: str, traits: dict[str, Any], log: Log,
           time_scale: float, startup_scale: float | None = None) -> Started | int:
    """Injected faults, model, GPU, plan and socket; the exit code 1 when one fails."""
    try:
        topology = fleet.Topology.from_args(args)
    except ValueError as exc:  # NetworkAddress.parse, in the scheduler
        log.error(f"ValueError: {exc}")
        return 1
    try:
        faults = Faults.from_env()
        model_config, gpu_name, gpu = _model_and_gpu(args)
        plan = _plan(args, model_config, gpu, release, log)
        if plan is None:
            return 1
        sock = host.bind(str(args.get("host") or "127.0.0.1"), int(args.get("port") or 30000))
    except host.StartupError as exc:
        log.error(str(exc))
        return 1
    return Started(args, release, traits, model_config, gpu_name, plan, sock, time_scale,
                   time_scale if startup_scale is None else startup_scale, topology, faults)


async def _serve_api(started: Started, procs: EngineProcs, log: Log, http: ModuleType) -> int:
    """Node rank 0 (the only node, or the one that hosts the meeting): SGLang's API."""
    engine = Engine(EngineConfig.build(
        args=started.args, plan=started.plan, gpu_name=started.gpu_name,
        release=started.release, traits=started.traits, model_config=started.model_config,
        time_scale=started.time_scale, startup_scale=started.startup_scale, faults=started.faults), log)
    listen_early = os.environ.get("LLMOPS_SIM_LISTEN", "early").lower() != "ready"
    schedule = startup_schedule(started.args, started.plan, started.traits)
    meeting = fleet.Rendezvous(started.topology) if started.topology is not None else None
    server = http.HttpServer(engine, meeting)
    return await procs.supervise(server.run(started.sock, schedule, listen_early),
                                 phase=lambda: engine.state, stop=engine.stop_event.set)


async def _serve_placeholder(started: Started, topology: fleet.Topology, procs: EngineProcs,
                             log: Log, http: ModuleType) -> int:
    """A node of rank > 0: the meeting, the placeholder routes, then waiting for rank 0."""
    follower = Follower(args=started.args, traits=started.traits, log=log,
                        joiner=fleet.Joiner(topology),
                        placeholder=http.PlaceholderServer(bool(started.args.get("enable_metrics"))),
                        procs=procs, time_scale=started.startup_scale)
    schedule = startup_schedule(started.args, started.plan, started.traits)
    return await procs.supervise(follower.run(started.sock, schedule),
                                 phase=lambda: follower.state, stop=follower.stop_event.set,
                                 launch_phase_only=True)


def _serve(started: Started, procs: EngineProcs, log: Log, http: ModuleType) -> int:
    topology = started.topology
    try:
        if topology is not None and topology.node_rank > 0:
            return asyncio.run(_serve_placeholder(started, topology, procs, log, http))
        return asyncio.run(_serve_api(started, procs, log, http))
    except KeyboardInterrupt:
        return 0


def main(argv: list[str] | None = None) -> int:
    """Run the embedded engine with a real SGLang argv; returns the process exit code."""
    # aiohttp is loaded here, not when this module is imported: server.py is the one file of
    # the engine that imports it, and the others stay importable without it (ansible-test's
    # import sanity test runs without aiohttp; tests/sanity/ignore-*.txt names server.py only).
    from ansible_collections.llmops.sglang.plugins.module_utils._engine import server as http

    argv = list(sys.argv[1:] if argv is None else argv)
    release = os.environ.get("LLMOPS_SGLANG_RELEASE", _releases.DEFAULT_RELEASE)
    parsed = _parse(argv, release)
    if isinstance(parsed, int):
        return parsed
    args, traits = parsed
    log = Log(str(args.get("log_level") or "info"))
    warn_deprecated_flags(argv, traits)
    time_scale = _time_scale(log)
    if time_scale is None:
        return 1
    startup_scale = _time_scale(log, "LLMOPS_SIM_STARTUP_SCALE", str(time_scale))
    if startup_scale is None:
        return 1
    started = _start(args, release, traits, log, time_scale, startup_scale)
    if isinstance(started, int):
        return started
    try:  # SGLang's scheduler and detokenizer processes (docs/engine-api.md "Processes")
        procs = EngineProcs.spawn(args, log, time_scale)
    except OSError as exc:
        log.error(f"cannot start the engine's child processes: {exc}")
        started.sock.close()
        return 1
    try:
        return _serve(started, procs, log, http)
    finally:
        procs.stop()
        started.sock.close()
