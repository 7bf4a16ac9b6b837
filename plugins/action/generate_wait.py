# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.generate_wait: wait for a generation job, printing its progress
(documentation: plugins/modules/generate_wait.py).

Why an action: the job runs detached on its host; the person watching and the summary are on the
controller. Each poll runs ``generate_job step=status`` through the task's connection and prints a
line when the job's progress document changed."""
from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmops.sglang.plugins.module_utils._generate import report as _report
from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import documented_args

display = Display()
ENDED = ("finished", "stopped", "failed", "interrupted", "none")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = documented_args(self, "generate_wait")
        poll, timeout, start_timeout = float(args["poll"]), float(args["timeout"]), float(args["start_timeout"])
        if poll <= 0 or timeout < 0 or start_timeout <= 0:
            raise AnsibleActionFail(f"poll ({poll:g}) and start_timeout ({start_timeout:g}) must be > 0 s, timeout "
                                    f"({timeout:g}) >= 0 s")
        dest = None if self._task.check_mode else args.get("dest")
        began = time.monotonic()
        seen = None
        # with jid, this play started the job: a status before it took its folder is an earlier run's
        started = not args.get("jid")
        while True:
            status = self._status(args["folder"], task_vars)
            progress = status.get("progress") or {}
            started = started or status["state"] == "running"
            if progress and started and progress.get("updated_at") != seen:
                seen = progress.get("updated_at")
                display.display(f"generate: {_report.line(progress)}")
                if dest:
                    _append(dest, progress)
            if self._task.check_mode:
                break
            if status["state"] in ENDED and started:
                break
            if status["state"] in ENDED:  # not started yet, or it ended before a poll saw it run
                job = self._async(str(args["jid"]), task_vars)
                if job.get("failed"):
                    return {**result, "failed": True, "changed": False, "state": "failed", "generate": progress,
                            "msg": str(job.get("msg") or "the job failed")}
                if job.get("finished"):
                    started = True
                    continue  # its end is in the folder now: read it
                if time.monotonic() - began > start_timeout:
                    raise AnsibleActionFail(f"the job in {args['folder']} did not start in {start_timeout:g} s "
                                            f"(async job {args['jid']} still running, the folder's lock not taken)")
            if timeout and time.monotonic() - began > timeout:
                display.warning(f"generate_wait: stopped waiting after {timeout:g} s; the job runs on "
                                "(generate.yml -e generate_action=status shows it)")
                break
            time.sleep(poll)
        state = status["state"]
        if dest and progress and state != "running":
            _summary(dest, progress, {"host": args.get("host_label") or task_vars.get("inventory_hostname"),
                                      "folder": args["folder"]})
        failed = state in ("failed", "interrupted") and not self._task.check_mode
        out = {**result, "changed": False, "state": state, "generate": progress}
        if int(progress.get("errors") or 0) and state != "running":
            out["warnings"] = [*result.get("warnings", []), (
                f"{progress['errors']} of {progress.get('total')} requests failed for good: errors.jsonl in "
                f"{args['folder']} has each one's reason; once the cause is fixed, "
                "sglang_generate_retry_errors=true sends them again")]
        if failed:
            out.update(failed=True, msg=f"the job {state}: {progress.get('message') or 'see job.log in ' + args['folder']}")
        return out

    def _status(self, folder: str, task_vars: dict[str, Any]) -> dict[str, Any]:
        res = self._execute_module(module_name="llmops.sglang.generate_job",
                                   module_args={"step": "status", "folder": folder}, task_vars=task_vars)
        if res.get("failed"):
            raise AnsibleActionFail(f"cannot read the job's status in {folder}: {res.get('msg')}")
        return res

    def _async(self, jid: str, task_vars: dict[str, Any]) -> dict[str, Any]:
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._execute_module(module_name="ansible.legacy.async_status",
                                    module_args={"jid": jid, "_async_dir": async_dir}, task_vars=task_vars)


def _append(dest: str, progress: dict[str, Any]) -> None:
    try:
        os.makedirs(dest, exist_ok=True)
        with open(os.path.join(dest, "progress.jsonl"), "a", encoding="utf-8") as fh:
            fh.write(json.dumps(progress, separators=(",", ":"), sort_keys=True) + "\n")
    except OSError as exc:
        display.warning(f"generate_wait: cannot append to {dest}/progress.jsonl ({exc.strerror or exc}); the job goes on")


def _summary(dest: str, progress: dict[str, Any], where: dict[str, Any]) -> None:
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "summary.json"), "w", encoding="utf-8") as fh:
        json.dump(progress, fh, indent=1, sort_keys=True)
    with open(os.path.join(dest, "summary.md"), "w", encoding="utf-8") as fh:
        fh.write(_report.markdown(progress, where))
