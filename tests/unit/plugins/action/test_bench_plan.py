"""The bench_plan action (plugins/action/bench_plan.py): the task's arguments checked against its
documentation, the role's variables read from the task's, the plan (plugin_utils/_benchplan.py)
returned and its errors a failed task."""
from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.sglang.plugins.action import bench_plan
from ansible_collections.llmops.sglang.plugins.plugin_utils._benchplan import VARIABLES
from ansible_collections.llmops.sglang.plugins.plugin_utils._declared import role_default

MANIFEST = {"python": "/e/bin/python", "instances": [{"name": "gpu0", "connect_url": "http://127.0.0.1:30000"}]}


def _run(args: dict[str, Any], **task_vars: Any) -> dict[str, Any]:
    task = mock.MagicMock(args=args, async_val=0, check_mode=False)
    templar = mock.MagicMock()
    templar.template.side_effect = lambda value: value
    action = bench_plan.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=templar,
                                     shared_loader_obj=None)
    defaults = {name: role_default("bench", name) for name in VARIABLES}
    return action.run(task_vars={"inventory_hostname": "node1", **defaults, **task_vars})


def test_the_plan_from_the_task_and_the_roles_variables() -> None:
    result = _run({"manifest": MANIFEST}, sglang_bench_sweep_timeout=60, ansible_playbook_python="/c/python")
    assert not result.get("failed") and result["changed"] is False
    plan = result["plan"]
    assert plan["batches"] == [[{"name": "gpu0", "url": "http://127.0.0.1:30000",
                                 "progress_file": plan["progress_file"].replace("{instance}", "gpu0"),
                                 "heartbeat_file": plan["heartbeat_file"].replace("{instance}", "gpu0")}]]
    assert plan["job_timeout"] == 180 and plan["python"] == "/e/bin/python" and plan["run_id"].endswith("Z")
    assert _run({"manifest": MANIFEST}, sglang_bench_run_on="controller",
                ansible_playbook_python="/c/python")["plan"]["python"] == "/c/python"


def test_a_plan_that_cannot_be_made_fails_the_task_naming_the_variable() -> None:
    result = _run({"manifest": MANIFEST}, sglang_bench_instances=["gpu3"])
    assert result["failed"] and "sglang_bench_instances is ['gpu3']" in result["msg"]


def test_an_argument_the_documentation_does_not_name_is_refused() -> None:
    with pytest.raises(AnsibleActionFail):
        _run({"manifest": MANIFEST, "instances": ["gpu0"]})
