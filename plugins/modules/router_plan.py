#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Documentation of the action llmops.sglang.router_plan (plugins/action/router_plan.py does the
work on the controller, plugins/plugin_utils/_routerplan.py holds the rules; nothing of this file
runs)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: router_plan
short_description: Plan the SGLang router of a host and check there that it can start, changing nothing
version_added: "0.2.0"
description:
  - Builds the plan of the role C(llmops.sglang.router) on the controller from the task's
    variables (the role's C(sglang_router_*) variables and C(sglang_api_key), read through one
    mapping) - the router's command line, interpreter, environment, files, service names, URLs
    and stop timeout. Every bad variable is named at once, with its value, the rule and the fix.
  - Then runs M(llmops.sglang.preflight) once on the host, before
    anything there changes. Both the router's port and its Prometheus port must be free or held
    by this router (a port held by another program is refused, naming it; the running router is
    not stopped); with C(sglang_router_install=false) the router's Python must be there, with
    C(sglang_router_install=true) the Python that creates its venv; the installed router's own
    parser must accept the flags (skipped while the role has yet to install it). The service
    manager C(auto) is resolved there, once.
  - The API key is not part of the plan; the plan says only under which environment variable
    the role's env file holds it.
author:
  - llmops.sglang contributors (@llmops)
options:
  preflight:
    description:
      - Check on the host that the router can start (ports, Python, flags). V(false) (the role's
        C(stop.yml) and C(status.yml)) only resolves the service manager there.
    type: bool
    default: true
  show:
    description:
      - Print the result (the plan, and its C(summary) - the router, its Python, argv and URL)
        as the task's output, as M(ansible.builtin.debug) would (C(--check), C(--tags plan)).
    type: bool
    default: false
  rollout:
    description:
      - Also check the fleet's rollout, on the controller, before the host is asked anything
        (C(playbooks/deploy.yml)'s gate, through the role's C(plan.yml)). The server hosts are
        those of the group C(sglang_servers) with a server plan in this run (C(__sglang_plan), by
        M(llmops.sglang.server_plan)); their instances in the routers are their rank-0 instances.
      - The capacity floor C(sglang_rollout_min_available), C(sglang_rollout_canary),
        C(sglang_rollout_canary_seconds), C(sglang_rollout_guard_seconds) and
        C(sglang_rollout_estimate) are read from the first of those hosts' variables,
        C(sglang_rollout_instances_at_once) from each (the largest counts), and
        C(sglang_rollout_batch) from the extra vars only, as deploy.yml's play-level C(serial)
        sees it (one set in the inventory is refused). A floor that the batch, a host's
        instances at once or the canary would break fails the task, naming the values and the
        largest batch that keeps it.
      - Returns RV(rollout) and RV(rollout_estimate), the rollout time estimate (printed with
        O(show)); the load time is the longest C(ready_after_s) of the hosts' manifests when one
        was measured. docs/fleet.md "Capacity floor" and "Rollout time estimate".
    type: bool
    default: false
attributes:
  check_mode:
    description: Reads only; runs in check mode too.
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
  action:
    description: Runs on the controller, and one module (M(llmops.sglang.preflight)) on the host.
    support: full
notes:
  - The role runs it in its C(plan.yml) entry point; C(playbooks/deploy.yml) runs that for every
    router in its gate, after the servers' plans and before any host changes.
seealso:
  - module: llmops.sglang.preflight
  - name: docs/fleet.md
    description: The router, its pre-flight and the facts behind the role's defaults.
    link: https://github.com/llmops/llmops.sglang/tree/main/docs/fleet.md
"""

EXAMPLES = r"""
- name: Plan the router and check that it can start on this host (nothing changes)
  llmops.sglang.router_plan:
    rollout: true
  vars:
    sglang_router_port: 8001
  register: __sglang_router_planned
"""

RETURN = r"""
plan:
  description: The router's plan.
  returned: success
  type: dict
  contains:
    python:
      description: The interpreter that runs the router.
      type: str
      sample: /opt/sglang-router/venv/bin/python
    argv:
      description: The router's flags (after C(python -c ...)); never the API key.
      type: list
      elements: str
      sample: [--host, 127.0.0.1, --port, "8000", --policy, cache_aware]
    env:
      description: The extra environment (C(sglang_router_env)), sorted.
      type: dict
    api_key_env:
      description: The env file's variable that holds C(sglang_api_key) ("" without a key).
      type: str
      sample: LLMOPS_SGLANG_ROUTER_API_KEY
    api_key_set:
      description: Whether C(sglang_api_key) is set (the env file then holds it under RV(plan.api_key_env)).
      type: bool
    paths:
      description: The router's folder, launch script, env file, pid file and log.
      type: dict
    connect_url:
      description: Where a client on the router's host reaches it.
      type: str
      sample: http://127.0.0.1:8000
    advertise_url:
      description: Where other hosts reach it (null on loopback only).
      type: str
    backend:
      description: The service manager that runs it (C(systemd) or C(process); C(auto) resolved on the host).
      type: str
      sample: process
    stop_timeout:
      description: Seconds the service manager waits for it to stop (its grace period + 15).
      type: int
      sample: 45
summary:
  description: The router, its Python, its argv and its URL, in a few lines (with O(show)).
  returned: success and O(show)
  type: dict
rollout:
  description: With O(rollout) and a planned server host, the fleet's rollout as checked.
  returned: success and O(rollout)
  type: dict
  contains:
    hosts:
      description: The server hosts planned in this run, in inventory order.
      type: list
      elements: str
    instances:
      description: Each host's instances in the routers (its rank-0 instances).
      type: dict
    batch:
      description: C(sglang_rollout_batch) as deploy.yml's serial sees it (the extra var, else C(100%)).
      type: raw
      sample: 100%
    floor:
      description: >-
        The capacity floor's numbers - instances, floor, out_per_host, requested_hosts, requested_kept,
        max_hosts, max_instances_out, canary, canary_out, min_in_routers.
      type: dict
    load:
      description: The load time the estimate uses (load_s), where it came from (source) and the measurement (measured).
      type: dict
    costs:
      description: The estimate's costs in seconds (C(sglang_rollout_estimate) over its defaults).
      type: dict
rollout_estimate:
  description: The rollout time estimate, one line each (worst case, every instance changed).
  returned: success and O(rollout)
  type: list
  elements: str
  sample:
    - "rollout estimate: 1 hosts x 2 instances, 1 host(s) per batch (1 batches), 1 instance(s) of a host replaced at once"
    - "  load time L 3 min: a default (nothing measured yet: set sglang_rollout_estimate.load_s)"
    - "  total: 9 min 30 s; at least 1 of 2 instances (50 %) stay in the routers"
problems:
  description: The bad variables, one line each (when the plan cannot be made).
  returned: failure
  type: list
  elements: str
"""
