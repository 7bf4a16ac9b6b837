#!/usr/bin/env python
"""Queueing delay of rate mode against M/D/c (docs/PERFORMANCE.md, "Rate mode against M/D/c").

    .venv/bin/python tools/bench/queueing_mdc.py [--slots 1 4] [--rho 0.5 0.8] [--requests 600]
        [--prefill-s 0.01] [--tokens 20] [--rate 1000] [--seed 1] [--json out.json]

Starts tests/unit/knownrate_server.py (K slots served first come, first served; a request holds
its slot S = P + T/R seconds, deterministic) and runs one open-loop level per (K, rho) with
Poisson arrivals at lambda = rho x K / S and no client cap, so requests queue at the server only.
A request's server queueing delay is its TTFT minus P + 1/R (its first token's own time).

Three numbers per level, mean queueing delay in ms:
- ``measured``: from the sweep's records (wall clock: the box's load adds to it);
- ``schedule``: the same seeded arrival times pushed through an ideal FCFS K-server queue with
  service S (exact for this schedule: what a perfect client and server would show);
- ``theory``: M/D/c in the long run: Pollaczek-Khinchine rho x S / (2 (1 - rho)) for K = 1, else
  Cosmetatos' approximation (M/M/c Erlang-C wait x 1/2 x correction).
``measured`` vs ``schedule`` checks the client (sends on time) and the server; ``schedule`` vs
``theory`` is the sampling noise of a finite Poisson level. Not a test: the wall clock of a loaded
machine moves ``measured``.
"""
from __future__ import annotations

import argparse
import heapq
import json
import math
import select
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.openloop import (  # noqa: E402
    arrival_offsets,
    level_seed,
)


def erlang_c_wait(c: int, lam: float, s: float) -> float:
    """Mean wait of M/M/c with arrival rate lam and mean service s."""
    a = lam * s
    rho = a / c
    term = sum(a ** k / math.factorial(k) for k in range(c))
    last = a ** c / math.factorial(c) / (1 - rho)
    return last / (term + last) * s / (c * (1 - rho))


def mdc_wait(c: int, lam: float, s: float) -> float:
    """Mean wait of M/D/c: exact for c = 1, Cosmetatos' approximation above."""
    rho = lam * s / c
    if c == 1:
        return rho * s / (2 * (1 - rho))
    corr = 1 + (1 - rho) * (c - 1) * (math.sqrt(4 + 5 * c) - 2) / (16 * rho * c)
    return 0.5 * corr * erlang_c_wait(c, lam, s)


def schedule_wait(arrivals: list[float], c: int, s: float) -> float:
    """Mean wait of these arrivals through an FCFS c-server queue with service s."""
    free = [0.0] * c
    total = 0.0
    for t in arrivals:
        at = heapq.heappop(free)
        start = max(t, at)
        total += start - t
        heapq.heappush(free, start + s)
    return total / len(arrivals)


def start_server(slots: int, rate: float, prefill: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests/unit/knownrate_server.py"), "--port", "0",
                             "--slots", str(slots), "--rate", str(rate), "--prefill-s", str(prefill)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 20.0)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("PORT "):
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    url = f"http://127.0.0.1:{int(line.split()[1])}"
    body = json.dumps({"slots": slots, "rate": rate, "prefill_s": prefill}).encode()
    req = urllib.request.Request(url + "/_config", data=body, headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=5).read()
    return proc, url


def one(slots: int, rho: float, args: argparse.Namespace) -> dict[str, float]:
    s = args.prefill_s + args.tokens / args.rate
    lam = rho * slots / s
    proc, url = start_server(slots, args.rate, args.prefill_s)
    try:
        facts = sw.run_sweep(sw.SweepOptions(url=url, mode="rate", rates=[lam], requests=args.requests,
                                             seed=args.seed, max_tokens=args.tokens, level_warmup=False))
    finally:
        proc.terminate()
        proc.wait(10)
    first = args.prefill_s + 1.0 / args.rate
    waits = [r["ttft_ms"] / 1000.0 - first for r in facts["records"] if r["ok"] and r["ttft_ms"] is not None]
    arrivals = arrival_offsets(lam, "poisson", level_seed(args.seed, 0), count=args.requests)
    point = facts["points"][0]
    return {
        "slots": slots, "rho": rho, "rate": round(lam, 3), "service_ms": round(s * 1000, 3),
        "measured_ms": round(1000 * sum(waits) / len(waits), 2),
        "schedule_ms": round(1000 * schedule_wait(arrivals, slots, s), 2),
        "theory_ms": round(1000 * mdc_wait(slots, lam, s), 2),
        "achieved_rate": point["achieved_rate"], "scheduled_rate": point["scheduled_rate"],
        "ok": point["ok"], "requests": point["requests"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rho", type=float, nargs="+", default=[0.5, 0.8])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--prefill-s", type=float, default=0.01)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = [one(k, rho, args) for k in args.slots for rho in args.rho]
    print("| K | rho | lambda req/s | S ms | measured ms | schedule ms | M/D/c ms | achieved req/s | scheduled req/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['slots']} | {r['rho']} | {r['rate']} | {r['service_ms']} | {r['measured_ms']} | "
              f"{r['schedule_ms']} | {r['theory_ms']} | {r['achieved_rate']} | {r['scheduled_rate']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
