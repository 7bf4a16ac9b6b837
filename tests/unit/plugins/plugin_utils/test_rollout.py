"""The order a host's instances are started and replaced in (plugin_utils/_rollout.py)."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import (
    RolloutError,
    capacity_floor,
    hosts_per_batch,
    out_per_host,
    rollout_batches,
)

PLAN = {"instances": [{"name": f"gpu{i}"} for i in range(4)]}


def _names(batches):
    return [([i["name"] for i in b["instances"]], b["restart"], b["replace"]) for b in batches]


def test_without_routers_parallel_is_one_batch_and_serial_one_per_instance() -> None:
    batches, warnings = rollout_batches(PLAN, ["gpu1"], ["gpu0", "gpu1", "gpu2", "gpu3"], policy="parallel")
    assert _names(batches) == [(["gpu0", "gpu1", "gpu2", "gpu3"], ["gpu1"], True)] and warnings == []
    batches, _ = rollout_batches(PLAN, ["gpu1", "gpu3"], ["gpu0", "gpu1"], policy="serial")
    assert _names(batches) == [(["gpu0"], [], False), (["gpu1"], ["gpu1"], True), (["gpu2"], [], False),
                               (["gpu3"], ["gpu3"], False)]


def test_behind_routers_new_instances_first_then_replacements_a_few_at_a_time() -> None:
    # gpu3 is new (not running); gpu0..gpu2 run and all changed
    batches, warnings = rollout_batches(PLAN, ["gpu0", "gpu1", "gpu2", "gpu3"], ["gpu0", "gpu1", "gpu2"],
                                        routed=True, at_once=1)
    assert _names(batches) == [(["gpu3"], ["gpu3"], False), (["gpu0"], ["gpu0"], True),
                               (["gpu1"], ["gpu1"], True), (["gpu2"], ["gpu2"], True)]
    assert warnings == []
    batches, _ = rollout_batches(PLAN, ["gpu0", "gpu1", "gpu2"], ["gpu0", "gpu1", "gpu2", "gpu3"],
                                 routed=True, at_once=2)
    assert _names(batches) == [(["gpu3"], [], False), (["gpu0", "gpu1"], ["gpu0", "gpu1"], True),
                               (["gpu2"], ["gpu2"], True)]


def test_never_every_instance_of_a_host_at_once_behind_routers() -> None:
    running = ["gpu0", "gpu1", "gpu2", "gpu3"]
    batches, warnings = rollout_batches(PLAN, running, running, routed=True, at_once=8)
    assert [len(b["instances"]) for b in batches] == [3, 1]
    assert "every instance of this host" in warnings[0]
    nothing, _ = rollout_batches(PLAN, [], running, routed=True)
    assert _names(nothing) == [(running, [], False)]  # one batch: starts nothing, changes nothing


# --- the capacity floor ---------------------------------------------------------------------


def test_largest_batch_that_keeps_the_floor() -> None:
    # 10 hosts x 4 instances, one instance per host out at a time, 90 % must stay: 36 of 40
    floor = capacity_floor(hosts=10, per_host=4, at_once=1, min_available="90%", batch=4)
    assert floor["floor"] == 36 and floor["max_hosts"] == 4 and floor["max_instances_out"] == 4
    assert floor["requested_kept"] == 36
    # two at once per host: 2 hosts at most
    assert capacity_floor(hosts=10, per_host=4, at_once=2, min_available=36, batch=2)["max_hosts"] == 2


def test_percent_floor_rounds_up_and_batch_percent_rounds_down() -> None:
    assert capacity_floor(hosts=3, per_host=2, min_available="50%", batch=1)["floor"] == 3
    assert capacity_floor(hosts=3, per_host=3, min_available="50%", batch=1)["floor"] == 5  # 4.5 -> 5
    assert hosts_per_batch("50%", 5) == 2 and hosts_per_batch("10%", 5) == 1 and hosts_per_batch(9, 5) == 5


def test_batch_that_breaks_the_floor_refused_with_the_largest_that_holds() -> None:
    with pytest.raises(RolloutError, match=r"sglang_rollout_batch='100%' rolls 10 hosts.*at most 4 \(or 40%\)"):
        capacity_floor(hosts=10, per_host=4, min_available="90%", batch="100%")


def test_floor_that_cannot_hold_at_all_refused() -> None:
    with pytest.raises(RolloutError, match="replacing even one host takes 1 out"):
        capacity_floor(hosts=3, per_host=2, min_available=6, batch=1)
    with pytest.raises(RolloutError, match="more than the fleet's 6"):
        capacity_floor(hosts=3, per_host=2, min_available=7, batch=1)
    with pytest.raises(RolloutError, match="neither a count"):
        capacity_floor(hosts=3, per_host=2, min_available="lots")


def test_no_floor_and_hosts_of_one_instance() -> None:
    assert capacity_floor(hosts=4, per_host=1, batch="100%")["requested_kept"] == 0
    assert capacity_floor(hosts=4, per_host=1, min_available="50%", batch=2)["max_hosts"] == 2
    assert out_per_host(4, 9) == 3 and out_per_host(1, 1) == 1
