"""The model_plan action (plugins/action/model_plan.py): one run plans the play - each Hub
reference resolved once through model_revision where the task runs, every host's plan returned."""
from __future__ import annotations

from typing import Any

from ansible_collections.llmops.sglang.plugins.action.model_plan import ActionModule

from .actions import make_action

C1 = "c" * 40


def _action(args: dict[str, Any], answers: dict[str, dict[str, Any]]) -> tuple[ActionModule, list[dict[str, Any]]]:
    def execute(module_name: str, module_args: dict[str, Any]) -> dict[str, Any]:
        assert module_name == "llmops.sglang.model_revision"
        return answers[f"{module_args['repo']}@{module_args['revision']}"]

    action, calls = make_action(ActionModule, args, execute)
    return action, calls


def _req(model: dict[str, Any], **over: Any) -> dict[str, Any]:
    return {"model": model, "cache_dir": "/data/hf", "stage_from": "hub", **over}


def test_each_reference_is_resolved_once_and_every_host_planned() -> None:
    requests = {"h1": _req({"repo": "org/m"}), "h2": _req({"repo": "org/m"}, cache_dir="/data/h2")}
    action, calls = _action({"requests": requests, "controller_cache_dir": "/ctl", "endpoint": "http://127.0.0.1:1"},
                            {"org/m@main": {"commit": C1}})
    result = action.run(task_vars={})
    assert calls == [{"module": "llmops.sglang.model_revision", "repo": "org/m", "revision": "main", "offline": False,
                      "endpoint": "http://127.0.0.1:1"}]
    assert result["resolved"] == {"org/m@main": C1} and not result.get("failed")
    assert result["hosts"]["h2"]["paths"]["model"].startswith("/data/h2/models--org--m/snapshots/" + C1)


def test_bad_sources_fail_before_any_resolution_and_a_failed_resolution_names_the_reference() -> None:
    action, calls = _action({"requests": {"h1": _req({"repo": "org/m", "bogus": 1})}, "controller_cache_dir": "/ctl"}, {})
    result = action.run(task_vars={})
    assert result["failed"] and "h1: sglang_model has keys ['bogus']" in result["msg"] and calls == []
    action, _ = _action({"requests": {"h1": _req({"repo": "org/m"})}, "controller_cache_dir": "/ctl"},
                        {"org/m@main": {"failed": True, "msg": "the Hub did not answer"}})
    result = action.run(task_vars={})
    assert result["failed"] and result["msg"] == "cannot resolve org/m@main to a commit: the Hub did not answer"


# issue 28 item 9: a Hub that does not answer for a branch
C2 = "d" * 40
SNAP = "/data/hf/models--org--m/snapshots/"


def _slurp(commit: str) -> dict[str, Any]:
    import base64
    import json

    manifest = {"instances": [{"name": "gpu0", "argv": ["--model-path", SNAP + commit, "--port", "30000"]}]}
    return {"content": base64.b64encode(json.dumps(manifest).encode()).decode()}


def _down(hosts: dict[str, Any]) -> dict[str, Any]:
    requests = {h: _req({"repo": "org/m"}) for h in hosts}
    action, _ = _action({"requests": requests, "controller_cache_dir": "/ctl"},
                        {"org/m@main": {"failed": True, "unreachable": True,
                                        "msg": "could not resolve org/m@main at http://hub: ConnectError: refused"}})
    return action.run(task_vars={"hostvars": {h: {"__sglang_model_deployed": s} for h, s in hosts.items()}})


def test_a_hub_that_does_not_answer_goes_on_with_the_commit_the_hosts_serve_saying_so() -> None:
    result = _down({"h1": _slurp(C1), "h2": _slurp(C1), "h3": {"failed": True, "msg": "file not found"}})
    assert not result.get("failed"), result
    assert result["resolved"] == {"org/m@main": C1}
    assert result["hosts"]["h3"]["paths"]["model"] == SNAP + C1  # a new host stages what the others serve
    (warning,) = result["warnings"]
    assert f"going on with commit {C1}, the one deployed on h1, h2" in warning and "ConnectError" in warning
    assert f"sglang_model: {{repo: org/m, revision: {C1}}}" in warning


def test_a_hub_that_does_not_answer_and_nothing_to_go_on_with_names_the_fixes() -> None:
    for hosts in ({"h1": {"failed": True}}, {"h1": _slurp(C1), "h2": _slurp(C2)}):
        result = _down(hosts)
        assert result["failed"], result
        msg = result["msg"]
        assert msg.startswith("cannot resolve org/m@main to a commit: the Hub did not answer (could not resolve")
        assert "pin a commit that is staged on the hosts" in msg and "sglang_hf_offline: true" in msg
        assert "models--org--m/snapshots/" in msg and "sglang_hf_endpoint" in msg
    assert f"serve different commits of it: h1 {C1}, h2 {C2}" in msg


def test_a_hub_that_answers_no_is_not_gone_around() -> None:
    """A revision the Hub says is not there fails as before, whatever the hosts serve."""
    action, _ = _action({"requests": {"h1": _req({"repo": "org/m"})}, "controller_cache_dir": "/ctl"},
                        {"org/m@main": {"failed": True, "unreachable": False, "msg": "404 Revision Not Found"}})
    result = action.run(task_vars={"hostvars": {"h1": {"__sglang_model_deployed": _slurp(C1)}}})
    assert result["failed"] and result["msg"] == "cannot resolve org/m@main to a commit: 404 Revision Not Found"
