"""An action's argument spec from its documentation (plugins/plugin_utils/_docspec.py)."""
from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.llmops.sglang.plugins.plugin_utils import _docspec


def test_options_become_a_spec_with_types_choices_defaults_and_suboptions() -> None:
    options = {
        "step": {"description": "x", "type": "str", "choices": ["a", "b"], "required": True},
        "n": {"description": "x", "type": "int", "default": 3},
        "key": {"description": "x", "type": "str", "no_log": True},
        "thresholds": {"description": "x", "type": "dict", "suboptions": {"p99": {"description": "y", "type": "float"}}},
    }
    spec = _docspec.options_spec(options)
    assert spec == {"step": {"type": "str", "choices": ["a", "b"], "required": True}, "n": {"type": "int", "default": 3},
                    "key": {"type": "str", "no_log": True},
                    "thresholds": {"type": "dict", "options": {"p99": {"type": "float"}}}}
    result = ArgumentSpecValidator(spec).validate({"step": "a", "thresholds": {"p99": "1.5"}})
    assert result.error_messages == [] and result.validated_parameters["n"] == 3
    assert result.validated_parameters["thresholds"] == {"p99": 1.5}
    assert ArgumentSpecValidator(spec).validate({"step": "c"}).error_messages


def test_a_step_actions_spec_is_its_documentation() -> None:
    spec = _docspec.argument_spec("server_rollout")
    assert spec["step"]["choices"] == ["batches", "records", "manifest", "candidate", "rollback_plan", "rolled_back"]
    assert spec["policy"] == {"type": "str", "default": "parallel"} and spec["canary_alone"]["default"] is True


def test_doc_fragments_are_merged_under_the_plugins_own_options() -> None:
    # rollout_guard documents api_key through the collection's fragment, as ansible-doc shows it
    options = _docspec.documented_options("rollout_guard")
    assert options["api_key"]["type"] == "str" and "canary" in options
    assert _docspec.fragment_options("llmops.sglang.server_api")["api_key"] == options["api_key"]


def test_each_step_actions_steps_are_its_documented_choices() -> None:
    from ansible_collections.llmops.sglang.plugins.action import server_rollout, tune_search

    for action in (server_rollout.ActionModule, tune_search.ActionModule):
        assert list(action.STEPS) == _docspec.argument_spec(action.NAME)["step"]["choices"], action.NAME
