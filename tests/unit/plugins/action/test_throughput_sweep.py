"""The throughput_sweep action (plugins/action/throughput_sweep.py): with options_from_role the
role's variables fill the options the task lacks, then the module runs (async kept); without it
the task's arguments go to the module as they are."""
from __future__ import annotations

import os
from typing import Any
from unittest import mock

from ansible_collections.llmops.sglang.plugins.action import throughput_sweep


def _run(args: dict[str, Any], task_vars: dict[str, Any], async_val: int = 0,
         transport: str = "ssh") -> list[dict[str, Any]]:
    task = mock.MagicMock(args=args, async_val=async_val, check_mode=False)
    connection = mock.MagicMock(has_native_async=False, transport=transport)
    templar = mock.MagicMock()
    templar.template.side_effect = lambda value: value
    action = throughput_sweep.ActionModule(task, connection, mock.MagicMock(), loader=None, templar=templar,
                                           shared_loader_obj=None)
    calls: list[dict[str, Any]] = []

    def execute(module_name: str, module_args: dict[str, Any], task_vars: dict[str, Any], wrap_async: bool) -> dict[str, Any]:
        calls.append({"module": module_name, "args": module_args, "wrap_async": wrap_async})
        return {"ansible_job_id": "j1"} if wrap_async else {"changed": False}

    action._execute_module = execute  # type: ignore[method-assign]
    action._remove_tmp_path = mock.MagicMock()  # type: ignore[method-assign]
    action.run(task_vars=task_vars)
    return calls


def test_the_bench_roles_variables_fill_the_options_and_async_is_kept() -> None:
    task_vars = {"sglang_bench_concurrency": [2, 4], "sglang_bench_timeout": 30, "sglang_bench_requests": 0,
                 "sglang_bench_fail_on_errors": True, "sglang_bench_progress_poll": 2}
    calls = _run({"url": "http://h:1", "options_from_role": "bench", "fail_on_errors": False}, task_vars, async_val=60)
    assert len(calls) == 1 and calls[0]["module"] == "llmops.sglang.throughput_sweep" and calls[0]["wrap_async"]
    args = calls[0]["args"]
    assert args["concurrency"] == [2, 4] and args["timeout"] == 30 and args["fail_on_errors"] is False
    assert "requests" not in args and "options_from_role" not in args and "progress_poll" not in args


def test_without_options_from_role_the_task_is_the_modules_arguments() -> None:
    calls = _run({"url": "http://h:1", "concurrency": [1]}, {"sglang_bench_timeout": 30})
    assert calls[0]["args"] == {"url": "http://h:1", "concurrency": [1]} and not calls[0]["wrap_async"]


def test_on_the_controllers_machine_the_sweep_watches_the_controller() -> None:
    """An async sweep over the local connection is a daemon: it watches ansible-playbook's process
    (here the test's own: no multiprocessing parent), unless the task names another."""
    local = _run({"url": "u"}, {}, async_val=60, transport="local")
    assert local[0]["args"]["watch_pid"] == os.getpid()
    assert _run({"url": "u", "watch_pid": 7}, {}, transport="local")[0]["args"]["watch_pid"] == 7
    assert "watch_pid" not in _run({"url": "u"}, {}, async_val=60, transport="ssh")[0]["args"]
    # watch_controller false (a sweep meant to outlive the play), also from the bench role's variable
    alone = _run({"url": "u", "watch_controller": False}, {}, async_val=60, transport="local")[0]["args"]
    assert "watch_pid" not in alone and "watch_controller" not in alone
    role = _run({"url": "u", "options_from_role": "bench"}, {"sglang_bench_watch_controller": False},
                async_val=60, transport="local")[0]["args"]
    assert "watch_pid" not in role and "watch_controller" not in role


def test_a_sweep_of_the_bench_plan_gives_its_url_files_and_pd_targets() -> None:
    """``sweep`` (one of bench_plan's plan.sweeps) is its keys as the options of their names, before
    the role's options are added; the task's own arguments win; keys not options are not read."""
    pd = {"prefill": [{"url": "http://h:1", "bootstrap_port": 8998}], "decode": ["http://h:2"]}
    planned = {"name": "gpu1+gpu0", "url": "http://h:2", "pd": pd, "worker_metrics": [],
               "progress_file": "/tmp/p.jsonl", "heartbeat_file": "/tmp/h"}
    args = _run({"sweep": planned, "options_from_role": "bench", "heartbeat_file": "/tmp/mine"},
                {"sglang_bench_concurrency": [2]})[0]["args"]
    assert (args["url"], args["pd"], args["progress_file"], args["heartbeat_file"]) == (
        "http://h:2", pd, "/tmp/p.jsonl", "/tmp/mine")
    assert args["concurrency"] == [2] and not {"sweep", "name", "worker_metrics"} & set(args)
