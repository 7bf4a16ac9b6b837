#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Documentation of the action llmops.sglang.server_plan (plugins/action/server_plan.py does the
work on the controller, plugins/plugin_utils/_plan/server.py computes the plan; nothing of this
file runs)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: server_plan
short_description: Plan one host's SGLang servers in one task, from one read of the host
version_added: "0.3.0"
description:
  - Reads the host once, through one run of M(llmops.sglang.host_facts) on it - GPUs, memory,
    service manager, this deployment's live instances and its manifest (the current deployment,
    as M(llmops.sglang.server_status) with O(llmops.sglang.server_status#module:probe=false)
    reads it) and the model's C(config.json).
  - Reads the C(llmops.sglang.server) role's C(sglang_*) variables from the task's variables
    through one mapping (C(plugins/plugin_utils/_plan/taskvars.py)), so it is used inside that
    role (C(tasks_from=plan.yml), or the role itself) where the role's defaults apply.
  - Adds back the HiCache memory the deployment's running instances pin, plans the instances on
    the controller, checks every argv against the release's flag schema, resolves the service
    backend (C(auto)), and returns the whole plan as its result (register it) - instances with
    argv, full environment, paths and readiness waits, and the Python, the packages to install, the
    pre-flight checks, the backend, the previous deployment.
  - With O(preflight=true), then runs M(llmops.sglang.preflight) on the host with the plan's
    checks (ports, the model's config, the Python), so that the deploy gate is one task.
  - With O(plan), returns that plan (made by this action earlier in the same run for the same
    host) without reading the host again, so that C(playbooks/deploy.yml) deploys exactly the plan its
    gate checked.
  - A plan that cannot be made fails the task with the plan's own message (the value, the
    variable, the fix); the host has not changed.
  - Secret values are never in the plan; C(secrets) and C(env_secrets) name the variables that
    hold them.
  - Action plugin; this file is its documentation.
author:
  - llmops.sglang contributors (@llmops)
options:
  preflight:
    description: Also run M(llmops.sglang.preflight) with the plan's checks.
    type: bool
    default: false
  show:
    description:
      - Also return RV(plan_summary), what a deploy of the plan would do to each instance and why
        (the server role prints it under C(--check) and C(--tags plan)).
    type: bool
    default: false
  plan:
    description:
      - The registered result of an earlier C(server_plan) task for this host in this run. It is
        returned as it is and nothing is read from the host.
      - A plan made for another host is refused.
    type: dict
attributes:
  action:
    description: Runs on the controller, and the modules it names on the host.
    support: full
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: full
    details: Reads only; the modules it runs support check mode.
  diff_mode:
    description: Nothing to show a difference of.
    support: none
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
    platforms: posix
seealso:
  - module: llmops.sglang.host_facts
  - module: llmops.sglang.preflight
"""

EXAMPLES = r"""
- name: Plan the servers of this host and check on it that the plan can start
  llmops.sglang.server_plan:
    preflight: true
  register: gate_plan

- name: Later in the same run, deploy exactly that plan (the host is not read again)
  llmops.sglang.server_plan:
    plan: "{{ gate_plan }}"
  register: deployed_plan
"""

RETURN = r"""
plan_summary:
  description:
    - With O(show), lines for a reader; the host with its release, profile, engine and services
      (and the HiCache size); per instance C(start) (new, or not running), C(restart) (the flags
      whose values change, C(environment changed), the release, the model's revision) or
      C(stays), with its GPUs, port and command line; the instances of deployment.json the plan no
      longer has (C(stop)); then the counts.
    - Compared with deployment.json as the plan read it; at deploy time the instance's files decide.
  returned: when O(show) is true
  type: list
  elements: str
  sample:
    - "gpu0: restart (--max-running-requests 16 -> 32) - GPU 0, port 30000"
host:
  description: The inventory host the plan is for.
  returned: success
  type: str
release:
  description: The SGLang release the argv was rendered and checked for.
  returned: success
  type: str
profile:
  description: The deployment profile.
  returned: success
  type: str
engine:
  description: C(sglang) or C(sim) (the embedded engine).
  returned: success
  type: str
backend:
  description: The service backend, C(systemd) or C(process) (C(auto) resolved from the host facts).
  returned: success
  type: str
python:
  description: The Python that runs the servers.
  returned: success
  type: str
install:
  description: >-
    What the role installs - enabled, venv, venv_command, packages, extra_args; with O(preflight),
    current (the venv holds every pinned package already: the role skips pip).
  returned: success
  type: dict
owner:
  description: The user and group that own the instances' files (empty strings for the connection's user).
  returned: success
  type: dict
instances:
  description:
    - One per SGLang server of the host - name, gpu_ids, port, nccl_port, connect_url,
      advertise_url, paths, unit, service, rank0, argv, env (the whole environment file but its
      secrets), env_secrets (variable -> role variable holding its value), secrets, settings and
      wait (one entry of M(llmops.sglang.wait_ready)'s instances).
  returned: success
  type: list
  elements: dict
hicache:
  description: The HiCache host-pool arithmetic (null without HiCache).
  returned: success
  type: dict
preflight:
  description: The ports, files and executables M(llmops.sglang.preflight) checks.
  returned: success
  type: dict
previous:
  description: The deployment's manifest before this run (empty when there was none).
  returned: success
  type: dict
running:
  description: Names of the deployment's instances running when the host was read.
  returned: success
  type: list
  elements: str
unit_paths:
  description: The instance paths of the systemd template unit (C(%i) for the instance name).
  returned: success
  type: dict
warnings:
  description: What the plan found worth a look.
  returned: success
  type: list
  elements: str
modules_run:
  description: The modules this task ran on the host, in order (empty when O(plan) was given).
  returned: always
  type: list
  elements: str
"""
