#!/usr/bin/env python
"""Run commands side by side, each line of their output prefixed with its name; exit non-zero
when any of them failed (issue 27).

    python3 tools/side_by_side.py NAME 'COMMAND' [NAME 'COMMAND' ...]

Each COMMAND runs in `bash -c` in its own process group, its output (stdout and stderr) line by
line as `[NAME] line`, then `[NAME] done after N s (exit status S)`; after the last one a line
with the group's seconds. The exit status is the first failing command's (in the order given),
or 0. Ctrl-C or SIGTERM stops every command (its whole process group) and exits 130 or 143.
`make test` and `.ci/run` use it for the stages that leave the two cores idle part of the time;
tools/ci_timed.py reads the `done after` lines for each stage's own time.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time


def _pump(name: str, proc: subprocess.Popen, lock: threading.Lock) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        with lock:
            sys.stdout.write(f"[{name}] {line}" if line.endswith("\n") else f"[{name}] {line}\n")
            sys.stdout.flush()


def main(argv: list[str]) -> int:
    if not argv or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    jobs = list(zip(argv[0::2], argv[1::2], strict=True))
    lock = threading.Lock()
    started = time.monotonic()
    running: list[tuple[str, subprocess.Popen, threading.Thread, float]] = []

    def stop(signum: int, _frame: object) -> None:
        for _, proc, _, _ in running:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except OSError:
                    pass
        sys.exit(128 + signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    for name, command in jobs:
        proc = subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", bufsize=1, start_new_session=True)
        pump = threading.Thread(target=_pump, args=(name, proc, lock), daemon=True)
        pump.start()
        running.append((name, proc, pump, time.monotonic()))
    statuses: dict[str, int] = {}
    pending = list(running)
    while pending:  # report each one as it ends, in the order they end
        for item in list(pending):
            name, proc, pump, begun = item
            if proc.poll() is None:
                continue
            pump.join()
            statuses[name] = proc.returncode
            with lock:
                print(f"[{name}] done after {time.monotonic() - begun:.0f} s (exit status {proc.returncode})", flush=True)
            pending.remove(item)
        time.sleep(0.2)
    names = ", ".join(name for name, _ in jobs)
    print(f"side by side ({names}): {time.monotonic() - started:.0f} s", flush=True)
    return next((statuses[name] for name, _ in jobs if statuses[name]), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
