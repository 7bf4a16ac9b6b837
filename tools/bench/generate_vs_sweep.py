#!/usr/bin/env python
"""Does the generation job get what the server can give? (docs/PERFORMANCE.md, "The generation
job against the sweep's peak on the embedded engine")

    .venv/bin/python tools/bench/generate_vs_sweep.py [--concurrency 32] [--requests 512]
        [--max-tokens 256] [--time-scale 1] [--reps 2] [--json out.json]

Starts the embedded engine (SGLang 0.5.17's flags, an H200, data/models/qwen3-0.6b-dense) at
LLMOPS_SIM_TIME_SCALE ``--time-scale`` on a free loopback port, then per rep, in alternating
order:

- the sweep: one level of ``_sweep.run_sweep`` at C (openai API, streamed, the sweep's default
  prompts, ``--max-tokens``, ``--requests`` requests), its ``output_tok_s`` (model time: the
  engine reports its time scale);
- the job: ``_generate.job.run`` over ``--requests`` lines with the same bodies (the sweep's
  prompts in turn, max_tokens, temperature, ignore_eos; not streamed) at the same C, its output
  tokens over its wall time times the time scale (the same model time).

Prints each and the job's over the sweep's. The target: within 5 % (the same requests, the same
server, at the same concurrency; what differs is the client and streaming). Keep the time scale
at 1 (model time is wall time): below it the engine's own CPU, not its model, sets the pace on a
small machine, and a streamed response (256 chunks) costs it far more CPU than a whole one, so the
job (not streamed) then beats the sweep by what streaming costs the engine, not by the model.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "collections")]

from ansible_collections.llmops.sglang.plugins.module_utils._generate import job, runner  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._sweep import (  # noqa: E402
    DEFAULT_PROMPTS,
    SweepOptions,
    run_sweep,
)

ENGINE = "ansible_collections.llmops.sglang.plugins.module_utils._engine"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_engine(scale: float, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "collections"), "LLMOPS_SGLANG_RELEASE": "0.5.17",
           "LLMOPS_SIM_GPUS": "NVIDIA H200", "CUDA_VISIBLE_DEVICES": "0", "LLMOPS_SIM_TIME_SCALE": str(scale),
           "LLMOPS_SIM_STARTUP_SCALE": "0.01", "LLMOPS_SIM_HOST_MEM_AVAILABLE_GB": "200"}
    cmd = [sys.executable, "-m", ENGINE, "--model-path", str(ROOT / "data" / "models" / "qwen3-0.6b-dense"),
           "--port", str(port), "--enable-metrics"]
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the engine exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the engine did not get ready in 120 s")


def _options(url: str, a: argparse.Namespace) -> SweepOptions:
    return SweepOptions(url=url, concurrency=[a.concurrency], requests=a.requests, max_tokens=a.max_tokens,
                        warmup=1, level_warmup=True, return_records=False)


def _sweep(url: str, a: argparse.Namespace) -> dict[str, float]:
    point = run_sweep(_options(url, a))["points"][0]
    return {"tok_s": point["output_tok_s"], "ok": point["ok"], "time_base": point.get("time_base"),
            "wall_s": point["duration_s"], "tokens": point.get("output_tokens"),
            "scale": (point.get("server") or {}).get("time_scale")}


def _job(url: str, a: argparse.Namespace, work: Path) -> dict[str, float]:
    opts = _options(url, a)
    folder = work / "job"
    shutil.rmtree(folder, ignore_errors=True)
    inp = work / "in.jsonl"
    with inp.open("w") as fh:
        for i in range(a.requests):
            body = {"id": f"r{i}", "prompt": DEFAULT_PROMPTS[i % len(DEFAULT_PROMPTS)], "max_tokens": a.max_tokens,
                    "temperature": opts.temperature}
            if opts.ignore_eos:
                body["ignore_eos"] = True
            fh.write(json.dumps(body) + "\n")
    settings = runner.Settings(folder=str(folder), input=str(inp), total=0,
                               targets=(runner.Target("engine", url, a.concurrency),))
    report = job.run(settings)
    run = report["this_run"]
    return {"tok_s": run["output_tok_s"] * a.time_scale, "ok": report["ok"], "wall_s": run["wall_s"],
            "tokens": run["completion_tokens"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="generate-vs-sweep-"))
    engine, url = _start_engine(a.time_scale, work / "engine.log")
    rows = []
    try:
        for rep in range(a.reps):
            order = ("sweep", "job") if rep % 2 == 0 else ("job", "sweep")
            got = {}
            for kind in order:
                got[kind] = _sweep(url, a) if kind == "sweep" else _job(url, a, work)
                print(f"rep {rep} {kind:5s} C={a.concurrency} ok={got[kind]['ok']} model tok/s={got[kind]['tok_s']:.0f} "
                      f"wall={got[kind]['wall_s']:.2f}s tokens={got[kind]['tokens']} "
                      f"load1={os.getloadavg()[0]:.2f}", flush=True)
            ratio = got["job"]["tok_s"] / got["sweep"]["tok_s"]
            print(f"rep {rep} job/sweep output tok/s {ratio:.3f}", flush=True)
            rows.append({"rep": rep, "sweep": got["sweep"], "job": got["job"], "ratio": ratio})
    finally:
        engine.terminate()
        engine.wait(20)
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
