#!/usr/bin/env python
"""The sweep client's ceiling with one process and with several (docs/PERFORMANCE.md, "Client
ceiling: one process vs several").

    .venv/bin/python tools/bench/client_ceiling.py [--processes 1 2] [--concurrency 64]
        [--reps 5] [--requests-per-c 8] [--max-tokens 512] [--per-event-writes] [--json out.json]

Starts tools/bench/zero_server.py (answers at once, one token per chunk, so chunk/s = tok/s) on a
free loopback port and runs one level of ``_sweep.run_sweep`` per (rep, processes), the process
counts in turn and their order reversed every other rep (1 2, 2 1, ...), so that a change of the
machine's load hits both alike. Prints one line per run (tok/s, the worst process's CPU use and
loop lag, client_limited, the server's CPU seconds, the load average) and per rep the ratio of
each process count's tok/s to one process's. The figures are the point's ``output_tok_s``
(server-counted tokens / level wall time). Nothing is pinned: on a 2-core machine the server and
the clients share both cores, as they would on a host that runs the sweep next to a router.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.llmops.sglang.plugins.module_utils._sweep import SweepOptions, run_sweep  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start_server(per_event: bool) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    cmd = [sys.executable, str(ROOT / "tools" / "bench" / "zero_server.py"), "--port", str(port)]
    proc = subprocess.Popen(cmd + (["--per-event-writes"] if per_event else []),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 20.0)
    if not ready or not proc.stdout.readline().startswith("PORT ") or not _accepts(port):
        proc.kill()
        raise SystemExit("zero_server.py did not start")
    return proc, f"http://127.0.0.1:{port}"


def _accepts(port: int, seconds: float = 10.0) -> bool:
    """zero_server prints PORT at the app's start-up, just before it listens: wait for that."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def _one(url: str, server_pid: int, a: argparse.Namespace, processes: int, rep: int) -> dict[str, object]:
    opts = SweepOptions(url=url, concurrency=[a.concurrency], requests=a.requests_per_c * a.concurrency,
                        max_tokens=a.max_tokens, warmup=1, level_warmup=False, return_records=False,
                        client_processes=processes)
    cpu0 = _cpu_s(server_pid)
    fact = run_sweep(opts)
    point = fact["points"][0]
    row = {"rep": rep, "processes": point["client_processes"], "tok_s": point["output_tok_s"],
           "ok": point["ok"], "requests": point["requests"], "duration_s": point["duration_s"],
           "cpu_util": point["client"]["cpu_util"], "lag_ms_p99": point["client"]["loop_lag_ms_p99"],
           "client_limited": point["client_limited"], "server_cpu_s": round(_cpu_s(server_pid) - cpu0, 2),
           "load": os.getloadavg()[0]}
    print(f"rep {rep} P={row['processes']} C={a.concurrency} ok={row['ok']}/{row['requests']} "
          f"dur={row['duration_s']:.2f}s tok/s={row['tok_s']:.0f} cpu_util(max)={row['cpu_util']} "
          f"lag_p99_ms(max)={row['lag_ms_p99']} client_limited={row['client_limited']} "
          f"server_cpu={row['server_cpu_s']}s load1={row['load']:.2f}", flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--requests-per-c", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--per-event-writes", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    server, url = _start_server(a.per_event_writes)
    rows = []
    try:
        print(f"cpus={os.cpu_count()} load1={os.getloadavg()[0]:.2f} server={'per-event' if a.per_event_writes else 'bulk'}",
              flush=True)
        for rep in range(1, a.reps + 1):
            order = a.processes if rep % 2 else list(reversed(a.processes))
            got = {p: _one(url, server.pid, a, p, rep) for p in order}
            rows.extend(got.values())
            base = got[a.processes[0]]["tok_s"]
            ratios = " ".join(f"P={p}/P={a.processes[0]}={float(got[p]['tok_s']) / float(base):.2f}"  # type: ignore[arg-type]
                              for p in a.processes[1:])
            print(f"rep {rep} ratio {ratios}", flush=True)
            time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=10)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
