"""plugin_utils/_rollback.py: rollback.yml's plan from a host's manifest alone."""
from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout
from ansible_collections.llmops.sglang.plugins.plugin_utils import _rollback


def _record(name: str, port: int, previous: bool = True, **extra: Any) -> dict[str, Any]:
    return {"name": name, "service": _layout.service_name(name), "unit": f"sglang@{name}.service",
            "connect_url": f"http://127.0.0.1:{port}", "paths": _layout.instance_paths("/srv/sglang", name),
            "gpus": [port - 30000], "rank0": True, **({"previous": {"argv": ["--port", str(port)]}} if previous else {}),
            **extra}


MANIFEST = {"engine": "sim", "service_manager": "process", "python": "/usr/bin/python3", "base_dir": "/srv/sglang",
            "instances": [_record("gpu0", 30000), _record("gpu1", 30001, previous=False),
                          _record("gpu2", 30002, nnodes=2)]}


def test_targets_are_the_instances_with_a_previous_configuration_and_the_others_say_why() -> None:
    plan = _rollback.plan(MANIFEST, ["gpu0", "gpu1", "gone"], ready_timeout=30, time_scale=0.1)
    assert plan["targets"] == ["gpu0"] and plan["running"] == ["gpu0", "gpu1"]
    assert set(plan["not_targets"]) == {"gpu1", "gpu2"} and "no previous configuration" in plan["not_targets"]["gpu1"]
    assert "multi-node" in plan["not_targets"]["gpu2"]
    assert plan["manifest_path"] == _layout.manifest_path("/srv/sglang")
    assert _rollback.plan(MANIFEST, [], ready_timeout=0, only=["gpu1"])["targets"] == []


def test_each_instance_carries_what_the_batch_steps_start_and_wait_for() -> None:
    """The batch steps are the rollout's (start_process.yml starts a batch in one
    detached_service run from each instance's ``process``, wait_ready reads ``wait``)."""
    gpu0 = _rollback.plan(MANIFEST, [], ready_timeout=0)["instances"][0]
    paths = _layout.instance_paths("/srv/sglang", "gpu0")
    assert gpu0["process"] == {"name": "sglang-gpu0", "command": [paths["launch_script"]], "chdir": paths["dir"],
                               "pid_file": paths["pid_file"], "log_file": paths["log_file"]}
    assert gpu0["wait"]["url"] == "http://127.0.0.1:30000" and gpu0["wait"]["pid_file"] == paths["pid_file"]
    systemd = _rollback.plan({**MANIFEST, "service_manager": "systemd"}, [], ready_timeout=0)["instances"][0]
    assert systemd["wait"]["unit"] == "sglang@gpu0.service"


def test_a_host_without_a_manifest_has_nothing_to_roll_back() -> None:
    with pytest.raises(_rollback.RollbackError, match="deploy first"):
        _rollback.plan(None, [], ready_timeout=0)


def test_a_second_rollback_says_the_instance_was_rolled_back_not_that_it_never_served_another() -> None:
    """Issue 28 item 11: rollback.yml run twice said "it never had another one that served" of an
    instance it had just put back."""
    once = _rollback.rolled_back(MANIFEST, ["gpu0"], {"gpu0": {"pid": 7}}, {})
    again = _rollback.plan(once, ["gpu0", "gpu1"], ready_timeout=0)
    assert again["targets"] == []
    why = again["not_targets"]["gpu0"]
    assert why.startswith("already rolled back") and "rolled-back/" in why and "deploy.yml" in why, why
    assert "never had another" in again["not_targets"]["gpu1"]
    assert "gpu0 stays: already rolled back" in " ".join(again["summary"])
