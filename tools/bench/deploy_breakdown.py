#!/usr/bin/env python
"""Phase breakdown of the deploy runs of tools/bench/deploy_bench.sh (task_timer JSON).

    .venv/bin/python tools/bench/deploy_breakdown.py [build/perf/deploy-results]

Per run: total, seconds before the first start task (facts, plan, engine copy, render),
start task(s), readiness wait(s), after (manifest), and the slowest tasks.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "build/perf/deploy-results")
    for path in sorted(root.glob("*.tasks.json")):
        data = json.loads(path.read_text())
        tasks = data["tasks"]
        phase = "before"
        sums = {"before": 0.0, "start": 0.0, "wait": 0.0, "after": 0.0}
        for t in tasks:
            name = t["task"]
            if name.startswith("llmops.sglang.server : Start") and "instance" in name:
                phase = "start"
            elif "Wait" in name and ("health" in name or "readiness" in name):
                phase = "wait"
            elif phase in ("start", "wait") and "manifest" in name:
                phase = "after"
            key = phase
            if phase in ("start", "wait") and not (name.startswith("llmops.sglang.server : Start")
                                                   or "Wait" in name):
                key = "start"  # serial: includes/collect between instances
            sums[key] += t["seconds"]
        top = sorted(tasks, key=lambda t: -t["seconds"])[:4]
        print(f"{path.name.replace('.tasks.json', ''):30s} total={data['total_s']:6.1f}s "
              + " ".join(f"{k}={v:5.1f}" for k, v in sums.items())
              + " | " + "; ".join(f"{t['task'].split(' : ')[-1][:40]} {t['seconds']:.1f}" for t in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
