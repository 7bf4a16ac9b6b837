#!/usr/bin/env python
"""Modelled start-up of each embedded-engine instance of a deployment, and its measured L.

    .venv/bin/python tools/bench/modelled_startup.py build/perf/deploy4

For each <base_dir>/<instance>/launch.sh: the modelled load + HiCache pin seconds (the
perf model, GPU time, independent of the time scale) and, from server.log, the measured wall
seconds from the detached_service "starting" line to "The server is fired up and ready to
roll!" (L). Prints one JSON object.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.llmops.sglang.plugins.module_utils._engine import perfmodel  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._shared import flags as _flags  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._shared import releases as _releases  # noqa: E402

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]")
START = re.compile(r"^--- (\S+) detached_service: starting")


def _argv(script: Path) -> list[str]:
    text = script.read_text()
    body = text.split("args=(", 1)[1].split(")\nexec", 1)[0]
    return shlex.split(body)


def _env(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            env[key] = shlex.split(value)[0] if value else ""
    return env


def _measured_l(log: Path) -> float | None:
    """Wall seconds of the LAST start in the log: 'starting' line -> 'fired up'."""
    start = ready = None
    for line in log.read_text(errors="replace").splitlines():
        m = START.match(line)
        if m:
            start = datetime.fromisoformat(m.group(1)).replace(tzinfo=None)
            ready = None
        elif "The server is fired up and ready to roll!" in line:
            s = STAMP.match(line)
            if s:
                ready = datetime.strptime(s.group(1), "%Y-%m-%d %H:%M:%S")
    if start is None or ready is None:
        return None
    return (ready - start).total_seconds()


def main() -> int:
    base = Path(sys.argv[1] if len(sys.argv) > 1 else "build/perf/deploy4")
    out = {}
    for inst in sorted(p for p in base.iterdir() if (p / "launch.sh").exists()):
        env = _env(inst / "env")
        release = env.get("LLMOPS_SGLANG_RELEASE", _releases.DEFAULT_RELEASE)
        args = vars(_flags.build_parser(release).parse_args(_argv(inst / "launch.sh")))
        names = env.get("LLMOPS_SIM_GPUS", "NVIDIA H200").split(",")
        gpu = perfmodel.find_gpu(names[int(env.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])])
        cfg = perfmodel.load_model_config(str(args["model_path"]))
        avail = os.environ.get("LLMOPS_SIM_HOST_MEM_AVAILABLE_GB")
        host = int(float(avail) * 1e9) if avail else None
        if host is None:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    host = int(line.split()[1]) * 1024
        plan = perfmodel.plan_engine(args, cfg, gpu, release, host)
        out[inst.name] = {
            "modelled_load_s": round(plan.load_seconds, 1),
            "modelled_pin_s": round(plan.pin_seconds, 1),
            "modelled_ready_s": round(plan.load_seconds + plan.pin_seconds, 1),
            "time_scale": float(env.get("LLMOPS_SIM_TIME_SCALE", "1")),
            "measured_L_s": _measured_l(inst / "server.log"),
        }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
