#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: server_status
short_description: Report the state of the SGLang instances listed in a deployment manifest
version_added: "0.1.0"
description:
  - Reads C(deployment.json) written by the C(llmops.sglang.server) role and asks each
    instance for C(/health) and its server info (C(/server_info), falling back to
    C(/get_server_info) on older releases).
  - Reports per instance whether it is up, its process state from the pid file, the SGLang
    version, the effective C(max_running_requests) (after SGLang's own resets) and the
    average speculative accept length.
options:
  manifest:
    description: Path of the deployment manifest on the host.
    type: path
    required: true
  api_key:
    description: Bearer token when the servers enforce C(--api-key).
    type: str
  timeout:
    description: Seconds per request.
    type: float
    default: 10
author:
  - llmops.sglang contributors (@llmops)
attributes:
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: full
"""

EXAMPLES = r"""
- name: Status of every instance on the host
  llmops.sglang.server_status:
    manifest: /opt/sglang/deployment.json
  register: st
"""

RETURN = r"""
manifest_found:
  description: Whether the manifest exists.
  returned: always
  type: bool
instances:
  description: One entry per instance of the manifest.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Instance name., type: str}
    url: {description: Base URL., type: str}
    up: {description: C(/health) answered 200., type: bool}
    health: {description: HTTP status of C(/health) (0 = no answer)., type: int}
    process: {description: "C(running), C(dead) or C(unknown) from the pid file.", type: str}
    pid: {description: The pid recorded in the manifest., type: int}
    version: {description: SGLang version from server info., type: str}
    max_running_requests: {description: Effective limit from server info., type: int}
    avg_spec_accept_length: {description: Average speculative accept length of DP rank 0., type: float}
    last_gen_throughput: {description: Last generation throughput (tokens/s) reported., type: float}
    server_info_path: {description: Which server-info endpoint answered., type: str}
all_up:
  description: Every instance answered C(/health) with 200.
  returned: always
  type: bool
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._deploy import instance_status


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "manifest": {"type": "path", "required": True},
            "api_key": {"type": "str", "no_log": True},
            "timeout": {"type": "float", "default": 10},
        },
        supports_check_mode=True,
    )
    path = module.params["manifest"]
    if not os.path.exists(path):
        module.exit_json(changed=False, manifest_found=False, instances=[], all_up=False)
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError) as err:
        module.fail_json(msg=f"cannot read deployment manifest {path}: {err}")
    results = [
        instance_status(inst, module.params["api_key"], module.params["timeout"])
        for inst in manifest.get("instances", [])
    ]
    module.exit_json(changed=False, manifest_found=True, instances=results,
                     all_up=bool(results) and all(r["up"] for r in results))


if __name__ == "__main__":
    main()
