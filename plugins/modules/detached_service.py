#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Thin module over the module_utils/_detached package."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: detached_service
short_description: Run a command as a detached, process-group-managed service with a pid file
version_added: 0.1.0
description:
  - Process backend for hosts where systemd is not PID 1 (containers, many GPU clouds).
  - A service is a command (typically one launch script that C(exec)s the SGLang server), a pid
    file and a log file.
  - The command is started in its own session and process group (C(setsid)), with stdin from
    C(/dev/null) and stdout and stderr appended to O(log_file). It survives the end of the SSH
    session that started it. The module returns once the pid file is written and O(start_grace)
    has passed; it never waits for the server.
  - A stop sends SIGTERM to the whole process group (and session), so processes that re-parent
    away from the server (SGLang's scheduler and detokenizer) are reached too; it waits until
    every one of them has exited, up to O(stop_timeout), then sends SIGKILL and waits again.
  - A pid file counts as running only if its pid exists, is not a zombie, has the start time
    (C(/proc/<pid>/stat) field 22) and boot id recorded in the pid file, and, when O(match) is
    set, has O(match) in its command line. A recycled pid or a pid file from before a reboot is
    stale, never mistaken for the server.
  - Line 1 of the pid file is the bare pid; line 2 is a JSON record (pgid, start time, boot id,
    start date, argv). The file is written atomically with mode C(0644).
  - The server's environment is the module's environment, then O(env_file), then O(env), plus
    C(LLMOPS_DETACHED_SERVICE=<name>) as a marker. Values are never put on a command line.
  - If the leader is gone but processes of its group survive (this boot, same service marker),
    they are stopped by O(state=stopped) and before a new start.
  - With O(services), several services are handled in one run of the module (one per GPU of a
    host - one module start instead of one per instance), each as if alone, with the other
    options shared; one that fails does not keep the others from being handled.
  - Linux only (reads C(/proc)).
author:
  - llmops.sglang developers (@llmops)
options:
  name:
    description:
      - Name of the service, used in messages and as the environment marker.
      - Required without O(services).
    type: str
  services:
    description:
      - Several services in one run, instead of O(name), O(command), O(pid_file), O(log_file),
        O(chdir), O(env) and O(env_file) - each item has those keys, the other options apply to
        all. The result is RV(services), one result per item in their order.
    type: list
    elements: dict
    suboptions:
      name:
        description: As O(name).
        type: str
        required: true
      command:
        description: As O(command).
        type: raw
      pid_file:
        description: As O(pid_file).
        type: path
        required: true
      log_file:
        description: As O(log_file).
        type: path
        required: true
      chdir:
        description: As O(chdir).
        type: path
      env:
        description: As O(env).
        type: dict
        default: {}
      env_file:
        description: As O(env_file).
        type: path
  command:
    description:
      - The argv to run, typically a single launch script that C(exec)s the server.
      - A string is split like a shell would split it; no shell is run.
      - Required for O(state=started) and O(state=restarted).
    type: raw
  pid_file:
    description:
      - Path of the pid file. Its folder is created when missing.
      - Required without O(services).
    type: path
  log_file:
    description:
      - Path of the log file that receives stdout and stderr (appended). Its folder is created
        when missing; a new file is owned by O(user)/O(group) with mode C(0640).
      - Required without O(services).
    type: path
  state:
    description:
      - V(started) starts the service unless it is running.
      - V(stopped) stops the whole process group and removes the pid file. Removing a stale pid
        file (no running service) is reported as a change.
      - V(restarted) stops (when running) and starts; always a change.
      - V(status) only reports; it never changes anything.
    type: str
    choices: [started, stopped, restarted, status]
    default: started
  chdir:
    description: Working directory of the service (default the module's working directory).
    type: path
  env:
    description: Environment variables for the service; they override O(env_file).
    type: dict
    default: {}
  env_file:
    description:
      - File of C(KEY=VALUE) lines read by the module on the target (blank lines and C(#)
        comments skipped, an C(export) prefix and matching surrounding quotes removed, no
        expansion). Suited to secrets such as C(HF_TOKEN); keep it mode C(0600).
    type: path
  user:
    description: User to run the service as (name or uid). Needs root (C(become)).
    type: str
  group:
    description: Group to run the service as (default the primary group of O(user)).
    type: str
  umask:
    description: Umask of the service, an octal string such as V('0022').
    type: raw
  match:
    description:
      - Substring that the command line of the tracked pid must contain to count as the
        service, in addition to the recorded start time. The launch script C(exec)s the server,
        so this is part of the server's command line (for example V(sglang.launch_server)),
        not the script's path.
      - On start, after O(start_grace), the module waits (up to 30 seconds) until the
        started leader has C(exec)ed what O(match) names, so that the pid it returns is the
        server's also on a busy host where the exec comes later; a leader that exits first
        fails the start with its log.
    type: str
  stop_timeout:
    description: Seconds to wait for every process of the group to exit after SIGTERM before SIGKILL.
    type: int
    default: 60
  kill_timeout:
    description:
      - Seconds to wait after SIGKILL. Processes that survive it (for example stuck in a GPU
        driver) make the task fail and the pid file is kept.
    type: int
    default: 30
  start_grace:
    description:
      - Seconds to watch the new process after starting; if it exits within them the task
        fails with the tail of its log.
    type: float
    default: 1.0
  restart_changed:
    description:
      - With O(state=started), a running service whose pid file records another command line than
        O(command) is restarted (a change), instead of being left running.
    type: bool
    default: false
extends_documentation_fragment:
  - llmops.sglang.service_log
attributes:
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: full
  diff_mode:
    description: Returns details on what changed, or would change, in diff mode.
    support: none
notes:
  - Where systemd is PID 1, prefer a systemd unit with C(KillMode=control-group).
  - A process that leaves the server's session (C(setsid) of its own) cannot be tracked.
  - A command whose leader exits during O(start_grace), even with status 0 (a script that
    daemonizes itself), is reported as a failure; the launch script must C(exec) the server.
seealso:
  - name: docs/detached_service.md
    description: Design notes in the collection.
    link: https://github.com/llmops/llmops.sglang/tree/main/docs/detached_service.md
"""

EXAMPLES = r"""
- name: Start the SGLang instance on GPU 0
  llmops.sglang.detached_service:
    name: sglang-gpu0
    command: [/opt/llmops/sglang/gpu0/launch.sh]
    pid_file: /run/llmops-sglang/gpu0.pid
    log_file: /var/log/llmops-sglang/gpu0.log
    env_file: /etc/llmops-sglang/secrets.env
    env:
      CUDA_VISIBLE_DEVICES: "0"
    match: sglang.launch_server
    user: sglang
    umask: "0027"
  become: true

- name: Start the instances of GPU 0 and 1 in one module run
  llmops.sglang.detached_service:
    services:
      - name: sglang-gpu0
        command: [/opt/llmops/sglang/gpu0/launch.sh]
        chdir: /opt/llmops/sglang/gpu0
        pid_file: /opt/llmops/sglang/gpu0/server.pid
        log_file: /opt/llmops/sglang/gpu0/server.log
      - name: sglang-gpu1
        command: [/opt/llmops/sglang/gpu1/launch.sh]
        chdir: /opt/llmops/sglang/gpu1
        pid_file: /opt/llmops/sglang/gpu1/server.pid
        log_file: /opt/llmops/sglang/gpu1/server.log
    match: sglang.launch_server
  register: __sglang_started

- name: Report whether it runs (read-only)
  llmops.sglang.detached_service:
    name: sglang-gpu0
    pid_file: /run/llmops-sglang/gpu0.pid
    log_file: /var/log/llmops-sglang/gpu0.log
    state: status
  register: __sglang_status

- name: Stop it, with SIGKILL after two minutes
  llmops.sglang.detached_service:
    name: sglang-gpu0
    pid_file: /run/llmops-sglang/gpu0.pid
    log_file: /var/log/llmops-sglang/gpu0.log
    state: stopped
    stop_timeout: 120
  become: true
"""

RETURN = r"""
name:
  description: Name of the service.
  returned: without O(services)
  type: str
  sample: sglang-gpu0
state:
  description: The requested state.
  returned: without O(services)
  type: str
  sample: started
running:
  description: Whether the service runs after the task (in check mode, as observed now).
  returned: without O(services)
  type: bool
  sample: true
pid:
  description: Pid of the service's leader process (the server, after the script's exec).
  returned: without O(services) (null when not running)
  type: int
  sample: 41234
pgid:
  description: Process group (and session) id of the service.
  returned: without O(services) (null when not running)
  type: int
  sample: 41234
cmdline:
  description: Command line (argv) of the leader process.
  returned: without O(services) (empty when not running)
  type: list
  elements: str
  sample: [/opt/venv/bin/python, -m, sglang.launch_server, --port, "30000"]
started_at:
  description: UTC start time of the leader process (ISO 8601), from /proc.
  returned: without O(services) (null when not running)
  type: str
  sample: "2025-11-30T05:10:00+00:00"
uptime:
  description: Seconds since the leader process started.
  returned: without O(services) (null when not running)
  type: float
  sample: 12.5
group_pids:
  description: Live processes of the service's group and session (for a stale pid file, leftovers).
  returned: without O(services)
  type: list
  elements: int
  sample: [41234, 41290, 41291]
stale:
  description: A pid file exists but describes no running instance of the service.
  returned: without O(services)
  type: bool
  sample: false
log_file:
  description: The log file.
  returned: without O(services)
  type: str
  sample: /var/log/llmops-sglang/gpu0.log
pid_file:
  description: The pid file.
  returned: without O(services)
  type: str
  sample: /run/llmops-sglang/gpu0.pid
stopped_pids:
  description: Every pid that was signalled by a stop (or by the cleanup of leftovers before a start).
  returned: without O(services)
  type: list
  elements: int
  sample: [41234, 41290, 41291]
killed:
  description: SIGKILL was needed because processes outlived O(stop_timeout) after SIGTERM.
  returned: without O(services)
  type: bool
  sample: false
removed_stale_pid_file:
  description: A stale pid file was removed.
  returned: without O(services)
  type: bool
  sample: false
log_tail:
  description: Last O(log_tail_lines) lines of the log written by the failed start (also in C(msg)).
  returned: failure
  type: list
  elements: str
  sample: ["ValueError: --mem-fraction-static must be in (0, 1)"]
services:
  description:
    - With O(services), one result per item, in their order - each with the keys above for that
      service (C(name), C(running), C(pid) ...), C(changed), C(failed) and, for a failed one,
      C(msg) and C(log_tail).
  returned: with O(services)
  type: list
  elements: dict
"""

# Imports follow the documentation blocks, as ansible-test validate-modules requires.
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.llmops.sglang.plugins.module_utils._detached import (  # noqa: E402
    DetachedServiceError,
    ServiceSpec,
    apply,
    normalize_command,
    parse_umask,
)
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec


def _spec(p: dict[str, Any], item: dict[str, Any]) -> ServiceSpec:
    """One service's spec: its own keys from ``item``, the shared options from ``p``."""
    if not isinstance(item["command"], (str, list, type(None))):
        raise DetachedServiceError("command must be a list or a string")
    if p["state"] in ("started", "restarted") and not item["command"]:
        raise DetachedServiceError(f"state is {p['state']} but command is missing")
    # status and stopped need no command; the placeholder is never run.
    command = normalize_command(item["command"]) if item["command"] else [""]
    return ServiceSpec(
        name=item["name"],
        command=command,
        pid_file=item["pid_file"],
        log_file=item["log_file"],
        chdir=item["chdir"],
        env={str(k): "" if v is None else str(v) for k, v in (item["env"] or {}).items()},
        env_file=item["env_file"],
        user=p["user"],
        group=p["group"],
        umask=parse_umask(p["umask"]),
        match=p["match"],
        stop_timeout=float(p["stop_timeout"]),
        kill_timeout=float(p["kill_timeout"]),
        start_grace=float(p["start_grace"]),
        log_tail_lines=int(p["log_tail_lines"]),
        restart_changed=bool(p["restart_changed"]),
    )


def _one(p: dict[str, Any], item: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    """The result of one service (``failed`` with ``msg`` and ``log_tail`` when it failed)."""
    base: dict[str, Any] = {"name": item["name"], "state": p["state"], "log_file": item["log_file"],
                            "pid_file": item["pid_file"]}
    try:
        result = apply(_spec(p, item), p["state"], check_mode=check_mode)
    except DetachedServiceError as exc:
        return {**base, "changed": False, "failed": True, "msg": exc.msg, "log_tail": exc.log_tail}
    st = result.status
    return {
        **base,
        "changed": result.changed,
        "failed": False,
        "msg": result.msg,
        "running": st.running,
        "pid": st.pid,
        "pgid": st.pgid,
        "cmdline": st.cmdline,
        "started_at": st.started_at,
        "uptime": st.uptime,
        "group_pids": st.group_pids,
        "stale": st.stale,
        "stopped_pids": result.stopped_pids,
        "killed": result.killed,
        "removed_stale_pid_file": result.removed_stale_pid_file,
    }


SERVICE_KEYS = ("name", "command", "pid_file", "log_file", "chdir", "env", "env_file")


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("detached_service", no_log={"env": True, "services.env": True}),
        mutually_exclusive=[("services", "name"), ("services", "command"), ("services", "pid_file"),
                            ("services", "log_file"), ("services", "chdir"), ("services", "env_file")],
        required_one_of=[("name", "services")],
        required_by={"name": ("pid_file", "log_file")},
        supports_check_mode=True,
    )
    p = module.params
    if p["services"] is not None:
        results = [_one(p, item, module.check_mode) for item in p["services"]]
        failed = [r for r in results if r["failed"]]
        if failed:
            module.fail_json(msg="; ".join(f"{r['name']}: {r['msg']}" for r in failed),
                             changed=any(r["changed"] for r in results), services=results)
        module.exit_json(changed=any(r["changed"] for r in results), services=results)
    one = _one(p, {key: p[key] for key in SERVICE_KEYS}, module.check_mode)
    if one.pop("failed"):
        one.pop("changed")
        module.fail_json(**one)
    module.exit_json(**one)


if __name__ == "__main__":
    main()
