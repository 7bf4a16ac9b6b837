#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.preflight: a thin shell over module_utils/_preflight.py."""
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
  deployment_dir:
    description: The deployment's base folder; ports held by its instances are not a problem.
    type: path
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
"""

RETURN = r"""
problems:
  description: What would keep the instances from starting (empty when none).
  returned: always
  type: list
  elements: str
  sample: ["port 30000 (HTTP port of instance gpu0) is held by pid 4242 (nginx: master process), which is not this deployment's: stop it, or choose other ports (sglang_base_port, sglang_nccl_port_base)"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._preflight import check_paths, check_ports


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "ports": {"type": "list", "elements": "dict", "default": [], "options": {
                "port": {"type": "int", "required": True},
                "instance": {"type": "str", "required": True},
                "what": {"type": "str", "default": "HTTP"},
            }},
            "deployment_dir": {"type": "path"},
            "user": {"type": "str"},
            "files": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True},
                "what": {"type": "str", "default": "file"},
                "fix": {"type": "str"},
            }},
            "executables": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "str", "required": True},
                "what": {"type": "str", "default": "program"},
                "fix": {"type": "str"},
            }},
        },
        supports_check_mode=True,
    )
    params = module.params
    problems = check_paths(params["files"], params["executables"], params["user"]) \
        + check_ports(params["ports"], params["deployment_dir"])
    if problems:
        module.fail_json(msg=f"the planned instances cannot start on this host ({len(problems)} problem(s)); "
                             "nothing was changed:\n  - " + "\n  - ".join(problems), problems=problems)
    module.exit_json(changed=False, problems=[])


if __name__ == "__main__":
    main()
