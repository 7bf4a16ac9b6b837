"""Unit tests for plugins/plugin_utils/_plan (HiCache sizing, profiles, instance plan) and the
filters over it, on the recorded hosts in tests/fixtures."""
from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._shared import paths as _paths
from ansible_collections.llmops.sglang.plugins.module_utils._shared.models import ModelKindError, model_kind
from ansible_collections.llmops.sglang.plugins.module_utils._shared.releases import load_releases
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import (
    GB,
    GIB,
    PlanError,
    instance_plan,
    load_profiles,
    resolve_profile,
    validate_plan,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import hicache_plan as _hicache_plan
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.request import declared

BUILTIN_PROFILES = ("baseline", "mtp", "hicache", "mtp_hicache")
SPEC_PROFILES = ("mtp", "mtp_hicache")


def hicache_plan(facts, **kwargs):
    """The sizing with the server role's declared reserve and fraction unless given, as the plan
    passes them."""
    kwargs.setdefault("reserve_gib", declared("hicache_reserve_gib"))
    kwargs.setdefault("fraction", declared("hicache_fraction"))
    return _hicache_plan(facts, **kwargs)


# ---------------------------------------------------------------------------------------------
# Facts


def _gpu(index: int, name: str, mib: int, **extra: Any) -> dict[str, Any]:
    gpu = {
        "index": index, "uuid": f"GPU-{index:04d}", "name": name, "pci_bus_id": f"00000000:{index:02x}:00.0",
        "memory_total_mib": mib, "memory_used_mib": 0, "memory_free_mib": mib, "driver_version": "580",
        "compute_capability": "9.0", "mig_enabled": False, "processes": [], "busy": False,
    }
    gpu.update(extra)
    return gpu


def _facts(available: int, gpus: list[dict[str, Any]], *, cgroup_available: int | None = None,
           total: int | None = None) -> dict[str, Any]:
    effective, limited_by = available, "meminfo"
    if cgroup_available is not None and cgroup_available < available:
        effective, limited_by = cgroup_available, "cgroup_v2_max"
    return {
        "schema_version": 1,
        "gpu_source": "declared",
        "gpus": gpus,
        "gpu_count": len(gpus),
        "memory": {
            "total_bytes": total or available,
            "available_bytes": available,
            "cgroup": {"version": 2, "path": "/", "max_bytes": None, "high_bytes": None,
                       "usage_bytes": None, "available_bytes": cgroup_available},
            "effective_available_bytes": effective,
            "limited_by": limited_by,
        },
        "cpu_count": 32,
        "numa_nodes": 1,
        "service_manager": "process",
        "hostname": "test",
    }


@pytest.fixture
def handrun_facts() -> dict[str, Any]:
    """The hand-run deployment (reference/seed-benchmarks.md): 4x RTX PRO 6000, ~200 GB free."""
    return _facts(200 * GB, [_gpu(i, "NVIDIA RTX PRO 6000 Blackwell", 97887) for i in range(4)])


@pytest.fixture(scope="session")
def h200x2_facts(fixtures_dir: Path) -> dict[str, Any]:
    """Facts of the 2x H200 recording, parsed minimally from its host.txt and nvidia_smi.txt."""
    host = (fixtures_dir / "h200x2" / "host.txt").read_text()
    meminfo = {m.group(1): int(m.group(2)) * 1024
               for m in re.finditer(r"^(MemTotal|MemAvailable):\s+(\d+) kB", host, re.M)}
    smi = (fixtures_dir / "h200x2" / "nvidia_smi.txt").read_text()
    section = smi.split("--format=csv,noheader,nounits\n", 1)[1].split("###", 1)[0]
    gpus = []
    for line in section.strip().splitlines():
        index, uuid, name, bus, total, used, free, driver, cc = (c.strip() for c in line.split(","))
        gpus.append({
            "index": int(index), "uuid": uuid, "name": name, "pci_bus_id": bus,
            "memory_total_mib": int(total), "memory_used_mib": int(used), "memory_free_mib": int(free),
            "driver_version": driver, "compute_capability": cc, "mig_enabled": False,
            "processes": [], "busy": False,
        })
    assert len(gpus) == 2 and all(g["name"] == "NVIDIA H200" for g in gpus)
    return _facts(meminfo["MemAvailable"], gpus, total=meminfo["MemTotal"])


@pytest.fixture(scope="session")
def configs(fixtures_dir: Path) -> dict[str, dict[str, Any]]:
    base = fixtures_dir / "sglang-0.5.17-h200"
    return {kind: json.loads((base / kind / "model-config.json").read_text()) for kind in ("dense", "hybrid")}


def _flags_module() -> Any:
    return pytest.importorskip("ansible_collections.llmops.sglang.plugins.module_utils._shared.flags",
                               reason="_flags (flag schemas) not available yet")


def _releases() -> list[str]:
    """Releases with traits and a flag schema."""
    schemas = Path(_paths.data_dir()) / "flag_schemas"
    return sorted(r for r in load_releases() if (schemas / f"sglang-{r}.json").is_file())


def _opt(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _plan_for(facts: dict[str, Any], configs: dict[str, dict[str, Any]], kind: str, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("profile", "mtp_hicache")
    kwargs.setdefault("model_path", f"/models/{kind}")
    if kind == "dense" and kwargs["profile"] in SPEC_PROFILES:
        kwargs.setdefault("draft_model_path", "/models/draft")
    return instance_plan(facts, model_config=configs[kind], **kwargs)


# ---------------------------------------------------------------------------------------------
# HiCache sizing


def test_handrun_0510_hybrid_spec_stays_within_budget(handrun_facts: dict[str, Any]) -> None:
    plan = hicache_plan(handrun_facts, release="0.5.10", instances=1, tp_size=1, hybrid=True, spec=True)
    budget = 0.75 * (200 * GB - 10 * GIB)
    assert plan["budget_bytes"] == int(budget)
    assert plan["pools_per_rank"] == 2  # 0.5.10 gives the size to the KV pool and the Mamba pool
    assert plan["draft_factor"] > 0
    # No more than 75 GB per pool, and no more than 0.75 * (200 - 10.7) / 2 ~= 71 GB.
    assert plan["size_gb"] <= 75
    assert plan["size_gb"] <= math.floor(budget / 2 / GB)
    assert plan["pinned_total_bytes"] <= plan["budget_bytes"]
    assert plan["pinned_total_bytes"] == math.ceil(plan["size_gb"] * GB * (2 + plan["draft_factor"]))
    # It is the largest that fits: one more GB would not.
    assert (plan["size_gb"] + 1) * GB * (2 + plan["draft_factor"]) > plan["budget_bytes"]
    assert plan["fits"] is True
    assert any("Mamba pool" in line for line in plan["reasoning"])


def test_handrun_150gb_explicit_fails_with_arithmetic(handrun_facts: dict[str, Any]) -> None:
    largest = hicache_plan(handrun_facts, release="0.5.10", instances=1, tp_size=1, hybrid=True,
                           spec=True)["size_gb"]
    with pytest.raises(PlanError) as err:
        hicache_plan(handrun_facts, release="0.5.10", instances=1, tp_size=1, hybrid=True, spec=True,
                     explicit_size_gb=150)
    message = str(err.value)
    assert "--hicache-size 150" in message
    assert "pinned > budget" in message
    assert f"largest size that fits is {largest} GB" in message
    assert "200.00 GB available" in message


def test_handrun_four_instances(handrun_facts: dict[str, Any]) -> None:
    one = hicache_plan(handrun_facts, release="0.5.10", instances=1, tp_size=1, hybrid=True, spec=True)
    four = hicache_plan(handrun_facts, release="0.5.10", instances=4, tp_size=1, hybrid=True, spec=True)
    assert four["size_gb"] <= one["size_gb"] // 4
    assert four["pinned_total_bytes"] == 4 * four["pinned_per_instance_bytes"] <= four["budget_bytes"]
    plan = instance_plan(handrun_facts, profile="mtp_hicache", release="0.5.10", model_path="/m",
                         model_arch="hybrid")
    assert [i["name"] for i in plan["instances"]] == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert plan["hicache"]["size_gb"] == four["size_gb"]
    assert all(_opt(i["argv"], "--hicache-size") == str(four["size_gb"]) for i in plan["instances"])


def test_split_release_counts_size_once(handrun_facts: dict[str, Any]) -> None:
    old = hicache_plan(handrun_facts, release="0.5.10", instances=1, tp_size=1, hybrid=True, spec=False)
    new = hicache_plan(handrun_facts, release="0.5.23", instances=1, tp_size=1, hybrid=True, spec=False)
    assert old["pools_per_rank"] == 2 and new["pools_per_rank"] == 1
    assert new["size_gb"] >= 2 * old["size_gb"]
    dense = hicache_plan(handrun_facts, release="0.5.10", instances=1, tp_size=1, hybrid=False, spec=False)
    assert dense["pools_per_rank"] == 1 and dense["draft_factor"] == 0


def test_draft_factor_covers_the_recorded_draft_pools() -> None:
    """0.5.17 recordings: --hicache-size 8 pinned 9.46 GB, --hicache-size 20 pinned 23.62 GB."""
    factor = load_releases()["0.5.17"]["draft_host_pool_factor"]
    for size, pinned in ((8, 5.78 + 2.24 + 1.44), (20, 14.45 + 5.56 + 3.61)):
        assert size * (1 + factor) >= pinned
        assert size * (1 + factor) <= pinned * 1.05  # and not wildly above


def test_tp_divides_per_rank(handrun_facts: dict[str, Any]) -> None:
    tp1 = hicache_plan(handrun_facts, release="0.5.23", instances=2, tp_size=1, hybrid=False, spec=False)
    tp2 = hicache_plan(handrun_facts, release="0.5.23", instances=1, tp_size=2, hybrid=False, spec=False)
    assert tp1["size_gb"] == tp2["size_gb"]
    assert tp2["pinned_per_instance_bytes"] == 2 * tp2["pinned_per_rank_bytes"]


def test_cgroup_limit_wins() -> None:
    facts = _facts(200 * GB, [_gpu(0, "NVIDIA H200", 143771)], cgroup_available=60 * GB)
    plan = hicache_plan(facts, release="0.5.23", instances=1, tp_size=1, hybrid=False, spec=False)
    assert plan["available_bytes"] == 60 * GB
    assert plan["limited_by"] == "cgroup_v2_max"
    assert plan["pinned_total_bytes"] <= int(0.75 * (60 * GB - 10 * GIB))


def test_not_enough_memory() -> None:
    facts = _facts(12 * GB, [_gpu(0, "NVIDIA H200", 143771)])
    with pytest.raises(PlanError, match="not enough host memory.*disable HiCache.*fewer instances"):
        hicache_plan(facts, release="0.5.23", instances=1, tp_size=1, hybrid=True, spec=True)


def test_explicit_size_that_fits(handrun_facts: dict[str, Any]) -> None:
    plan = hicache_plan(handrun_facts, release="0.5.23", instances=1, tp_size=1, hybrid=True, spec=True,
                        explicit_size_gb=20)
    assert plan["size_gb"] == 20 and plan["explicit"] is True and plan["fits"] is True


def test_missing_memory_facts() -> None:
    with pytest.raises(PlanError, match="host_facts"):
        hicache_plan({"gpus": []}, release="0.5.23", instances=1, tp_size=1, hybrid=False, spec=False)


# ---------------------------------------------------------------------------------------------
# The H200x2 recording


def test_h200x2_recording_two_instances_fit(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    plan = _plan_for(h200x2_facts, configs, "hybrid", profile="mtp_hicache", release="0.5.23")
    assert [i["name"] for i in plan["instances"]] == ["gpu0", "gpu1"]
    assert [i["port"] for i in plan["instances"]] == [30000, 30001]
    assert [i["cuda_visible_devices"] for i in plan["instances"]] == ["0", "1"]
    hc = plan["hicache"]
    assert hc["instances"] == 2 and hc["fits"] is True
    assert hc["available_bytes"] == 263393720 * 1024
    assert hc["pinned_total_bytes"] <= hc["budget_bytes"] < h200x2_facts["memory"]["total_bytes"]
    # The recording ran --hicache-size 20 on each: the plan allows more, within 256 GB.
    assert hc["size_gb"] >= 20
    assert hc["pinned_total_bytes"] <= 256 * GIB - 10 * GIB
    validate = _flags_module()  # noqa: F841
    validate_plan(plan)


def test_h200x2_recorded_size_20_is_accepted(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    plan = _plan_for(h200x2_facts, configs, "hybrid", release="0.5.17", hicache_size_gb=20)
    assert all(_opt(i["argv"], "--hicache-size") == "20" for i in plan["instances"])
    assert plan["hicache"]["pinned_per_instance_bytes"] >= int(23.62 * GB)


# ---------------------------------------------------------------------------------------------
# Profiles


def test_builtin_profiles() -> None:
    profiles = load_profiles()
    assert set(BUILTIN_PROFILES) <= set(profiles)
    for name in SPEC_PROFILES:
        spec = profiles[name]["speculative"]
        assert spec == {"algorithm": "auto", "steps": 3, "topk": 1, "draft_tokens": 4}
        assert isinstance(profiles[name]["max_running_requests"], int)
    assert profiles["baseline"]["hicache"]["enabled"] is False
    assert profiles["mtp_hicache"]["hicache"]["size"] == "plan"


def test_unknown_profile_lists_valid_ones() -> None:
    with pytest.raises(PlanError) as err:
        resolve_profile("mtp_hicahce")
    message = str(err.value)
    assert "unknown profile 'mtp_hicahce'" in message
    for name in BUILTIN_PROFILES:
        assert name in message
    assert "did you mean 'mtp_hicache'" in message


def test_user_profiles_merge_and_extend() -> None:
    user = {
        "mtp": {"max_running_requests": 8},
        "fast": {"extends": "mtp_hicache", "hicache": {"write_policy": "write_back"}},
    }
    profiles = load_profiles(user)
    assert profiles["mtp"]["max_running_requests"] == 8
    assert profiles["mtp"]["speculative"]["steps"] == 3  # merged, not replaced
    assert profiles["fast"]["hicache"]["write_policy"] == "write_back"
    assert profiles["fast"]["hicache"]["enabled"] is True
    assert "extends" not in profiles["fast"]
    assert "fast" in str(pytest.raises(PlanError, resolve_profile, "nope", user).value)


def test_profile_typo_and_loop_refused() -> None:
    with pytest.raises(PlanError, match="unknown key 'max_running_request'.*did you mean"):
        load_profiles({"mine": {"max_running_request": 4}})
    with pytest.raises(PlanError, match="loop"):
        load_profiles({"a": {"extends": "b"}, "b": {"extends": "a"}})


@pytest.mark.parametrize("release", _releases())
@pytest.mark.parametrize("profile", BUILTIN_PROFILES)
@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_every_profile_release_and_model_validates(
    h200x2_facts: dict[str, Any], configs: dict[str, Any], release: str, profile: str, kind: str
) -> None:
    plan = _plan_for(h200x2_facts, configs, kind, profile=profile, release=release)
    traits = load_releases()[release]
    for inst in plan["instances"]:
        argv = inst["argv"]
        assert argv[:2] == ["--model-path", f"/models/{kind}"]
        assert "--enable-metrics" in argv
        assert _opt(argv, "--host") == "127.0.0.1"
        assert _opt(argv, "--port") == str(inst["port"])
        assert _opt(argv, "--nccl-port") == str(inst["nccl_port"])
        if profile in SPEC_PROFILES:
            for flag in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                         "--max-running-requests"):
                assert flag in argv
            assert _opt(argv, "--speculative-algorithm") == ("NEXTN" if kind == "hybrid" else "EAGLE")
            assert int(_opt(argv, traits["cuda_graph_bs_flag"]) or 0) >= int(_opt(argv, "--max-running-requests") or 0)
        else:
            assert "--speculative-algorithm" not in argv
        if "hicache" in profile:
            assert _opt(argv, "--hicache-size") == str(plan["hicache"]["size_gb"])
            assert plan["hicache"]["pinned_total_bytes"] <= plan["hicache"]["budget_bytes"]
        else:
            assert "--enable-hierarchical-cache" not in argv and plan["hicache"] is None
    _flags_module()
    validate_plan(plan)


# ---------------------------------------------------------------------------------------------
# Instances


def test_model_detection(configs: dict[str, Any]) -> None:
    assert model_kind(configs["hybrid"])["hybrid"] is True
    assert model_kind(configs["hybrid"])["has_mtp"] is True
    assert model_kind(configs["dense"])["hybrid"] is False
    assert model_kind(None, "hybrid")["source"] == "declared"
    # MLA (multi-head latent attention: the storage tier's pages are rank 0's alone)
    assert model_kind(configs["dense"])["mla"] is False and model_kind(None, "dense")["mla"] is None
    deepseek = {"architectures": ["DeepseekV3ForCausalLM"], "kv_lora_rank": 512}
    assert model_kind(deepseek)["mla"] is True
    assert model_kind({"architectures": ["KimiK25ForConditionalGeneration"], "text_config": deepseek})["mla"] is True
    with pytest.raises(ModelKindError, match="model_arch"):
        model_kind(None, None)
    with pytest.raises(PlanError, match="model_arch"):  # through the plan: a PlanError
        instance_plan({"gpus": [{"index": 0}], "memory": {}}, profile="baseline", model_path="/m")


def test_dense_spec_needs_a_draft_model(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    with pytest.raises(PlanError, match="draft_model_path"):
        instance_plan(h200x2_facts, profile="mtp", model_path="/m", model_config=configs["dense"])
    plan = instance_plan(h200x2_facts, profile="mtp", model_path="/m", model_config=configs["dense"],
                         draft_model_path="/draft")
    argv = plan["instances"][0]["argv"]
    assert _opt(argv, "--speculative-algorithm") == "EAGLE"
    assert _opt(argv, "--speculative-draft-model-path") == "/draft"


def test_busy_gpu_refused_unless_forced(configs: dict[str, Any]) -> None:
    busy = _gpu(1, "NVIDIA H200", 143771, busy=True, memory_used_mib=70000,
                processes=[{"pid": 4242, "name": "python3", "used_memory_mib": 70000}])
    facts = _facts(200 * GB, [_gpu(0, "NVIDIA H200", 143771), busy])
    with pytest.raises(PlanError, match="GPU 1 .*pid 4242.*force_busy"):
        _plan_for(facts, configs, "hybrid", profile="baseline")
    plan = _plan_for(facts, configs, "hybrid", profile="baseline", force_busy=True)
    assert len(plan["instances"]) == 2
    assert any("busy" in w for w in plan["warnings"])
    only_free = _plan_for(facts, configs, "hybrid", profile="baseline", gpus=[0])
    assert [i["name"] for i in only_free["instances"]] == ["gpu0"]


def test_tp2_naming_and_ports(handrun_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    plan = _plan_for(handrun_facts, configs, "hybrid", profile="mtp_hicache", tp_size=2, base_port=31000,
                     nccl_port_base=32000)
    assert [i["name"] for i in plan["instances"]] == ["gpu0-1", "gpu2-3"]
    assert [i["gpu_ids"] for i in plan["instances"]] == [[0, 1], [2, 3]]
    assert [i["cuda_visible_devices"] for i in plan["instances"]] == ["0,1", "2,3"]
    assert [i["port"] for i in plan["instances"]] == [31000, 31001]
    assert [i["nccl_port"] for i in plan["instances"]] == [32000, 32001]
    assert all(_opt(i["argv"], "--tp-size") == "2" for i in plan["instances"])
    assert plan["hicache"]["tp_size"] == 2 and plan["hicache"]["instances"] == 2
    default = _plan_for(handrun_facts, configs, "hybrid", profile="baseline")
    nccl = [i["nccl_port"] for i in default["instances"]]
    assert nccl == [31000, 31001, 31002, 31003] and len(set(nccl)) == 4


def test_gpu_count_and_presence(handrun_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    with pytest.raises(PlanError, match="cannot be divided into tensor-parallel groups of 2"):
        _plan_for(handrun_facts, configs, "hybrid", profile="baseline", tp_size=2, gpus=[0, 1, 2])
    with pytest.raises(PlanError, match="GPU.* 7 not present.*0, 1, 2, 3"):
        _plan_for(handrun_facts, configs, "hybrid", profile="baseline", gpus=[0, 7])
    with pytest.raises(PlanError, match="overlap"):
        _plan_for(handrun_facts, configs, "hybrid", profile="baseline", nccl_port_base=30002)


@pytest.mark.parametrize(("release", "flag"), [
    ("0.5.10", "--mamba-scheduler-strategy"),
    ("0.5.17", "--mamba-radix-cache-strategy"),
    ("0.5.23", "--mamba-radix-cache-strategy"),
])
def test_mamba_flag_per_release(h200x2_facts: dict[str, Any], configs: dict[str, Any], release: str,
                                flag: str) -> None:
    hybrid = _plan_for(h200x2_facts, configs, "hybrid", profile="mtp", release=release)["instances"][0]["argv"]
    assert _opt(hybrid, flag) == "extra_buffer"
    dense = _plan_for(h200x2_facts, configs, "dense", profile="mtp", release=release)["instances"][0]["argv"]
    assert not any("mamba" in word for word in dense)


@pytest.mark.parametrize("release", ["0.5.10", "0.5.17", "0.5.23"])
def test_spec_v2_env_only_on_0510(h200x2_facts: dict[str, Any], configs: dict[str, Any], release: str) -> None:
    for profile in BUILTIN_PROFILES:
        for kind in ("dense", "hybrid"):
            env = _plan_for(h200x2_facts, configs, kind, profile=profile, release=release)["instances"][0]["env"]
            wanted = release == "0.5.10" and kind == "hybrid" and profile in SPEC_PROFILES
            assert (env.get("SGLANG_ENABLE_SPEC_V2") == "1") is wanted, (profile, kind)
            assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # Without extra_buffer, 0.5.10 needs no spec v2 either.
    env = _plan_for(h200x2_facts, configs, "hybrid", profile="mtp", release="0.5.10",
                    user_profiles={"mtp": {"mamba_strategy": "no_buffer"}})["instances"][0]["env"]
    assert "SGLANG_ENABLE_SPEC_V2" not in env


@pytest.mark.parametrize(("release", "flag", "other"), [
    ("0.5.10", "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
    ("0.5.23", "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
])
def test_cuda_graph_flag_per_release(h200x2_facts: dict[str, Any], configs: dict[str, Any], release: str,
                                     flag: str, other: str) -> None:
    plan = _plan_for(h200x2_facts, configs, "hybrid", profile="mtp", release=release, max_running_requests=40)
    argv = plan["instances"][0]["argv"]
    assert _opt(argv, "--max-running-requests") == "40"
    assert int(_opt(argv, flag) or 0) >= 40
    assert other not in argv
    # A profile with a larger graph keeps it; a smaller one is raised.
    user = {"mtp": {"cuda_graph_max_bs": 64}}
    argv = _plan_for(h200x2_facts, configs, "hybrid", profile="mtp", release=release,
                     user_profiles=user)["instances"][0]["argv"]
    assert _opt(argv, flag) == "64"
    # max running requests set through extra_args raises the graph too.
    argv = _plan_for(h200x2_facts, configs, "hybrid", profile="mtp", release=release,
                     extra_args={"--max-running-requests": 96})["instances"][0]["argv"]
    assert _opt(argv, "--max-running-requests") == "96" and _opt(argv, flag) == "96"


def test_extra_args_override_and_removal(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    plan = _plan_for(h200x2_facts, configs, "hybrid", profile="mtp_hicache", release="0.5.23", extra_args={
        "--mem-fraction-static": 0.7, "--enable-metrics": None, "--log-level": "info",
        "--hicache-write-policy": "write_back", "disable-custom-all-reduce": True,
    })
    argv = plan["instances"][0]["argv"]
    assert _opt(argv, "--mem-fraction-static") == "0.7"
    assert argv.count("--mem-fraction-static") == 1
    assert "--enable-metrics" not in argv
    assert _opt(argv, "--log-level") == "info"
    assert _opt(argv, "--hicache-write-policy") == "write_back"
    assert "--disable-custom-all-reduce" in argv
    as_list = _plan_for(h200x2_facts, configs, "hybrid", profile="baseline",
                        extra_args=["--log-level", "debug", "--mem-fraction-static=0.6"])["instances"][0]["argv"]
    assert _opt(as_list, "--log-level") == "debug" and _opt(as_list, "--mem-fraction-static") == "0.6"
    _flags_module()
    validate_plan(plan)


def test_extra_hicache_size_goes_through_the_plan(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    with pytest.raises(PlanError, match="oversubscribes.*largest size that fits"):
        _plan_for(h200x2_facts, configs, "hybrid", profile="mtp_hicache", extra_args={"--hicache-size": 150})
    plan = _plan_for(h200x2_facts, configs, "hybrid", profile="mtp_hicache", extra_args={"--hicache-size": 30})
    assert _opt(plan["instances"][0]["argv"], "--hicache-size") == "30"


def test_owned_flags_and_api_key(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    for flag in ("--api-key", "--port", "--tp-size", "--model-path", "--config"):
        with pytest.raises(PlanError, match=f"may not set {flag}"):
            _plan_for(h200x2_facts, configs, "hybrid", profile="baseline", extra_args={flag: "x"})
    plan = _plan_for(h200x2_facts, configs, "hybrid", profile="baseline", api_key_env=True, base_dir="/b")
    for inst in plan["instances"]:
        assert "--api-key" not in inst["argv"]  # never argv: ps shows argv
        assert _opt(inst["argv"], "--config") == f"/b/{inst['name']}/secrets.yaml" == inst["paths"]["secrets_file"]
        assert inst["secrets"] == {"api-key": "sglang_api_key"}
    plain = _plan_for(h200x2_facts, configs, "hybrid", profile="baseline")
    assert plain["instances"][0]["secrets"] == {} and "--config" not in plain["instances"][0]["argv"]


def test_bad_extra_flag_names_instance_flag_and_closest(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    _flags_module()
    plan = _plan_for(h200x2_facts, configs, "hybrid", profile="baseline", release="0.5.23",
                     extra_args={"--mem-fraction-statik": 0.7})
    with pytest.raises(PlanError) as err:
        validate_plan(plan)
    message = str(err.value)
    assert "instance gpu0" in message and "instance gpu1" in message
    assert "--mem-fraction-statik" in message
    assert "--mem-fraction-static" in message.replace("--mem-fraction-statik", "")
    # The old flag name on the new release is caught the same way.
    old = _plan_for(h200x2_facts, configs, "hybrid", profile="baseline", release="0.5.23",
                    extra_args={"--mamba-scheduler-strategy": "extra_buffer"})
    with pytest.raises(PlanError, match="--mamba-scheduler-strategy"):
        validate_plan(old)


def test_unknown_release_and_strategy(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    with pytest.raises(PlanError, match="0.5.99.*supported releases are 0.5.10"):
        _plan_for(h200x2_facts, configs, "hybrid", release="0.5.99")
    with pytest.raises(PlanError, match="extra_buffer_lazy.*0.5.10"):
        _plan_for(h200x2_facts, configs, "hybrid", profile="mtp", release="0.5.10",
                  user_profiles={"mtp": {"mamba_strategy": "extra_buffer_lazy"}})


def test_plan_is_json_and_pure(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    before = copy.deepcopy(h200x2_facts)
    plan = _plan_for(h200x2_facts, configs, "hybrid", served_model_name="qwen")
    assert h200x2_facts == before
    assert json.loads(json.dumps(plan)) == plan
    assert _opt(plan["instances"][0]["argv"], "--served-model-name") == "qwen"
    wrapped = _plan_for({"sglang_host": h200x2_facts}, configs, "hybrid", served_model_name="qwen")
    assert wrapped == plan


# ---------------------------------------------------------------------------------------------
# Filters


def test_filters(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    errors = pytest.importorskip("ansible.errors")
    from ansible_collections.llmops.sglang.plugins.filter.plan import FilterModule

    filters = FilterModule().filters()
    hc = filters["hicache_plan"](h200x2_facts, release="0.5.23", instances=2, tp_size=1, hybrid=True, spec=True)
    assert hc["fits"] is True
    with pytest.raises(errors.AnsibleFilterError, match="largest size that fits"):
        filters["hicache_plan"](h200x2_facts, release="0.5.23", instances=2, tp_size=1, hybrid=True, spec=True,
                                explicit_size_gb=500)
    with pytest.raises(errors.AnsibleFilterError, match="unknown profile"):
        filters["instance_plan"](h200x2_facts, profile="nope", model_path="/m", model_config=configs["hybrid"],
                                 validate=False)
    plan = filters["instance_plan"](h200x2_facts, profile="baseline", model_path="/m",
                                    model_config=configs["hybrid"], validate=False)
    assert len(plan["instances"]) == 2


def test_validate_plan_collects_every_problem(monkeypatch: pytest.MonkeyPatch, h200x2_facts: dict[str, Any],
                                              configs: dict[str, Any]) -> None:
    """validate_plan's report, with a stand-in for _flags.validate_argv (the real one is used above)."""
    import sys
    import types

    class FakeFlagError:
        def __init__(self, flag: str, message: str, suggestion: str | None) -> None:
            self.flag, self.message, self.suggestion = flag, message, suggestion

    def validate_argv(argv: list[str], release: str) -> list[FakeFlagError]:
        assert release == "0.5.23" and argv[0] == "--model-path"
        return [FakeFlagError(word, "unrecognized argument", "--mem-fraction-static")
                for word in argv if word == "--mem-fraction-statik"]

    fake = types.ModuleType("_flags")
    fake.validate_argv = validate_argv  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ansible_collections.llmops.sglang.plugins.module_utils._shared.flags", fake)
    validate_plan(_plan_for(h200x2_facts, configs, "hybrid"))  # no problem: no error
    plan = _plan_for(h200x2_facts, configs, "hybrid", extra_args={"--mem-fraction-statik": 0.7})
    with pytest.raises(PlanError) as err:
        validate_plan(plan)
    lines = str(err.value).splitlines()
    assert "2 problem(s)" in lines[0]
    assert lines[1:] == [
        f"  - instance {name}: --mem-fraction-statik: unrecognized argument (closest valid flag: --mem-fraction-static)"
        for name in ("gpu0", "gpu1")
    ]


# ---------------------------------------------------------------------------------------------
# The request: sentinels in every form they arrive in, every problem at once


@pytest.mark.parametrize("zero", [0, "0", "", None, " 0 "])
def test_automatic_sentinels_from_yaml_json_and_extra_vars(
        h200x2_facts: dict[str, Any], configs: dict[str, Any], zero: Any) -> None:
    """-e sglang_max_running_requests=0 arrives as the string "0": it must mean "from the
    profile", as 0 does from YAML and JSON; the same for the HiCache size and the NCCL base."""
    auto = _plan_for(h200x2_facts, configs, "hybrid", base_port=30000)
    plan = _plan_for(h200x2_facts, configs, "hybrid", base_port="30000", max_running_requests=zero,
                     hicache_size_gb=zero, nccl_port_base=zero, gpus="" if zero == "" else [],
                     served_model_name="" if zero else None, model_arch="", draft_model_path="")
    assert [i["argv"] for i in plan["instances"]] == [i["argv"] for i in auto["instances"]]
    assert _opt(plan["instances"][0]["argv"], "--max-running-requests") != "0"
    assert plan["instances"][0]["nccl_port"] == 31000


def test_extra_vars_strings_are_typed(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    plan = _plan_for(h200x2_facts, configs, "hybrid", profile="baseline", max_running_requests="12",
                     gpus="1", tp_size="1", force_busy="false", hicache_fraction="0.5")
    assert [i["name"] for i in plan["instances"]] == ["gpu1"]
    assert _opt(plan["instances"][0]["argv"], "--max-running-requests") == "12"


def test_every_bad_input_is_named_at_once(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    with pytest.raises(PlanError) as err:
        _plan_for(h200x2_facts, configs, "hybrid", max_running_requests=-3, base_port="http", tp_size=0,
                  hicache_fraction=1.5, force_busy="maybe", gpus=[0, 0], model_path="")
    message = str(err.value)
    assert message.startswith("7 problems with the deployment's variables:")
    for expected in ("sglang_max_running_requests=-3: must be at least 1, or 0 for automatic",
                     "sglang_base_port='http': must be an integer", "sglang_tp_size=0: must be at least 1",
                     "sglang_hicache_fraction=1.5: must be in (0, 1]", "sglang_force_busy_gpus='maybe'",
                     "sglang_gpus=[0, 0]: lists a GPU twice", "sglang_model_path='': required"):
        assert expected in message, message
    with pytest.raises(PlanError, match=r"^sglang_hicache_size_gb=2\.5: must be a whole number$"):
        _plan_for(h200x2_facts, configs, "hybrid", hicache_size_gb=2.5)
    with pytest.raises(PlanError, match="not a parameter of the plan"):
        _plan_for(h200x2_facts, configs, "hybrid", max_running_request=3)


def test_running_size_is_kept_while_it_fits(handrun_facts: dict[str, Any]) -> None:
    """MemAvailable moves between runs; a running deployment keeps its size while it fits, and
    is resized only when it no longer does (or when a size is given)."""
    fresh = hicache_plan(handrun_facts, release="0.5.23", instances=4, tp_size=1, hybrid=True, spec=True)
    largest = fresh["size_gb"]
    facts = copy.deepcopy(handrun_facts)
    facts["memory"]["running_hicache_size_gb"] = largest - 3
    kept = hicache_plan(facts, release="0.5.23", instances=4, tp_size=1, hybrid=True, spec=True,
                        keep_size_gb=largest - 3)
    assert kept["size_gb"] == largest - 3 and kept["largest_size_gb"] == largest
    assert any("kept" in line for line in kept["reasoning"])
    above_target = hicache_plan(handrun_facts, release="0.5.23", instances=4, tp_size=1, hybrid=True, spec=True,
                                keep_size_gb=largest + 5)  # above the 75% target, within available - reserve
    assert above_target["size_gb"] == largest + 5 and above_target["kept_running_size"]
    hard = math.floor((200 * GB - 10 * GIB) / 4 / (GB * (1 + fresh["draft_factor"])))
    too_big = hicache_plan(handrun_facts, release="0.5.23", instances=4, tp_size=1, hybrid=True, spec=True,
                           keep_size_gb=hard + 1)
    assert too_big["size_gb"] == largest and any("no longer fits" in line for line in too_big["reasoning"])
    explicit = hicache_plan(handrun_facts, release="0.5.23", instances=4, tp_size=1, hybrid=True, spec=True,
                            keep_size_gb=largest - 3, explicit_size_gb=2)
    assert explicit["size_gb"] == 2


def test_the_plan_keeps_the_running_size_from_the_facts(
        h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    from ansible_collections.llmops.sglang.plugins.module_utils._server.manifest import reclaim_pinned

    first = _plan_for(h200x2_facts, configs, "hybrid")
    size = first["hicache"]["size_gb"]
    previous = {"engine": "sim", "hicache": first["hicache"], "instances": [{"name": "gpu0"}, {"name": "gpu1"}]}
    moved = copy.deepcopy(h200x2_facts)
    moved["memory"]["available_bytes"] -= 3 * GB  # other programs took a little memory meanwhile
    moved["memory"]["effective_available_bytes"] -= 3 * GB
    assert _plan_for(moved, configs, "hybrid")["hicache"]["size_gb"] < size  # a fresh plan would shrink
    again = _plan_for(reclaim_pinned(moved, previous, ["gpu0", "gpu1"]), configs, "hybrid")
    assert again["hicache"]["size_gb"] == size
    stopped = reclaim_pinned(moved, previous, [])
    assert stopped["memory"]["running_hicache_size_gb"] is None


def test_a_tensor_parallel_group_over_two_hosts(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    """tp_size 4 over two hosts of 2 GPUs: each host runs one instance on its 2 GPUs with
    --nnodes 2, its --node-rank from the inventory order and rank 0's --dist-init-addr."""
    group = {"tp_group_hosts": ["node-a", "node-b"], "tp_group_addresses": ["10.0.0.11", "10.0.0.12"],
             "tp_size": 4, "base_port": 30000}
    plans = {host: _plan_for(h200x2_facts, configs, "hybrid", profile="baseline", inventory_host=host, **group)
             for host in ("node-a", "node-b")}
    for rank, host in enumerate(("node-a", "node-b")):
        (inst,) = plans[host]["instances"]
        argv = inst["argv"]
        assert (_opt(argv, "--tp-size"), _opt(argv, "--nnodes"), _opt(argv, "--node-rank")) == ("4", "2", str(rank))
        assert _opt(argv, "--dist-init-addr") == "10.0.0.11:32000"
        assert inst["gpu_ids"] == [0, 1] and inst["cuda_visible_devices"] == "0,1"
        assert (inst["node_rank"], inst["nnodes"], inst["rank0"]) == (rank, 2, rank == 0)
    hicache = _plan_for(h200x2_facts, configs, "hybrid", inventory_host="node-a", **group)["hicache"]
    assert hicache["tp_size"] == 2  # the ranks on this host pin host memory here
    with pytest.raises(PlanError, match="multiple of 2"):
        _plan_for(h200x2_facts, configs, "hybrid", profile="baseline", inventory_host="node-a",
                  **dict(group, tp_size=3))
    with pytest.raises(PlanError, match="set sglang_gpus to 1 GPU"):
        _plan_for(h200x2_facts, configs, "hybrid", profile="baseline", inventory_host="node-a",
                  **dict(group, tp_size=2))
    with pytest.raises(PlanError, match="is not in the TP group"):
        _plan_for(h200x2_facts, configs, "hybrid", profile="baseline", inventory_host="node-z", **group)
    with pytest.raises(PlanError, match="may not set --node-rank"):
        _plan_for(h200x2_facts, configs, "hybrid", profile="baseline", extra_args={"--node-rank": 1})
    single = _plan_for(h200x2_facts, configs, "hybrid", profile="baseline")["instances"][0]
    assert single["rank0"] and single["nnodes"] == 1 and "--nnodes" not in single["argv"]
