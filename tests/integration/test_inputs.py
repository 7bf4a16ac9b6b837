"""Bad and automatic inputs of deploy.yml, seen through the plan only (`--tags plan`: nothing is
started, a few seconds each): issue 16 #6 and #7."""
from __future__ import annotations

import re
from pathlib import Path

from .conftest import Deployment, make_inventory


def planned_flag(out: str, flag: str) -> list[str]:
    """The values the shown plan gives ``flag`` (one per instance)."""
    return re.findall(rf"- {re.escape(flag)}\n\s+- '?([^'\n]+)'?\n", out)


def test_a_malformed_model_config_names_the_variable_the_file_and_the_place(tmp_path: Path) -> None:
    """A config.json that is not JSON failed on a raw from_json error naming neither the file
    nor the variable. Now the message names sglang_model_path, the file, the line and column
    and the fix, and nothing was created on the host."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"],\n  "hidden_size": 1024,,\n}\n')
    dep = make_inventory(tmp_path, sglang_model_path=str(model))
    run = dep.play("deploy.yml", "--tags", "plan", profile="baseline")
    assert run.rc != 0
    text = " ".join(run.out.split())
    assert (f"sglang_model_path='{model}': {model}/config.json is not valid JSON (line 2, column 23: "
            "Expecting property name enclosed in double quotes): put the model's own config.json there") in text, \
        run.out[-3000:]
    assert "from_json" not in run.out
    assert not dep.base.exists()


def test_empty_and_null_max_running_requests_mean_automatic_from_extra_vars(deployment: Deployment) -> None:
    """`-e sglang_max_running_requests=` (empty) and null were refused by the role's argument
    spec ("unable to convert to int") while the docs said they mean automatic. Every form now
    plans what no value plans (the profile's), as the other automatic sentinels do."""
    auto = deployment.play("deploy.yml", "--tags", "plan", profile="mtp_hicache")
    assert auto.rc == 0, auto.out[-3000:]
    profile_value = planned_flag(auto.out, "--max-running-requests")
    assert len(profile_value) == 2 and profile_value[0] != "0", auto.out[-3000:]
    for args in (["-e", "sglang_max_running_requests="],
                 ["-e", "sglang_max_running_requests=null"],
                 ["-e", '{"sglang_max_running_requests": null}'],
                 ["-e", "sglang_max_running_requests= sglang_hicache_size_gb= sglang_nccl_port_base=null"]):
        run = deployment.play("deploy.yml", "--tags", "plan", *args, profile="mtp_hicache")
        assert run.rc == 0, (args, run.out[-3000:])
        assert planned_flag(run.out, "--max-running-requests") == profile_value, args
        assert planned_flag(run.out, "--nccl-port") == planned_flag(auto.out, "--nccl-port"), args
    explicit = deployment.play("deploy.yml", "--tags", "plan", "-e", "sglang_max_running_requests=7",
                               profile="mtp_hicache")
    assert explicit.rc == 0 and planned_flag(explicit.out, "--max-running-requests") == ["7", "7"], explicit.out[-3000:]
