"""The profile settings as flags (plugin_utils/_plan/profileflags.py): one row per setting, the
argv in the rows' order, the profile keys derived from the rows, and chunked_prefill_size, the row
added through the table (docs/ARCHITECTURE.md "Adding an option, once")."""
from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import PlanError, validate_plan
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.profileflags import PROFILE_FLAGS
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.profiles import PROFILE_KEYS, load_profiles

from .test_plan import _opt, _plan_for


def test_the_profile_keys_are_the_rows() -> None:
    assert PROFILE_KEYS == ("description", "extends", *(row.key for row in PROFILE_FLAGS))
    assert len({row.key for row in PROFILE_FLAGS}) == len(PROFILE_FLAGS)
    assert all(row.doc and not row.doc.endswith(".") for row in PROFILE_FLAGS)
    # every built-in profile sets only keys of the table
    assert all(set(body) - {"name"} <= set(PROFILE_KEYS) for body in load_profiles().values())


def test_the_argv_follows_the_rows(h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    argv = _plan_for(h200x2_facts, configs, "hybrid", profile="mtp_hicache")["instances"][0]["argv"]
    first = {"mem_fraction_static": "--mem-fraction-static", "max_running_requests": "--max-running-requests",
             "metrics": "--enable-metrics", "speculative": "--speculative-algorithm",
             "hicache": "--enable-hierarchical-cache"}
    positions = [argv.index(first[row.key]) for row in PROFILE_FLAGS if row.key in first]
    assert positions == sorted(positions)
    assert argv.index("--nccl-port") < min(positions)  # where the server runs comes first


def test_chunked_prefill_size_is_rendered_per_model_kind_and_checked_against_the_release(
        h200x2_facts: dict[str, Any], configs: dict[str, Any]) -> None:
    plain = _plan_for(h200x2_facts, configs, "hybrid", profile="baseline")
    assert "--chunked-prefill-size" not in plain["instances"][0]["argv"]  # not set: SGLang decides
    user = {"baseline": {"chunked_prefill_size": {"dense": 8192, "hybrid": 4096}}}
    for kind, expected in (("hybrid", "4096"), ("dense", "8192")):
        plan = _plan_for(h200x2_facts, configs, kind, profile="baseline", user_profiles=user)
        argv = plan["instances"][0]["argv"]
        assert _opt(argv, "--chunked-prefill-size") == expected
        assert argv.index("--chunked-prefill-size") > argv.index("--enable-metrics")  # its row is last
        assert plan["profile_settings"]["chunked_prefill_size"] == {"dense": 8192, "hybrid": 4096}
        validate_plan(plan)  # the release's real flag schema takes it
    # extra_args still has the last word
    plan = _plan_for(h200x2_facts, configs, "hybrid", profile="baseline", user_profiles=user,
                     extra_args={"--chunked-prefill-size": 2048})
    assert _opt(plan["instances"][0]["argv"], "--chunked-prefill-size") == "2048"
    # a value the release refuses is named with the flag, before anything changes
    bad = _plan_for(h200x2_facts, configs, "hybrid", profile="baseline",
                    user_profiles={"baseline": {"chunked_prefill_size": "lots"}})
    with pytest.raises(PlanError, match="--chunked-prefill-size"):
        validate_plan(bad)


def test_a_misspelt_key_names_the_closest_row() -> None:
    with pytest.raises(PlanError, match="unknown key 'chunked_prefill'.*chunked_prefill_size"):
        load_profiles({"baseline": {"chunked_prefill": 4096}})
