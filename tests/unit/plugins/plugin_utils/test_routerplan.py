"""The router's plan (plugin_utils/_routerplan.py): its command line, the checks of its inputs,
the pre-flight it asks of its host, and its agreement with the role's defaults and argument
specs. The flags are also put to the real router's own parser (.venv-router, `make router`)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.plugin_utils import _routerplan as rp

ROOT = Path(__file__).resolve().parents[4]
ROUTER_PY = ROOT / ".venv-router" / "bin" / "python"


def role_defaults(**overrides: Any) -> dict[str, Any]:
    """The router role's defaults, as Ansible would template them (one reference to resolve)."""
    values = yaml.safe_load((ROOT / "roles" / "router" / "defaults" / "main.yml").read_text())
    values["sglang_router_prometheus_host"] = values["sglang_router_host"]
    values.update(overrides)
    return values


def test_every_field_is_a_role_variable_with_a_default_and_an_argument_spec() -> None:
    defaults = role_defaults()
    specs = yaml.safe_load((ROOT / "roles" / "router" / "meta" / "argument_specs.yml").read_text())
    main = specs["argument_specs"]["main"]["options"]
    for variable in [*rp.VARIABLES.values(), *rp.SECRET_VARIABLES]:
        assert variable in defaults, variable
        assert variable in main, variable
    for name in ("service_manager", "policy", "log_level"):
        constant = {"service_manager": "SERVICE_MANAGERS", "policy": "POLICIES", "log_level": "LOG_LEVELS"}[name]
        assert tuple(main[rp.VARIABLES[name]]["choices"]) == getattr(rp, constant)


def test_the_command_line_from_the_defaults() -> None:
    req = rp.RouterRequest.from_vars(role_defaults())
    assert rp.argv(req) == [
        "--host", "127.0.0.1", "--port", "8000", "--policy", "cache_aware",
        "--prometheus-host", "127.0.0.1", "--prometheus-port", "29000",
        "--health-check-interval-secs", "3", "--health-check-timeout-secs", "5",
        "--health-failure-threshold", "2", "--health-success-threshold", "2",
        "--health-check-endpoint", "/health", "--retry-max-retries", "5",
        "--request-timeout-secs", "1800", "--shutdown-grace-period-secs", "30",
        "--log-level", "info", "--disable-circuit-breaker"]


def test_circuit_breaker_and_extra_args_and_values_from_extra_vars() -> None:
    # -e gives strings: they are taken as their types
    req = rp.RouterRequest.from_vars(role_defaults(sglang_router_circuit_breaker="true", sglang_router_port="8001",
                                                   sglang_router_cb_timeout=30,
                                                   sglang_router_extra_args=["--max-payload-size", 1024]))
    words = rp.argv(req)
    assert words[words.index("--port") + 1] == "8001"
    assert "--disable-circuit-breaker" not in words
    assert words[-6:] == ["--cb-failure-threshold", "10", "--cb-timeout-duration-secs", "30",
                          "--max-payload-size", "1024"]


def test_every_bad_input_is_named_at_once() -> None:
    with pytest.raises(rp.RouterPlanError) as err:
        rp.RouterRequest.from_vars(role_defaults(
            sglang_router_port="eighty", sglang_router_policy="fastest", sglang_router_install="maybe",
            sglang_router_extra_args=["--api-key", "x"], sglang_router_env={"1BAD": "v"},
            sglang_router_base_dir="relative/dir"))
    problems = err.value.problems
    assert "sglang_router_port='eighty': must be a whole number" in problems
    assert "sglang_router_install='maybe': must be true or false" in problems
    assert len(problems) == 6, problems  # and the four rules broken by the values that could be read
    with pytest.raises(rp.RouterPlanError) as err:
        rp.RouterRequest.from_vars(role_defaults(
            sglang_router_policy="fastest", sglang_router_prometheus_port=8000, sglang_router_extra_args=["--api-key=x"],
            sglang_router_env={"1BAD": "v"}, sglang_router_base_dir="relative/dir", sglang_router_port=70000))
    text = str(err.value)
    assert text.startswith("the router cannot be planned (nothing was changed):")
    for part in ("sglang_router_policy='fastest': must be one of cache_aware, round_robin",
                 "sglang_router_port=70000: must be a TCP port (1-65535)",
                 "sglang_router_extra_args has --api-key: it would show the key",
                 "sglang_router_env has '1BAD'",
                 "sglang_router_base_dir='relative/dir': must be an absolute path"):
        assert part in text, part
    with pytest.raises(rp.RouterPlanError, match="sglang_router_port and sglang_router_prometheus_port are both 9"):
        rp.RouterRequest.from_vars(role_defaults(sglang_router_port=9, sglang_router_prometheus_port=9))
    missing = role_defaults()
    del missing["sglang_router_policy"]
    with pytest.raises(rp.RouterPlanError, match="sglang_router_policy is not set"):
        rp.RouterRequest.from_vars(missing)


def test_the_plan_keeps_no_secret_and_renders_only_fields() -> None:
    req = rp.RouterRequest.from_vars(role_defaults(sglang_router_user="", sglang_router_env={"RUST_LOG": "warn"},
                                                   sglang_api_key="s3cret"), api_key="s3cret")
    plan = rp.plan(req, "10.0.0.5")
    assert "s3cret" not in repr(plan)
    assert plan["api_key_set"] is True and plan["api_key_env"] == rp.API_KEY_ENV
    assert plan["env"] == {"RUST_LOG": "warn"}
    assert plan["python"] == "/opt/sglang-router/venv/bin/python"
    assert plan["flag_check"][:2] == [plan["python"], "-c"] and plan["flag_check"][3:] == plan["argv"]
    assert plan["stop_timeout"] == 45 and plan["match"] == "sglang::router"
    assert (plan["user"], plan["group"], plan["unit_user"], plan["unit_group"]) == ("", "", "root", "root")
    assert plan["connect_url"] == "http://127.0.0.1:8000" and plan["advertise_url"] is None  # loopback only
    assert plan["paths"]["pid_file"] == "/opt/sglang-router/router/router.pid"
    named = rp.plan(rp.RouterRequest.from_vars(role_defaults(sglang_router_host="0.0.0.0")), "10.0.0.5")
    assert named["advertise_url"] == "http://10.0.0.5:8000"
    assert (named["user"], named["group"], named["unit_user"]) == ("sglang-router", "sglang-router", "sglang-router")
    assert named["api_key_set"] is False


def test_the_preflight_it_asks_of_the_host() -> None:
    existing = rp.plan(rp.RouterRequest.from_vars(role_defaults(
        sglang_router_install=False, sglang_router_python="/srv/venv-router/bin/python", sglang_router_user="")))
    spec = existing["preflight"]
    assert spec["router_dir"] == "/opt/sglang-router/router" and spec["service_manager"] == "auto"
    assert [(p["port"], p["what"]) for p in spec["ports"]] == [(8000, "HTTP"), (29000, "Prometheus")]
    assert all("sglang_router_port" in p["fix"] for p in spec["ports"])
    [python] = spec["executables"]
    assert python["path"] == "/srv/venv-router/bin/python" and python["what"] == "the router's Python"
    assert "`make router`" in python["fix"] and "sglang_router_install: true" in python["fix"]
    assert "sglang_router_python" in python["fix"] and "user" not in spec
    [flags] = spec["commands"]
    # a missing Python is named once, by the executables check
    assert flags["argv"] == existing["flag_check"] and flags["missing_ok"] is True
    installing = rp.plan(rp.RouterRequest.from_vars(role_defaults()))["preflight"]
    assert [e["path"] for e in installing["executables"]] == ["python3"]
    assert installing["commands"][0]["missing_ok"] is True  # the role installs it, then checks the flags
    as_user = rp.plan(rp.RouterRequest.from_vars(role_defaults(sglang_router_install=False)))["preflight"]
    assert as_user["user"] == "sglang-router"


def _ask(python: str, plan: dict[str, Any]) -> subprocess.CompletedProcess:
    return subprocess.run([python, *plan["flag_check"][1:]], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(not ROUTER_PY.exists(), reason="no .venv-router (make router)")
def test_the_real_router_parses_the_planned_flags_and_refuses_a_bad_one() -> None:
    good = rp.plan(rp.RouterRequest.from_vars(role_defaults(sglang_router_circuit_breaker=True)))
    assert _ask(str(ROUTER_PY), good).returncode == 0
    bad = rp.plan(rp.RouterRequest.from_vars(role_defaults(sglang_router_extra_args=["--no-such-flag"])))
    done = _ask(str(ROUTER_PY), bad)
    assert done.returncode == 1 and done.stderr.strip() == (
        "sglang-router refuses the flags (-c: error: unrecognized arguments: --no-such-flag): correct "
        "sglang_router_extra_args, or the role variable of that flag")


def test_a_python_without_the_router_says_so_and_the_version_stays_a_literal() -> None:
    plan = rp.plan(rp.RouterRequest.from_vars(role_defaults()))
    done = _ask(sys.executable, plan)
    assert done.returncode == 1
    assert done.stderr.strip() == (f"{sys.executable} cannot import sglang_router (No module named 'sglang_router'): "
                                   + rp.python_fix("0.3.2"))
    odd = rp.plan(rp.RouterRequest.from_vars(role_defaults(sglang_router_version='0.3.2"); import os; os.exit(("')))
    done = _ask(sys.executable, odd)  # the version is text in the message, not code
    assert done.returncode == 1 and 'install sglang-router==0.3.2"); import os; os.exit(("' in done.stderr
