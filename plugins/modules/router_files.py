#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.router_files: a thin shell over module_utils/_router/files.py."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: router_files
short_description: Write the SGLang router's folders and files in one pass, from its plan
version_added: "0.3.0"
description:
  - Renders and writes, from the router's plan (action M(llmops.sglang.router_plan)), its base
    folder (0755), its folder (0750), its log file (0600, created empty, content and times kept),
    its environment file (0600, with the API key under the plan's C(api_key_env)), its launch
    script (0750, checked with C(bash -n) first) and, with O(backend=systemd), its unit (0644,
    root).
  - Each is compared with the host's first and written only when its content, mode or owner
    differ, atomically. Returns whether the router must restart (its environment, launch script
    or unit changed) and whether systemd must read the unit again.
  - Also says whether the router runs as its service manager should have it (O(backend=process) -
    its pid file names its live process; O(backend=systemd) - its unit is active and enabled), so
    that the role starts it only when it does not.
  - The plan decides, this module renders its fields.
author:
  - llmops.sglang contributors (@llmops)
options:
  plan:
    description:
      - The router's plan as the action M(llmops.sglang.router_plan) returns it (its C(paths),
        C(argv), C(env), C(python), C(match), C(unit), C(user), C(group), ...).
    type: dict
    required: true
  backend:
    description: The service manager the plan's pre-flight resolved; V(systemd) also writes the unit.
    type: str
    choices: [process, systemd]
    required: true
  base_dir:
    description: The router's base folder, created when missing (owned by the connection's user).
    type: path
  api_key:
    description: The API key the environment file hands to the router (when the plan says one is set).
    type: str
    default: ""
  unit_dir:
    description: Where the unit goes.
    type: path
    default: /etc/systemd/system
attributes:
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
    details: The environment file shows as C((secret)).
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
    platforms: posix
seealso:
  - module: llmops.sglang.router_plan
  - module: llmops.sglang.server_files
"""

EXAMPLES = r"""
- name: Write the router's folders, environment, launch script (and unit)
  llmops.sglang.router_files:
    plan: "{{ __sglang_router_plan }}"
    backend: "{{ __sglang_router_plan.backend }}"
    base_dir: /opt/sglang-router
    api_key: "{{ sglang_api_key }}"
  register: __sglang_router_files
"""

RETURN = r"""
restart:
  description: Whether the router's environment file, launch script or unit changed (it must restart).
  returned: always
  type: bool
unit_changed:
  description: Whether the unit changed (systemd must read it again before the restart).
  returned: always
  type: bool
running:
  description:
    - Whether the router runs now, as its service manager should have it (pid file and process,
      or the unit active and enabled); read before anything is restarted.
  returned: always
  type: bool
files:
  description: The paths written or fixed (or that would be, in check mode).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._router.files import running, write_router
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec

PLAN_KEYS = ("paths", "argv", "python", "match", "api_key_env", "description", "unit", "service", "stop_timeout",
             "unit_user", "unit_group")
PATH_KEYS = ("dir", "log_file", "env_file", "launch_script", "pid_file")


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("router_files"),
        supports_check_mode=True,
    )
    params = module.params
    plan = params["plan"]
    missing = [key for key in PLAN_KEYS if key not in plan]
    missing += [f"paths.{key}" for key in PATH_KEYS if not (plan.get("paths") or {}).get(key)]
    if missing:
        module.fail_json(msg=f"plan: missing {', '.join(missing)} (give the plan of llmops.sglang.router_plan)")
    try:
        outcome = write_router(plan, base_dir=params["base_dir"] or "", api_key=params["api_key"],
                               backend=params["backend"], check=module.check_mode, unit_dir=params["unit_dir"])
    except (OSError, KeyError, ValueError) as exc:
        module.fail_json(msg=f"writing the router's files: {exc}")
    result = {"changed": bool(outcome.changed), "restart": outcome.restart, "unit_changed": outcome.unit_changed,
              "running": running(plan, params["backend"]), "files": outcome.changed}
    if module._diff:
        result["diff"] = outcome.diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
