"""The order a host's instances are started and replaced in (plugin_utils/_rollout.py)."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import (
    RolloutError,
    batch_percent,
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


def test_canary_is_the_first_replaced_batch_and_other_batches_are_guarded() -> None:
    running = ["gpu0", "gpu1", "gpu2", "gpu3"]
    batches, warnings = rollout_batches(PLAN, running, running, routed=True, at_once=2, canary=1, canary_s=60,
                                        guard_s=30)
    assert _names(batches) == [(["gpu0"], ["gpu0"], True), (["gpu1", "gpu2"], ["gpu1", "gpu2"], True),
                               (["gpu3"], ["gpu3"], True)]
    assert [(b["canary"], b["guard_s"]) for b in batches] == [(True, 60.0), (False, 30.0), (False, 30.0)]
    assert warnings == []
    # the canary is at most at_once; new instances are never watched
    batches, _ = rollout_batches(PLAN, ["gpu0", "gpu3"], ["gpu0", "gpu1", "gpu2"], routed=True, canary=5, canary_s=60)
    assert [(b["restart"], b["canary"], b["guard_s"]) for b in batches] == [
        (["gpu3"], False, 0.0), (["gpu0"], True, 60.0)]  # gpu1..gpu3 start (or keep running) first


def test_no_canary_when_the_host_is_not_alone_in_its_batch() -> None:
    running = ["gpu0", "gpu1"]
    batches, warnings = rollout_batches({"instances": PLAN["instances"][:2]}, running, running, routed=True,
                                        canary=1, canary_s=60, canary_alone=False)
    assert not any(b["canary"] for b in batches) and "-e sglang_rollout_canary" in warnings[0]


def test_hosts_of_different_sizes_count_their_largest_in_one_batch() -> None:
    # 4, 4, 2, 1 routed instances (a host of one replaces its only one), one out per host at once
    floor = capacity_floor(per_host=[4, 4, 2, 1], min_available=9, batch=2)
    assert floor["instances"] == 11 and floor["floor"] == 9 and floor["max_hosts"] == 2
    assert floor["requested_kept"] == 9 and floor["min_in_routers"] == 9
    # two at once per host: the two 4-instance hosts take 2 each, the 2-instance host 1
    floor = capacity_floor(per_host=[4, 2, 4], at_once=2, min_available=6, batch=1)
    assert floor["out_per_host"] == 2 and floor["max_hosts"] == 2 and floor["max_instances_out"] == 4
    with pytest.raises(RolloutError, match=r"rolls 3 hosts at once, taking 5 of 10 .* at most 2 \(or 67%\)"):
        capacity_floor(per_host=[4, 2, 4], at_once=2, min_available=6, batch="100%")
    # a host with no instance in the routers (other ranks of multi-node groups) takes none out
    assert capacity_floor(per_host=[2, 0], min_available=1, batch=2)["requested_kept"] == 1
    with pytest.raises(RolloutError, match=r"\(2 hosts of 1 to 3 instances\)"):
        capacity_floor(per_host=[3, 1], min_available=4)


def test_the_int_form_and_the_list_form_agree() -> None:
    for hosts, per_host, at_once, floor, batch in ((10, 4, 1, "90%", 4), (3, 2, 1, 3, 2), (5, 3, 2, "40%", "40%")):
        one = capacity_floor(hosts=hosts, per_host=per_host, at_once=at_once, min_available=floor, batch=batch)
        listed = capacity_floor(per_host=[per_host] * hosts, at_once=at_once, min_available=floor, batch=batch)
        assert one == listed


def test_canary_counts_against_the_floor() -> None:
    floor = capacity_floor(hosts=3, per_host=2, min_available=5, batch=1, canary=1)
    assert floor["canary_out"] == 1 and floor["min_in_routers"] == 5
    # 3 canary instances over 2 hosts: one out per host at once = 2 out
    assert capacity_floor(hosts=3, per_host=2, min_available=4, batch=1, canary=3)["canary_out"] == 2
    with pytest.raises(RolloutError, match=r"sglang_rollout_canary=3 takes 2 instances .* at most 1"):
        capacity_floor(hosts=3, per_host=2, min_available=5, batch=1, canary=3)
    with pytest.raises(RolloutError, match="more canary instances than the fleet's 6"):
        capacity_floor(hosts=3, per_host=2, batch=1, canary=7)
    for bad in ("10%", -1, True, 1.5):
        with pytest.raises(RolloutError, match="sglang_rollout_canary=.* is not a count"):
            capacity_floor(hosts=3, per_host=2, canary=bad)


def test_an_empty_floor_is_no_floor_and_a_fleet_without_routed_instances_refused() -> None:
    assert capacity_floor(hosts=2, per_host=2, min_available="", batch=2)["floor"] == 0
    with pytest.raises(RolloutError, match="at least one host and one instance"):
        capacity_floor(per_host=[0, 0])
    with pytest.raises(RolloutError, match="at least one host"):
        capacity_floor(per_host=[])


def test_the_percentage_offered_puts_at_most_the_largest_batch_in_one() -> None:
    assert batch_percent(4, 10) == 40 and batch_percent(2, 3) == 67 and batch_percent(7, 500) == 1
    for hosts in (1, 3, 7, 10, 99, 500):
        for size in range(1, hosts + 1, max(1, hosts // 7)):
            assert hosts_per_batch(f"{batch_percent(size, hosts)}%", hosts) <= size


def test_a_pd_hosts_replacements_go_one_side_at_a_time_and_keep_a_pair() -> None:
    """sglang_pd: behind the router a PD host replaces its decodes, then its prefills, never every
    instance of a side it has more than one of (the router keeps a pair from this host), each batch
    one side (drained as a side); a side with one instance here is named: only another host's
    instance of that side keeps the pair while it restarts."""
    roles = ["prefill", "prefill", "decode", "decode", "decode"]
    plan = {"instances": [{"name": f"gpu{i}", "pd_role": role} for i, role in enumerate(roles)]}
    running = [f"gpu{i}" for i in range(5)]
    batches, warnings = rollout_batches(plan, running, running, routed=True, at_once=4)
    assert _names(batches) == [(["gpu2", "gpu3"], ["gpu2", "gpu3"], True), (["gpu4"], ["gpu4"], True),
                               (["gpu0"], ["gpu0"], True), (["gpu1"], ["gpu1"], True)]
    assert warnings == []
    # the canary: the first decode alone
    batches, _ = rollout_batches(plan, running, running, routed=True, at_once=4, canary=1, canary_s=60)
    assert [(b["canary"], [i["name"] for i in b["instances"]]) for b in batches][:2] == [(True, ["gpu2"]),
                                                                                         (False, ["gpu3"])]
    split = {"instances": [{"name": "gpu0", "pd_role": "prefill"}, {"name": "gpu1", "pd_role": "decode"}]}
    batches, warnings = rollout_batches(split, ["gpu0", "gpu1"], ["gpu0", "gpu1"], routed=True, at_once=1)
    assert _names(batches) == [(["gpu1"], ["gpu1"], True), (["gpu0"], ["gpu0"], True)]
    assert warnings == [
        "gpu1 is this host's only decode instance: while it is replaced the router keeps a prefill/decode pair "
        "only through another host's decode instance",
        "gpu0 is this host's only prefill instance: while it is replaced the router keeps a prefill/decode pair "
        "only through another host's prefill instance"]


def test_a_pd_fleet_keeps_a_prefill_and_a_decode_in_the_routers_or_says_it_cannot() -> None:
    from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import pd_pair_check

    two = {"node-1": {"prefill": 1, "decode": 1}, "node-2": {"prefill": 1, "decode": 1}}
    assert pd_pair_check(two, at_once=1, batch_hosts=1) == []  # one host at a time: the other keeps the pair
    both = pd_pair_check(two, at_once=1, batch_hosts=2)
    heads = [m.split(" instance")[0] for m in both]
    assert heads == ["a rollout of 2 host(s) at once takes every prefill", "a rollout of 2 host(s) at once takes every decode"]
    assert "roll fewer hosts at once (sglang_rollout_batch) or run more prefill instances (sglang_pd)" in both[0]
    # one host with two of each: its batches never take both of a side
    assert pd_pair_check({"node-1": {"prefill": 2, "decode": 2}}, at_once=4, batch_hosts=1) == []
    # a one-host split has nothing to keep the pair with
    assert len(pd_pair_check({"node-1": {"prefill": 1, "decode": 1}}, at_once=1, batch_hosts=1)) == 2
