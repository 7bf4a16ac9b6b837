"""A module's options from a role's variables (plugin_utils/_roleoptions.py): the bench role's
sglang_bench_<option>, with the role's declared default of an option the module leaves to its own
rule meaning "unset"."""
from __future__ import annotations

from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils._declared import role_options
from ansible_collections.llmops.sglang.plugins.plugin_utils._docspec import documented_options
from ansible_collections.llmops.sglang.plugins.plugin_utils._roleoptions import MISSING, options_from_role

DOC = {"timeout": {"type": "float", "default": 900}, "requests": {"type": "int"}, "seed": {"type": "int"},
       "api_key": {"type": "str"}, "url": {"type": "str", "required": True}}
ROLE = {"sglang_bench_timeout": {"default": 900}, "sglang_bench_requests": {"default": 0},
        "sglang_bench_seed": {"default": 42}, "sglang_bench_api_key": {"default": "{{ sglang_api_key }}"}}


def _take(values: dict[str, Any], given: dict[str, Any] | None = None) -> dict[str, Any]:
    return options_from_role("bench", DOC, given or {"url": "http://x"}, lambda name: values.get(name, MISSING), ROLE)


def test_each_option_the_task_lacks_comes_from_the_roles_variable() -> None:
    got = _take({"sglang_bench_timeout": 60, "sglang_bench_requests": 16, "sglang_bench_seed": 0})
    assert got == {"url": "http://x", "timeout": 60, "requests": 16, "seed": 0}  # seed 0 is a seed


def test_the_roles_unset_leaves_an_option_without_default_to_the_module() -> None:
    got = _take({"sglang_bench_timeout": 900, "sglang_bench_requests": 0, "sglang_bench_seed": 42,
                 "sglang_bench_api_key": ""})
    # requests 0 (max(2*C, 8)), seed 42 (the module's own), an empty key (none) are left out; a
    # documented default is passed as it is
    assert got == {"url": "http://x", "timeout": 900}


def test_the_task_wins_and_an_undefined_variable_is_not_passed() -> None:
    assert _take({"sglang_bench_timeout": 60}, {"url": "u", "timeout": 5}) == {"url": "u", "timeout": 5}
    assert _take({}) == {"url": "http://x"}


def test_the_bench_roles_declared_variables_are_the_sweeps_options() -> None:
    """Every sglang_bench_<option> the bench role declares for a throughput_sweep option with a
    default has that default (generated from the module's documentation), and the role's sentinels
    leave the others unset."""
    doc, role = documented_options("throughput_sweep"), role_options("bench")
    defaults = {name: option["default"] for name, option in role.items() if "default" in option and
                not str(option["default"]).startswith("{{")}
    got = options_from_role("bench", doc, {"url": "u", "fail_on_errors": False}, lambda n: defaults.get(n, MISSING), role)
    expected = {name for name, option in doc.items() if "default" in option and f"sglang_bench_{name}" in role} - {"fail_on_errors"}
    assert set(got) - {"url", "fail_on_errors"} == expected
    assert {"requests", "duration", "prompts", "workload", "seed", "rates", "slo"}.isdisjoint(got)
    assert all(got[name] == doc[name]["default"] for name in expected)
