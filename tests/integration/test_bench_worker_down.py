"""A bench through the router with one worker dead (issue 16, the unclear case, decided): the
workers that are up are swept, the dead one is reported as DOWN beside them, the fleet total is
the healthy ones', and the play's result follows sglang_bench_fail_on_errors."""
from __future__ import annotations

import csv
import json
import os
import signal
import time
from pathlib import Path

import pytest

from .conftest import group_members
from .test_router import router_inventory, stop_all

# several minutes per test (playbooks run end to end, interrupted, re-run): make e2e, not make test
pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def test_bench_through_the_router_with_a_dead_worker_keeps_the_healthy_workers_results(tmp_path: Path) -> None:
    # before: the dead worker's sweep failed ("cannot learn the model name ... is the server up?"),
    # the host failed in the first play, the router play never ran and gpu0's sweep was lost
    dep = router_inventory(tmp_path)
    try:
        deployed = dep.play("deploy.yml")
        assert deployed.rc == 0, deployed.out[-4000:]
        gpu1 = dep.pids()["gpu1"]
        os.killpg(gpu1, signal.SIGKILL)
        for _ in range(200):  # at most 10 s for the group to be gone
            if not group_members(gpu1):
                break
            time.sleep(0.05)
        reports = tmp_path / "reports"
        bench = {"sglang_bench_target": "router", "sglang_bench_concurrency": [1, 2], "sglang_bench_max_tokens": 32,
                 "sglang_bench_reports_dir": str(reports)}
        run = dep.play("bench.yml", sglang_bench_run_id="down", **bench)
        assert run.rc == 0, run.out[-4000:]
        out = " ".join(run.out.split())
        assert "1 worker(s) down when the bench began, not swept: localhost/gpu1" in out
        folder = reports / "down"
        names = {p.name for p in folder.glob("localhost_*.json")}
        assert names == {"localhost_gpu0_baseline.json", "localhost_router_baseline.json"}
        gpu0 = json.loads((folder / "localhost_gpu0_baseline.json").read_text())["sweep"]
        assert [p["status"] for p in gpu0["points"]] == ["ok", "ok"]
        router = json.loads((folder / "localhost_router_baseline.json").read_text())
        assert [(d["host"], d["instance"]) for d in router["meta"]["workers_down"]] == [("localhost", "gpu1")]
        rows = list(csv.DictReader((folder / "fleet.csv").open()))
        at1 = [r for r in rows if r["concurrency"] == "1"]
        assert [r["view"] for r in at1] == ["worker", "down", "fleet", "router"]
        assert at1[1]["label"].startswith("localhost/gpu1 DOWN, not swept (/health no answer")
        assert at1[2]["label"] == "fleet total (1 of 2 workers, merged; down: localhost/gpu1)"
        assert at1[2]["requests"] == at1[0]["requests"] and int(at1[0]["requests"]) > 0

        # asked to fail on errors: the same report first, then the play fails naming the worker
        failed = dep.play("bench.yml", sglang_bench_run_id="down-fail", sglang_bench_fail_on_errors=True, **bench)
        assert failed.rc == 2, failed.out[-4000:]
        assert "workers down when the bench began" in " ".join(failed.out.split())
        assert (reports / "down-fail" / "fleet.csv").exists()
    finally:
        stop_all(dep)
