"""The model sources of the play (plugin_utils/_modelsource.py), as the action model_plan plans
them: every host checked at once, the Hub references once each, then per host its pinned sources,
copies and folders (the copies' rules in detail: tests/unit/plugins/module_utils/_staging/test_fanout.py)."""
from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._staging.layout import Layout
from ansible_collections.llmops.sglang.plugins.plugin_utils import _modelsource as ms

REPO, C1 = "Qwen/Qwen3-0.6B", "c" * 40


def _req(**over: Any) -> dict[str, Any]:
    base = {"model": {"repo": REPO}, "draft": None, "model_path": "", "draft_model_path": "",
            "cache_dir": "/data/hf", "stage_from": "hub"}
    return {**base, **over}


def test_every_bad_host_is_named_at_once() -> None:
    requests = {"h1": _req(model={"repo": "not a repo"}), "h2": _req(model={"path": "rel"}), "h3": _req()}
    with pytest.raises(ms.SourceError) as err:
        ms.play_sources(requests, ["h1", "h2", "h3"])
    assert "h1: sglang_model.repo='not a repo' is not a Hub repository id" in str(err.value)
    assert "h2: sglang_model.path='rel' must be an absolute folder" in str(err.value)
    assert "h3" not in str(err.value)


def test_hub_refs_once_each_in_order() -> None:
    play = ms.play_sources({"h1": _req(draft={"repo": "org/draft", "revision": "v1"}), "h2": _req()}, ["h1", "h2"])
    assert ms.hub_refs(play) == [f"{REPO}@main", "org/draft@v1"]


def test_plan_pins_each_host_and_plans_the_seeds_copies() -> None:
    requests = {"seed": _req(stage_from="seed", cache_dir="/data/seed"), "h2": _req(stage_from="seed"),
                "h3": _req(model={"from_host": "seed", "path": "/models/m"}, stage_from="seed")}
    play = ms.play_sources(requests, list(requests))
    plan = ms.play_plan(requests, play, {f"{REPO}@main": C1}, "/ctl")
    assert plan["seed"]["pinned"][0]["path"] == Layout("/data/seed", REPO, C1).snapshot
    assert plan["seed"]["transfers"] == [] and plan["seed"]["paths"] == {"model": Layout("/data/seed", REPO, C1).snapshot}
    (copy,) = plan["h2"]["transfers"]
    assert copy["origin"] == "seed" and copy["dest_dir"] == Layout("/data/hf", REPO, C1).snapshot
    (peer,) = plan["h3"]["transfers"]
    assert peer["kind"] == "peer" and peer["origin"] == "seed" and plan["h3"]["paths"] == {"model": "/models/m"}
    with pytest.raises(ms.SourceError, match="was not resolved to a commit"):
        ms.play_plan(requests, play, {}, "/ctl")


def test_the_commit_a_deployment_serves_comes_from_its_model_path() -> None:
    from ansible_collections.llmops.sglang.plugins.plugin_utils._modelsource import (
        deployed_commits,
        slurped_manifest,
    )

    commit = "a" * 40
    manifests = {
        "h1": {"instances": [{"argv": ["--model-path", f"/c/models--org--m/snapshots/{commit}", "--port", "1"]}]},
        "h2": {"instances": [{"argv": ["--model-path", f"/c/models--org--other/snapshots/{commit}"]}]},  # another repo
        "h3": {"instances": [{"argv": ["--model-path", "/models/m"]}]},  # a folder, not a snapshot
        "h4": {"instances": [{"argv": ["--model-path", "/c/models--org--m/snapshots/main"]}]},  # not a commit
        "h5": {"instances": "garbage"},
        "h6": None,
    }
    assert deployed_commits(manifests, "org/m") == {"h1": commit}
    assert slurped_manifest({"content": "bm90IGpzb24="}) is None  # base64 of "not json"
    assert slurped_manifest({"failed": True, "msg": "file not found"}) is None
    assert slurped_manifest({"content": "eyJhIjogMX0="}) == {"a": 1}
