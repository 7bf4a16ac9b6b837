from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils import _generateplan as gp


def manifest(*names: str, python: str = "/venv/bin/python", **extra) -> dict:
    return {"python": python, "instances": [
        {"name": n, "connect_url": f"http://127.0.0.1:{30000 + i}", "advertise_url": f"http://10.0.0.1:{30000 + i}",
         "rank0": True, **extra} for i, n in enumerate(names)]}


@pytest.fixture
def prompts(tmp_path: Path) -> Path:
    path = tmp_path / "My prompts.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "prompt": "x"}) + "\n" for i in range(3)))
    return path


def variables(prompts: Path, **kw) -> dict:
    return {"sglang_generate_input": str(prompts), "sglang_base_dir": "/opt/sglang", **kw}


def test_straight_to_the_instances_each_with_its_own_concurrency_and_where_it_came_from(prompts: Path) -> None:
    fleet = gp.Fleet(
        deployments={"a": manifest("gpu0", "gpu1"), "b": manifest("gpu0", max_running_requests=64)},
        tuned={"a": {"at_concurrency": 48}},
        sweeps={"b": {"gpu0": {"knee": {"concurrency": 24}, "peak": {"concurrency": 32}}}},
    )
    plan = gp.plan(variables(prompts), fleet, ["a", "b"])
    assert plan["via"] == "instances" and plan["host"] == "a" and plan["python"] == "/venv/bin/python"
    assert [(t["name"], t["url"], t["concurrency"], t["source"]) for t in plan["targets"]] == [
        ("a/gpu0", "http://127.0.0.1:30000", 48, "sglang_tuned.at_concurrency"),
        ("a/gpu1", "http://127.0.0.1:30001", 48, "sglang_tuned.at_concurrency"),
        ("b/gpu0", "http://10.0.0.1:30000", 24, "sglang_sweeps knee"),
    ]
    assert plan["concurrency"] == 120 and plan["job"] == "My-prompts" and plan["folder"] == "/opt/sglang/generate/My-prompts"
    assert plan["input"]["requests"] == 3 and plan["input"]["path"].startswith("/opt/sglang/generate/My-prompts/input-")
    assert plan["warnings"] == []


def test_through_the_router_one_target_with_the_instances_summed_on_the_router_host(prompts: Path) -> None:
    fleet = gp.Fleet(deployments={"a": manifest("gpu0", max_running_requests=40), "b": manifest("gpu0")},
                     routers={"r": {"url": "http://127.0.0.1:8000", "python": "/router/bin/python"}})
    plan = gp.plan(variables(prompts, sglang_generate_concurrency=16), fleet, ["a", "b", "r"])
    assert plan["via"] == "router" and plan["host"] == "r" and plan["python"] == "/router/bin/python"
    assert plan["targets"] == [{"name": "router", "url": "http://127.0.0.1:8000", "concurrency": 32,
                                "source": "sum of 2 instances' (sglang_generate_concurrency)"}]
    assert plan["instances"] == [{"name": "a/gpu0", "url": "http://10.0.0.1:30000"}, {"name": "b/gpu0", "url": "http://10.0.0.1:30000"}]


def test_an_instance_with_nothing_to_size_it_gets_the_fallback_with_a_warning(prompts: Path) -> None:
    plan = gp.plan(variables(prompts, sglang_generate_target="instances"), gp.Fleet(deployments={"a": manifest("gpu0")}), ["a"])
    assert plan["targets"][0]["concurrency"] == 32 and "run bench.yml or tune.yml first" in plan["warnings"][0]
    given = gp.plan(variables(prompts, sglang_generate_target="instances", sglang_generate_fallback_concurrency=6),
                    gp.Fleet(deployments={"a": manifest("gpu0")}), ["a"])
    assert given["targets"][0]["concurrency"] == 6 and "6 (sglang_generate_fallback_concurrency)" in given["warnings"][0]


def test_ranks_above_0_are_no_targets(prompts: Path) -> None:
    fleet = gp.Fleet(deployments={"a": manifest("tp0"), "b": manifest("tp0", rank0=False)})
    plan = gp.plan(variables(prompts, sglang_generate_concurrency=8), fleet, ["a", "b"])
    assert [t["name"] for t in plan["targets"]] == ["a/tp0"]


@pytest.mark.parametrize(("kw", "fleet", "message"), [
    ({"sglang_generate_target": "router"}, gp.Fleet(deployments={"a": manifest("g")}), "the play has no router host"),
    ({}, gp.Fleet(), "no SGLang instance is deployed"),
    ({"sglang_generate_concurrency": -1}, gp.Fleet(deployments={"a": manifest("g")}), "give a count > 0, or 0"),
    ({"sglang_generate_host": "zz"}, gp.Fleet(deployments={"a": manifest("g")}), "sglang_generate_host zz is not a host of this play"),
    ({"sglang_generate_job": "a/b"}, gp.Fleet(deployments={"a": manifest("g")}), "a job name is letters"),
])
def test_a_plan_that_cannot_be_made_names_the_value_and_the_fix(prompts: Path, kw: dict, fleet: gp.Fleet, message: str) -> None:
    with pytest.raises(gp.GeneratePlanError, match=message):
        gp.plan(variables(prompts, **kw), fleet, ["a"])


def test_a_loopback_instance_on_another_host_cannot_be_a_target(prompts: Path) -> None:
    loop = {"python": "p", "instances": [{"name": "g", "connect_url": "http://127.0.0.1:1", "advertise_url": None}]}
    with pytest.raises(gp.GeneratePlanError, match="listens on loopback only"):
        gp.plan(variables(prompts), gp.Fleet(deployments={"a": manifest("g"), "b": loop}), ["a", "b"])


def test_the_input_is_checked_on_the_controller_before_anything_moves(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
    fleet = gp.Fleet(deployments={"a": manifest("g")})
    with pytest.raises(gp.GeneratePlanError, match="line 2: id 'a' is on line 1 too"):
        gp.plan({"sglang_generate_input": str(bad)}, fleet, ["a"])
    with pytest.raises(gp.GeneratePlanError, match="is not a file on the controller"):
        gp.plan({"sglang_generate_input": str(tmp_path / "none.jsonl")}, fleet, ["a"])
    on_host = gp.plan({"sglang_generate_input": "/data/in.jsonl", "sglang_generate_input_on_host": True}, fleet, ["a"])
    assert on_host["input"] == {"src": None, "path": "/data/in.jsonl", "checked": False}
    with pytest.raises(gp.GeneratePlanError, match="sglang_generate_input is not set"):
        gp.plan({"sglang_generate_job": "j"}, fleet, ["a"])
    status = gp.plan({"sglang_generate_job": "j", "sglang_generate_action": "status"}, fleet, ["a"])
    assert status["input"] is None and status["folder"] == "/opt/sglang/generate/j"
    with pytest.raises(gp.GeneratePlanError, match="neither sglang_generate_job nor sglang_generate_input"):
        gp.plan({"sglang_generate_action": "status"}, fleet, ["a"])


def test_the_folder_is_the_job_hosts_own_base_dir_where_its_inventory_sets_one(prompts: Path) -> None:
    fleet = gp.Fleet(deployments={"a": manifest("g")}, routers={"r": {"url": "http://r:8000", "python": "p"}},
                     dirs={"a": {"sglang_base_dir": "/srv/a"}, "r": {"sglang_base_dir": "/srv/r", "sglang_generate_dir": None}})
    assert gp.plan(variables(prompts), fleet, ["a", "r"])["folder"] == "/srv/r/generate/My-prompts"
    fleet = gp.Fleet(deployments={"a": manifest("g")}, dirs={"a": {"sglang_generate_dir": "/data/jobs"}})
    assert gp.plan(variables(prompts), fleet, ["a"])["folder"] == "/data/jobs/My-prompts"
