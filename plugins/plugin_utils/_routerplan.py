# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The router's plan (controller side): its command line, interpreter, environment, files and
the pre-flight that must pass on its host before anything there changes.

The one owner of the router's command line (the role's templates render ``argv``; they decide
nothing) and of what the router's pre-flight checks. The action ``llmops.sglang.router_plan``
reads the role's variables through ``VARIABLES`` (one mapping, variable -> field), builds a
``RouterRequest`` (every bad input at once, each naming the variable, its value and the rule),
then ``plan`` makes the fact the role renders and starts from.

What the router needs to start (measured on sglang-router 0.3.2, docs/fleet.md):
- its port and its Prometheus port free: it exits at start ("Address already in use") when
  either is taken, so a port held by another program must refuse the deploy before the running
  router is stopped;
- a Python that has ``sglang_router`` (with ``sglang_router_install: false`` it must be there
  already; with ``true`` the role creates it from ``sglang_router_venv_python``);
- flags its own parser accepts (``parse_router_args``), asked of the installed router.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout

# field -> the role's variable (roles/router/meta/argument_specs.yml, main entry point)
VARIABLES: dict[str, str] = {
    "version": "sglang_router_version",
    "install": "sglang_router_install",
    "venv": "sglang_router_venv",
    "venv_python": "sglang_router_venv_python",
    "python": "sglang_router_python",
    "base_dir": "sglang_router_base_dir",
    "user": "sglang_router_user",
    "group": "sglang_router_group",
    "service_manager": "sglang_router_service_manager",
    "host": "sglang_router_host",
    "port": "sglang_router_port",
    "prometheus_host": "sglang_router_prometheus_host",
    "prometheus_port": "sglang_router_prometheus_port",
    "policy": "sglang_router_policy",
    "health_check_interval": "sglang_router_health_check_interval",
    "health_check_timeout": "sglang_router_health_check_timeout",
    "health_failure_threshold": "sglang_router_health_failure_threshold",
    "health_success_threshold": "sglang_router_health_success_threshold",
    "health_check_endpoint": "sglang_router_health_check_endpoint",
    "retry_max_retries": "sglang_router_retry_max_retries",
    "circuit_breaker": "sglang_router_circuit_breaker",
    "pd_disaggregation": "sglang_router_pd_disaggregation",
    "cb_failure_threshold": "sglang_router_cb_failure_threshold",
    "cb_timeout": "sglang_router_cb_timeout",
    "request_timeout": "sglang_router_request_timeout",
    "shutdown_grace_period": "sglang_router_shutdown_grace_period",
    "log_level": "sglang_router_log_level",
    "extra_args": "sglang_router_extra_args",
    "env": "sglang_router_env",
    "ready_timeout": "sglang_router_ready_timeout",
}
# Variables read for the plan but not kept in it (the key lives only in the 0600 env file)
SECRET_VARIABLES = ("sglang_api_key",)

SERVICE_MANAGERS = ("auto", "systemd", "process")
POLICIES = ("cache_aware", "round_robin", "random", "power_of_two", "manual")
LOG_LEVELS = ("debug", "info", "warn", "error")
# The launch script hands the key to the router through this variable (never --api-key: argv)
API_KEY_ENV = "LLMOPS_SGLANG_ROUTER_API_KEY"
# The service manager waits this long after the router's own grace period before SIGKILL
STOP_MARGIN_S = 15
# Flags the role never writes on the command line
FORBIDDEN_EXTRA = {
    "--api-key": "it would show the key in the router's command line (/proc/<pid>/cmdline); set sglang_api_key, "
                 "which the role keeps in the 0600 env file",
    "--worker-urls": "the role starts the router with no worker and registers the deployed instances through its "
                     "worker API; list servers in sglang_servers instead",
}
# Asked of the installed router's own parser, with the planned flags as its arguments; it says
# in one line what is wrong and what to do (argparse's usage text left out)
_FLAG_CHECK = """\
import contextlib, io, sys
try:
    from sglang_router.launch_router import parse_router_args
except ImportError as err:
    sys.exit(f"{{sys.executable}} cannot import sglang_router ({{err}}): " + {python_fix!r})
said = io.StringIO()
try:
    with contextlib.redirect_stderr(said):
        parse_router_args(sys.argv[1:])
except SystemExit as err:
    if err.code:
        lines = [line for line in said.getvalue().splitlines() if line.strip()]
        sys.exit(f"sglang-router refuses the flags ({{lines[-1] if lines else err.code}}): correct "
                 "sglang_router_extra_args, or the role variable of that flag")
"""


class RouterPlanError(ValueError):
    """Bad router input: one line per problem, each naming the variable, its value and the fix."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("the router cannot be planned (nothing was changed):\n  - " + "\n  - ".join(problems))
        self.problems = problems


def python_fix(version: str) -> str:
    """What to do about a router Python that is not there."""
    return (f"install sglang-router=={version} there (in a checkout of this collection: `make router`), or set "
            f"sglang_router_install: true to have the role pip-install it into sglang_router_venv, or point "
            "sglang_router_python at a Python that has sglang-router")


@dataclass(frozen=True)
class RouterRequest:
    """The router role's inputs, checked and typed."""

    version: str
    install: bool
    venv: str
    venv_python: str
    python: str
    base_dir: str
    user: str
    group: str
    service_manager: str
    host: str
    port: int
    prometheus_host: str
    prometheus_port: int
    policy: str
    health_check_interval: int
    health_check_timeout: int
    health_failure_threshold: int
    health_success_threshold: int
    health_check_endpoint: str
    retry_max_retries: int
    circuit_breaker: bool
    pd_disaggregation: bool
    cb_failure_threshold: int
    cb_timeout: int
    request_timeout: int
    shutdown_grace_period: int
    log_level: str
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    ready_timeout: int = 60
    api_key_set: bool = False

    @classmethod
    def from_vars(cls, values: Mapping[str, Any], api_key: str | None = None) -> RouterRequest:
        """From the role's variables (by their names, ``VARIABLES``); RouterPlanError naming
        every bad one at once."""
        problems: list[str] = []
        fields: dict[str, Any] = {}
        for name, variable in VARIABLES.items():
            if variable not in values:
                problems.append(f"{variable} is not set (the role's defaults set it: is the role's defaults/main.yml "
                                "loaded?)")
                continue
            try:
                fields[name] = _convert(name, values[variable])
            except ValueError as err:
                problems.append(f"{variable}={values[variable]!r}: {err}")
        problems += _rules(fields)
        if problems:
            raise RouterPlanError(problems)
        return cls(**fields, api_key_set=bool(api_key))

    @property
    def interpreter(self) -> str:
        """The Python that runs the router."""
        return self.python or f"{self.venv.rstrip('/')}/bin/python"


_INTS = {"port", "prometheus_port", "health_check_interval", "health_check_timeout", "health_failure_threshold",
         "health_success_threshold", "retry_max_retries", "cb_failure_threshold", "cb_timeout", "request_timeout",
         "shutdown_grace_period", "ready_timeout"}
_BOOLS = {"install", "circuit_breaker", "pd_disaggregation"}
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _convert(name: str, value: Any) -> Any:
    """One variable's value as its field's type (ValueError saying the rule)."""
    if name in _INTS:
        if isinstance(value, bool) or value is None or str(value).strip() == "":
            raise ValueError("must be a whole number")
        try:
            return int(str(value).strip())
        except ValueError:
            raise ValueError("must be a whole number") from None
    if name in _BOOLS:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError("must be true or false")
    if name == "extra_args":
        if value is None or value == "":
            return ()
        if not isinstance(value, (list, tuple)):
            raise ValueError("must be a list of argv words, for example ['--max-payload-size', '1048576']")
        return tuple(str(word) for word in value)
    if name == "env":
        if value is None or value == "":
            return {}
        if not isinstance(value, Mapping):
            raise ValueError("must be a mapping of environment variable names to values")
        return {str(k): str(v) for k, v in value.items()}
    return "" if value is None else str(value)


def _rules(f: Mapping[str, Any]) -> list[str]:
    """Rules between and within fields; a field whose value could not be converted (not in
    ``f``) is skipped, so that every other problem is still named."""
    problems = []
    for name, choices in (("service_manager", SERVICE_MANAGERS), ("policy", POLICIES), ("log_level", LOG_LEVELS)):
        if name in f and f[name] not in choices:
            problems.append(f"{VARIABLES[name]}={f[name]!r}: must be one of {', '.join(choices)}")
    for name in ("port", "prometheus_port"):
        if name in f and not 1 <= f[name] <= 65535:
            problems.append(f"{VARIABLES[name]}={f[name]}: must be a TCP port (1-65535)")
    if "port" in f and f["port"] == f.get("prometheus_port"):
        problems.append(f"sglang_router_port and sglang_router_prometheus_port are both {f['port']}: the router "
                        "listens on both, so they must differ")
    for name in ("health_check_interval", "health_check_timeout", "health_failure_threshold",
                 "health_success_threshold", "request_timeout", "cb_failure_threshold", "cb_timeout", "ready_timeout"):
        if name in f and f[name] < 1:
            problems.append(f"{VARIABLES[name]}={f[name]}: must be at least 1")
    for name in ("retry_max_retries", "shutdown_grace_period"):
        if name in f and f[name] < 0:
            problems.append(f"{VARIABLES[name]}={f[name]}: must not be negative")
    if f.get("host") == "":
        problems.append("sglang_router_host='': give the address the router listens on (127.0.0.1, 0.0.0.0, ...)")
    if "base_dir" in f and not f["base_dir"].startswith("/"):
        problems.append(f"sglang_router_base_dir={f['base_dir']!r}: must be an absolute path")
    if f.get("install") and not f.get("venv", "/").startswith("/"):
        problems.append(f"sglang_router_venv={f['venv']!r}: must be an absolute path")
    for word in f.get("extra_args", ()):
        flag = word.split("=", 1)[0]
        if flag in FORBIDDEN_EXTRA:
            problems.append(f"sglang_router_extra_args has {flag}: {FORBIDDEN_EXTRA[flag]}")
    for key in f.get("env", {}):
        if not key.replace("_", "a").isalnum() or key[:1].isdigit() or key == API_KEY_ENV:
            problems.append(f"sglang_router_env has {key!r}: not an environment variable name the role may set")
    return problems


def argv(req: RouterRequest) -> list[str]:
    """The router's command line after the interpreter (never the API key: see ``API_KEY_ENV``)."""
    words = ["--host", req.host,
             "--port", str(req.port),
             "--policy", req.policy,
             "--prometheus-host", req.prometheus_host,
             "--prometheus-port", str(req.prometheus_port),
             "--health-check-interval-secs", str(req.health_check_interval),
             "--health-check-timeout-secs", str(req.health_check_timeout),
             "--health-failure-threshold", str(req.health_failure_threshold),
             "--health-success-threshold", str(req.health_success_threshold),
             "--health-check-endpoint", req.health_check_endpoint,
             "--retry-max-retries", str(req.retry_max_retries),
             "--request-timeout-secs", str(req.request_timeout),
             "--shutdown-grace-period-secs", str(req.shutdown_grace_period),
             "--log-level", req.log_level]
    if req.pd_disaggregation:  # pairs prefill and decode workers (their worker_type and bootstrap_port)
        words.append("--pd-disaggregation")
    if req.circuit_breaker:
        words += ["--cb-failure-threshold", str(req.cb_failure_threshold),
                  "--cb-timeout-duration-secs", str(req.cb_timeout)]
    else:
        words.append("--disable-circuit-breaker")
    return words + list(req.extra_args)


def flag_check(req: RouterRequest, words: list[str]) -> list[str]:
    """The command that asks the installed router's own parser about ``words``."""
    return [req.interpreter, "-c", _FLAG_CHECK.format(python_fix=python_fix(req.version)), *words]


def preflight(req: RouterRequest, layout: Mapping[str, Any], words: list[str]) -> dict[str, Any]:
    """The arguments of module ``llmops.sglang.preflight`` for the router's host: both ports free
    or held by this router (its folder), its Python there (with ``install: false``; with
    ``install: true`` the Python that creates the venv), and its flags accepted by its own
    parser (asked when its Python is there)."""
    fix_ports = "or choose another sglang_router_port / sglang_router_prometheus_port"
    spec: dict[str, Any] = {
        "ports": [{"port": req.port, "instance": "router", "what": "HTTP", "fix": fix_ports},
                  {"port": req.prometheus_port, "instance": "router", "what": "Prometheus", "fix": fix_ports}],
        "router_dir": layout["paths"]["dir"],
        "service_manager": req.service_manager,
        "executables": [],
        "commands": [{"argv": flag_check(req, words),
                      # its own message names the problem and the fix
                      "what": "the router's flags, as the installed sglang-router parses them",
                      # a missing Python is named by the executables check (install: false), or the
                      # role installs it in this run and asks its parser then (install: true)
                      "missing_ok": True,
                      # a pass is kept in the router's folder: the same flags, the same installed
                      # router are not asked again (its Python's start and import are the slowest
                      # part of a no-change router plan)
                      "remember": f"{layout['paths']['dir']}/.flags-accepted"}],
    }
    if req.install:
        spec["executables"].append({"path": req.venv_python, "what": "the Python that creates the router's venv",
                                    "fix": "install python3 (with its venv module), or set sglang_router_venv_python"})
    else:
        spec["executables"].append({"path": req.interpreter, "what": "the router's Python",
                                    "fix": python_fix(req.version)})
        if req.user:
            spec["user"] = req.user
    return spec


def plan(req: RouterRequest, host_address: str | None = None) -> dict[str, Any]:
    """The router's plan: what the role installs, renders, starts and waits for."""
    layout = _layout.router_layout(req.base_dir, req.host, req.port, host_address)
    words = argv(req)
    return {
        "version": req.version,
        "install": req.install,
        "python": req.interpreter,
        "argv": words,
        "flag_check": flag_check(req, words),
        "description": f"sglang-router {req.version} on {req.host}:{req.port}, policy {req.policy}",
        "env": dict(sorted(req.env.items())),
        # the env file's variable that holds sglang_api_key when it is set (the key is never here)
        "api_key_env": API_KEY_ENV,
        "api_key_set": req.api_key_set,
        "paths": layout["paths"],
        "unit": layout["unit"],
        "service": layout["service"],
        "connect_url": layout["connect_url"],
        "advertise_url": layout["advertise_url"],
        "match": layout["match"],
        "stop_timeout": req.shutdown_grace_period + STOP_MARGIN_S,
        "ready_timeout": req.ready_timeout,
        # files and processes: "" = the connecting user (the role passes omit)
        "user": req.user,
        "group": req.group if req.user else "",
        # the systemd unit's User= and Group=
        "unit_user": req.user or "root",
        "unit_group": req.group if req.user else "root",
        "service_manager": req.service_manager,
        "preflight": preflight(req, layout, words),
    }
