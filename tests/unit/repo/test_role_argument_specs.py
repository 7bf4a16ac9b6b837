"""The server role's argument spec admits every documented "automatic" sentinel, in every form
-e, JSON and YAML give it, and leaves the check to the plan (issue 16 #7: `-e
sglang_max_running_requests=` and null were refused before the plan saw them)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import PlanError, PlanRequest

ROOT = Path(__file__).resolve().parents[3]
AUTOMATIC = ("sglang_max_running_requests", "sglang_hicache_size_gb", "sglang_nccl_port_base")
FORMS = [0, "0", "", None, "null", "NULL", " 0 ", "~"]  # YAML/JSON, then -e key=value strings


def server_spec() -> dict[str, Any]:
    specs = yaml.safe_load((ROOT / "roles" / "server" / "meta" / "argument_specs.yml").read_text())
    return specs["argument_specs"]["main"]["options"]


@pytest.mark.parametrize("value", FORMS)
def test_the_argument_spec_admits_every_automatic_sentinel(value: Any) -> None:
    spec = {name: server_spec()[name] for name in AUTOMATIC}
    result = ArgumentSpecValidator(spec).validate({name: value for name in AUTOMATIC})
    assert not result.error_messages, result.error_messages


@pytest.mark.parametrize("value", FORMS)
def test_the_plan_reads_every_automatic_sentinel_as_automatic(value: Any) -> None:
    req = PlanRequest.from_kwargs(profile="baseline", model_path="/m", max_running_requests=value,
                                  hicache_size_gb=value, nccl_port_base=value, base_port=30000)
    assert (req.max_running_requests, req.hicache_size_gb, req.nccl_port_base, req.nccl_base) == (None, None, None, 31000)


def test_what_the_spec_lets_through_the_plan_still_checks() -> None:
    with pytest.raises(PlanError) as err:
        PlanRequest.from_kwargs(profile="baseline", model_path="/m", max_running_requests="many", hicache_size_gb=-1)
    message = str(err.value)
    assert "sglang_max_running_requests='many': must be an integer" in message
    assert "sglang_hicache_size_gb=-1: must be at least 1, or 0 for automatic" in message
