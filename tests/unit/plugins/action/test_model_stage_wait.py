"""The model_stage_wait action (plugins/action/model_stage_wait.py): a failed staging job in words."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.action.model_stage_wait import ActionModule


def test_a_job_that_failed_without_a_message_is_named_with_what_it_left() -> None:
    """Issue 28 item 10: a re-run after a Ctrl-C of stage.yml failed with "msg: None"."""
    item = {"role": "model", "repo": "org/tiny", "commit": "c" * 40}
    assert ActionModule._why({"item": item, "msg": "no room"}) == f"model: org/tiny@{'c' * 40}: no room"
    why = ActionModule._why({"item": item, "failed": True, "module_stderr": "Traceback ...\nOSError: boom\n"})
    assert why.endswith("the staging job failed without a message: Traceback ...\nOSError: boom")
    assert "rc 1" in ActionModule._why({"item": item, "failed": True, "rc": 1})
    assert "None" not in ActionModule._why({"failed": True})
