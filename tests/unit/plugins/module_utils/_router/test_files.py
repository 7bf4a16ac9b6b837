"""module_utils/_router/files.py: the router's files in one pass, rendered from its plan and
compared before written (module llmops.sglang.router_files)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils._router import files as _routerfiles
from ansible_collections.llmops.sglang.plugins.module_utils._router.files import write_router
from ansible_collections.llmops.sglang.plugins.module_utils._server.files import Owner
from ansible_collections.llmops.sglang.plugins.plugin_utils import _routerplan as rp

ROOT = Path(__file__).resolve().parents[5]


def _plan(base: Path, **overrides: Any) -> dict[str, Any]:
    values = yaml.safe_load((ROOT / "roles" / "router" / "defaults" / "main.yml").read_text())
    values.update(sglang_router_prometheus_host="127.0.0.1", sglang_router_base_dir=str(base),
                  sglang_router_user="", sglang_router_env={"RUST_LOG": "warn it"})
    values.update(overrides)
    key = values.get("sglang_api_key")
    return rp.plan(rp.RouterRequest.from_vars(values, api_key=key))


def _mode(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)


def test_first_pass_writes_everything_then_nothing_changes(tmp_path: Path) -> None:
    base = tmp_path / "sglang-router"
    plan = _plan(base, sglang_api_key="s3cret")
    first = write_router(plan, base_dir=str(base), api_key="s3cret", backend="process", check=False)
    folder = base / "router"
    assert first.restart and not first.unit_changed
    assert sorted(first.changed) == sorted(str(p) for p in (base, folder, folder / "router.log", folder / "env",
                                                            folder / "launch.sh"))
    assert (_mode(base), _mode(folder), _mode(folder / "router.log")) == ("0o755", "0o750", "0o600")
    assert (_mode(folder / "env"), _mode(folder / "launch.sh")) == ("0o600", "0o750")
    env = (folder / "env").read_text()
    assert "RUST_LOG='warn it'" in env and f"{rp.API_KEY_ENV}=s3cret" in env
    script = (folder / "launch.sh").read_text()
    args = script.split("args=(\n", 1)[1].split("\n)\n", 1)[0].split()
    assert "s3cret" not in script and "--api-key" not in args and args == plan["argv"]
    # the script runs: bash sources the env file and execs the router's Python with the launcher and argv
    out = subprocess.run(["bash", "-c", f"sed 's/^exec /printf \"%s\\\\n\" /' {folder}/launch.sh | bash"],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == plan["python"] and out[1] == "-c"
    assert "parse_router_args(sys.argv[1:])" in "\n".join(out) and f'setproctitle("{plan["match"]}")' in "\n".join(out)
    assert [word for word in out[-len(plan["argv"]) - 1:] if word] == plan["argv"]
    again = write_router(plan, base_dir=str(base), api_key="s3cret", backend="process", check=False)
    assert not again.restart and again.changed == []


def test_the_launcher_is_python_that_parses(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    script = _routerfiles.launch_text(plan)
    launcher = script.split(" -c '", 1)[1].rsplit("' \"${args[@]}\"", 1)[0]
    compile(launcher, "launcher", "exec")
    assert f'os.environ.pop("{rp.API_KEY_ENV}", "")' in launcher


def test_drift_or_a_new_key_restarts_and_check_mode_writes_nothing(tmp_path: Path) -> None:
    base = tmp_path / "sglang-router"
    plan = _plan(base)
    write_router(plan, base_dir=str(base), api_key="", backend="process", check=False)
    env = base / "router" / "env"
    assert rp.API_KEY_ENV not in env.read_text()  # no key: no line
    keyed = _plan(base, sglang_api_key="k2")
    checked = write_router(keyed, base_dir=str(base), api_key="k2", backend="process", check=True)
    assert checked.restart and checked.changed == [str(env)] and "k2" not in env.read_text()
    assert checked.diffs[0]["after"] == "(secret)\n"
    done = write_router(keyed, base_dir=str(base), api_key="k2", backend="process", check=False)
    assert done.restart and "k2" in env.read_text()
    os.chmod(env, 0o644)  # a mode fixed is a change, not a restart
    fixed = write_router(keyed, base_dir=str(base), api_key="k2", backend="process", check=False)
    assert fixed.changed == [str(env)] and not fixed.restart and _mode(env) == "0o600"
    log = base / "router" / "router.log"
    log.write_text("served\n")
    assert not write_router(keyed, base_dir=str(base), api_key="k2", backend="process", check=False).changed
    assert log.read_text() == "served\n"


def test_systemd_writes_the_unit_and_says_so(tmp_path: Path) -> None:
    base = tmp_path / "sglang-router"
    units = tmp_path / "units"
    units.mkdir()
    plan = _plan(base, sglang_router_shutdown_grace_period=30)
    # the unit is root's; here the test's user's (it need not run as root)
    kwargs: dict[str, Any] = {"unit_dir": str(units), "unit_owner": Owner()}
    first = write_router(plan, base_dir=str(base), api_key="", backend="systemd", check=False, **kwargs)
    unit = units / plan["unit"]
    assert first.restart and first.unit_changed and _mode(unit) == "0o644"
    text = unit.read_text()
    for line in ("KillMode=control-group", "Restart=on-failure", "TimeoutStopSec=45",
                 f"ExecStart={base}/router/launch.sh", f"StandardOutput=append:{base}/router/router.log",
                 "User=root", "WorkingDirectory=" + str(base / "router")):
        assert line in text.splitlines()
    again = write_router(plan, base_dir=str(base), api_key="", backend="systemd", check=False, **kwargs)
    assert not again.restart and not again.unit_changed and again.changed == []


def test_a_script_bash_refuses_is_not_written(tmp_path: Path) -> None:
    base = tmp_path / "sglang-router"
    plan = _plan(base)
    plan["python"] = "/venv/bin/python $("  # quoted: still a valid script
    write_router(plan, base_dir=str(base), api_key="", backend="process", check=False)
    assert "bash -n" not in (base / "router" / "launch.sh").read_text()
    broken = dict(plan, description="x\nif then")  # the description is a comment line; a newline breaks out
    with pytest.raises(ValueError, match="bash -n"):
        write_router(broken, base_dir=str(base), api_key="", backend="process", check=False)
    assert "if then" not in (base / "router" / "launch.sh").read_text()


def test_running_only_when_the_pid_file_names_the_live_router(tmp_path: Path) -> None:
    from ansible_collections.llmops.sglang.plugins.module_utils._detached.spec import ServiceSpec
    from ansible_collections.llmops.sglang.plugins.module_utils._detached.starting import start
    from ansible_collections.llmops.sglang.plugins.module_utils._detached.stopping import stop

    base = tmp_path / "sglang-router"
    plan = _plan(base)
    plan["match"] = "sleep 61"  # what the stand-in's command line shows (the router's: sglang::router)
    write_router(plan, base_dir=str(base), api_key="", backend="process", check=False)
    paths = plan["paths"]
    Path(paths["launch_script"]).write_text("#!/bin/sh\nexec sleep 61\n")
    spec = ServiceSpec(name=plan["service"], command=[paths["launch_script"]], pid_file=paths["pid_file"],
                       log_file=paths["log_file"], chdir=paths["dir"], match=plan["match"], start_grace=0.3,
                       stop_timeout=5)
    assert _routerfiles.running(plan, "process") is False  # no pid file
    try:
        assert start(spec).status.running
        assert _routerfiles.running(plan, "process") is True
        Path(paths["pid_file"]).unlink()  # found by its folder only: not running as it should (a start repairs it)
        assert _routerfiles.running(plan, "process") is False
    finally:
        stop(spec)
    assert _routerfiles.running(plan, "process") is False
