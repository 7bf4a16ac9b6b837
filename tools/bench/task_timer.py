"""Ansible callback (aggregate): wall time per task, written as JSON at the end of the run.

Enabled by tools/bench/deploy_bench.sh with
    ANSIBLE_CALLBACK_PLUGINS=tools/bench ANSIBLE_CALLBACKS_ENABLED=task_timer
    LLMOPS_TASK_TIMES=/path/out.json
"""
from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_timer
type: aggregate
short_description: wall time per task as JSON (benchmarks)
description: Writes [{task, seconds}] in run order to $LLMOPS_TASK_TIMES.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_timer"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._t0 = time.monotonic()
        self._times: list[dict] = []
        self._cur: tuple[str, float] | None = None

    def _close(self) -> None:
        if self._cur is not None:
            name, start = self._cur
            self._times.append({"task": name, "seconds": round(time.monotonic() - start, 3)})
            self._cur = None

    def v2_playbook_on_task_start(self, task, is_conditional):  # noqa: ANN001
        self._close()
        self._cur = (task.get_name(), time.monotonic())

    def v2_playbook_on_handler_task_start(self, task):  # noqa: ANN001
        self.v2_playbook_on_task_start(task, False)

    def v2_playbook_on_stats(self, stats):  # noqa: ANN001
        self._close()
        path = os.environ.get("LLMOPS_TASK_TIMES")
        if path:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump({"total_s": round(time.monotonic() - self._t0, 3),
                           "tasks": self._times}, handle, indent=1)
