"""Bad and automatic inputs, refused or accepted before anything changes or is measured: the
model's config.json and the automatic sentinels through deploy.yml's plan only (`--tags plan`:
nothing is started), the bench's report folder (issue 16 #6, #7, #9)."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from .conftest import BIN, ROOT, Deployment, make_inventory


def planned_flag(out: str, flag: str) -> list[str]:
    """The values the shown plan summary gives ``flag`` (one per instance: each instance's
    command line is shown once, folded over lines by the YAML callback)."""
    text = " ".join(out.split())
    return re.findall(rf"{re.escape(flag)} ([^\s']+)", text)


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


def test_a_bad_reports_dir_is_refused_before_anything_is_measured(tmp_path: Path) -> None:
    """`-e sglang_bench_reports_dir=/proc/x` measured a level, then failed on a raw errno and
    lost the result. The folder is now checked on the controller before the manifest is read or
    a request sent, naming the variable, the reason and the fix."""
    dep = make_inventory(tmp_path)
    run = dep.play("bench.yml", "-e", "sglang_bench_reports_dir=/proc/x")
    assert run.rc != 0
    text = " ".join(run.out.split())
    assert ("sglang_bench_reports_dir='/proc/x': cannot create and write a report there: No such file or directory: "
            "set sglang_bench_reports_dir to a folder this user can create and write on the controller") in text, \
        run.out[-3000:]
    assert "Read the deployment manifest" not in run.out and "Start the sweeps" not in run.out
    assert "sweep progress" not in run.out


def test_a_report_whose_folder_fails_after_the_sweep_goes_to_the_fallback(tmp_path: Path) -> None:
    """Never lose a finished measurement: when the report cannot be written where asked after
    all, sweep_report writes it under ~/.ansible/llmops.sglang/reports/<run id> and fails
    saying where."""
    from tests.unit.plugins.module_utils._report.test_report import make_point, make_sweep

    points = [make_point(1, 8, 8, 0, 70.0, 1024, 117.0), make_point(4, 8, 8, 0, 234.0, 1024, 35.0)]
    results = [{"meta": {"host": "node1", "instance": "gpu0", "profile": "mtp"},
                "sweep": make_sweep(points, None, "http://127.0.0.1:30000", 4)}]
    dep = make_inventory(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    args = json.dumps({"results": results, "dest": "/proc/x", "run_id": "r1"})
    env = dict(dep.env(), HOME=str(home))
    proc = subprocess.run([str(BIN / "ansible"), "-i", str(dep.inventory), "localhost", "-m",
                           "llmops.sglang.sweep_report", "-a", args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    fallback = home / ".ansible" / "llmops.sglang" / "reports" / "r1"
    assert proc.returncode != 0, proc.stdout[-2000:]
    text = " ".join(proc.stdout.split())
    assert "could not write the report under /proc/x/r1" in text and f"written to {fallback} instead" in text, \
        proc.stdout[-2000:]
    assert (fallback / "summary.md").is_file() and (fallback / "node1_gpu0_mtp.json").is_file()
    assert "| 4 | 8 | 8 | 0 | 234.0 |" in (fallback / "summary.md").read_text()


def test_a_server_variable_of_the_wrong_type_is_refused_by_the_gate(deployment: Deployment) -> None:
    """deploy.yml's gate runs the server role's entry point plan, which validates every server
    variable against the role's argument spec before any host changes (a value only the deploy
    steps read, such as sglang_ready_interval, was checked nowhere before the deploy play)."""
    run = deployment.play("deploy.yml", "-e", "sglang_ready_interval=abc")
    assert run.rc != 0, run.out[-3000:]
    assert "Validating arguments against arg spec 'plan'" in run.out, run.out[-3000:]
    assert "sglang_ready_interval" in run.out and "float" in run.out, run.out[-3000:]
    assert not (deployment.base / "deployment.json").exists()
    assert not (deployment.base / "gpu0").exists()
