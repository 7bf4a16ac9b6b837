"""The order a host's instances are started and replaced in (plugin_utils/_rollout.py)."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import rollout_batches

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
