#!/usr/bin/env python
"""Is the generation job the bottleneck? (docs/PERFORMANCE.md, "The generation job's ceiling")

    .venv/bin/python tools/bench/generate_ceiling.py [--concurrency 64] [--requests 4096]
        [--max-tokens 512] [--reps 3] [--json out.json]

Starts tools/bench/zero_server.py (answers at once) on a free loopback port, then per rep, in
alternating order (sweep then job, job then sweep, ...), so that a change of the machine's load
hits both alike:

- the sweep client: one level of ``_sweep.run_sweep`` at C with ``--requests`` streamed requests;
- the generation job: ``_generate.job.run`` over ``--requests`` lines (plain prompts) at the same C
  and max_tokens, into a fresh folder (every result fsync'ed and journaled, as in production).

Prints per run requests/s and output tok/s (server-counted tokens / wall time), and per rep the
job's rate over the sweep's. The job passes when it sustains at least the sweep client's request
rate: the job's client is not what limits a fleet's batch generation.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "collections"), str(ROOT / "tools" / "bench")]

from client_ceiling import _cpu_s, _start_server  # noqa: E402

from ansible_collections.llmops.sglang.plugins.module_utils._generate import job, runner  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._sweep import SweepOptions, run_sweep  # noqa: E402


def _sweep(url: str, a: argparse.Namespace) -> dict[str, float]:
    opts = SweepOptions(url=url, concurrency=[a.concurrency], requests=a.requests, max_tokens=a.max_tokens, warmup=1,
                        level_warmup=False, return_records=False)
    point = run_sweep(opts)["points"][0]
    return {"req_s": point["ok"] / point["duration_s"], "tok_s": point["output_tok_s"], "ok": point["ok"]}


def _job(url: str, a: argparse.Namespace, work: Path) -> dict[str, float]:
    folder = work / "job"
    shutil.rmtree(folder, ignore_errors=True)
    inp = work / "in.jsonl"
    if not inp.exists():
        with inp.open("w") as fh:
            for i in range(a.requests):
                fh.write(json.dumps({"id": f"r{i}", "prompt": f"p {i}", "max_tokens": a.max_tokens}) + "\n")
    settings = runner.Settings(folder=str(folder), input=str(inp), total=0,
                               targets=(runner.Target("zero", url, a.concurrency),))
    started = time.monotonic()
    report = job.run(settings)
    wall = time.monotonic() - started  # the whole run: the input's check and the store's open included
    return {"req_s": report["done"] / wall, "tok_s": report["completion_tokens"] / wall, "ok": report["ok"],
            "run_req_s": report["this_run"]["lines_s"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=4096)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    server, url = _start_server(per_event=False)
    work = Path(tempfile.mkdtemp(prefix="generate-ceiling-"))
    rows = []
    try:
        for rep in range(a.reps):
            order = ("sweep", "job") if rep % 2 == 0 else ("job", "sweep")
            got = {}
            for kind in order:
                cpu0 = _cpu_s(server.pid)
                got[kind] = _sweep(url, a) if kind == "sweep" else _job(url, a, work)
                got[kind]["server_cpu_s"] = round(_cpu_s(server.pid) - cpu0, 2)
                print(f"rep {rep} {kind:5s} C={a.concurrency} ok={got[kind]['ok']} req/s={got[kind]['req_s']:.0f} "
                      f"tok/s={got[kind]['tok_s']:.0f} server_cpu={got[kind]['server_cpu_s']}s "
                      f"load1={os.getloadavg()[0]:.2f}", flush=True)
            ratio = got["job"]["req_s"] / got["sweep"]["req_s"]
            print(f"rep {rep} job/sweep req/s ratio {ratio:.2f}", flush=True)
            rows.append({"rep": rep, **{f"{k}_{m}": v for k, d in got.items() for m, v in d.items()}, "ratio": ratio})
    finally:
        server.kill()
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
