#!/usr/bin/env python
"""Compare a real-GPU run of tools/gpu/run_collection.sh with the embedded engine's model.

For every instance in the run's deployment manifests, the embedded engine's performance model
(plugins/module_utils/_engine/perfmodel/) is given the very argv the collection rendered (parsed
with the release's flag schema), the GPU the instance ran on and the run's host MemAvailable,
and each sweep level of the report (C, n, output tokens) is simulated on its virtual clock.

usage: .venv/bin/python tools/gpu/predict_real_run.py WORK [--accept-length 1.0]
  WORK: the `work/` folder of run.tar.gz (holds */deployment.json and report/summary.csv)
Random weights make the MTP head useless: the accept length defaults to 1.0.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.llmops.sglang.plugins.module_utils._engine import perfmodel as pm  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._shared import flags as _flags  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("--accept-length", type=float, default=1.0)
    ap.add_argument("--gpu", default="NVIDIA H200")
    ap.add_argument("--prompt-tokens", type=int, default=50,
                    help="prompt tokens per request (the 8 built-in chat prompts: about 50)")
    ns = ap.parse_args()
    summary = ns.work / "report" / "summary.csv"
    rows = list(csv.DictReader(open(summary))) if summary.exists() else []
    print("| instance | C | n | real tok/s | predicted tok/s | error | real TTFT mean (p50) ms "
          "| predicted TTFT ms | real TPOT mean ms | predicted TPOT ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    shapes = []
    for manifest_path in sorted(ns.work.glob("*/deployment.json")):
        manifest = json.loads(manifest_path.read_text())
        avail = (manifest.get("hicache") or {}).get("available_bytes") or 263 * 10**9
        for inst in manifest["instances"]:
            args = _flags.parse_argv(list(inst["argv"]), manifest["release"])
            cfg = pm.load_model_config(str(args["model_path"]))
            plan = pm.plan_engine(args, cfg, pm.find_gpu(ns.gpu), manifest["release"], int(avail))
            if plan.spec_algorithm:
                plan.accept_length = ns.accept_length
            shapes.append((manifest["host"], inst, plan))
            for row in rows:
                if row["host"] != manifest["host"] or row["instance"] != inst["name"]:
                    continue
                c, n = int(row["concurrency"]), int(row["requests"])
                tokens = round(float(row["avg_out"]))
                sim = pm.simulate_level(plan, c, n, tokens, ns.prompt_tokens)
                real = float(row["output_tok_s"])
                err = 100.0 * (sim["output_tok_s"] / real - 1.0)
                tpot = 1000.0 * (sim["mean_latency_s"] - sim["mean_ttft_s"]) / max(tokens - 1, 1)
                print(f"| {manifest['host']}/{inst['name']} | {c} | {n} | {real:.1f} | {sim['output_tok_s']:.1f} "
                      f"| {err:+.1f}% | {float(row['ttft_mean_ms']):.1f} ({float(row['ttft_p50_ms']):.1f}) "
                      f"| {1000 * sim['mean_ttft_s']:.1f} | {float(row['tpot_mean_ms']):.2f} | {tpot:.2f} |")
    print()
    print("| instance | predicted max_total_num_tokens | mamba slots | host pools GB | pin s (predicted) "
          "| ready s (predicted) | ready s (real) |")
    print("|---|---|---|---|---|---|---|")
    for host, inst, plan in shapes:
        pools = " + ".join(f"{p.name} {p.bytes / 1e9:.2f}" for p in plan.hicache_pools) or "-"
        print(f"| {host}/{inst['name']} | {plan.max_total_num_tokens} | {plan.mamba_slots or '-'} | {pools} "
              f"| {plan.pin_seconds:.1f} | {plan.ready_seconds:.1f} | {inst.get('ready_after_s')} |")


if __name__ == "__main__":
    main()
