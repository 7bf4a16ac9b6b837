# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.model_stage_wait: wait for async model_stage jobs, printing their progress
(documentation: plugins/modules/model_stage_wait.py).

Why an action: a staging of tens of GB takes minutes to hours on the host; the person watching
is on the controller. An action runs on the controller with the task's connection, so each poll
asks the host for the jobs' status (``async_status``) and the last line of each job's progress
file (``tail -n 1`` through the connection) and prints it when it moved.
"""
from __future__ import annotations

import json
import shlex
import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmops.sglang.plugins.module_utils._staging import progress as _progress
from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import documented_args

display = Display()


class ActionModule(ActionBase):
    """Poll the jobs until all finished: status and the last progress line each ``poll`` seconds."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = documented_args(self, "model_stage_wait")
        poll = float(args["poll"])
        timeout = float(args["timeout"])
        if poll <= 0 or timeout <= 0:
            raise AnsibleActionFail(f"poll ({poll}) and timeout ({timeout}) must be > 0 seconds")
        starts = [j for j in args.get("jobs") or [] if isinstance(j, dict)]
        pending = {i: j for i, j in enumerate(starts) if j.get("ansible_job_id")}
        done: dict[int, dict[str, Any]] = {i: j for i, j in enumerate(starts) if not j.get("ansible_job_id")}
        shown: dict[int, str] = {}
        template = str(args.get("progress_file") or "")
        deadline = time.monotonic() + timeout
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        while pending:
            for i, job in list(pending.items()):
                status = self._execute_module(module_name="ansible.legacy.async_status",
                                              module_args={"jid": job["ansible_job_id"], "_async_dir": async_dir},
                                              task_vars=task_vars)
                self._show(i, job, template, shown)
                if status.get("finished") or (status.get("failed") and not status.get("started")):
                    done[i] = {**status, "item": job.get("item")}
                    del pending[i]
            if not pending:
                break
            if time.monotonic() > deadline:
                raise AnsibleActionFail(f"model staging still running after timeout={timeout:g}s")
            time.sleep(poll)
        results = [done[i] for i in sorted(done)]
        failed = [r for r in results if r.get("failed")]
        result.update(results=results, changed=any(r.get("changed") for r in results))
        if failed:
            result.update(failed=True, msg="; ".join(self._why(r) for r in failed))
        return result

    @staticmethod
    def _why(res: dict[str, Any]) -> str:
        """A failed job in words: its message, else what it left (a job that died without one
        made the whole task fail with "msg: None")."""
        item = res.get("item")
        label = f"{item.get('role')}: {item.get('repo')}@{item.get('commit')}: " if isinstance(item, dict) else ""
        if res.get("msg"):
            return label + str(res["msg"])
        left = str(res.get("exception") or res.get("module_stderr") or res.get("stderr") or "").strip()
        return label + (f"the staging job failed without a message: {left[-800:]}" if left else
                        "the staging job failed without a message"
                        + (f" (rc {res['rc']})" if res.get("rc") is not None else "")
                        + "; its log is the async job's file under ~/.ansible_async on the host")

    def _show(self, i: int, job: dict[str, Any], template: str, shown: dict[int, str]) -> None:
        """Print the job's last progress line when it changed since the last look."""
        item = job.get("item")
        role = item.get("role", "") if isinstance(item, dict) else str(item or "")
        path = template.replace("{role}", str(role))
        if not path:
            return
        res = self._low_level_execute_command("tail -n 1 -- " + shlex.quote(str(path)))
        line = str(res.get("stdout") or "").strip()
        if res.get("rc") != 0 or not line or shown.get(i) == line:
            return
        shown[i] = line
        try:
            text = _progress.describe(json.loads(line))
        except ValueError:
            return  # a line being written: the next look reads it whole
        display.display(f"staging: {text}")
