"""deploy.yml's rollout check (plugin_utils/_rolloutcheck.py): the capacity floor and the time
estimate from hostvars-shaped input (what action router_plan hands it), hosts of different sizes,
where each input of the estimate comes from, and the refusals."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import ESTIMATE_DEFAULTS, RolloutError
from ansible_collections.llmops.sglang.plugins.plugin_utils._rolloutcheck import (
    estimate_costs,
    rollout_check,
    router_mode_check,
)


def plan(names: list[str], ready: dict[str, float] | None = None, rank0: bool = True) -> dict:
    """A server_plan result as registered (__sglang_plan): instances, and the manifest before this run."""
    previous = {"instances": [{"name": n, "ready_after_s": s} for n, s in (ready or {}).items()]} if ready else {}
    return {"instances": [{"name": n, "rank0": rank0} for n in names], "previous": previous}


def fleet(*sizes: int, **first_vars) -> dict[str, dict]:
    hosts = {f"s{i}": {"__sglang_plan": plan([f"gpu{g}" for g in range(n)])} for i, n in enumerate(sizes)}
    hosts["s0"].update(first_vars)
    return hosts


SERVERS = ["s0", "s1", "s2", "s3"]


def test_floor_from_the_first_host_and_the_batch_from_extra_vars() -> None:
    hv = fleet(4, 4, 4, 4, sglang_rollout_min_available="75%")
    out = rollout_check(hv, SERVERS, extra_vars={"sglang_rollout_batch": 4})
    # an extra var is in every host's hostvars too, as Ansible makes them
    assert out["floor"]["floor"] == 12 and out["floor"]["max_hosts"] == 4 and out["batch"] == 4
    with pytest.raises(RolloutError, match=r"sglang_rollout_min_available='90%' \(15\): set sglang_rollout_batch to "
                                           r"at most 1 \(or 25%\)"):
        rollout_check(fleet(4, 4, 4, 4, sglang_rollout_min_available="90%"), SERVERS, extra_vars={})


def test_a_batch_set_in_the_inventory_is_refused_deploy_serial_would_ignore_it() -> None:
    hv = fleet(2, 2, sglang_rollout_batch=1)
    with pytest.raises(RolloutError, match=r"sglang_rollout_batch=1 is set in the inventory \(host s0\).*"
                                           r"-e sglang_rollout_batch=1"):
        rollout_check(hv, SERVERS, extra_vars={})
    assert rollout_check(hv, SERVERS, extra_vars={"sglang_rollout_batch": 1})["floor"]["requested_hosts"] == 1


def test_a_canary_set_in_the_inventory_is_refused_it_would_share_its_batch() -> None:
    hv = fleet(2, 2, sglang_rollout_canary=1)
    with pytest.raises(RolloutError, match=r"sglang_rollout_canary=1 is set in the inventory \(host s0\).*"
                                           r"-e sglang_rollout_canary=1"):
        rollout_check(hv, SERVERS, extra_vars={})
    assert rollout_check(hv, SERVERS, extra_vars={"sglang_rollout_canary": 1})["estimate"]["shape"]["canary"] == 1
    assert rollout_check(fleet(2, 2, sglang_rollout_canary=0), SERVERS, extra_vars={}) is not None


def test_hosts_of_different_sizes_and_only_planned_rank0_instances() -> None:
    hv = fleet(4, 2, sglang_rollout_min_available=4)
    hv["s2"] = {"__sglang_plan": plan(["gpu0-1"], rank0=False)}  # rank 1 of a multi-node group: not routed
    hv["s3"] = {"ansible_host": "10.0.0.9"}  # not planned (unreachable, or left out by sglang_hosts)
    out = rollout_check(hv, SERVERS, extra_vars={})
    assert out["hosts"] == ["s0", "s1", "s2"] and out["instances"] == {"s0": 4, "s1": 2, "s2": 0}
    assert out["floor"]["instances"] == 6 and out["floor"]["requested_kept"] == 4
    assert out["estimate"]["shape"]["per_host"] == 4  # the largest host: the worst case
    with pytest.raises(RolloutError, match=r"\(3 hosts of 0 to 4 instances\)"):
        rollout_check(fleet(4, 2, 0, sglang_rollout_min_available=6), SERVERS[:3], extra_vars={})


def test_at_once_is_each_hosts_own_the_largest_counts() -> None:
    hv = fleet(4, 4, sglang_rollout_min_available=5)
    hv["s1"]["sglang_rollout_instances_at_once"] = 2
    with pytest.raises(RolloutError, match="sglang_rollout_batch='100%' rolls 2 hosts at once, taking 4 of 8"):
        rollout_check(hv, SERVERS, extra_vars={})
    hv["s1"]["sglang_rollout_instances_at_once"] = "0"
    with pytest.raises(RolloutError, match="sglang_rollout_instances_at_once='0' is not a count: a whole number >= 1"):
        rollout_check(hv, SERVERS, extra_vars={})


def test_no_planned_server_host_no_check() -> None:
    assert rollout_check({"s0": {}}, SERVERS, extra_vars={}) is None
    assert rollout_check({}, [], extra_vars={}) is None


def test_load_time_measured_set_or_default_and_said_which() -> None:
    hv = fleet(2, 2)
    out = rollout_check(hv, SERVERS, extra_vars={}, forks=5)
    assert out["load"]["load_s"] == ESTIMATE_DEFAULTS["load_s"] and out["load"]["measured"] is None
    assert "a default (nothing measured yet" in out["lines"][1]
    hv["s0"]["__sglang_plan"] = plan(["gpu0", "gpu1"], {"gpu0": 41.5, "gpu1": None})
    hv["s1"]["__sglang_plan"] = plan(["gpu0", "gpu1"], {"gpu0": 12.0, "gpu1": 97.2})
    out = rollout_check(hv, SERVERS, extra_vars={}, forks=5)
    assert out["load"]["load_s"] == 97.2 and out["estimate"]["shape"]["load_s"] == 97.2
    assert out["lines"][1] == "  load time L 1 min 37 s: measured (the longest ready_after_s of the last deploy: s1 gpu1)"
    hv["s0"]["sglang_rollout_estimate"] = {"load_s": 300}
    out = rollout_check(hv, SERVERS, extra_vars={})
    assert out["load"]["load_s"] == 300 and "set (sglang_rollout_estimate.load_s)" in out["lines"][1]


def test_estimate_inputs_costs_forks_canary_and_guard() -> None:
    hv = fleet(4, 4, 4, 4, sglang_rollout_canary=1, sglang_rollout_canary_seconds=600,
               sglang_rollout_guard_seconds="60", sglang_rollout_estimate={"host_fixed_s": 30, "step_s": "5"})
    out = rollout_check(hv, SERVERS, extra_vars={"sglang_rollout_batch": "50%", "sglang_rollout_canary": 1}, forks=1)
    shape = out["estimate"]["shape"]
    assert (shape["hosts"], shape["per_host"], shape["batch_hosts"], shape["at_once"]) == (4, 4, 2, 1)
    assert (shape["host_fixed_s"], shape["step_s"], shape["run_fixed_s"]) == (30, 5, ESTIMATE_DEFAULTS["run_fixed_s"])
    assert (shape["canary"], shape["canary_window_s"], shape["guard_s"], shape["forks"]) == (1, 600, 60, 1)
    # per host 30 + 4 x (180 + 5) = 770; 2 hosts per batch, one fork: 2 waves + guard 60
    assert out["estimate"]["batch_s"] == 2 * 770 + 60
    text = "\n".join(out["lines"])
    assert "fixed F 30 s, step S 5 s, run P 2 min (sglang_rollout_estimate)" in text
    assert "canary: 1 instance(s)" in text and "2 waves (raise forks)" in text
    assert "sglang_rollout_batch=50%" in text and "capacity floor: none" in text
    # without a canary its window does not count
    hv["s0"]["sglang_rollout_canary"] = 0
    assert rollout_check(hv, SERVERS, extra_vars={})["estimate"]["shape"]["canary_window_s"] == 0


def test_bad_estimate_variable_refused_naming_the_key() -> None:
    assert estimate_costs(None) == (ESTIMATE_DEFAULTS, [])
    with pytest.raises(RolloutError, match=r"unknown key\(s\) load; the keys are load_s \(default 180 s\)"):
        estimate_costs({"load": 1})
    with pytest.raises(RolloutError, match=r"sglang_rollout_estimate.step_s='soon' must be seconds"):
        estimate_costs({"step_s": "soon"})
    with pytest.raises(RolloutError, match=r"sglang_rollout_estimate.step_s=-1 must be seconds"):
        estimate_costs({"step_s": -1})
    with pytest.raises(RolloutError, match="must be a mapping"):
        estimate_costs([1, 2])
    with pytest.raises(RolloutError, match="sglang_rollout_canary_seconds='ten' is not a count"):
        rollout_check(fleet(2, sglang_rollout_canary_seconds="ten"), SERVERS, extra_vars={})


def test_a_pd_fleet_rolled_all_at_once_is_refused_under_a_floor_and_said_without_one() -> None:
    """sglang_pd: two hosts, each a prefill and a decode. One at a time keeps a pair; both at once
    would take every prefill and every decode out of the routers: refused where
    sglang_rollout_min_available asks for a floor, a line of the estimate otherwise."""
    def pd_fleet(**first_vars: object) -> dict[str, dict]:
        pair = [{"name": "gpu0", "rank0": True, "pd_role": "prefill"}, {"name": "gpu1", "rank0": True, "pd_role": "decode"}]
        hosts = {f"s{i}": {"__sglang_plan": {"instances": pair, "previous": {}}} for i in range(2)}
        hosts["s0"].update(first_vars)
        return hosts

    one = rollout_check(pd_fleet(sglang_rollout_min_available=1), SERVERS, extra_vars={"sglang_rollout_batch": 1})
    assert not any("prefill/decode" in line for line in one["lines"])
    with pytest.raises(RolloutError, match=r"sglang_rollout_min_available=1: a rollout of 2 host\(s\) at once takes "
                                           r"every prefill instance of the fleet \(2, on 2 host\(s\)\)"):
        rollout_check(pd_fleet(sglang_rollout_min_available=1), SERVERS, extra_vars={"sglang_rollout_batch": 2})
    said = rollout_check(pd_fleet(), SERVERS, extra_vars={"sglang_rollout_batch": 2})
    assert [line.split(" at once")[0] for line in said["lines"] if "prefill/decode" in line] == [
        "  prefill/decode: a rollout of 2 host(s)", "  prefill/decode: a rollout of 2 host(s)"]


def test_the_routers_mode_must_fit_the_fleet_before_any_host_changes() -> None:
    """router_plan's gate: prefill/decode instances behind a router not in PD mode (which would refuse
    them at registration, after restarting) and unified instances behind one in PD mode are refused
    naming the setting; a fitting router passes."""
    pair = [{"name": "gpu0", "rank0": True, "pd_role": "prefill"}, {"name": "gpu1", "rank0": True, "pd_role": "decode"}]
    plain = [{"name": "gpu0", "rank0": True, "pd_role": None}]
    fleet = {"s0": {"__sglang_plan": {"instances": pair}}, "s1": {"__sglang_plan": {"instances": pair}}}
    router_mode_check(fleet, SERVERS, pd_mode=True)
    with pytest.raises(RolloutError, match=r"the deployments of s0, s1 have prefill/decode instances \(sglang_pd\), "
                                           r"and this router is not in PD mode: set sglang_router_pd_disaggregation: true"):
        router_mode_check(fleet, SERVERS, pd_mode=False)
    mixed = {**fleet, "s2": {"__sglang_plan": {"instances": plain}}}
    with pytest.raises(RolloutError, match=r"routes to prefill and decode workers only, and s2 plan\(s\) unified "
                                           r"instances: set sglang_pd.role there, or sglang_router_pd_disaggregation"):
        router_mode_check(mixed, SERVERS, pd_mode=True)
    router_mode_check({"s2": {"__sglang_plan": {"instances": plain}}}, SERVERS, pd_mode=False)
    # a prefill the router (on s0) would register at loopback, and a decode on s1: it could not fetch the KV
    prefill = {"name": "gpu0", "pd_role": "prefill", "bootstrap_port": 8998, "connect_url": "http://127.0.0.1:30000",
               "advertise_url": "http://10.0.0.1:30000"}
    decode = {"name": "gpu0", "pd_role": "decode", "connect_url": "http://127.0.0.1:30000",
              "advertise_url": "http://10.0.0.2:30000"}
    local = {"s0": {"__sglang_plan": {"instances": [prefill]}}, "s1": {"__sglang_plan": {"instances": [decode]}}}
    with pytest.raises(RolloutError, match=r"prefill instance\(s\) gpu0 of s0 are registered at a loopback URL, which "
                                           r"the decode instances of s1 cannot reach"):
        router_mode_check(local, SERVERS, pd_mode=True, router_host="s0")
    router_mode_check(local, SERVERS, pd_mode=True, router_host="r1")  # a router elsewhere: advertised URLs


def test_the_fleets_pd_hosts_must_agree_on_the_backend_and_the_bootstrap_port() -> None:
    """A prefill and a decode of different transfer backends cannot hand KV over; a decode whose
    fallback bootstrap port (its host's sglang_pd.bootstrap_port) no prefill serves is refused too,
    naming the instances, the ports and the fix."""
    def host(role: str, port: int, backend: str = "mooncake_tcp") -> dict:
        inst = {"name": "gpu0", "pd_role": role, "bootstrap_port": port if role == "prefill" else None,
                "argv": ["--disaggregation-mode", role, "--disaggregation-bootstrap-port", str(port)]}
        return {"__sglang_plan": {"instances": [inst], "pd": {"transfer_backend": backend}}}

    router_mode_check({"s0": host("prefill", 9000), "s1": host("decode", 9000)}, SERVERS, pd_mode=True)
    with pytest.raises(RolloutError, match=r"sglang_pd.transfer_backend differs between hosts \(s0 mooncake_tcp, "
                                           r"s1 nixl\)"):
        router_mode_check({"s0": host("prefill", 9000), "s1": host("decode", 9000, "nixl")}, SERVERS, pd_mode=True)
    with pytest.raises(RolloutError, match=r"a bootstrap port no prefill instance serves \(gpu0 of s1: 8998; the "
                                           r"prefills serve 9000\): set the same sglang_pd.bootstrap_port"):
        router_mode_check({"s0": host("prefill", 9000), "s1": host("decode", 8998)}, SERVERS, pd_mode=True)
