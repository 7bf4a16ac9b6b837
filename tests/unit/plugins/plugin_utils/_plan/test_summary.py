"""What --check and --tags plan print (issue 28 item 12): per host and instance, start, restart
and why, stays, stop; not the whole plan (854 lines on the local inventory before)."""
from __future__ import annotations

from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server import manifest as _manifest
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.summary import argv_changes, plan_summary

ARGV = ["--model-path", "/m", "--port", "30000", "--max-running-requests", "16", "--enable-metrics"]
ENV = {"CUDA_VISIBLE_DEVICES": "0", "LLMOPS_SIM_TIME_SCALE": "0.005"}


def _inst(name: str, port: int, argv: list[str] | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "port": port, "cuda_visible_devices": name[-1], "argv": list(argv or ARGV),
            "env": dict(env or ENV)}


def _plan(instances: list[dict[str, Any]], recorded: list[dict[str, Any]] | None, running: list[str]) -> dict[str, Any]:
    previous = {"release": "0.5.23", "instances": recorded} if recorded is not None else {}
    return {"host": "h1", "release": "0.5.23", "profile": "baseline", "engine": "sim", "backend": "process",
            "instances": instances, "previous": previous, "running": running, "hicache": {}}


def _record(inst: dict[str, Any]) -> dict[str, Any]:
    return {"name": inst["name"], "argv": inst["argv"], "env_digest": _manifest.env_digest(inst["env"])}


def test_flag_changes_are_named_with_both_values() -> None:
    new = ["--model-path", "/m", "--port", "30000", "--max-running-requests", "32", "--hicache-size", "40"]
    assert argv_changes(ARGV, new) == ["--max-running-requests 16 -> 32", "+ --hicache-size 40", "- --enable-metrics"]
    assert argv_changes(ARGV, ARGV) == []
    # a switch that gained a value, and a flag of several words
    assert argv_changes(["--x"], ["--x", "a", "b"]) == ["--x (set) -> a b"]


def test_nothing_deployed_every_instance_starts() -> None:
    lines = plan_summary(_plan([_inst("gpu0", 30000), _inst("gpu1", 30001)], None, []))
    assert lines[0].startswith("h1: 2 instance(s), SGLang 0.5.23 (sim engine, process services), profile baseline")
    assert "compared with nothing deployed" in lines[0]
    assert "  gpu0: start (new: not in deployment.json) - GPU 0, port 30000" in lines
    assert "      " + " ".join(ARGV) in lines
    assert lines[-1] == "  in all: 2 start"


def test_restart_says_which_flag_stays_and_stop_are_named() -> None:
    old0, old1 = _inst("gpu0", 30000), _inst("gpu1", 30001)
    gone = {"name": "gpu2", "argv": ARGV}
    changed = _inst("gpu0", 30000, argv=[*ARGV[:5], "32", ARGV[6]])
    lines = plan_summary(_plan([changed, _inst("gpu1", 30001)], [_record(old0), _record(old1), gone],
                               ["gpu0", "gpu1", "gpu2"]))
    assert "  gpu0: restart (--max-running-requests 16 -> 32) - GPU 0, port 30000" in lines
    assert "  gpu1: stays - GPU 1, port 30001" in lines
    assert "  gpu2: stop (no longer planned)" in lines
    assert lines[-1] == "  in all: 1 restart, 1 stays, 1 stop"


def test_environment_release_and_not_running_are_reasons() -> None:
    old = _inst("gpu0", 30000)
    record = {**_record(old), "release": "0.5.17"}
    plan = _plan([_inst("gpu0", 30000, env={**ENV, "LLMOPS_SIM_FAIL_SHARE": "0.3"})], [record], ["gpu0"])
    (line,) = [x for x in plan_summary(plan) if x.startswith("  gpu0:")]
    assert line.startswith("  gpu0: restart (environment changed; release 0.5.17 -> 0.5.23)"), line
    dead = plan_summary(_plan([_inst("gpu0", 30000)], [_record(old)], []))
    assert "  gpu0: start (not running) - GPU 0, port 30000" in dead


def test_the_hicache_size_and_why_are_one_line() -> None:
    plan = _plan([_inst("gpu0", 30000)], None, [])
    plan["hicache"] = {"size_gb": 40, "limited_by": "cgroup", "reasoning": ["...", "size 40 GB: pins 43 GB per rank"]}
    assert "  HiCache: 40 GB host pool per rank (cgroup limits the host: size 40 GB: pins 43 GB per rank)" in plan_summary(plan)


def test_the_storage_tier_its_folder_and_each_instances_cap_are_one_line() -> None:
    plan = _plan([_inst("gpu0", 30000)], None, [])
    plan["hicache_storage"] = {"backend": "file", "root": "/data/kv", "instances": {"gpu0": {"cap_bytes": 250 * 10**9}},
                               "filesystem": {"fstype": "xfs", "mount_point": "/data"},
                               "reasoning": ["...", "the tier may hold 250.00 GB on this host"]}
    assert ("  HiCache storage: file in /data/kv/<instance>, 250.00 GB per instance (xfs at /data: the tier may "
            "hold 250.00 GB on this host)") in plan_summary(plan)
    plan["hicache_storage"] = {"backend": "mooncake", "root": "", "master": {"address": "10.0.0.5:50051", "local": False},
                               "reasoning": ["...", "the host lends the store 8.62 GB, taken out of the host tier's "
                                                    "memory budget"]}
    assert ("  HiCache storage: mooncake store, master 10.0.0.5:50051 (run elsewhere): the host lends the store "
            "8.62 GB, taken out of the host tier's memory budget") in plan_summary(plan)
    plan["hicache_storage"] = None
    assert not any("HiCache storage" in line for line in plan_summary(plan))
