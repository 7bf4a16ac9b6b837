# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.throughput_sweep: the module with, when the task says
``options_from_role: bench``, every documented option it does not give taken from the role's
``sglang_bench_<option>`` (``_stepaction.RoleOptionsAction``), so the bench role passes options, not one keyword per
option; and, run over the local connection (the controller's machine) without O(watch_pid), with
the controller's process to watch (an async sweep there is a daemon that neither Ctrl-C nor the
play's end reaches); ``sweep``, one sweep of the bench role's plan, gives its URL, files and PD
targets as the options of their names. The module then runs as it would without this action (``async`` included)."""
from __future__ import annotations

from typing import Any

from ansible_collections.llmops.sglang.plugins.lookup.controller_pid import controller_pid
from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import RoleOptionsAction

# what the option ``sweep`` (a sweep of bench_plan's plan) gives, as the options of these names
SWEEP_KEYS = ("url", "pd", "worker_metrics", "progress_file", "heartbeat_file")


class ActionModule(RoleOptionsAction):
    NAME = "throughput_sweep"

    def task_args(self, args: dict[str, Any]) -> dict[str, Any]:
        planned = args.pop("sweep", None) or {}
        return {**{key: planned[key] for key in SWEEP_KEYS if planned.get(key) not in (None, [], {})}, **args}

    def module_args(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        watch_controller = args.pop("watch_controller", True)
        if watch_controller and "watch_pid" not in args and getattr(self._connection, "transport", None) == "local":
            args["watch_pid"] = controller_pid()
        return args
