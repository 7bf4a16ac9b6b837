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
<log-dir>/steps.md, and every test's seconds (each stage's pytest `--durations=0` rows, setup,
call and teardown added up) to <log-dir>/durations-K.md. The exit status is the first failing run's, or 0.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import time

# A step starts at the first line that contains its marker (the command make echoes).
STEPS = (
    ("setup", "-m venv"),
    ("lint", "ruff check"),
    ("unit", "--durations=0 tests/unit"),
    ("integration", '-m "not e2e"'),
    ("molecule", "molecule test"),
    ("build", "ansible-galaxy collection build"),
    ("sanity", "ansible-test sanity --local"),
    ("test-newcore", "--ansible-facing"),
    ("e2e", "-n 2 -m e2e"),
    ("fleet-test", "tests/fleet"),
)


# tools/side_by_side.py's line when one of the stages it runs side by side ended (make test's lint,
# unit, molecule, sanity and the newest core's venv; .ci/run's e2e and fleet), and its line when
# the whole group ended; a stage's own name in the step table (side_by_side.py's name -> STEPS').
SIDE_BY_SIDE = re.compile(r"^\[([\w-]+)\] done after (\d+) s")
GROUP = re.compile(r"^side by side \(([^)]*)\): (\d+) s")
SIDE_STEPS = {"fleet": ("fleet-test",), "sanity": ("build", "sanity"), "setup-newcore": (),
              "newcore": ("test-newcore",), "browser": ()}
# The prefix side_by_side.py puts on each line of a stage it runs.
PREFIX = re.compile(r"^\[([\w-]+)\] ")
# A row of pytest's `--durations=0` table (every stage's pytest prints one): seconds, phase, test.
DURATION = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S+)")


def durations(log_path: str) -> list[tuple[str, str, str, float]]:
    """(step, test, phase, seconds) for every `--durations=0` row of a run's log, the step being
    the one the row was printed in."""
    rows: list[tuple[str, str, str, float]] = []
    seen: set[str] = set()
    step = ""
    with open(log_path, encoding="utf-8", errors="replace") as log:
        for raw in log:
            line = raw.split("] ", 1)[1] if raw.startswith("[") and "] " in raw else raw
            stage = PREFIX.match(line)
            if stage:  # a line of a stage run side by side: its prefix names the step
                line = line[stage.end():]
                step = (SIDE_STEPS.get(stage[1]) or (stage[1],))[-1]
                seen.add(step)
            else:
                for name, marker in STEPS:
                    if name not in seen and marker in line:
                        seen.add(name)
                        step = name
            match = DURATION.match(line)
            if match:
                rows.append((step, match[3], match[2], float(match[1])))
    return rows


def durations_table(rows: list[tuple[str, str, str, float]]) -> str:
    """Markdown: per test (setup, call and teardown added up), slowest first within each step,
    with each step's sum."""
    per_test: dict[tuple[str, str], float] = {}
    for step, test, _, seconds in rows:
        per_test[step, test] = per_test.get((step, test), 0.0) + seconds
    lines = ["| step | test | seconds |", "|---|---|---|"]
    for step in dict.fromkeys(step for step, _ in per_test):
        tests = sorted(((t, s) for (st, t), s in per_test.items() if st == step), key=lambda ts: -ts[1])
        lines += [f"| {step} | `{test}` | {seconds:.1f} |" for test, seconds in tests]
        lines.append(f"| {step} | **{len(tests)} tests, sum** | {sum(s for _, s in tests):.0f} |")
    return "\n".join(lines) + "\n"


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
    side: list[tuple[str, float]] = []
    groups: list[tuple[str, float, float]] = []
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
            done = SIDE_BY_SIDE.match(line)
            if done:
                side.append((done[1], float(done[2])))
            group = GROUP.match(line)
            if group:
                groups.append((group[1], float(group[2]), now))
        rc = proc.wait()
    total = time.monotonic() - start
    return rc, total, _table(marks, side, groups, total)


def _table(marks: list[tuple[str, float]], side: list[tuple[str, float]],
           groups: list[tuple[str, float, float]], total: float) -> list[tuple[str, float]]:
    """The steps in order: a sequential one's time from its start to the next one's; the stages
    of a side-by-side group each with its own time, then the group's (its line ends it)."""
    inside = {step for name, _ in side for step in SIDE_STEPS.get(name, (name,))}
    steps: list[tuple[str, float]] = []
    done: set[str] = set()
    for name, seconds in _steps(marks, total):
        if name not in inside:
            steps.append((name, seconds))
            continue
        for label, names, group_seconds, _ in [(g[0], g[0].split(", "), g[1], g[2]) for g in groups]:
            if label in done or not any(name in SIDE_STEPS.get(n, (n,)) for n in names):
                continue
            done.add(label)
            steps += [(f"{n} (side by side)", s) for n, s in side if n in names]
            steps.append((f"{label.replace(', ', ' + ')} (together)", group_seconds))
    return steps


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
            log_path = os.path.join(args.log_dir, f"run-{run}.log")
            with open(os.path.join(args.log_dir, f"durations-{run}.md"), "w", encoding="utf-8") as handle:
                handle.write(durations_table(durations(log_path)))
            if rc and not first_failure:
                first_failure = rc
    finally:
        for proc in burners:
            proc.terminate()
    return first_failure


if __name__ == "__main__":
    sys.exit(main())
