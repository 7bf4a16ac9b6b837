"""bench.yml in open-loop rate mode with an SLO and a capacity target, end to end on the embedded engine."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Deployment

pytestmark = pytest.mark.integration


def test_rate_mode_reports_goodput_and_the_capacity_answer(deployment: Deployment, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    deployed = deployment.play("deploy.yml", sglang_gpus=[0])
    assert deployed.rc == 0, deployed.out[-4000:]
    # rates in the engine's modelled time (time scale 0.005: 200x faster in wall time)
    run = deployment.play("bench.yml", sglang_gpus=[0], sglang_bench_reports_dir=str(reports),
                          sglang_bench_mode="rate", sglang_bench_rates=[0.5, 1.0], sglang_bench_requests=8,
                          sglang_bench_arrival="constant", sglang_bench_max_tokens=64,
                          sglang_bench_slo={"ttft_p99_ms": 1000000}, sglang_bench_capacity_target_rps=2.5)
    assert run.rc == 0, run.out[-4000:]
    folder = (reports / "latest").resolve()
    data = json.loads(next(folder.glob("localhost_gpu0_*.json")).read_text())
    sweep = data["sweep"]
    assert sweep["mode"] == "rate" and sweep["slo"] == {"ttft_p99_ms": 1000000.0}
    points = sweep["points"]
    assert [p["offered_rate"] for p in points] == [0.5, 1.0]
    for point in points:
        assert point["requests"] == 8 and point["ok"] == 8 and point["unsent"] == 0
        assert point["scheduled_rate"] == pytest.approx(point["offered_rate"], rel=0.01)
        assert point["slo_met"] and point["slo_attainment"] == 1.0 and point["goodput_req_s"] > 0
    # 1 req/s met the SLO: ceil(2.5 / 1) = 3 instances, one per host, 3 hosts; the inventory has one
    table = (folder / "capacity.md").read_text()
    assert "| 1 / 1 | 1 | 3 | 3 | 1 | **no** |" in table, table
    assert "hosts needed" in run.out
