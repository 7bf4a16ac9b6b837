#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.preflight: a thin shell over module_utils/_server/preflight.py."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight
short_description: Check on a host that planned SGLang instances can start, before anything stops
version_added: "0.2.0"
description:
  - Run after the plan and before any change to the host, so that a deploy never stops healthy
    servers for a configuration that cannot start.
  - Every port in O(ports) must be free, or held by a server of the deployment under
    O(deployment_dir) (those are stopped before their replacements start). A port held by any
    other process fails the check, naming that process (pid and command line).
  - Every file in O(files) must exist and every program in O(executables) must be executable.
  - Every command in O(commands) must exit 0 (for example a program's own check of the flags it
    will be started with).
  - Returns the service manager to use (O(service_manager), C(auto) resolved on the host).
  - All problems are reported at once. Changes nothing.
author:
  - llmops.sglang contributors (@llmops)
options:
  ports:
    description: The ports the instances will listen on.
    type: list
    elements: dict
    default: []
    suboptions:
      port:
        description: The TCP port.
        type: int
        required: true
      instance:
        description: The instance that needs it.
        type: str
        required: true
      what:
        description: What the port is for (C(HTTP), C(NCCL)).
        type: str
        default: HTTP
      fix:
        description: What to do when another program holds it (the message says "stop it, " and then this).
        type: str
      ours_dir:
        description:
          - A folder whose service may hold the port (a process working in that folder, for
            example the storage tier's master the role runs beside the instances).
        type: path
  deployment_dir:
    description: The deployment's base folder; ports held by its instances are not a problem.
    type: path
  router_dir:
    description:
      - The folder of a router of the role C(llmops.sglang.router) (C(<base>/router)); ports held by
        that router are not a problem (its pid file's process group, its unit
        C(sglang-router.service), or a process working in that folder).
    type: path
  service_manager:
    description:
      - The service manager asked for; V(auto) is resolved on the host (V(systemd) where PID 1 is
        systemd and C(/run/systemd/system) exists, else V(process), the rule of
        M(llmops.sglang.host_facts)) and returned as RV(service_manager).
    type: str
    choices: [auto, systemd, process]
    default: auto
  subject:
    description: What cannot start, for the failure message.
    type: str
    default: the planned instances
  user:
    description:
      - The user the servers run as; every program in O(executables) must be runnable by that
        user (search permission on its folders, execute permission on the file).
    type: str
  files:
    description: Files that must exist.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      what:
        description: What it is, for the message.
        type: str
        default: file
      fix:
        description: What to do when it is missing.
        type: str
  folders:
    description:
      - Folders the run makes or writes (an instance's HiCache storage folder). The folder, or where
        it does not exist yet the closest folder above it, must be writable by the connecting user
        (who makes it) on a file system mounted read-write.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The folder.
        type: path
        required: true
      what:
        description: What it is, for the message.
        type: str
        default: folder
      fix:
        description: What to do when it cannot be made or written.
        type: str
  executables:
    description: Programs that must be executable files.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The program.
        type: str
        required: true
      what:
        description: What it is, for the message.
        type: str
        default: program
      fix:
        description: What to do when it is missing.
        type: str
  commands:
    description:
      - Commands that must exit 0, run as the connecting user without a shell; a failure reports
        the last lines of what the command wrote.
    type: list
    elements: dict
    default: []
    suboptions:
      argv:
        description: The command and its arguments.
        type: list
        elements: str
        required: true
      what:
        description: What it checks, for the message.
        type: str
        default: command
      fix:
        description: What to do when it fails.
        type: str
      missing_ok:
        description: Skip the command when its program is not there (it is installed later in the run).
        type: bool
        default: false
      env:
        description: Variables added to the command's environment (the servers' own, for example).
        type: dict
        default: {}
      remember:
        description:
          - A file where a pass is recorded (not in check mode, and only where its folder exists) -
            a digest of the argv, the program (real path, size, modification time) and the
            modification times of the C(lib/python*/site-packages) folders beside it. A command
            whose digest the file holds is not run again - the same argv was accepted by the same
            program with the same packages installed; any change to one of them runs it.
        type: path
  packages:
    description:
      - Not a check - asks whether the venv the role installs into holds these requirements
        already (read from its C(*.dist-info) metadata, nothing run), returned as
        RV(packages_current); the role then runs pip only when it would change something.
    type: dict
    suboptions:
      venv:
        description: The virtual environment.
        type: path
        required: true
      requirements:
        description: The pip requirements the role installs (only exact pins C(name==version) can be current).
        type: list
        elements: str
        required: true
attributes:
  check_mode:
    description: Only reads; runs in check mode too.
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
notes:
  - Linux only (C(/proc/net/tcp), C(/proc/<pid>/fd)). Run as root to see the holders of every socket;
    a holder the user cannot see is reported as such.
"""

EXAMPLES = r"""
- name: Check that the plan can start before anything stops
  llmops.sglang.preflight:
    deployment_dir: /opt/sglang
    ports:
      - {port: 30000, instance: gpu0}
      - {port: 31000, instance: gpu0, what: NCCL}
    files:
      - {path: /models/Qwen3.6-27B/config.json, what: the model's config, fix: set sglang_model_path}
    executables:
      - {path: /opt/sglang/venv/bin/python, what: the server's Python}

- name: Check that the router can start on its ports (its own running router excepted)
  llmops.sglang.preflight:
    subject: the router
    router_dir: /opt/sglang-router/router
    ports:
      - {port: 8000, instance: router, fix: or choose another sglang_router_port}
    executables:
      - {path: /opt/sglang-router/venv/bin/python, what: the router's Python, fix: run make router}
    commands:
      - argv: [/opt/sglang-router/venv/bin/python, -c, "import sglang_router"]
        what: the router's installation
  register: __preflight
"""

RETURN = r"""
problems:
  description: What would keep the instances from starting (empty when none).
  returned: always
  type: list
  elements: str
  sample:
    - >-
      port 30000 (HTTP port of instance gpu0) is held by pid 4242 (nginx - master process), which
      is not this deployment's - stop it, or choose other ports (sglang_base_port, sglang_nccl_port_base)
packages_current:
  description:
    - With O(packages), whether the venv holds every requirement already (each an exact pin
      C(name==version), at that version), so that pip would change nothing.
  returned: with O(packages)
  type: bool
service_manager:
  description: The service manager to use (O(service_manager), with V(auto) resolved on the host).
  returned: always
  type: str
  sample: process
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._server.preflight import (
    check_commands,
    check_folders,
    check_paths,
    check_ports,
    packages_current,
    service_manager,
)
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("preflight"),
        supports_check_mode=True,
    )
    params = module.params
    problems = check_paths(params["files"], params["executables"], params["user"]) \
        + check_ports(params["ports"], params["deployment_dir"], router_dir=params["router_dir"]) \
        + check_commands(params["commands"], record=not module.check_mode) \
        + check_folders(params["folders"])
    manager = service_manager(params["service_manager"])
    if problems:
        module.fail_json(msg=f"{params['subject']} cannot start on this host ({len(problems)} problem(s)); "
                             "nothing was changed:\n  - " + "\n  - ".join(problems), problems=problems,
                         service_manager=manager)
    extra = {}
    if params["packages"]:
        extra["packages_current"] = packages_current(params["packages"]["venv"], params["packages"]["requirements"])
    module.exit_json(changed=False, problems=[], service_manager=manager, **extra)


if __name__ == "__main__":
    main()
