# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What the ``llmops.sglang.generate_job`` module does (``plugins/modules/generate_job.py`` is its
documentation and this file's caller): each ``step`` from the parsed parameters to
``exit_json``/``fail_json``. ``module`` is the ``AnsibleModule`` (any object with ``params``,
``check_mode``, ``exit_json`` and ``fail_json``), so this file imports nothing of Ansible."""
from __future__ import annotations

import sys
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._generate import job as _job
from ansible_collections.llmops.sglang.plugins.module_utils._generate import runner as _runner

# the options that go to the runner's Settings as they are
SETTINGS = ("defaults", "max_attempts", "backoff_s", "backoff_max_s", "request_timeout_s", "down_timeout_s",
            "shard_lines", "progress_interval_s", "api_key", "labels", "max_failures_in_a_row")


def settings(params: dict[str, Any]) -> _runner.Settings:
    """The runner's settings from the module's parameters; ValueError naming a bad one."""
    targets = tuple(_runner.Target(str(t["name"]), str(t["url"]), int(t["concurrency"]), str(t.get("source") or "")) for t in params["targets"] or [])
    if not targets:
        raise ValueError("targets is empty: give the router, or the instances, to send to")
    for t in targets:
        if t.concurrency < 1:
            raise ValueError(f"target {t.name}: concurrency {t.concurrency} must be >= 1")
    if len({t.name for t in targets}) < len(targets):
        raise ValueError(f"target names repeat: {[t.name for t in targets]}")
    if int(params["max_failures_in_a_row"]) < 0:
        raise ValueError(f"max_failures_in_a_row must be >= 0 (0: never stop), got {params['max_failures_in_a_row']}")
    for name in ("max_attempts", "shard_lines"):
        if int(params[name]) < 1:
            raise ValueError(f"{name} must be >= 1, got {params[name]}")
    for name in ("backoff_s", "backoff_max_s", "request_timeout_s", "down_timeout_s", "progress_interval_s"):
        if not float(params[name]) > 0:
            raise ValueError(f"{name} must be > 0 seconds, got {params[name]}")
    instances = tuple({"name": str(i["name"]), "url": str(i["url"])} for i in params.get("instances") or [])
    return _runner.Settings(folder=params["folder"], input=params["input"], targets=targets, total=0, instances=instances,
                            **{k: params[k] for k in SETTINGS if params.get(k) is not None or k == "api_key"})


def run(module: Any) -> None:
    params: dict[str, Any] = module.params
    params.pop("options_from_role", None)  # the action plugin's: the options are in params already
    step, folder = params["step"], params["folder"]
    try:
        if step == "status":
            module.exit_json(changed=False, **_job.status(folder))
        if step == "check":
            module.exit_json(changed=False, **_job.check(folder, params["input"], params["defaults"],
                                                         params["allow_input_change"], params["retry_errors"]))
        if module.check_mode:
            module.exit_json(changed=False, skipped=True, msg=f"check mode: step={step} not done")
        if step == "stop":
            res = _job.stop(folder, timeout=params["stop_timeout_s"])
            module.exit_json(changed=res["stopped"], **res)
        if not _runner.HAS_AIOHTTP:
            module.fail_json(msg=f"the job needs aiohttp, which {sys.executable} cannot import: install it there "
                                 "(pip install 'aiohttp>=3.8'), or give sglang_generate_python a Python that has it")
        report = _job.run(settings(params), allow_input_change=params["allow_input_change"], job_name=params["job"],
                          retry_errors=params["retry_errors"])
    except (_job.JobError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    if report.get("state") == "failed":
        module.fail_json(msg=f"the job failed: {report.get('message')}", progress=report, state="failed")
    module.exit_json(changed=not report.get("attached"), state=report.get("state"),
                     attached=bool(report.get("attached")), progress=report)
