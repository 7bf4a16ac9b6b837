"""Prefill/decode disaggregation in a host's plan (_plan/pd.py, issue 32): each instance's side,
the flags that must agree across a pair, the release's backends, refusals naming the fix."""
from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._shared.releases import release_traits
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import (
    PlanError,
    instance_plan,
    validate_plan,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.pd import pd_plan, pd_request
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.summary import plan_summary


def _plan(facts: dict[str, Any], configs: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("profile", "baseline")
    kwargs.setdefault("release", "0.5.17")
    return instance_plan(facts, model_path="/models/dense", model_config=configs["dense"], base_dir="/opt/sglang",
                         **kwargs)


def test_one_host_split_into_a_prefill_and_a_decode(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    plan = _plan(h200x2_facts, configs, pd={"role": ["prefill", "decode"]})
    prefill, decode = plan["instances"]
    assert (prefill["pd_role"], prefill["bootstrap_port"], decode["pd_role"], decode["bootstrap_port"]) == \
        ("prefill", 8998, "decode", None)
    assert prefill["argv"][-6:] == ["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend",
                                    "mooncake_tcp", "--disaggregation-bootstrap-port", "8998"]
    assert decode["argv"][-6:] == ["--disaggregation-mode", "decode", "--disaggregation-transfer-backend",
                                   "mooncake_tcp", "--disaggregation-bootstrap-port", "8998"]
    pd = plan["pd"]
    assert pd["counts"] == {"prefill": 1, "decode": 1}
    assert (pd["package"], pd["import"]) == ("mooncake-transfer-engine-cuda13==0.3.13.post1", "mooncake.engine")
    validate_plan(plan)  # every flag and choice is 0.5.17's
    assert "  PD: 1 prefill, 1 decode over mooncake_tcp (the router pairs them)" in plan_summary(plan)
    unified = _plan(h200x2_facts, configs)
    assert unified["pd"] is None and all(i["pd_role"] is None for i in unified["instances"])
    assert not any("--disaggregation-mode" in i["argv"] for i in unified["instances"])


def test_a_hosts_prefill_instances_each_take_a_bootstrap_port_of_their_own() -> None:
    instances = [{"name": f"gpu{i}", "port": 30000 + i, "nccl_port": 31000 + i} for i in range(3)]
    plan = pd_plan(pd_request({"role": "prefill", "bootstrap_port": 9000, "transfer_backend": "mooncake",
                               "ib_device": "mlx5_0"}),  # type: ignore[arg-type]
                   instances=instances, release="0.5.17", traits=release_traits("0.5.17"))
    assert [plan["instances"][f"gpu{i}"]["bootstrap_port"] for i in range(3)] == [9000, 9001, 9002]
    assert plan["instances"]["gpu0"]["flags"][-2:] == ["--disaggregation-ib-device", "mlx5_0"]


@pytest.mark.parametrize(("value", "release", "message"), [
    ({"role": "both"}, "0.5.17", r"role='both': each role is one of prefill, decode"),
    ({"role": "prefill", "bootstrap_port": "x"}, "0.5.17", "bootstrap_port='x': must be a TCP port"),
    ({"role": "prefill", "colour": 1}, "0.5.17", "unknown key.* colour"),
    ({"role": "prefill"}, "0.5.10", "release 0.5.10: this collection renders prefill/decode disaggregation for "
                                    "SGLang 0.5.17 and later .* pin sglang_version 0.5.17"),
    ({"role": "prefill", "transfer_backend": "carrier-pigeon"}, "0.5.17",
     "transfer_backend='carrier-pigeon': release 0.5.17 has mooncake, mooncake_tcp, nixl"),
    ({"role": "prefill", "ib_device": "mlx5_0"}, "0.5.17", "ib_device='mlx5_0' with transfer_backend "
                                                           "'mooncake_tcp', which uses no RDMA device"),
    ({"role": ["prefill", "decode", "decode"]}, "0.5.17", r"one role for every instance, or one per instance; "
                                                          r"this host plans 2 instance\(s\) \(gpu0, gpu1\)"),
    ({"role": "prefill", "bootstrap_port": 30001}, "0.5.17", r"bootstrap port\(s\) \[30001\] are ports the "
                                                             "instances serve on"),
])
def test_refused_before_anything_runs(h200x2_facts: dict[str, Any], configs: dict[str, Any], value: dict[str, Any],
                                      release: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        _plan(h200x2_facts, configs, pd=value, release=release)


def _hicache_flags(inst: dict[str, Any]) -> list[str]:
    return [a for a in inst["argv"] if a.startswith("--hicache") or a == "--enable-hierarchical-cache"]


def test_hicache_and_its_storage_tier_are_the_prefill_sides(h200x2_facts: dict[str, Any],
                                                            configs: dict[str, Any]) -> None:
    """A decode runs a chunk cache (SGLang 0.5.17's PD hook), which refuses HiCache at start; the host
    tier and the storage tier behind it are the prefill's, sized for the prefill instances alone."""
    disk = {"path": "/opt/sglang/hicache-storage", "checked_at": "/", "mount_point": "/", "fstype": "ext4",
            "source": "/dev/sda1", "total_bytes": 4000 * 2**30, "free_bytes": 2000 * 2**30, "used_bytes": 0,
            "network": False, "memory": False, "rotational": False}
    facts = {**h200x2_facts, "filesystems": [disk]}
    plan = _plan(facts, configs, profile="hicache", pd={"role": ["prefill", "decode"]},
                 hicache_storage={"backend": "file"})
    prefill, decode = plan["instances"]
    alone = _plan(facts, configs, profile="hicache", gpus=[0], hicache_storage={"backend": "file"})
    assert "--enable-hierarchical-cache" in prefill["argv"] and "--hicache-storage-backend" in prefill["argv"]
    # the prefill takes what one instance of the host would: the decode's share is not set aside
    assert prefill["settings"]["hicache_size_gb"] == alone["instances"][0]["settings"]["hicache_size_gb"]
    assert prefill["settings"]["hicache_size_gb"] > _plan(facts, configs, profile="hicache")["instances"][0][
        "settings"]["hicache_size_gb"]
    assert _hicache_flags(decode) == [] and decode["settings"]["hicache_size_gb"] is None
    assert "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR" not in decode["env"] and "storage_dir" not in decode
    assert list(plan["hicache_storage"]["instances"]) == ["gpu0"]
    assert [c["name"] for c in plan["hicache_storage_clear"]] == ["gpu0"]
    assert any("HiCache on the prefill instances only (1 of 2 on this host)" in w for w in plan["warnings"])
    validate_plan(plan)
    # a host of decodes only: no host tier, no storage tier, nothing sized, said
    decodes = _plan(facts, configs, profile="hicache", pd={"role": "decode"}, hicache_storage={"backend": "file"})
    assert decodes["hicache"] is None and decodes["hicache_storage"] is None
    assert all(_hicache_flags(i) == [] for i in decodes["instances"])
    assert any("HiCache on the prefill instances only (0 of 2" in w for w in decodes["warnings"])
