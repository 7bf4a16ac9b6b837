"""The storage tier in a host's plan (_plan/instances.py ``storage_tier``; the sizing is
test_storage.py's): rendered into each instance's argv and environment, checked against the release's
flags, refused where the profile has no host tier or extra_args sets its flags."""
from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import (
    PlanError,
    instance_plan,
    validate_plan,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import GIB
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.storage import clear_path

ROOT = "/opt/sglang/hicache-storage"


def _with_disk(facts: dict[str, Any], free: int = 2050 * GIB, **over: Any) -> dict[str, Any]:
    out = copy.deepcopy(facts)
    out["filesystems"] = [{"path": ROOT, "checked_at": "/", "mount_point": "/", "fstype": "ext4", "source": "/dev/sda1",
                           "total_bytes": 4000 * GIB, "free_bytes": free, "used_bytes": 0, "network": False,
                           "memory": False, "rotational": False, **over}]
    return out


def _plan(facts: dict[str, Any], configs: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("profile", "mtp_hicache")
    kwargs.setdefault("release", "0.5.17")
    return instance_plan(facts, model_path="/models/hybrid", model_config=configs["hybrid"], base_dir="/opt/sglang",
                         **kwargs)


def test_each_instance_gets_its_folder_its_cap_and_the_release_flags(h200x2_facts: dict[str, Any],
                                                                     configs: dict[str, Any]) -> None:
    plan = _plan(_with_disk(h200x2_facts), configs, hicache_storage={"backend": "file",
                                                                     "prefetch_policy": "wait_complete"})
    tier = plan["hicache_storage"]
    each = int((2050 - 50) * GIB * 0.5) // 2
    for inst in plan["instances"]:
        assert inst["argv"][-4:] == ["--hicache-storage-backend", "file", "--hicache-storage-prefetch-policy",
                                     "wait_complete"]
        assert inst["env"]["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] == f"{ROOT}/{inst['name']}"
        assert inst["env"]["SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"] == str(each)  # TP 1: one rank owns its files
    assert tier["cap_bytes_total"] == 2 * each and tier["reasoning"]
    # the readiness prime: a prompt of many pages (the release compiles its page-hash extension at the
    # first prefill that reaches the tier), greedy, one token
    assert tier["prime"] == {"path": "/generate", "timeout": 900, "words": 1024}  # the text: _server/deploy.prime_body
    # sglang_hicache_storage_clear: each instance's URL of the release's current endpoint
    assert plan["hicache_storage_clear"] == [{"name": i["name"], "url": f"{i['connect_url']}/hicache/storage-backend/clear"}
                                             for i in plan["instances"]]
    validate_plan(plan)  # the flags are 0.5.17's


def test_without_the_tier_nothing_is_rendered(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    plan = _plan(_with_disk(h200x2_facts), configs, hicache_storage={})
    assert plan["hicache_storage"] is None and plan["hicache_storage_clear"] == []
    assert not any("--hicache-storage-backend" in i["argv"] for i in plan["instances"])


def test_a_write_policy_through_extra_args_goes_over_the_profiles_with_the_tier_on(
        h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    """How tune deploys a storage candidate with its own write policy (_tune.candidate_vars)."""
    plan = _plan(_with_disk(h200x2_facts), configs, hicache_storage={"backend": "file"},
                 extra_args={"--hicache-write-policy": "write_back"})
    for inst in plan["instances"]:
        argv = inst["argv"]
        assert argv.count("--hicache-write-policy") == 1 and argv[argv.index("--hicache-write-policy") + 1] == "write_back"
        assert argv[argv.index("--hicache-storage-backend") + 1] == "file"
    validate_plan(plan)


def test_the_clear_endpoint_is_the_releases_current_post_path_and_a_release_without_one_is_refused() -> None:
    both = {"hicache_storage_clear": {"/hicache/storage-backend/clear": ["POST"],
                                      "/clear_hicache_storage_backend": ["GET", "POST"]}}
    assert clear_path("0.5.17", both) == "/hicache/storage-backend/clear"
    assert clear_path("x", {"hicache_storage_clear": {"/old": ["GET"], "/new": ["POST"]}}) == "/new"
    with pytest.raises(PlanError, match="no endpoint that clears a running server's storage tier"):
        clear_path("0.5.9", {})


def test_a_warning_of_the_sizing_reaches_the_plans_warnings(h200x2_facts: dict[str, Any],
                                                            configs: dict[str, Any]) -> None:
    plan = _plan(_with_disk(h200x2_facts, fstype="nfs4", network=True), configs, hicache_storage={"backend": "file"})
    assert any("network file system (nfs4)" in w for w in plan["warnings"])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"profile": "mtp"}, "needs HiCache's host tier, which profile 'mtp' does not enable: choose a profile with hicache"),
    ({"extra_args": {"hicache-storage-backend": "nixl"}},
     "sglang_extra_args may not set --hicache-storage-backend: the plan sets it from sglang_hicache_storage.backend"),
    ({"extra_args": ["--hicache-storage-prefetch-policy", "best_effort"]},
     "may not set --hicache-storage-prefetch-policy: the plan sets it from sglang_hicache_storage.prefetch_policy"),
    ({"release": "0.5.10"}, "release 0.5.10: its file backend has no size cap"),
    ({"hicache_storage": {"backend": "file", "sizes": 3}}, r"unknown key\(s\) sizes"),
])
def test_refused_before_anything_runs(h200x2_facts: dict[str, Any], configs: dict[str, Any], kwargs: dict[str, Any],
                                      message: str) -> None:
    kwargs.setdefault("hicache_storage", {"backend": "file"})
    with pytest.raises(PlanError, match=message):
        _plan(_with_disk(h200x2_facts), configs, **kwargs)


def test_without_the_tier_extra_args_may_set_its_flags(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    """By hand, as before the tier was planned: the user's own flags, nothing sized."""
    plan = _plan(_with_disk(h200x2_facts), configs, hicache_storage={},
                 extra_args={"hicache-storage-backend": "file"})
    assert plan["hicache_storage"] is None
    for inst in plan["instances"]:
        assert inst["argv"][inst["argv"].index("--hicache-storage-backend") + 1] == "file"


def test_the_running_instances_cap_is_kept_by_a_rerun(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    first = _plan(_with_disk(h200x2_facts), configs, hicache_storage={"backend": "file"})
    caps = {name: item["cap_bytes"] for name, item in first["hicache_storage"]["instances"].items()}
    later_facts = _with_disk(h200x2_facts, free=2000 * GIB)
    later_facts["hicache_storage_running"] = {"root": ROOT, "caps": caps}
    again = _plan(later_facts, configs, hicache_storage={"backend": "file"})
    assert [i["env"] for i in again["instances"]] == [i["env"] for i in first["instances"]]


def test_each_instance_carries_its_page_layout_and_what_changes_it(h200x2_facts: dict[str, Any],
                                                                   configs: dict[str, Any]) -> None:
    """The launch script compares the layout's digest with the folder's stamp (_server/files.py):
    stable across re-plans, changed by what shapes a page (KV dtype, release, model), not by what
    does not (the port, the prefetch policy)."""
    facts = _with_disk(h200x2_facts)

    def digest(**kwargs: Any) -> str:
        kwargs.setdefault("hicache_storage", {"backend": "file"})
        plan = _plan(facts, configs, **kwargs)
        inst = plan["instances"][0]
        layout = inst["storage_layout"]
        assert layout == plan["hicache_storage"]["instances"]["gpu0"]["layout"]  # deployment.json keeps it
        assert layout["stamp"] == f"{ROOT}/gpu0/.llmops-layout"
        return str(layout["digest"])

    first = digest()
    assert digest() == first
    assert digest(hicache_storage={"backend": "file", "prefetch_policy": "best_effort"}) == first
    assert digest(base_port=31000) == first
    assert digest(extra_args={"kv-cache-dtype": "fp8_e4m3"}) != first
    assert digest(release="0.5.23") != first


def test_page_layout_reads_both_forms_of_a_flag() -> None:
    from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.storage import page_layout
    spaced = page_layout(["--model-path", "/m", "--tp-size", "2", "--port", "1", "--enable-metrics"], "0.5.17")
    joined = page_layout(["--model-path=/m", "--tp-size=2", "--port=2"], "0.5.17")
    assert spaced == joined and spaced["of"] == {"release": "0.5.17", "--model-path": "/m", "--tp-size": "2"}


def test_mooncake_segments_come_out_of_the_host_tiers_budget_and_each_instance_is_tagged_by_its_layout(
        h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    """The RAM each instance lends the store is host memory: the host tier is sized from what is
    left (never the same bytes twice); the extra config is one flag per instance, its keys tagged
    with the page layout's digest, so a change of layout never reads another layout's pages."""
    without = _plan(h200x2_facts, configs, host_address="10.0.0.7")
    plan = _plan(h200x2_facts, configs, host_address="10.0.0.7",
                 hicache_storage={"backend": "mooncake", "segment_gib": 64})
    lent = plan["hicache_storage"]["lent_bytes_total"]
    assert lent == 2 * (64 * GIB + 16 * 2**20) and plan["hicache"]["lent_bytes"] == lent
    assert plan["hicache"]["available_bytes"] == without["hicache"]["available_bytes"] - lent
    assert plan["hicache"]["size_gb"] < without["hicache"]["size_gb"]
    assert plan["hicache"]["pinned_total_bytes"] + lent <= without["hicache"]["available_bytes"]
    for inst in plan["instances"]:
        flag = inst["argv"].index("--hicache-storage-backend-extra-config")
        extra = json.loads(inst["argv"][flag + 1])
        assert extra["extra_backend_tag"] == f"llmops-{inst['storage_layout']['digest']}"
        assert extra["master_server_address"] == "10.0.0.7:50051" and extra["global_segment_size"] == 64 * GIB
        assert "storage_dir" not in inst
    validate_plan(plan)  # mooncake and the extra config are 0.5.17's flags
    other = _plan(h200x2_facts, configs, host_address="10.0.0.7", extra_args={"--kv-cache-dtype": "fp8_e4m3"},
                  hicache_storage={"backend": "mooncake", "segment_gib": 64})
    assert other["instances"][0]["storage_layout"]["digest"] != plan["instances"][0]["storage_layout"]["digest"]


def test_mooncake_segments_that_leave_the_host_tier_nothing_are_refused(h200x2_facts: dict[str, Any],
                                                                        configs: dict[str, Any]) -> None:
    with pytest.raises(PlanError, match="segments lent to the storage tier's store"):
        _plan(h200x2_facts, configs, hicache_storage={"backend": "mooncake", "segment_gib": 100_000})


def test_the_tier_brings_its_page_size_unless_extra_args_set_one(h200x2_facts: dict[str, Any],
                                                                 configs: dict[str, Any]) -> None:
    """Device runs 10 and 12 (an H100, SGLang 0.5.17, the same shared-prefix load): at the release's
    page size of 1 token the file tier writes and reads a file per token (TTFT p99 2.3 s, 2.4 % of
    the prompt from storage); at 64, 0.22 s and 9.8 %. So the tier renders --page-size 64."""
    disk = _with_disk(h200x2_facts)
    plan = _plan(disk, configs, profile="hicache", hicache_storage={"backend": "file"})
    for inst in plan["instances"]:
        assert inst["argv"][inst["argv"].index("--page-size") + 1] == "64"
        assert inst["storage_layout"]["of"]["--page-size"] == "64"  # pages of another size are another layout
    assert not [w for w in plan["warnings"] if "--page-size" in w]
    validate_plan(plan)
    mine = _plan(disk, configs, profile="hicache", hicache_storage={"backend": "file"},
                 extra_args={"--page-size": 1})
    assert mine["instances"][0]["argv"].count("--page-size") == 1
    assert mine["instances"][0]["argv"][mine["instances"][0]["argv"].index("--page-size") + 1] == "1"
    assert any("--page-size 1 (sglang_extra_args) with the storage tier" in w for w in mine["warnings"])
    release = _plan(disk, configs, profile="hicache", hicache_storage={"backend": "file", "page_size": 0})
    assert "--page-size" not in release["instances"][0]["argv"]
    no_buffer = _plan(disk, configs, profile="hicache", hicache_storage={"backend": "file"},
                      extra_args={"--mamba-radix-cache-strategy": "no_buffer"})
    assert "--page-size" not in no_buffer["instances"][0]["argv"]
    assert any("Mamba strategy no_buffer allows no other" in w for w in no_buffer["warnings"])
    without = _plan(disk, configs, profile="hicache")
    assert "--page-size" not in without["instances"][0]["argv"]  # no tier: the release's page size
    with pytest.raises(PlanError, match="page_size=2.5: must be a whole number of tokens"):
        _plan(disk, configs, profile="hicache", hicache_storage={"backend": "file", "page_size": 2.5})
