#!/usr/bin/env python
"""Run a CI command (default `.ci/run`) N times back to back, optionally beside CPU-heavy busy
loops, and time each step from the lines make echoes.

Issue 16 asks that `.ci/run` passes twice in a row with another CPU-heavy job beside it, with the
time of each step recorded (docs/DEVELOPING.md, "CI's time, step by step"). This is the tool
that did it:

    git clone /path/to/checkout /tmp/ci && cd /tmp/ci
    python3 tools/ci_timed.py --repeat 2 --burn 1 --log-dir /tmp/ci-logs

--burn N starts N processes that each keep one core busy (a pure-Python loop) for the whole
run, and stops them at the end. Every output line goes to <log-dir>/run-K.log prefixed with
the seconds since that run started; the step table is printed after each run and written to
<log-dir>/steps.md. The exit status is the first failing run's, or 0.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time

# A step starts at the first line that contains its marker (the command make echoes).
STEPS = (
    ("setup", "-m venv"),
    ("lint", "ruff check"),
    ("unit", "pytest -q -n 2 tests/unit"),
    ("integration", '-m "not e2e"'),
    ("molecule", "molecule test"),
    ("build", "ansible-galaxy collection build"),
    ("sanity", "ansible-test sanity --local"),
    ("test-newcore", ".venv-new"),
    ("e2e", "-n 2 -m e2e"),
    ("fleet-test", "tests/fleet"),
)


def _burn() -> None:
    while True:
        pass


def _steps(marks: list[tuple[str, float]], end: float) -> list[tuple[str, float]]:
    out = []
    for index, (name, start) in enumerate(marks):
        stop = marks[index + 1][1] if index + 1 < len(marks) else end
        out.append((name, stop - start))
    return out


def run_once(command: list[str], log_path: str) -> tuple[int, float, list[tuple[str, float]]]:
    start = time.monotonic()
    marks: list[tuple[str, float]] = []
    seen: set[str] = set()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.monotonic() - start
            log.write(f"[{now:7.1f}] {line}")
            log.flush()
            for name, marker in STEPS:
                if name not in seen and marker in line:
                    seen.add(name)
                    marks.append((name, now))
        rc = proc.wait()
    total = time.monotonic() - start
    return rc, total, _steps(marks, total)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--burn", type=int, default=1, help="busy-loop processes beside the runs")
    parser.add_argument("--log-dir", default="build/ci-timed")
    parser.add_argument("command", nargs="*", default=[".ci/run"])
    args = parser.parse_args()
    os.makedirs(args.log_dir, exist_ok=True)
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(args.burn)]
    for proc in burners:
        proc.start()
    first_failure = 0
    table = ["| run | step | seconds |", "|---|---|---|"]
    try:
        for run in range(1, args.repeat + 1):
            rc, total, steps = run_once(args.command, os.path.join(args.log_dir, f"run-{run}.log"))
            for name, seconds in steps:
                table.append(f"| {run} | {name} | {seconds:.0f} |")
            table.append(f"| {run} | **all (rc {rc})** | {total:.0f} |")
            print("\n".join(table), flush=True)
            with open(os.path.join(args.log_dir, "steps.md"), "w", encoding="utf-8") as handle:
                handle.write(f"burners: {args.burn}, command: {' '.join(args.command)}\n\n")
                handle.write("\n".join(table) + "\n")
            if rc and not first_failure:
                first_failure = rc
    finally:
        for proc in burners:
            proc.terminate()
    return first_failure


if __name__ == "__main__":
    sys.exit(main())
