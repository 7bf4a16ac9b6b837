"""Tests for module_utils/_server/hostfacts.py and the llmops.sglang.host_facts module.

The real recording of a 2x H200 host (tests/fixtures/h200x2) is parsed as recorded; the
derived cases in fixtures/hostfacts/*.yml (8 GPUs, MIG, busy GPUs, no GPU, cgroup limits,
malformed output) take the recording's shapes and values where they can ("recorded").
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils._server import hostfacts as hf

CASES_DIR = Path(__file__).resolve().parents[3] / "fixtures" / "hostfacts"
CASES = sorted(CASES_DIR.glob("*.yml"))
RECORDED_GPU_QUERY = "nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,memory.free,driver_version,compute_cap,power.limit"
RECORDED_GPU_QUERY_NOHEADER = (
    "nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,memory.free,"
    "driver_version,compute_cap --format=csv,noheader,nounits"
)
RECORDED_APPS_QUERY = "nvidia-smi --query-compute-apps="
KIB = 1024


def recorded_output(path: Path, command: str) -> str:
    """The output recorded after the ``### <command>`` line (matched by prefix) in a
    recording file, up to the next ``### `` (or ``## `` sub-section) line."""
    block: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if line.startswith(("### ", "## ")):
            if block is not None:
                break
            if line.split(" ", 1)[1].rstrip("\n").startswith(command):
                block = []
        elif block is not None:
            block.append(line)
    if block is None:
        raise KeyError(f"{command!r} is not recorded in {path}")
    return "".join(block)


@pytest.fixture(scope="module")
def h200x2(fixtures_dir: Path) -> dict[str, Any]:
    base = fixtures_dir / "h200x2"
    smi, host = base / "nvidia_smi.txt", base / "host.txt"
    return {
        "gpu_csv": recorded_output(smi, RECORDED_GPU_QUERY),
        "gpu_csv_noheader": recorded_output(smi, RECORDED_GPU_QUERY_NOHEADER),
        "apps_csv": recorded_output(smi, RECORDED_APPS_QUERY),
        "smi_text": recorded_output(smi, "nvidia-smi (plain)"),
        "smi_q": recorded_output(smi, "nvidia-smi -q"),
        "meminfo": recorded_output(host, "/proc/meminfo"),
        "numa": recorded_output(host, "numa nodes"),
        "nproc": recorded_output(host, "nproc"),
        "nvml": json.loads((base / "nvml.json").read_text(encoding="utf-8")),
    }


# ---------------------------------------------------------------------------------------------
# The real recording


def test_recorded_gpu_query_with_header_and_units(h200x2: dict[str, Any]) -> None:
    gpus = hf.parse_gpu_csv(h200x2["gpu_csv"])
    assert [gpu["uuid"] for gpu in gpus] == [
        "GPU-996b713f-9ed2-dd19-db4b-e39f73bf5126",
        "GPU-34742c96-76ca-c2ab-63ec-fc65f6aa753a",
    ]
    assert gpus[0] == {
        "index": 0,
        "uuid": "GPU-996b713f-9ed2-dd19-db4b-e39f73bf5126",
        "name": "NVIDIA H200",
        "pci_bus_id": "00000000:00:06.0",
        "memory_total_mib": 143771,
        "memory_used_mib": 0,
        "memory_free_mib": 143156,
        "driver_version": "580.159.04",
        "compute_capability": "9.0",
        "mig_enabled": False,
    }


def test_recorded_noheader_nounits_matches_header_form(h200x2: dict[str, Any]) -> None:
    fields = hf.GPU_QUERY_FIELDS[:9]  # this recorded query has no mig.mode.current
    assert hf.parse_gpu_csv(h200x2["gpu_csv_noheader"], fields) == hf.parse_gpu_csv(h200x2["gpu_csv"])


def test_recorded_noheader_with_wrong_field_list_is_a_clear_error(h200x2: dict[str, Any]) -> None:
    with pytest.raises(hf.HostFactsError, match="has 9 fields, expected 10"):
        hf.parse_gpu_csv(h200x2["gpu_csv_noheader"])


def test_recorded_compute_apps_header_in_another_order(h200x2: dict[str, Any]) -> None:
    # "pid, process_name, used_gpu_memory [MiB], gpu_uuid": header only, no process.
    assert h200x2["apps_csv"].startswith("pid, process_name, used_gpu_memory [MiB], gpu_uuid")
    assert hf.parse_apps_csv(h200x2["apps_csv"]) == []
    row = h200x2["apps_csv"] + "4242, /usr/bin/python3, 70000 MiB, GPU-996b713f-9ed2-dd19-db4b-e39f73bf5126\n"
    assert hf.parse_apps_csv(row) == [
        {"gpu_uuid": "GPU-996b713f-9ed2-dd19-db4b-e39f73bf5126", "pid": 4242,
         "process_name": "/usr/bin/python3", "used_memory_mib": 70000}
    ]


def test_recorded_cuda_version(h200x2: dict[str, Any]) -> None:
    assert hf.parse_cuda_version(h200x2["smi_text"]) == "13.0"
    assert hf.parse_cuda_version(h200x2["smi_q"]) == "13.0"
    assert hf.parse_cuda_version("") is None


def test_recorded_meminfo(h200x2: dict[str, Any]) -> None:
    assert hf.parse_meminfo(h200x2["meminfo"]) == {
        "total_bytes": 263998500 * KIB,
        "available_bytes": 263393720 * KIB,
    }


def test_recorded_numa_and_cpus(h200x2: dict[str, Any]) -> None:
    assert hf.numa_node_count(h200x2["numa"].split()) == 1
    assert int(h200x2["nproc"]) == 32


def test_recorded_nvml_matches_nvidia_smi(h200x2: dict[str, Any]) -> None:
    nvml = hf.gpus_from_nvml(h200x2["nvml"])
    smi = hf.parse_gpu_csv(h200x2["gpu_csv"])
    for a, b in zip(nvml, smi, strict=True):
        for key in ("index", "uuid", "name", "pci_bus_id", "memory_total_mib", "memory_free_mib",
                    "driver_version", "compute_capability", "mig_enabled"):
            assert a[key] == b[key], key
    # NVML's v1 "used" counts the driver's 616 MiB reservation that nvidia-smi leaves out.
    assert (nvml[0]["memory_used_mib"], smi[0]["memory_used_mib"]) == (615, 0)
    assert hf.cuda_version_from_int(h200x2["nvml"]["cuda_driver"]) == "13.0"


def test_recorded_host_facts(h200x2: dict[str, Any]) -> None:
    facts = hf.build_facts(hf.HostInputs(
        meminfo_text=h200x2["meminfo"], gpu_csv=h200x2["gpu_csv"], apps_csv=h200x2["apps_csv"],
        smi_text=h200x2["smi_text"], cpu_count=32, numa_nodes=1, service_manager="process",
        python_executable="/usr/bin/python3", python_version="3.12.3", hostname="vm",
    ))
    assert facts["schema_version"] == 1
    assert (facts["gpu_source"], facts["gpu_count"]) == ("nvidia-smi", 2)
    assert (facts["driver_version"], facts["cuda_version"]) == ("580.159.04", "13.0")
    assert [gpu["busy"] for gpu in facts["gpus"]] == [False, False]
    assert facts["memory"] == {
        "total_bytes": 270334464000,
        "available_bytes": 269715169280,
        "cgroup": {"version": None, "path": None, "max_bytes": None, "high_bytes": None,
                   "usage_bytes": None, "available_bytes": None},
        "effective_available_bytes": 269715169280,
        "limited_by": "meminfo",
    }
    assert set(facts) == {"schema_version", "gpu_source", "gpus", "gpu_count", "driver_version",
                          "cuda_version", "memory", "cpu_count", "numa_nodes", "service_manager",
                          "python", "hostname", "deployment"}
    assert facts["deployment"] is None  # no deployment_dir given


def test_recorded_nvml_facts(h200x2: dict[str, Any]) -> None:
    facts = hf.build_facts(hf.HostInputs(meminfo_text=h200x2["meminfo"], nvml=h200x2["nvml"]))
    assert (facts["gpu_source"], facts["gpu_count"], facts["cuda_version"]) == ("nvml", 2, "13.0")
    assert facts["driver_version"] == "580.159.04"


# ---------------------------------------------------------------------------------------------
# Derived cases


def _resolve(value: Any, recorded: str) -> Any:
    return recorded if value == "recorded" else value


def _inputs(case: dict[str, Any], h200x2: dict[str, Any]) -> hf.HostInputs:
    given = case["inputs"]
    cgroup = given.get("cgroup")
    return hf.HostInputs(
        meminfo_text=_resolve(given["meminfo"], h200x2["meminfo"]),
        gpu_csv=_resolve(given.get("gpu_csv"), h200x2["gpu_csv"]),
        apps_csv=_resolve(given.get("apps_csv"), h200x2["apps_csv"]),
        smi_text=_resolve(given.get("smi_text"), h200x2["smi_text"]),
        declared_gpus=given.get("declared_gpus", []),
        prefer_declared=given.get("prefer_declared", False),
        require_gpus=given.get("require_gpus", True),
        cgroup=hf.CgroupMemory(
            version=cgroup["version"], path=cgroup["path"],
            levels=[hf.CgroupLevel(**level) for level in cgroup["levels"]],
        ) if cgroup else hf.CgroupMemory(),
    )


def assert_subset(expected: Any, actual: Any, where: str = "facts") -> None:
    """Every key of ``expected`` is in ``actual`` with that value; lists match item by item."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: {actual!r} is not a dict"
        for key, value in expected.items():
            assert key in actual, f"{where}.{key} missing"
            assert_subset(value, actual[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{where}: {actual!r}"
        for number, (want, got) in enumerate(zip(expected, actual, strict=True)):
            assert_subset(want, got, f"{where}[{number}]")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


@pytest.mark.parametrize("case_file", CASES, ids=[path.stem for path in CASES])
def test_case(case_file: Path, h200x2: dict[str, Any]) -> None:
    case = yaml.safe_load(case_file.read_text(encoding="utf-8"))
    inputs = _inputs(case, h200x2)
    if "error" in case:
        with pytest.raises(hf.HostFactsError) as info:
            hf.build_facts(inputs)
        assert case["error"] in str(info.value)
        return
    facts = hf.build_facts(inputs)
    assert_subset(case["expect"], facts)
    assert facts["gpu_count"] == len(facts["gpus"])
    assert inputs.warnings == case.get("warnings", [])


def test_cases_cover_the_brief() -> None:
    names = {path.stem for path in CASES}
    assert {"h200x8", "mig_enabled", "busy_gpu", "no_gpu", "no_gpu_declared", "cgroup_v2_max",
            "cgroup_v1", "malformed_columns"} <= names


# ---------------------------------------------------------------------------------------------
# Parsers and readers on their own


@pytest.mark.parametrize(("text", "expected"), [("max\n", None), ("68719476736\n", 68719476736)])
def test_cgroup_v2_limit(text: str, expected: int | None) -> None:
    assert hf.parse_cgroup_v2_limit(text) == expected


def test_cgroup_v2_limit_malformed() -> None:
    with pytest.raises(hf.HostFactsError, match="neither a byte count nor 'max'"):
        hf.parse_cgroup_v2_limit("64G")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("9223372036854771712\n", None), ("9223372036854710272", None), ("-1", None),
     ("34359738368", 34359738368)],
)
def test_cgroup_v1_limit(text: str, expected: int | None) -> None:
    assert hf.parse_cgroup_v1_limit(text) == expected


def test_meminfo_without_memavailable() -> None:
    text = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 200 kB\n"
    assert hf.parse_meminfo(text) == {"total_bytes": 1000 * KIB, "available_bytes": 310 * KIB}


def test_proc_self_cgroup() -> None:
    v1 = "12:memory:/docker/4f1c\n11:cpu,cpuacct:/docker/4f1c\n0::/docker/4f1c\n"
    assert hf.parse_proc_self_cgroup(v1) == {"memory": "/docker/4f1c", "v2": "/docker/4f1c"}
    assert hf.parse_proc_self_cgroup("0::/\n") == {"v2": "/"}


@pytest.mark.parametrize(
    ("comm", "run_systemd", "expected"),
    [("systemd\n", True, "systemd"), ("systemd", False, "process"), ("tini", True, "process"),
     (None, False, "process")],
)
def test_service_manager(comm: str | None, run_systemd: bool, expected: str) -> None:
    assert hf.detect_service_manager(comm, run_systemd) == expected


def test_no_devices_found_is_an_empty_list() -> None:
    assert hf.parse_gpu_csv("No devices were found\n") == []


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_read_cgroup_v2_nested(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    _write(proc / "self" / "cgroup", "0::/system.slice/sglang.service\n")
    _write(cg / "cgroup.controllers", "cpuset cpu io memory pids\n")
    leaf = cg / "system.slice" / "sglang.service"
    _write(leaf / "memory.max", "max\n")
    _write(leaf / "memory.high", "max\n")
    _write(leaf / "memory.current", "3221225472\n")
    _write(leaf / "memory.stat", "anon 1073741824\ninactive_file 1073741824\n")
    _write(cg / "system.slice" / "memory.max", "8589934592\n")
    _write(cg / "system.slice" / "memory.current", "4294967296\n")
    cgroup = hf.read_cgroup_memory(cg, proc)
    assert (cgroup.version, cgroup.path) == (2, "/system.slice/sglang.service")
    assert [level.path for level in cgroup.levels] == ["/system.slice/sglang.service", "/system.slice", "/"]
    summary = hf.cgroup_summary(cgroup)
    assert summary["max_bytes"] == 8589934592
    assert summary["usage_bytes"] == 2147483648  # current less inactive file cache
    assert (summary["available_bytes"], summary["limited_by"]) == (4294967296, "cgroup_v2_max")


def test_read_cgroup_v2_in_container_without_cgroupns(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    _write(proc / "self" / "cgroup", "0::/kubepods/pod1/abc\n")  # a host path, not mounted here
    _write(cg / "cgroup.controllers", "memory\n")
    _write(cg / "memory.max", "17179869184\n")
    cgroup = hf.read_cgroup_memory(cg, proc)
    assert [level.path for level in cgroup.levels] == ["/"]
    assert hf.cgroup_summary(cgroup)["max_bytes"] == 17179869184


def test_read_cgroup_v1(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    _write(proc / "self" / "cgroup", "12:memory:/\n")
    _write(cg / "memory" / "memory.limit_in_bytes", "34359738368\n")
    _write(cg / "memory" / "memory.usage_in_bytes", "0\n")
    cgroup = hf.read_cgroup_memory(cg, proc)
    assert cgroup.version == 1
    meminfo = {"total_bytes": 270334464000, "available_bytes": 269715169280}
    memory = hf.memory_facts(meminfo, cgroup)
    assert (memory["effective_available_bytes"], memory["limited_by"]) == (34359738368, "cgroup_v1_limit")
    _write(cg / "memory" / "memory.limit_in_bytes", "9223372036854771712\n")
    assert hf.memory_facts(meminfo, hf.read_cgroup_memory(cg, proc))["limited_by"] == "meminfo"


def test_read_cgroup_none(tmp_path: Path) -> None:
    assert hf.read_cgroup_memory(tmp_path, tmp_path) == hf.CgroupMemory()


def test_read_numa_and_service_manager(tmp_path: Path) -> None:
    for name in ("node0", "node1", "online", "possible"):
        (tmp_path / "devices" / "system" / "node" / name).mkdir(parents=True)
    assert hf.read_numa_nodes(tmp_path) == 2
    assert hf.read_numa_nodes(tmp_path / "missing") == 1
    _write(tmp_path / "proc" / "1" / "comm", "systemd\n")
    (tmp_path / "run" / "systemd" / "system").mkdir(parents=True)
    assert hf.read_service_manager(tmp_path / "proc", tmp_path / "run" / "systemd" / "system") == "systemd"
    assert hf.read_service_manager(tmp_path / "proc", tmp_path / "nowhere") == "process"


# ---------------------------------------------------------------------------------------------
# The module, end to end through `ansible localhost -m llmops.sglang.host_facts`

SMI_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin")


def fake_host(tmp_path: Path, h200x2: dict[str, Any]) -> dict[str, str]:
    """A fake /proc, /sys and cgroup v2 tree: the recorded meminfo, a 64 GiB container limit."""
    proc, sys_root, cg = tmp_path / "proc", tmp_path / "sys", tmp_path / "cgroup"
    _write(proc / "meminfo", h200x2["meminfo"])
    _write(proc / "self" / "cgroup", "0::/\n")
    _write(proc / "1" / "comm", "sleep\n")
    for name in h200x2["numa"].split():  # node0, online, possible... as recorded
        assert "/" not in name
        (sys_root / "devices" / "system" / "node" / name).mkdir(parents=True)
    _write(cg / "cgroup.controllers", "cpu memory pids\n")
    _write(cg / "memory.max", "68719476736\n")
    _write(cg / "memory.high", "max\n")
    _write(cg / "memory.current", "1073741824\n")
    _write(cg / "memory.stat", "anon 1073741824\ninactive_file 0\n")
    return {"proc_root": str(proc), "sys_root": str(sys_root), "cgroup_root": str(cg)}


def run_module(repo_root: Path, tmp_path: Path, args: dict[str, Any], path: str) -> tuple[str, dict[str, Any]]:
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(repo_root / "ansible.cfg"),
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_CACHE_PLUGIN": "memory",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_REMOTE_TEMP": str(tmp_path / "ansible-remote"),
        "PATH": path,
    })
    ansible = Path(repo_root / ".venv" / "bin" / "ansible")
    command = [str(ansible) if ansible.exists() else "ansible", "localhost",
               "-m", "llmops.sglang.host_facts", "-a", json.dumps(args)]
    done = subprocess.run(command, cwd=repo_root, env=env, capture_output=True, text=True, timeout=120)
    # The default callback with result_format=json: "localhost | SUCCESS => {...}".
    head, sep, payload = done.stdout.partition("localhost | ")
    status, arrow, payload = payload.partition(" => ")
    if not sep or not arrow:
        raise AssertionError(f"no result in:\n{done.stdout}\n{done.stderr}")
    result, _end = json.JSONDecoder().raw_decode(payload)
    return status, result


def bare_path(tmp_path: Path) -> str:
    """A PATH holding the Python/ansible of this venv and no nvidia-smi."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    return f"{bindir}:/usr/bin:/bin"


def test_module_declared_gpus_without_nvidia_smi(repo_root: Path, tmp_path: Path, h200x2: dict[str, Any]) -> None:
    if any(Path(folder, "nvidia-smi").exists() for folder in SMI_DIRS):
        pytest.skip("this machine has nvidia-smi in a system folder")
    args = {"declared_gpus": [{"name": "NVIDIA H200", "memory_mib": 143771, "count": 2}], **fake_host(tmp_path, h200x2)}
    status, result = run_module(repo_root, tmp_path, args, bare_path(tmp_path))
    assert status == "SUCCESS", result
    assert result["changed"] is False
    facts = result["ansible_facts"]["sglang_host"]
    assert (facts["gpu_source"], facts["gpu_count"]) == ("declared", 2)
    assert facts["gpus"][1] == {
        "index": 1, "uuid": None, "name": "NVIDIA H200", "pci_bus_id": None, "memory_total_mib": 143771,
        "memory_used_mib": 0, "memory_free_mib": 143771, "driver_version": None, "compute_capability": None,
        "mig_enabled": False, "processes": [], "owned_by": [], "busy": False,
    }
    assert facts["memory"]["effective_available_bytes"] == 68719476736 - 1073741824
    assert facts["memory"]["limited_by"] == "cgroup_v2_max"
    assert facts["memory"]["available_bytes"] == 263393720 * KIB
    assert (facts["numa_nodes"], facts["service_manager"]) == (1, "process")
    assert facts["cpu_count"] >= 1 and facts["python"]["version"] and facts["hostname"]


def test_module_reads_the_manifest_and_the_model_config_in_the_same_run(repo_root: Path, tmp_path: Path,
                                                                        h200x2: dict[str, Any]) -> None:
    """The server plan reads the host once: host_facts returns the deployment's manifest (as
    server_status reads it) and the model's config.json (base64, as slurp would), byte for byte;
    neither where there is none."""
    base = tmp_path / "deploy"
    base.mkdir()
    manifest = {"version": 1, "host": "h", "instances": [{"name": "gpu0", "port": 30000}]}
    (base / "deployment.json").write_text(json.dumps(manifest), encoding="utf-8")
    model = tmp_path / "model"
    model.mkdir()
    raw = b'{"architectures": ["Qwen3ForCausalLM"], "name": "caf\xc3\xa9"}\n'
    (model / "config.json").write_bytes(raw)
    declared = {"declared_gpus": [{"name": "NVIDIA H200", "memory_mib": 143771, "count": 2}], **fake_host(tmp_path, h200x2)}
    status, result = run_module(repo_root, tmp_path, {**declared, "deployment_dir": str(base), "model_path": str(model)},
                                bare_path(tmp_path))
    assert status == "SUCCESS", result
    assert result["manifest"]["instances"][0]["name"] == "gpu0" and result["manifest_problem"] == ""
    assert base64.b64decode(result["model_config"]) == raw
    status, result = run_module(repo_root, tmp_path, {**declared, "deployment_dir": str(tmp_path / "none"),
                                                      "model_path": str(tmp_path / "no-model")}, bare_path(tmp_path))
    assert status == "SUCCESS", result
    assert (result["manifest"], result["model_config"]) == (None, None)


def test_module_no_gpu_fails_clearly(repo_root: Path, tmp_path: Path, h200x2: dict[str, Any]) -> None:
    if any(Path(folder, "nvidia-smi").exists() for folder in SMI_DIRS):
        pytest.skip("this machine has nvidia-smi in a system folder")
    status, result = run_module(repo_root, tmp_path, fake_host(tmp_path, h200x2), bare_path(tmp_path))
    assert status == "FAILED!"
    assert "no GPU found on this host" in result["msg"] and "declared_gpus" in result["msg"]


def fake_nvidia_smi(tmp_path: Path, h200x2: dict[str, Any], broken: bool = False) -> Path:
    """A script answering the module's three nvidia-smi calls with the recorded outputs
    (the recorded GPU query has a header and units: the parser must cope) and logging them."""
    folder = tmp_path / "smi"
    folder.mkdir()
    (folder / "gpu.csv").write_text(h200x2["gpu_csv"], encoding="utf-8")
    (folder / "apps.csv").write_text(h200x2["apps_csv"], encoding="utf-8")
    (folder / "plain.txt").write_text(h200x2["smi_text"], encoding="utf-8")
    script = folder / "nvidia-smi"
    failure = (
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9\n"
        if broken else ""
    )
    script.write_text(
        "#!/bin/sh\n"
        f'echo "LC_ALL=$LC_ALL $*" >> {folder}/calls.log\n'
        f"{failure}"
        'case "$*" in\n'
        f"  --query-gpu=*) cat {folder}/gpu.csv ;;\n"
        f"  --query-compute-apps=*) cat {folder}/apps.csv ;;\n"
        f'  "") cat {folder}/plain.txt ;;\n'
        '  *) echo "unexpected arguments: $*" >&2; exit 2 ;;\n'
        "esac\n",
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def test_module_with_recorded_nvidia_smi(repo_root: Path, tmp_path: Path, h200x2: dict[str, Any]) -> None:
    smi = fake_nvidia_smi(tmp_path, h200x2)
    args = {"nvidia_smi_path": str(smi), "declared_gpus": ["NVIDIA A10"], **fake_host(tmp_path, h200x2)}
    status, result = run_module(repo_root, tmp_path, args, bare_path(tmp_path))
    assert status == "SUCCESS", result
    facts = result["ansible_facts"]["sglang_host"]
    assert (facts["gpu_source"], facts["gpu_count"]) == ("nvidia-smi", 2)  # nvidia-smi wins
    assert (facts["driver_version"], facts["cuda_version"]) == ("580.159.04", "13.0")
    assert facts["gpus"] == [
        {**gpu, "processes": [], "owned_by": [], "busy": False} for gpu in hf.parse_gpu_csv(h200x2["gpu_csv"])
    ]
    calls = (smi.parent / "calls.log").read_text(encoding="utf-8").splitlines()
    assert calls == [
        "LC_ALL=C --query-gpu=" + ",".join(hf.GPU_QUERY_FIELDS) + " --format=csv,noheader,nounits",
        "LC_ALL=C --query-compute-apps=" + ",".join(hf.APPS_QUERY_FIELDS) + " --format=csv,noheader,nounits",
        "LC_ALL=C ",
    ]


def test_module_with_broken_nvidia_smi(repo_root: Path, tmp_path: Path, h200x2: dict[str, Any]) -> None:
    smi = fake_nvidia_smi(tmp_path, h200x2, broken=True)
    args = {"nvidia_smi_path": str(smi), **fake_host(tmp_path, h200x2)}
    status, result = run_module(repo_root, tmp_path, args, bare_path(tmp_path))
    assert status == "FAILED!"
    assert "failed (rc=9)" in result["msg"] and "couldn't communicate" in result["msg"]
    assert "Traceback" not in json.dumps(result)


def test_module_documentation(repo_root: Path) -> None:
    doc = shutil.which("ansible-doc", path=str(repo_root / ".venv" / "bin")) or "ansible-doc"
    done = subprocess.run([doc, "--json", "llmops.sglang.host_facts"], cwd=repo_root, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "ANSIBLE_CONFIG": str(repo_root / "ansible.cfg")})
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)["llmops.sglang.host_facts"]
    assert set(info["doc"]["options"]) == {"declared_gpus", "prefer_declared", "use_nvml", "require_gpus",
                                           "nvidia_smi_path", "proc_root", "sys_root", "cgroup_root", "deployment_dir",
                                           "model_path", "storage_paths"}
    assert {"manifest", "manifest_problem", "model_config"} <= set(info["return"])
    facts_doc = info["return"]["ansible_facts"]["contains"]["sglang_host"]["contains"]
    sample = hf.build_facts(hf.HostInputs(meminfo_text="MemTotal: 1 kB\n", declared_gpus=["X"]))
    assert set(facts_doc) == set(sample) | {"filesystems"}  # filesystems: with storage_paths only
    assert set(facts_doc["gpus"]["contains"]) == set(sample["gpus"][0])
    assert set(facts_doc["memory"]["contains"]) == set(sample["memory"])
    assert set(facts_doc["memory"]["contains"]["cgroup"]["contains"]) == set(sample["memory"]["cgroup"])


def test_exiting_process_name_no_data_is_null() -> None:
    from ansible_collections.llmops.sglang.plugins.module_utils._server import hostfacts as hf

    assert hf._null("[No data]")
    assert not hf._null("python3")
