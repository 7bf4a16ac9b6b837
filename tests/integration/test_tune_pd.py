"""tune.yml comparing unified against a prefill/decode split of the same GPUs (issue 32)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from .conftest import cleanup, free_port_block, make_inventory

pytestmark = pytest.mark.integration


def test_tune_compares_unified_against_a_split_of_the_same_gpus(tmp_path: Path) -> None:
    """The space's pd on localhost's two GPUs: unified (one instance swept, as tune sweeps any
    candidate) and 1P:1D (both instances deployed as a prefill and a decode, swept as one pair at
    C x 2 with each request to both, scored per instance); the winner is written back with its
    sglang_pd, and the report says how the split was measured. One level: the glue of tune.yml,
    the server and bench roles (the scoring is test_tune_search's; which one wins is a speed
    ranking through wall clocks, where the pair's extra hop weighs 200 times its share at this
    time scale)."""
    boot = free_port_block(1)
    dep = make_inventory(tmp_path, sglang_pd={"bootstrap_port": boot}, sglang_tune_vars_dir=str(tmp_path / "inv"),
                         sglang_env={"LLMOPS_SIM_STARTUP_SCALE": "0.05"})
    (tmp_path / "inv").mkdir()
    try:
        run = dep.play("tune.yml", timeout=600, sglang_tune_run_id="pd", sglang_tune_reports_dir=str(tmp_path / "r"),
                       sglang_tune_concurrency_levels=[1], sglang_bench_max_tokens=16,
                       sglang_tune_space={"profiles": ["baseline"], "pd": [{}, {"prefill": 1, "decode": 1}]})
        assert run.rc == 0, run.out[-5000:]
        (outcome,) = json.loads((tmp_path / "r" / "pd" / "tune.json").read_text()).values()
        unified, split = outcome["results"]
        assert (unified["candidate"]["label"], split["candidate"]["label"]) == ("baseline unified", "baseline pd=1P:1D")
        assert unified["status"] == "swept" and split["status"] in ("swept", "pruned"), split
        points = split["sweep"]["points"]
        assert [(p["concurrency"], p["concurrency_swept"]) for p in points] == [(1, 2)]
        assert points[0]["ok"] == points[0]["requests"] and points[0]["sides"]["prefill"]["pd_kv_transfers"] >= \
            points[0]["ok"], points[0]
        assert split["sweep"]["options"]["pd"]["prefill"][0]["bootstrap_port"] == boot
        report = (tmp_path / "r" / "pd" / "tune.md").read_text()
        assert "per instance: its 2 instances swept together as one pair at C x 2" in report
        # the winner written back with its sglang_pd: as deployed, the host's bootstrap port kept
        tuned = yaml.safe_load((tmp_path / "inv" / "group_vars" / "sglang_servers" / "tuned.yml").read_text())
        won = outcome["fact"]["pd"]
        assert tuned["sglang_pd"] == ({"bootstrap_port": boot, "role": ["prefill", "decode"]} if won
                                      else {"bootstrap_port": boot}), tuned
    finally:
        cleanup(dep)
