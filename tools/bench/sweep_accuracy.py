#!/usr/bin/env python
"""The sweep's accuracy against the known-rate server's analytic rates (docs/PERFORMANCE.md,
"The sweep's accuracy against a known rate").

    .venv/bin/python tools/bench/sweep_accuracy.py [--reps 3] [--json out.json] [--part concurrency|rate|all]

Starts tests/unit/knownrate_server.py (K = 4 slots, R = 400 tok/s per request, P = 0.05 s,
T = 100 tokens: S = 0.3 s per request) on a free loopback port and sweeps C = 1, 3, 4, 8 (one
warm-up request and the level warm-ups, as the bench runs) for each wire format the unit test
covers (openai with 1 and 3 tokens per chunk, native with 3). Per level it prints the measured
output tok/s against the analytic full-run rate, the steady-window tok/s against min(C, K) x T /
S, the per-token ITL mean against 1/R, and the rate the server delivered over its own window
(its /_served timestamps), each with its deviation, and the load average.

Rate mode (``--part rate``, issue 18: "achieved rate within 2% of the target below saturation;
queueing delay against M/D/c theory where it applies"): one sweep per offered rate (2, 4, 8, 12
requests/s against a capacity of K / S = 13.3), constant and Poisson arrivals (a seed per rate,
so the Poisson samples are not one path scaled), 10 s of arrivals (30 s for Poisson), no
warm-ups. Per level: the achieved rate (the client's send times) against the offered and the
scheduled rate, the arrival rate the server saw (its ``received`` stamps), and the mean time a
request waited for a slot in the server (``slot - received``, the server's own clock) against
M/D/c theory at the rate of the arrivals that happened (Erlang C for M/M/c times Cosmetatos'
M/D/c factor; c = K, deterministic service S); constant arrivals below capacity never wait (D/D/c).

This was the unit test's 3% assertion; on a loaded machine the server itself runs late (its
sleeps overrun), so the measured rate is right and the analytic one is not what happened: that
flaked CI (1268 vs 1333 tok/s). The unit test now compares the sweep with the server's own
timestamps (tests/unit/plugins/module_utils/_sweep/test_run.py::test_throughput_matches_the_analytic_rate); the accuracy
against the analytic rate is this benchmark, to run on a quiet machine.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

import knownrate_server as krs  # noqa: E402

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw  # noqa: E402

CFG = {"slots": 4, "rate": 400.0, "prefill_s": 0.05}
T = 100
LEVELS = [1, 3, 4, 8]
CASES = [("openai", 1), ("openai", 3), ("native", 3)]


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def _dev(measured: float | None, expected: float) -> str:
    return "n/a" if measured is None else f"{(measured / expected - 1) * 100:+.1f}%"


def one_case(base: str, api: str, chunk: int) -> list[dict[str, Any]]:
    cfg = krs.ServerConfig(**_post(base + "/_config", {**CFG, "chunk_tokens": chunk}))
    facts = sw.run_sweep(sw.SweepOptions(url=base, api=api, concurrency=LEVELS, max_tokens=T))
    rows = [r for r in _get(base + "/_served") if r["max_tokens"] == T and r["done"] is not None]
    out = []
    for point in facts["points"]:
        c = point["concurrency"]
        n = point["requests"]
        # the level's own requests are the last n of T tokens before the next level's (warm-ups
        # ask for other lengths, except the one initial warm-up request)
        level = rows[-sum(p["requests"] for p in facts["points"] if p["concurrency"] >= c):][:n]
        server_s = max(r["done"] for r in level) - min(r["received"] for r in level)
        row = {
            "api": api, "chunk_tokens": chunk, "concurrency": c,
            "output_tok_s": point["output_tok_s"], "analytic_tok_s": round(krs.expected_output_tok_s(cfg, c, n, T), 1),
            "steady_tok_s": point["steady_output_tok_s"], "analytic_steady_tok_s":
                round(krs.expected_steady_tok_s(cfg, c, T), 1),
            "itl_ms_mean": point["itl_ms"]["mean"], "analytic_itl_ms": 1000.0 / cfg.rate,
            "server_window_tok_s": round(n * T / server_s, 1), "load1": round(os.getloadavg()[0], 2),
        }
        out.append(row)
        print(f"{api:6} M={chunk} C={c}: {row['output_tok_s']:8.1f} tok/s vs analytic {row['analytic_tok_s']:7.1f} "
              f"({_dev(row['output_tok_s'], row['analytic_tok_s'])}), vs the server's window "
              f"{row['server_window_tok_s']:7.1f} ({_dev(row['output_tok_s'], row['server_window_tok_s'])}); "
              f"steady {_dev(row['steady_tok_s'], row['analytic_steady_tok_s'])}; "
              f"ITL {_dev(row['itl_ms_mean'], row['analytic_itl_ms'])}; load1 {row['load1']}", flush=True)
    return out


RATES = [2.0, 4.0, 8.0, 12.0]
RATE_DURATION_S = {"constant": 10.0, "poisson": 30.0}


def mdc_wait_s(rate: float, servers: int, service_s: float) -> float:
    """Mean wait in queue of M/D/c: Erlang C's M/M/c wait times Cosmetatos' correction."""
    load = rate * service_s  # offered load a, in servers
    rho = load / servers
    if rho >= 1.0:
        return float("inf")
    term, total = 1.0, 1.0
    for k in range(1, servers):
        term *= load / k
        total += term
    tail = term * load / servers / (1.0 - rho)  # a^c / c! / (1 - rho)
    erlang_c = tail / (total + tail)
    mmc = erlang_c * service_s / (servers * (1.0 - rho))
    factor = 0.5 * (1.0 + (1.0 - rho) * (servers - 1) * ((4.0 + 5.0 * servers) ** 0.5 - 2.0) / (16.0 * rho * servers))
    return mmc * factor


def rate_case(base: str, rate: float, arrival: str) -> dict[str, Any]:
    cfg = krs.ServerConfig(**_post(base + "/_config", {**CFG, "chunk_tokens": 1}))
    facts = sw.run_sweep(sw.SweepOptions(url=base, mode="rate", rates=[rate], arrival=arrival, seed=7 + int(rate),
                                         level_duration_s=RATE_DURATION_S[arrival], max_tokens=T, warmup=0,
                                         level_warmup=False))
    point = facts["points"][0]
    rows = [r for r in _get(base + "/_served") if r["max_tokens"] == T and r["done"] is not None]
    received = sorted(r["received"] for r in rows)
    server_rate = (len(received) - 1) / (received[-1] - received[0]) if len(received) > 1 else None
    waits = [r["slot"] - r["received"] for r in rows]
    service_s = cfg.service_time(T)
    # theory at the rate of the arrivals that happened (a seeded Poisson sample of 10-30 s is
    # not its mean rate)
    realized = point["scheduled_rate"] or rate
    theory = 0.0 if arrival == "constant" and realized * service_s < cfg.slots else mdc_wait_s(realized, cfg.slots, service_s)
    row = {
        "arrival": arrival, "offered_rate": rate, "scheduled_rate": point["scheduled_rate"],
        "achieved_rate": point["achieved_rate"], "server_arrival_rate": round(server_rate, 4) if server_rate else None,
        "requests": point["requests"], "ok": point["ok"],
        "server_wait_ms_mean": round(1000.0 * sum(waits) / len(waits), 1) if waits else None,
        "theory_wait_ms": round(1000.0 * theory, 1), "load1": round(os.getloadavg()[0], 2),
    }
    print(f"{arrival:8} {rate:5.1f} req/s: achieved {row['achieved_rate']} ({_dev(row['achieved_rate'], rate)} vs offered, "
          f"{_dev(row['achieved_rate'], row['scheduled_rate'])} vs the schedule {row['scheduled_rate']}); "
          f"the server saw {row['server_arrival_rate']}; slot wait {row['server_wait_ms_mean']} ms vs "
          f"{'D/D/c' if arrival == 'constant' else 'M/D/c'} {row['theory_wait_ms']} ms; "
          f"{row['ok']}/{row['requests']} ok; load1 {row['load1']}", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--part", choices=["concurrency", "rate", "all"], default="all")
    args = parser.parse_args()
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "unit" / "knownrate_server.py"), "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    rows: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 20.0)
        line = proc.stdout.readline() if ready else ""
        if not line.startswith("PORT "):
            raise SystemExit(f"the known-rate server did not start: {line!r}")
        base = f"http://127.0.0.1:{int(line.split()[1])}"
        for _ in range(args.reps):
            if args.part in ("concurrency", "all"):
                for api, chunk in CASES:
                    rows.extend(one_case(base, api, chunk))
            if args.part in ("rate", "all"):
                for arrival in ("constant", "poisson"):
                    rows.extend(rate_case(base, rate, arrival) for rate in RATES)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
