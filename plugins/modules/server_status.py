#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: server_status
short_description: Read a host's SGLang deployment and report the state of its instances
version_added: "0.1.0"
description:
  - Reads the deployment manifest (C(deployment.json) under O(base_dir)) written by the
    C(llmops.sglang.server) role. A manifest of an older schema is read as the current one; a
    missing or unreadable manifest is rebuilt from the instance folders under O(base_dir)
    (their launch scripts and pid files), with a warning, so that servers that run are still
    found.
  - Any instance folder with a live process that the manifest does not list (a deploy interrupted
    after starting it) is part of the deployment all the same - added to RV(manifest)'s instances
    with C(in_manifest=false), named in RV(unlisted), with a warning - so that status reports it,
    C(stop.yml) stops it and the next deploy replaces or removes it.
  - Reports the host's run lock (M(llmops.sglang.run_lock)) in RV(run_lock) - while a deploy, stop
    or tune holds it, what this module reads may change before that run ends.
  - With O(probe=true), asks each instance for C(/health) and its server info (C(/server_info),
    falling back to C(/get_server_info) on older releases) and reports whether it is up, its
    process state from the pid file, the SGLang version, the effective C(max_running_requests)
    (after SGLang's own resets) and the average speculative accept length.
options:
  base_dir:
    description: The deployment's base folder on the host (C(sglang_base_dir)).
    type: path
    required: true
  probe:
    description: Ask every instance over HTTP; V(false) only reads the manifest, the pid files and the processes.
    type: bool
    default: true
  timeout:
    description: Seconds per request.
    type: float
    default: 10
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.server_api
attributes:
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: full
"""

EXAMPLES = r"""
- name: Status of every instance on the host
  llmops.sglang.server_status:
    base_dir: /opt/sglang
  register: st

- name: Only the manifest (no HTTP)
  llmops.sglang.server_status:
    base_dir: /opt/sglang
    probe: false
  register: deployment
"""

RETURN = r"""
manifest_found:
  description: Whether a deployment was found (a manifest, or instance folders to rebuild it from).
  returned: always
  type: bool
manifest_state:
  description:
    - V(ok) (read), V(missing) or V(unreadable) (rebuilt from the instance folders), V(absent)
      (neither a manifest nor an instance folder).
  returned: always
  type: str
manifest_problem:
  description: What was wrong with the manifest ('' when it was read).
  returned: always
  type: str
manifest:
  description:
    - The manifest in the current schema (see docs/deploy.md), or the one rebuilt from the
      instance folders; null when nothing was found.
  returned: always
  type: dict
instances:
  description: One entry per instance of the manifest (only with O(probe=true)).
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Instance name., type: str}
    in_manifest: {description: The manifest lists it (false - a live instance folder it does not list)., type: bool}
    url: {description: Base URL for clients on this host., type: str}
    up: {description: C(/health) answered 200., type: bool}
    health: {description: HTTP status of C(/health) (0 = no answer)., type: int}
    process:
      description:
        - V(running) (live processes in its process group or session, or in its systemd unit's
          control group), V(dead) (a pid file naming no live server), V(stopped) (neither).
      type: str
    pid: {description: The pid recorded in the manifest., type: int}
    pids:
      description: Its live processes (the leader, the scheduler and detokenizer children).
      type: list
      elements: int
    version: {description: SGLang version from server info., type: str}
    max_running_requests: {description: Effective limit from server info., type: int}
    avg_spec_accept_length: {description: Average speculative accept length of DP rank 0., type: float}
    last_gen_throughput: {description: Last generation throughput (tokens/s) reported., type: float}
    server_info_path: {description: Which server-info endpoint answered., type: str}
running:
  description:
    - Instances whose folder has live processes (listed in the manifest or not), also without O(probe).
  returned: always
  type: list
  elements: str
unlisted:
  description: Instance folders with live processes that the manifest does not list (added to RV(manifest) all the same).
  returned: always
  type: list
  elements: str
run_lock:
  description:
    - The host's run lock - C(held) (bool), C(holder) (the run holding it - controller host, pid,
      playbook, since when), C(age_s) (seconds since its lease was renewed), C(expired),
      C(message) (for people; '' when no run holds it).
  returned: always
  type: dict
lines:
  description:
    - The state for people, a line each - the run lock's holder when a run holds it, the
      manifest's problem, then per instance (with O(probe)) its name, C(up) or C(DOWN), URL,
      process, SGLang version, effective C(max_running_requests), accept length, and a mark on
      an instance the manifest does not list; C(no deployment on this host) without one.
  returned: always
  type: list
  elements: str
  sample: ["gpu0: up http://127.0.0.1:30000 process=running sglang=0.5.17 max_running_requests=48"]
all_up:
  description: Every instance answered C(/health) with 200.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._server import manifest as _manifest
from ansible_collections.llmops.sglang.plugins.module_utils._server import runlock as _runlock
from ansible_collections.llmops.sglang.plugins.module_utils._server.deploy import (
    instance_status,
    status_lines,
)
from ansible_collections.llmops.sglang.plugins.module_utils._server.hostfacts import read_service_manager
from ansible_collections.llmops.sglang.plugins.module_utils._server.ownership import find_ownership
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("server_status"),
        supports_check_mode=True,
    )
    params = module.params
    # every instance folder with a live process is part of the deployment, listed or not
    ownership = find_ownership(params["base_dir"])
    running = ownership.running()
    found = _manifest.load(params["base_dir"], read_service_manager("/proc"), running=running)
    if found["problem"]:
        module.warn(found["problem"])
    manifest = found["manifest"]
    try:
        lock = _runlock.query(params["base_dir"])
    except _runlock.RunLockError as exc:
        lock = {"held": None, "holder": None, "message": str(exc)}
    results = []
    if manifest is not None and params["probe"]:
        for inst in manifest.get("instances", []):
            procs = ownership.instances.get(inst["name"])
            res = instance_status(inst, params["api_key"], params["timeout"],
                                  pids=procs.pids if procs is not None else [])
            res["in_manifest"] = inst.get("in_manifest", True)
            res["candidate"] = bool(inst.get("candidate"))
            results.append(res)
    module.exit_json(changed=False, manifest_found=manifest is not None, manifest_state=found["state"],
                     manifest_problem=found["problem"], manifest=manifest, instances=results, running=sorted(running),
                     unlisted=found["unlisted"], run_lock=lock,
                     lines=status_lines(manifest is not None, results, str(lock.get("message") or ""), found["problem"]),
                     all_up=bool(results) and all(r["up"] for r in results))


if __name__ == "__main__":
    main()
