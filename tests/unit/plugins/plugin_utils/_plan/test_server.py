"""plugin_utils/_plan/server.py and taskvars.py: the server role's whole plan from the play's
variables and one read of the host (what action llmops.sglang.server_plan returns)."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import PlanError
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.server import (
    backend_of,
    preflight_spec,
    server_plan,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.taskvars import (
    REQUEST_VARIABLES,
    ROLE_SETTINGS,
    read_inputs,
)

ROLE_DEFAULTS = Path(__file__).resolve().parents[5] / "roles" / "server" / "defaults" / "main.yml"


def _gpu(index: int) -> dict[str, Any]:
    return {"index": index, "uuid": f"GPU-{index}", "name": "NVIDIA H200", "memory_total_mib": 143771,
            "memory_used_mib": 0, "memory_free_mib": 143771, "processes": [], "busy": False, "mig_enabled": False}


def _facts(running: list[str] | None = None, service_manager: str = "process") -> dict[str, Any]:
    return {
        "gpus": [_gpu(0), _gpu(1)],
        "memory": {"mem_total_bytes": 2000 * 2**30, "mem_available_bytes": 1800 * 2**30, "cgroup_limit_bytes": None,
                   "cgroup_usage_bytes": None, "cgroup_available_bytes": None, "budget_bytes": 1800 * 2**30},
        "cpu_count": 64, "service_manager": service_manager,
        "deployment": {"base_dir": "/srv/sglang",
                       "instances": [{"name": n, "running": True} for n in (running or [])]},
    }


def _vars(**over: Any) -> dict[str, Any]:
    import yaml
    values = yaml.safe_load(ROLE_DEFAULTS.read_text())
    values.update(sglang_profile="mtp", sglang_engine="sim", sglang_model_path="/models/q",
                  sglang_base_dir="/srv/sglang", sglang_venv="/srv/venv", sglang_sim_time_scale=0.1,
                  sglang_rollout_routers=[])
    values.update(over)
    return values


def _plan(config: dict[str, Any], facts: dict[str, Any] | None = None, current: dict[str, Any] | None = None,
          groups: dict[str, Any] | None = None, **over: Any) -> dict[str, Any]:
    values = _vars(**over)
    inputs = read_inputs(values.get, "node1", lambda hosts: [f"10.0.0.{i + 1}" for i, _ in enumerate(hosts)],
                         groups or {})
    return server_plan(inputs, facts or _facts(), current, config)


@pytest.fixture(scope="module")
def hybrid(fixtures_dir: Path) -> dict[str, Any]:
    return json.loads((fixtures_dir / "sglang-0.5.17-h200" / "hybrid" / "model-config.json").read_text())


def test_every_mapped_variable_is_a_role_default() -> None:
    import yaml
    defaults = yaml.safe_load(ROLE_DEFAULTS.read_text())
    names = set(REQUEST_VARIABLES.values()) | set(ROLE_SETTINGS.values())
    assert sorted(names - set(defaults)) == []


def test_plan_carries_what_the_role_renders(hybrid: dict[str, Any]) -> None:
    plan = _plan(hybrid, sglang_env={"PYTHONPATH": "/extra", "FOO": "bar"}, sglang_hf_token="hf_secret",
                 sglang_api_key="k")
    assert plan["backend"] == "process" and plan["python"] == "/srv/venv/bin/python" and plan["host"] == "node1"
    assert plan["install"]["packages"] == ["aiohttp==3.14.5"] and plan["install"]["enabled"] is True
    gpu1 = plan["instances"][1]
    assert gpu1["env"]["CUDA_VISIBLE_DEVICES"] == "1" and gpu1["env"]["FOO"] == "bar"
    assert gpu1["env"]["PYTHONPATH"] == "/srv/sglang/engine:/extra"
    assert gpu1["env"]["LLMOPS_SIM_GPUS"] == "NVIDIA H200,NVIDIA H200"
    assert gpu1["env"]["LLMOPS_SIM_TIME_SCALE"] == "0.1" and gpu1["env"]["LLMOPS_SGLANG_RELEASE"] == "0.5.23"
    # secrets: named, never their values
    assert gpu1["env_secrets"] == {"HF_TOKEN": "sglang_hf_token"} and "hf_secret" not in json.dumps(plan)
    assert '"k"' not in json.dumps(plan) and gpu1["secrets"] == {"api-key": "sglang_api_key"}
    assert gpu1["wait"] == {"name": "gpu1", "url": gpu1["connect_url"], "timeout": gpu1["wait"]["timeout"],
                            "log_file": gpu1["paths"]["log_file"], "pid_file": gpu1["paths"]["pid_file"]}
    assert [p["port"] for p in plan["preflight"]["ports"]] == [30000, 31000, 30001, 31001]
    assert plan["preflight"]["executables"][0]["path"] == "python3"
    assert plan["unit_paths"]["launch_script"] == "/srv/sglang/%i/launch.sh"


def test_backend_auto_is_resolved_once_from_the_facts(hybrid: dict[str, Any]) -> None:
    assert _plan(hybrid, facts=_facts(service_manager="systemd"))["backend"] == "systemd"
    assert _plan(hybrid, facts=_facts(service_manager="none"))["backend"] == "process"
    plan = _plan(hybrid, facts=_facts(service_manager="none"), sglang_service_manager="systemd")
    assert plan["backend"] == "systemd" and plan["instances"][0]["wait"]["unit"] == "sglang@gpu0.service"
    with pytest.raises(PlanError, match="sglang_service_manager='upstart'"):
        backend_of("upstart", "systemd")


def test_previous_deployment_and_running_instances_come_with_the_plan(hybrid: dict[str, Any]) -> None:
    current = {"manifest": {"instances": [{"name": "gpu0"}], "engine": "sim"}}
    plan = _plan(hybrid, facts=_facts(running=["gpu0"]), current=current)
    assert plan["previous"] == current["manifest"] and plan["running"] == ["gpu0"]
    # intact: read as it is on the host, so a run that deploys exactly it need not write it again
    assert plan["previous_intact"] is True
    rebuilt = {**current, "manifest_problem": "deployment.json is missing: rebuilt from the instance folders"}
    assert _plan(hybrid, facts=_facts(running=["gpu0"]), current=rebuilt)["previous_intact"] is False
    assert _plan(hybrid, current={"manifest": None, "manifest_problem": ""})["previous_intact"] is False


def test_errors_name_the_role_variable(hybrid: dict[str, Any]) -> None:
    with pytest.raises(PlanError, match=r"sglang_base_port='x': must be an integer"):
        _plan(hybrid, sglang_base_port="x")
    with pytest.raises(PlanError, match="sglang_model_path='/models/q': no config.json"):
        _plan(None)  # type: ignore[arg-type]


def test_sglang_env_may_not_set_what_the_storage_tier_sets(hybrid: dict[str, Any]) -> None:
    facts = _facts()
    facts["memory"] = {"total_bytes": 2000 * 2**30, "available_bytes": 1800 * 2**30,
                       "effective_available_bytes": 1800 * 2**30, "limited_by": "meminfo", "cgroup": {}}
    facts["filesystems"] = [{"path": "/srv/sglang/hicache-storage", "mount_point": "/", "fstype": "ext4",
                             "source": "/dev/sda1", "total_bytes": 4000 * 2**30, "free_bytes": 2000 * 2**30,
                             "used_bytes": 0, "network": False, "rotational": False}]
    tier = {"sglang_profile": "mtp_hicache", "sglang_version": "0.5.17", "sglang_hicache_storage": {"backend": "file"}}
    plan = _plan(hybrid, facts, **tier, sglang_env={"FOO": "bar"})
    assert plan["instances"][0]["env"]["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] == "/srv/sglang/hicache-storage/gpu0"
    with pytest.raises(PlanError, match="sglang_env sets SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE, which "
                                        "sglang_hicache_storage sets for each instance"):
        _plan(hybrid, facts, **tier, sglang_env={"SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE": "1T"})


def test_tp_group_hosts_and_addresses_from_the_inventory(hybrid: dict[str, Any]) -> None:
    plan = _plan(copy.deepcopy(hybrid), groups={"tp": ["node0", "node1"]}, sglang_tp_group="tp", sglang_tp_size=2,
                 sglang_gpus=[0])
    argv = plan["instances"][0]["argv"]
    assert argv[argv.index("--node-rank") + 1] == "1" and argv[argv.index("--dist-init-addr") + 1] == "10.0.0.1:32000"


def test_unknown_tp_group_is_refused(hybrid: dict[str, Any]) -> None:
    with pytest.raises(PlanError, match="sglang_tp_group='nope': no such inventory group"):
        _plan(hybrid, sglang_tp_group="nope")


def test_preflight_spec_from_a_plan() -> None:
    plan = {"model": {"path": "/models/m/"}, "instances": [
        {"name": "gpu0", "port": 30000, "nccl_port": 31000}, {"name": "gpu1", "port": 30001, "nccl_port": 31001}]}
    spec = preflight_spec(plan, {"engine": "sglang"}, python="/v/bin/python", install=False)
    assert [(p["port"], p["instance"], p["what"]) for p in spec["ports"]] == [
        (30000, "gpu0", "HTTP"), (31000, "gpu0", "NCCL"), (30001, "gpu1", "HTTP"), (31001, "gpu1", "NCCL")]
    assert spec["files"][0]["path"] == "/models/m/config.json"
    assert spec["executables"][0]["path"] == "/v/bin/python"
    hub = preflight_spec(dict(plan, model={"path": "Qwen/Qwen3-8B"}), {"engine": "sglang"},
                         python="/v/bin/python", install=True)
    assert hub["files"] == [] and hub["executables"][0]["path"] == "python3"


def test_preflight_asks_for_what_the_storage_tiers_page_hash_compiles_with() -> None:
    """SGLang 0.5.17's file backend compiles its page-hash extension at the first prefill (no
    Python fallback): the real engine's pre-flight asks for a compiler and the headers first."""
    plan = {"model": {"path": "/models/m"}, "release": "0.5.17", "instances": [{"name": "gpu0", "port": 30000}],
            "hicache_storage": {"backend": "file"},
            "traits": {"hicache_storage": {"file": {"page_hash": "jit_cpp"}}}}
    spec = preflight_spec(plan, {"engine": "sglang"}, python="/v/bin/python", install=False)
    assert [e["path"] for e in spec["executables"]] == ["/v/bin/python", "c++"]
    assert "/usr/include/openssl/sha.h" in [f["path"] for f in spec["files"]]
    (probe,) = spec["commands"]
    assert probe["argv"][0] == "/v/bin/python" and "Python.h" in probe["argv"][2] and not probe["missing_ok"]
    assert "apt-get install python3-dev" in probe["fix"] and "leave sglang_hicache_storage off" in probe["fix"]
    # the probe itself: this interpreter's headers, as the check runs it
    done = subprocess.run([sys.executable, "-c", probe["argv"][2]], capture_output=True, text=True, check=False)
    assert done.returncode == (0 if Path(sysconfig.get_paths()["include"], "Python.h").exists() else 1)
    # the embedded engine compiles nothing; 0.5.10 hashes in Python; no tier, no checks
    for engine, tier in (("sim", "jit_cpp"), ("sglang", "python")):
        other = dict(plan, traits={"hicache_storage": {"file": {"page_hash": tier}}})
        assert "commands" not in preflight_spec(other, {"engine": engine}, python="/p", install=False)
    assert "commands" not in preflight_spec(dict(plan, hicache_storage=None), {"engine": "sglang"}, python="/p",
                                            install=False)


def test_preflight_spec_asks_for_the_packages_only_when_the_role_installs() -> None:
    plan = {"model": {"path": "/models/m"}, "instances": []}
    packages = {"venv": "/opt/sglang/venv", "requirements": ["sglang==0.5.23"]}
    installing = preflight_spec(plan, {"engine": "sglang"}, python="/opt/sglang/venv/bin/python", install=True,
                                packages=packages)
    assert installing["packages"] == packages
    existing = preflight_spec(plan, {"engine": "sglang"}, python="/srv/py/bin/python", install=False,
                              packages=packages)
    assert "packages" not in existing


def _inputs(**over: Any):
    return read_inputs(_vars(**over).get, "node1", lambda hosts: [], {})


def test_the_staged_folders_win_over_an_extra_var_that_emptied_the_path() -> None:
    """Issue 28 item 4: `-e sglang_model_path=""` with `-e sglang_model={...}` on an inventory that
    sets a folder: the extra var outranks the model role's set_fact, so the plan read "" and
    refused it as missing. The role's staged folders (__sglang_model_paths) are read first."""
    snapshot = "/var/cache/llmops/hub/models--org--tiny/snapshots/" + "a" * 40
    inputs = _inputs(sglang_model_path="", __sglang_model_paths={"model": snapshot})
    assert inputs.request["model_path"] == snapshot and not inputs.request["draft_model_path"]
    both = _inputs(sglang_model_path="", sglang_draft_model_path="/d",
                   __sglang_model_paths={"model": snapshot, "draft": "/staged/draft"})
    assert both.request["draft_model_path"] == "/staged/draft"
    # nothing staged (no model source): the variables as they are
    assert _inputs(__sglang_model_paths={}).request["model_path"] == "/models/q"


def test_a_missing_model_path_names_both_ways_to_give_a_model(hybrid: dict[str, Any]) -> None:
    with pytest.raises(PlanError) as err:
        _plan(hybrid, sglang_model_path="")
    assert "sglang_model_path=''" in str(err.value) and "or set sglang_model" in str(err.value), err.value


def _hicache_facts() -> dict[str, Any]:
    facts = _facts()
    facts["memory"] = {**facts["memory"], "available_bytes": 1800 * 2**30}
    return facts


def test_a_mooncake_tier_with_no_master_runs_one_on_this_host_before_the_instances(hybrid: dict[str, Any]) -> None:
    """The master is a detached service of its own (never an instance): the embedded engine's
    stand-in for the embedded engine, the pinned package's mooncake_master for the real one, with
    the same flags; the package joins what the role installs, the pre-flight checks both ports
    (free, or held by that master's folder)."""
    storage = {"backend": "mooncake", "segment_gib": 8}
    sim = _plan(hybrid, _hicache_facts(), sglang_profile="mtp_hicache", sglang_hicache_storage=storage,
                sglang_host_address="10.0.0.7")
    kv = sim["kvstore"]
    flags = ["--rpc_port=50051", "--rpc_address=10.0.0.7", "--metrics_port=9003", "--metrics_host=10.0.0.7"]
    assert kv["command"] == [sim["python"], "-m", "ansible_collections.llmops.sglang.plugins.module_utils._engine."
                             "kvstore", *flags]
    assert kv["env"] == {"PYTHONPATH": sim["engine_root"]} and kv["dir"] == "/srv/sglang/kvstore"
    assert kv["pid_file"] == "/srv/sglang/kvstore/master.pid" and kv["name"] == "sglang-kvstore"
    assert kv["health"]["url"] == "http://10.0.0.7:9003" and kv["health"]["path"] == "/health"
    ports = {p["port"]: p for p in sim["preflight"]["ports"]}
    assert ports[50051]["ours_dir"] == ports[9003]["ours_dir"] == "/srv/sglang/kvstore"
    assert not any("mooncake" in p for p in sim["install"]["packages"])  # the stand-in needs nothing

    real = _plan(hybrid, _hicache_facts(), sglang_profile="mtp_hicache", sglang_hicache_storage=storage, sglang_engine="sglang",
                 sglang_host_address="10.0.0.7")
    assert real["kvstore"]["command"][1:3] == ["-c", "import sys; from mooncake.cli import main; sys.exit(main())"]
    assert real["kvstore"]["command"][3:] == flags and real["kvstore"]["match"] == "mooncake_master"
    assert "mooncake-transfer-engine-cuda13==0.3.13.post1" in real["install"]["packages"]
    # an existing installation: its Python must import the store's client
    existing = _plan(hybrid, _hicache_facts(), sglang_profile="mtp_hicache", sglang_hicache_storage=storage, sglang_engine="sglang",
                     sglang_install=False, sglang_python="/srv/py/bin/python", sglang_host_address="10.0.0.7",
                     sglang_env={"PYTHONPATH": "/tmp/site"})
    checks = [c for c in existing["preflight"]["commands"] if "mooncake" in c["what"]]
    assert checks[0]["argv"] == ["/srv/py/bin/python", "-c", "import mooncake.store"]
    # where the servers find their packages through sglang_env, so do the check and the master
    assert checks[0]["env"] == existing["kvstore"]["env"] == {"PYTHONPATH": "/tmp/site"}
    assert "sglang_install: true" in checks[0]["fix"]


def test_a_master_on_another_host_is_not_run_here_but_must_be_reachable(hybrid: dict[str, Any]) -> None:
    plan = _plan(hybrid, _hicache_facts(), sglang_profile="mtp_hicache", sglang_host_address="10.0.0.7",
                 sglang_hicache_storage={"backend": "mooncake", "master": "10.0.0.5:50051"})
    assert plan["kvstore"] is None
    assert not any(p["instance"] == "kvstore" for p in plan["preflight"]["ports"])
    (probe,) = [c for c in plan["preflight"]["commands"] if "reachable" in c["what"]]
    assert probe["argv"][-1] == "10.0.0.5:50051" and "start it first" in probe["fix"]
    # the probe as the pre-flight runs it: a port nobody listens on fails, a listening one passes
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        ok = subprocess.run([sys.executable, "-c", probe["argv"][2], f"127.0.0.1:{port}"], check=False)
    closed = subprocess.run([sys.executable, "-c", probe["argv"][2], f"127.0.0.1:{port}"], capture_output=True,
                            check=False)
    assert ok.returncode == 0 and closed.returncode != 0
