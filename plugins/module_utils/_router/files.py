# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The router's files, rendered from its plan and written in one pass (module
llmops.sglang.router_files).

Its base folder (0755, the connection's user), its folder (0750), its log (0600, created empty,
content and times kept), its environment file (0600: the plan's environment and the API key
under the plan's ``api_key_env``), its launch script (0750, checked with ``bash -n`` before it is
written) and, with the systemd backend, its unit (0644, root). Each is compared with what is on
the host first and written only when its content, mode or owner differ, atomically
(``_serverfiles.Writer``). A changed environment, launch script or unit is what restarts the
router; a changed unit also needs systemd to read it again. In check mode nothing is written.

The plan (``plugins/plugin_utils/_routerplan.py``) decides; this file renders its fields.
Stdlib only; runs on the host (Python >= 3.10).
"""
from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._detached.identity import status
from ansible_collections.llmops.sglang.plugins.module_utils._detached.spec import ServiceSpec
from ansible_collections.llmops.sglang.plugins.module_utils._server.files import Owner, Writer

HEADER = "# Ansible managed (llmops.sglang router role): edits here are overwritten by the next deploy"
UNIT_DIR = "/etc/systemd/system"

# Hands the key to the router's own launcher after parsing: sglang-router takes it only as
# --api-key, which would show it in /proc/<pid>/cmdline (readable by every local user).
_LAUNCHER = """\
import os
import sys

import setproctitle

setproctitle.setproctitle("{match}")
from sglang_router.launch_router import launch_router, parse_router_args

router_args = parse_router_args(sys.argv[1:])
key = os.environ.pop("{api_key_env}", "")
if key:
    router_args.api_key = key
launch_router(router_args)
"""


def env_text(plan: Mapping[str, Any], api_key: str) -> str:
    """The router's environment file (sourced by its launch script with ``set -a``)."""
    lines = [HEADER, "# Environment of the SGLang router (mode 0600: holds its API key)."]
    env = plan.get("env") or {}
    lines += [f"{key}={shlex.quote(str(env[key]))}" for key in sorted(env)]
    if plan.get("api_key_set") and api_key:
        lines.append(f"{plan['api_key_env']}={shlex.quote(api_key)}")
    return "\n".join(lines) + "\n"


def launch_text(plan: Mapping[str, Any]) -> str:
    """The router's launch script: its environment, then its own launcher with the plan's argv."""
    launcher = _LAUNCHER.format(match=plan["match"], api_key_env=plan["api_key_env"])
    lines = [
        "#!/usr/bin/env bash",
        HEADER,
        f"# The SGLang router: {plan['description']}.",
        "# It starts with no worker: workers are added and removed while it runs, through its worker API",
        "# (llmops.sglang.router_workers), never here. Start it through the service manager, not by",
        "# hand; by hand it runs in the foreground.",
        "set -euo pipefail",
        "set -a",
        "# shellcheck disable=SC1091",
        f". {shlex.quote(plan['paths']['env_file'])}",
        "set +a",
        "args=(",
        *(f"  {shlex.quote(str(arg))}" for arg in plan.get("argv") or []),
        ")",
        "# sglang-router takes its API key only as --api-key, which would show it in the process's command",
        "# line (/proc/<pid>/cmdline, readable by every local user). So the key stays in the environment",
        f"# (the 0600 env file, {plan['api_key_env']}) and these lines hand it to the router's own",
        "# launcher (sglang_router.launch_router: parse_router_args, then launch_router) after parsing;",
        '# the rest is `python -m sglang_router.launch_router "${args[@]}"`.',
        f"exec {shlex.quote(plan['python'])} -c {shlex.quote(chr(10) + launcher)} \"${{args[@]}}\"",
    ]
    return "\n".join(lines) + "\n"


def unit_text(plan: Mapping[str, Any]) -> str:
    """The router's systemd unit (systemctl status <unit>)."""
    paths = plan["paths"]
    return "\n".join([
        HEADER,
        f"# The SGLang router: systemctl status {plan['unit'].removesuffix('.service')}",
        "[Unit]",
        "Description=SGLang router (llmops.sglang)",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=exec",
        f"User={plan['unit_user']}",
        f"Group={plan['unit_group']}",
        f"WorkingDirectory={paths['dir']}",
        f"ExecStart={paths['launch_script']}",
        "KillMode=control-group",
        "KillSignal=SIGTERM",
        "# it lets running requests finish for sglang_router_shutdown_grace_period seconds",
        f"TimeoutStopSec={plan['stop_timeout']}",
        "Restart=on-failure",
        "RestartSec=5",
        "LimitNOFILE=1048576",
        f"StandardOutput=append:{paths['log_file']}",
        f"StandardError=append:{paths['log_file']}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]) + "\n"


@dataclass
class RouterOutcome:
    """What a pass changed (or would change, in check mode)."""

    changed: list[str] = field(default_factory=list)  # paths
    restart: bool = False       # the environment, launch script or unit changed
    unit_changed: bool = False  # systemd must read the unit again
    diffs: list[dict[str, str]] = field(default_factory=list)


def running(plan: Mapping[str, Any], backend: str) -> bool:
    """Whether the router runs as its service manager should have it, so that starting it would
    change nothing: the process backend's pid file names its live process (one found only by its
    folder is not: a start rewrites its pid file), or the systemd unit is active and enabled."""
    if backend == "systemd":
        unit = str(plan["unit"])
        checks = (["systemctl", "is-active", "--quiet", unit], ["systemctl", "is-enabled", "--quiet", unit])
        try:
            return all(subprocess.run(argv, capture_output=True, check=False, timeout=30).returncode == 0
                       for argv in checks)
        except (OSError, subprocess.SubprocessError):
            return False
    paths = plan["paths"]
    found = status(ServiceSpec(name=str(plan["service"]), command=[str(paths["launch_script"])],
                               pid_file=str(paths["pid_file"]), log_file=str(paths["log_file"]),
                               chdir=str(paths["dir"]), match=str(plan["match"])))
    return found.running and not found.adopted


def write_router(plan: Mapping[str, Any], *, base_dir: str, api_key: str, backend: str, check: bool,
                 unit_dir: str = UNIT_DIR, unit_owner: Owner | None = None) -> RouterOutcome:
    """The router's folders and files (see the module docstring); the unit is root's unless
    ``unit_owner`` says otherwise."""
    paths = plan["paths"]
    outcome = RouterOutcome()
    writers = []
    if base_dir:
        base = Writer(Owner(), check)
        base.directory(base_dir, 0o755)
        writers.append(base)
    files = Writer(Owner(plan.get("user") or "", plan.get("group") or ""), check)
    writers.append(files)
    files.directory(paths["dir"], 0o750)
    files.touch(paths["log_file"], 0o600)
    touched = files.content(paths["env_file"], env_text(plan, api_key), 0o600, secret=True)
    touched = files.content(paths["launch_script"], launch_text(plan), 0o750, validate=["bash", "-n"]) or touched
    if backend == "systemd":
        unit = Writer(unit_owner or Owner("root", "root"), check)
        writers.append(unit)
        outcome.unit_changed = unit.content(os.path.join(unit_dir, plan["unit"]), unit_text(plan), 0o644)
        touched = touched or outcome.unit_changed
    for writer in writers:
        outcome.changed += writer.outcome.changed
        outcome.diffs += writer.outcome.diffs
    outcome.restart = touched
    return outcome
