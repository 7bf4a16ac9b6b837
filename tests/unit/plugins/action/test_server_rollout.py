"""The server_rollout action (plugins/action/server_rollout.py): each step maps the server role's
plan and task results onto the rules (plugin_utils/_deployment.py, _rollout.py, _rollback.py;
tested in detail beside them), and the manifest steps run server_files on the host only when
there is something to write."""
from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.sglang.plugins.action import server_rollout

from ..module_utils._server.test_deploy import PLAN

FULL = {**PLAN, "engine": "sim", "backend": "process", "python": "/v/bin/python", "running": ["gpu0", "gpu1"],
        "manifest_path": "/b/deployment.json", "previous": {}}


def _step(args: dict[str, Any], check_mode: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    task = mock.MagicMock(args=args, async_val=0, check_mode=check_mode)
    action = server_rollout.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None,
                                         shared_loader_obj=None)
    calls: list[dict[str, Any]] = []

    def execute(module_name: str, module_args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        calls.append({"module": module_name, **module_args})
        return {"changed": True}

    action._execute_module = execute  # type: ignore[method-assign]
    return action.run(task_vars={"inventory_hostname": "h1"}), calls


def test_batches_say_what_restarts_and_goes_and_in_which_batches() -> None:
    previous = {"instances": [{"name": "gpu0"}, {"name": "gpu1"}, {"name": "gpu7"}]}
    got, calls = _step({"step": "batches", "plan": FULL, "previous": previous, "restart": ["gpu1"],
                        "policy": "serial"})
    assert got["diff"]["restart"] == ["gpu1"] and [i["name"] for i in got["diff"]["remove"]] == ["gpu7"]
    assert [[i["name"] for i in b["instances"]] for b in got["batches"]] == [["gpu0"], ["gpu1"]]
    assert [b["restart"] for b in got["batches"]] == [[], ["gpu1"]] and calls == []
    # a rollback's batches: only those that replace something
    back, _ = _step({"step": "batches", "plan": FULL, "restart": ["gpu1"], "policy": "serial", "replaced_only": True})
    assert [[i["name"] for i in b["instances"]] for b in back["batches"]] == [["gpu1"]]


def test_records_of_a_batch_started_in_one_detached_service_run() -> None:
    start = {"changed": True, "services": [{"name": "sglang-gpu0", "changed": False, "pid": 77},
                                           {"name": "sglang-gpu1", "changed": True, "pid": 88}]}
    got, _ = _step({"step": "records", "start": start, "restart": []})
    assert got["records"] == {"gpu0": {"pid": 77, "started": False}, "gpu1": {"pid": 88, "started": True}}
    assert got["started"] == ["gpu1"]


def test_the_manifest_is_written_on_the_host_only_when_it_changed() -> None:
    services = {"gpu0": {"pid": 11, "started": True}, "gpu1": {"pid": 12, "started": True}}
    got, calls = _step({"step": "manifest", "plan": FULL, "services": services, "ready": {}})
    assert got["written"] and got["changed"] and got["manifest"]["host"] == "h1"
    assert calls == [{"module": "llmops.sglang.server_files", "manifest_path": "/b/deployment.json",
                      "manifest": got["manifest"]}]
    again = {**FULL, "previous": got["manifest"], "previous_intact": True}
    running = {name: {**rec, "started": False} for name, rec in services.items()}  # found running, as before
    same, calls = _step({"step": "manifest", "plan": again, "services": running, "ready": {}})
    assert same["manifest"] == got["manifest"] and not same["written"] and not same["changed"] and calls == []


def test_rollback_plan_and_rolled_back_manifest() -> None:
    manifest = {"base_dir": "/b", "service_manager": "process", "engine": "sim", "instances": [
        {"name": "gpu0", "port": 30000, "connect_url": "http://127.0.0.1:30000", "gpus": [0],
         "paths": {"dir": "/b/gpu0", "launch_script": "/b/gpu0/launch.sh", "pid_file": "/b/gpu0/server.pid",
                   "log_file": "/b/gpu0/server.log"}, "service": "sglang-gpu0", "argv": ["--new"],
         "previous": {"argv": ["--old"], "env_digest": "d", "release": "0.5.17"}}]}
    got, _ = _step({"step": "rollback_plan", "manifest": manifest, "running": ["gpu0"], "only": []})
    plan = got["plan"]
    assert plan["targets"] == ["gpu0"]
    assert plan["instances"][0]["idle"] == {"name": "gpu0", "url": "http://127.0.0.1:30000"}
    back, calls = _step({"step": "rolled_back", "plan": plan, "restored": ["gpu0"],
                         "services": {"gpu0": {"pid": 5, "started": True}}, "ready": {}})
    assert back["manifest"]["instances"][0]["argv"] == ["--old"] and back["manifest"]["instances"][0]["pid"] == 5
    assert back["written"] and calls[0]["manifest_path"] == plan["manifest_path"]
    nothing, calls = _step({"step": "rolled_back", "plan": plan, "restored": []})
    assert not nothing["written"] and calls == []
    refused, _ = _step({"step": "rollback_plan", "manifest": None})
    assert refused["failed"] and refused["msg"].startswith("rollback_plan: no deployment manifest on this host")


def test_an_unknown_step_or_a_plan_that_is_not_one_is_refused() -> None:
    with pytest.raises(AnsibleActionFail, match="step 'x' is not one of batches"):
        _step({"step": "x"})
    with pytest.raises(AnsibleActionFail, match="plan must be the server role's plan"):
        _step({"step": "batches", "plan": {"instances": "no"}})


def test_options_are_the_documented_ones_with_their_types_and_defaults() -> None:
    # the documentation is the argument spec (plugin_utils/_docspec.py): defaults from it ...
    got, _ = _step({"step": "batches", "plan": FULL, "restart": ["gpu1"]})
    implicit = [b["instances"] for b in got["batches"]]
    got, _ = _step({"step": "batches", "plan": FULL, "restart": ["gpu1"], "policy": "parallel", "at_once": 1,
                    "canary": 0, "canary_alone": True, "engine_changed": False, "routed": False})
    assert [b["instances"] for b in got["batches"]] == implicit
    # ... strings as Ansible's templating gives them, converted by type ...
    got, _ = _step({"step": "batches", "plan": FULL, "restart": ["gpu1"], "at_once": "1", "routed": "False"})
    assert [b["instances"] for b in got["batches"]] == implicit
    # ... and what the documentation does not allow, refused with the option's name
    with pytest.raises(AnsibleActionFail, match="at_once"):
        _step({"step": "batches", "plan": FULL, "at_once": "many"})
    with pytest.raises(AnsibleActionFail, match="nonsense"):
        _step({"step": "batches", "plan": FULL, "nonsense": 1})
