"""tune.yml comparing unified against a prefill/decode split of the same GPUs (issue 32)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from .conftest import cleanup, free_port_block, make_inventory

pytestmark = pytest.mark.integration


@pytest.mark.e2e
def test_tune_compares_unified_against_a_split_of_the_same_gpus(tmp_path: Path) -> None:
    """tune.yml with the space's pd on localhost's two GPUs, end to end: the split candidate (1P:1D)
    deploys both instances as a prefill and a decode, bench.yml sweeps them as one pair at C x 2
    with each request to both, the step scores it per instance, the report says how it was
    measured, and the winner is written back with its sglang_pd (the host's bootstrap port kept).
    One candidate, one level: the glue of tune.yml, the server and bench roles. The comparison
    with a unified candidate is tune's rule on two records (test_tune_search's
    test_unified_against_a_split_on_the_same_gpus_scored_per_instance); which one wins on the
    embedded engine is a speed ranking through wall clocks, where the pair's extra hop weighs 200
    times its share at this time scale (docs/tune.md)."""
    boot = free_port_block(1)
    dep = make_inventory(tmp_path, sglang_pd={"bootstrap_port": boot}, sglang_tune_vars_dir=str(tmp_path / "inv"),
                         sglang_env={"LLMOPS_SIM_STARTUP_SCALE": "0.05"})
    (tmp_path / "inv").mkdir()
    try:
        run = dep.play("tune.yml", timeout=600, sglang_tune_run_id="pd", sglang_tune_reports_dir=str(tmp_path / "r"),
                       sglang_tune_concurrency_levels=[1], sglang_bench_max_tokens=16,
                       sglang_tune_space={"profiles": ["baseline"], "pd": [{"prefill": 1, "decode": 1}]})
        assert run.rc == 0, run.out[-5000:]
        (outcome,) = json.loads((tmp_path / "r" / "pd" / "tune.json").read_text()).values()
        (split,) = outcome["results"]
        assert split["candidate"]["label"] == "baseline pd=1P:1D" and split["status"] == "swept", split
        points = split["sweep"]["points"]
        assert [(p["concurrency"], p["concurrency_swept"]) for p in points] == [(1, 2)]
        assert points[0]["ok"] == points[0]["requests"] and points[0]["sides"]["prefill"]["pd_kv_transfers"] >= \
            points[0]["ok"], points[0]
        assert split["sweep"]["options"]["pd"]["prefill"][0]["bootstrap_port"] == boot
        report = (tmp_path / "r" / "pd" / "tune.md").read_text()
        assert "per instance: its 2 instances swept together as one pair at C x 2" in report
        # the winner written back with its sglang_pd: as deployed, the host's bootstrap port kept
        tuned = yaml.safe_load((tmp_path / "inv" / "group_vars" / "sglang_servers" / "tuned.yml").read_text())
        assert tuned["sglang_pd"] == {"bootstrap_port": boot, "role": ["prefill", "decode"]}, tuned
        assert (outcome["fact"]["pd"], outcome["fact"]["instances"]) == ({"prefill": 1, "decode": 1}, 2)
    finally:
        cleanup(dep)
