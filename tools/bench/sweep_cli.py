#!/usr/bin/env python
"""Run the throughput_sweep logic (plugins/module_utils/_sweep.py run_sweep) from the shell.

    .venv/bin/python tools/bench/sweep_cli.py URL --concurrency 64 [--requests N] \
        [--max-tokens 256] [--stop-on-plateau] [--json out.json] [--tokens-per-chunk 1]

Prints one line per level (tok/s, chunk/s = tok/s / tokens-per-chunk of the server, client CPU
use, client_limited) and a summary line with the sweep's wall time, the process CPU time,
peak, knee and stopped_on_plateau. --json writes the whole fact (records dropped).
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "collections"))

from ansible_collections.llmops.sglang.plugins.module_utils._sweep import (  # noqa: E402
    SweepOptions,
    run_sweep,
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--concurrency", type=int, nargs="+", required=True)
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--api", default="openai")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--stop-on-plateau", action="store_true")
    ap.add_argument("--plateau-gain", type=float, default=0.05)
    ap.add_argument("--tokens-per-chunk", type=float, default=1.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--label", default="llmops")
    a = ap.parse_args()
    opts = SweepOptions(url=a.url, api=a.api, concurrency=a.concurrency, requests=a.requests,
                        max_tokens=a.max_tokens, warmup=a.warmup,
                        stop_on_plateau=a.stop_on_plateau, plateau_gain=a.plateau_gain,
                        return_records=False)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    fact = run_sweep(opts)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    for p in fact["points"]:
        tps = p["output_tok_s"] or 0.0
        print(f"{a.label} C={p['concurrency']} n={p['requests']} ok={p['ok']} "
              f"dur={p['duration_s']:.2f}s tok/s={tps:.0f} chunk/s={tps / a.tokens_per_chunk:.0f} "
              f"steady_tok/s={p.get('steady_output_tok_s') or 0:.0f} "
              f"cpu_util={p['client']['cpu_util']} lag_p99_ms={p['client']['loop_lag_ms_p99']} "
              f"client_limited={p['client_limited']} ttft_p50_ms={p['ttft_ms']['p50']} "
              f"tpot_p50_ms={p['tpot_ms']['p50']}", flush=True)
    knee = fact.get("knee") or {}
    peak = fact.get("peak") or {}
    print(f"{a.label} SUMMARY wall={wall:.1f}s cpu={cpu:.1f}s levels={[p['concurrency'] for p in fact['points']]} "
          f"peak=C{peak.get('concurrency')}@{peak.get('output_tok_s')} "
          f"knee=C{knee.get('concurrency')}@{knee.get('output_tok_s')} ({knee.get('rule')}) "
          f"stopped_on_plateau={fact.get('stopped_on_plateau')} "
          f"time_scale={(fact.get('server') or {}).get('time_scale')}", flush=True)
    if a.json:
        fact["bench_wall_s"] = wall
        fact["bench_cpu_s"] = cpu
        Path(a.json).write_text(json.dumps(fact, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
