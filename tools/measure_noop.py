#!/usr/bin/env python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Measure a no-change re-run of playbooks/deploy.yml against a one-task ping playbook.

    .venv/bin/python tools/measure_noop.py [-i inventories/local] [--pairs 3] [-e KEY=VALUE ...]

Deploys once (so that the re-runs change nothing), then:
- one re-run at -vvv: the `Using module file` lines (module executions on the hosts) by module,
  and the tasks the PLAY RECAP reports (ok + changed + skipped + failed + rescued + ignored);
- ``--pairs`` pairs, taken in turn (ping, deploy, ping, deploy, ...): the wall time of each and
  the median ratio deploy / ping.
Prints one JSON document. ``-e`` is passed to both playbooks (other ports beside another run).
Leaves the deployment running (``ansible-playbook playbooks/stop.yml`` stops it).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RECAP = re.compile(r"^\S+\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)"
                   r"\s+rescued=(\d+)\s+ignored=(\d+)", re.M)
PING = "- name: One task\n  hosts: all\n  gather_facts: false\n  tasks:\n    - name: Ping\n      ansible.builtin.ping:\n"


def play(playbook: Path, inventory: str, extra: list[str], *args: str) -> tuple[float, str]:
    cmd = [str(BIN / "ansible-playbook"), "-i", inventory, str(playbook), *args]
    for item in extra:
        cmd += ["-e", item]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode:
        sys.exit(f"{playbook.name} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    return wall, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-i", "--inventory", default="inventories/local")
    parser.add_argument("-e", "--extra", action="append", default=[])
    parser.add_argument("--pairs", type=int, default=3)
    opts = parser.parse_args()
    deploy = ROOT / "playbooks" / "deploy.yml"
    with tempfile.TemporaryDirectory() as tmp:
        ping = Path(tmp) / "ping.yml"
        ping.write_text(PING)
        play(deploy, opts.inventory, opts.extra)
        _, out = play(deploy, opts.inventory, opts.extra, "-vvv")
        modules = collections.Counter(Path(line.split()[-1]).stem for line in out.splitlines()
                                      if line.startswith("Using module file"))
        recap = [sum(int(x) for i, x in enumerate(m) if i != 2) for m in RECAP.findall(out)]
        changed = sum(int(m[1]) for m in RECAP.findall(out))
        pairs = []
        for _ in range(opts.pairs):
            pairs.append((play(ping, opts.inventory, opts.extra)[0], play(deploy, opts.inventory, opts.extra)[0]))
    print(json.dumps({
        "module_executions": sum(modules.values()), "by_module": dict(modules.most_common()),
        "tasks_reported": sum(recap), "changed": changed,
        "pairs_s": [[round(a, 2), round(b, 2)] for a, b in pairs],
        "ratio_median": round(statistics.median(b / a for a, b in pairs), 1),
    }, indent=2))


if __name__ == "__main__":
    main()
