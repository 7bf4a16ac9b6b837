"""The server_files action (plugins/action/server_files.py): the plan's engine archive is read on
the controller and its bytes go to the module with its arguments; everything else is the module's."""
from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.sglang.plugins.action.server_files import ActionModule

from .actions import make_action


def _action(args: dict[str, Any]) -> tuple[ActionModule, list[dict[str, Any]]]:
    def execute(module_name: str, module_args: dict[str, Any]) -> dict[str, Any]:
        assert module_name == "llmops.sglang.server_files"
        return {"changed": True, "engine_unpacked": True}

    return make_action(ActionModule, args, execute)


def test_the_archive_goes_to_the_module_as_its_bytes(tmp_path: Path) -> None:
    archive = tmp_path / "engine.tar.gz"
    archive.write_bytes(b"\x1f\x8b some gzip")
    action, calls = _action({"instances": [], "engine_archive": {"path": str(archive), "root": "/srv/engine"}})
    result = action.run(task_vars={})
    assert result["engine_unpacked"] and not result.get("failed")
    (sent,) = calls
    assert sent["module"] == "llmops.sglang.server_files"
    assert sent["engine_archive"] == {"path": str(archive), "root": "/srv/engine",
                                      "content": base64.b64encode(archive.read_bytes()).decode()}
    assert sent["instances"] == []


def test_without_an_archive_the_arguments_go_as_they_are_and_a_missing_one_is_named(tmp_path: Path) -> None:
    action, calls = _action({"manifest": {"a": 1}, "manifest_path": "/srv/deployment.json"})
    action.run(task_vars={})
    assert calls == [{"module": "llmops.sglang.server_files", "manifest": {"a": 1},
                      "manifest_path": "/srv/deployment.json"}]
    missing = tmp_path / "gone.tar.gz"
    action, calls = _action({"engine_archive": {"path": str(missing), "root": "/srv/engine"}})
    with pytest.raises(AnsibleActionFail, match=f"cannot read {missing} on the controller"):
        action.run(task_vars={})
    assert calls == []
