"""The capacity answer (module_utils/_bench/capacity.py, computed by sweep_report), exact on given sweeps."""
from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._bench import capacity as _capacity

H200 = {"gpus": [{"name": "NVIDIA H200", "memory_total_mib": 143771}] * 8}
A100 = {"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920}] * 4}


def _sweep(mode: str, levels: list[tuple[float, bool]]) -> dict[str, Any]:
    key = "offered_rate" if mode == "rate" else "req_s"
    return {"mode": mode, "slo": {"ttft_p99_ms": 500.0},
            "points": [{key: load, "slo_met": met} for load, met in levels]}


def _item(host: str, instance: str, sweep: dict[str, Any]) -> dict[str, Any]:
    return {"meta": {"host": host, "instance": instance}, "sweep": sweep}


def test_instance_limit_is_the_highest_level_meeting_the_slo() -> None:
    assert _capacity.instance_limit(_sweep("rate", [(2, True), (4, True), (8, False), (5.6, True)])) == 5.6
    assert _capacity.instance_limit(_sweep("concurrency", [(3.5, True), (6.0, False)])) == 3.5
    assert _capacity.instance_limit(_sweep("rate", [(2, False)])) is None
    assert _capacity.instance_limit({"mode": "rate", "points": [{"offered_rate": 2, "slo_met": True}]}) is None


def test_hosts_needed_per_class() -> None:
    items = [
        _item("h1", "gpu0", _sweep("rate", [(4, True), (6, True), (8, False)])),
        _item("h1", "gpu1", _sweep("rate", [(4, True), (5, True), (8, False)])),
        _item("a1", "gpu0", _sweep("rate", [(2, True), (3, False)])),
    ]
    facts = {"h1": H200, "h2": H200, "a1": A100}
    fact = _capacity.capacity(items, facts, 42)
    by = {c["class"]: c for c in fact["classes"]}
    h200 = by["nvidia_h200_x8_143771mib"]
    # the lowest instance limit (5 req/s): ceil(42 / 5) = 9 instances, 2 per host -> 5 hosts, 2 in the inventory
    assert (h200["limit_rps_min"], h200["limit_rps_mean"]) == (5.0, 5.5)
    assert (h200["instances_needed"], h200["instances_per_host"], h200["hosts_needed"]) == (9, 2, 5)
    assert h200["hosts_in_inventory"] == 2 and h200["enough"] is False
    a100 = by["nvidia_a100_sxm4_80gb_x4_81920mib"]
    assert (a100["instances_needed"], a100["hosts_needed"], a100["hosts_in_inventory"]) == (21, 21, 1)
    assert fact["target_rps"] == 42.0 and fact["slo"] == {"ttft_p99_ms": 500.0}
    small = _capacity.capacity(items, facts, 10)
    assert {c["class"]: c["enough"] for c in small["classes"]}["nvidia_h200_x8_143771mib"] is True
    assert "| nvidia_h200_x8_143771mib | 5 / 5.5 | 2 | 2 | 1 | 2 | yes |" in _capacity.render_markdown(small)


def test_no_slo_result_and_bad_targets() -> None:
    items = [_item("h1", "gpu0", _sweep("rate", [(4, False)]))]
    fact = _capacity.capacity(items, {}, 10)
    assert fact["classes"][0]["hosts_needed"] is None and "set sglang_bench_slo" in fact["classes"][0]["note"]
    with pytest.raises(_capacity.CapacityError, match="sglang_bench_capacity_target_rps"):
        _capacity.capacity(items, {}, 0)


def test_a_routers_sweep_is_not_an_instance() -> None:
    items = [_item("h1", "gpu0", _sweep("rate", [(4, True)])),
             {"meta": {"host": "h1", "instance": "router", "role": "router"}, "sweep": _sweep("rate", [(1, True)])}]
    fact = _capacity.capacity(items, {"h1": H200, "h2": H200}, 9)
    only = fact["classes"][0]
    assert [i["instance"] for i in only["instances"]] == ["gpu0"]
    assert only["hosts_in_inventory"] == 2 and only["limit_rps_min"] == 4 and only["hosts_needed"] == 3


def test_gpu_class_key() -> None:
    assert _capacity.gpu_class_key(H200) == "nvidia_h200_x8_143771mib"
    assert _capacity.gpu_class_key({}) == "nogpu"
