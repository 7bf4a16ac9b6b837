"""generate_job's steps (module.py) with a stand-in AnsibleModule: what each step returns, and the
refusals of bad parameters before anything runs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._generate import module
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec

from .fakeserver import FakeServer, write_input


class Exit(Exception):
    def __init__(self, failed: bool, result: dict[str, Any]) -> None:
        super().__init__(result.get("msg"))
        self.failed, self.result = failed, result


class FakeModule:
    def __init__(self, check_mode: bool = False, **params: Any) -> None:
        self.params = {name: spec.get("default") for name, spec in argument_spec("generate_job").items()}
        self.params.update(params)
        self.check_mode = check_mode

    def exit_json(self, **result: Any) -> None:
        raise Exit(False, result)

    def fail_json(self, **result: Any) -> None:
        raise Exit(True, result)


def step(**params: Any) -> Exit:
    with pytest.raises(Exit) as done:
        module.run(FakeModule(**params))
    return done.value


def test_check_run_status_and_stop_in_turn(tmp_path: Path, server: FakeServer) -> None:
    write_input(tmp_path / "in.jsonl", 30)
    base = {"folder": str(tmp_path / "job"), "input": str(tmp_path / "in.jsonl"), "progress_interval_s": 0.05}
    checked = step(step="check", **base)
    assert not checked.failed and checked.result["state"] == "new" and checked.result["pending"] == 30
    ran = step(step="run", targets=[{"name": "a", "url": server.url, "concurrency": 4, "source": "test"}], **base)
    assert not ran.failed and ran.result["changed"] and ran.result["state"] == "finished"
    assert ran.result["progress"]["targets"]["a"]["source"] == "test"
    status = step(step="status", folder=base["folder"])
    assert status.result["state"] == "finished" and status.result["progress"]["done"] == 30
    stopped = step(step="stop", folder=base["folder"])
    assert not stopped.result["changed"] and stopped.result["was_running"] is False


def test_check_mode_sends_nothing(tmp_path: Path, server: FakeServer) -> None:
    write_input(tmp_path / "in.jsonl", 3)
    with pytest.raises(Exit) as done:
        module.run(FakeModule(check_mode=True, step="run", folder=str(tmp_path / "job"), input=str(tmp_path / "in.jsonl"),
                              targets=[{"name": "a", "url": server.url, "concurrency": 1}]))
    assert done.value.result["skipped"] and not server.seen


@pytest.mark.parametrize(("params", "message"), [
    ({"targets": []}, "targets is empty"),
    ({"targets": [{"name": "a", "url": "http://x", "concurrency": 0}]}, "concurrency 0 must be >= 1"),
    ({"targets": [{"name": "a", "url": "http://x", "concurrency": 1}] * 2}, "target names repeat"),
    ({"max_attempts": 0}, "max_attempts must be >= 1"),
    ({"backoff_s": 0}, "backoff_s must be > 0 seconds"),
    ({"max_failures_in_a_row": -1}, "max_failures_in_a_row must be >= 0"),
])
def test_bad_parameters_fail_naming_the_value_before_anything_runs(tmp_path: Path, params: dict, message: str) -> None:
    write_input(tmp_path / "in.jsonl", 3)
    targets = {"targets": [{"name": "a", "url": "http://127.0.0.1:9", "concurrency": 1}]}
    failed = step(step="run", folder=str(tmp_path / "job"), input=str(tmp_path / "in.jsonl"), **{**targets, **params})
    assert failed.failed and message in failed.result["msg"]
    assert not (tmp_path / "job" / "job.json").exists()
