#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.wait_idle: a thin shell over module_utils/_server/deploy.py."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: wait_idle
short_description: Wait until SGLang instances have no request running or queued
version_added: "0.2.0"
description:
  - Part of a rolling restart behind a router - after a worker is taken out of every router
    (which sends it nothing new but does not drain it), wait until the requests it already
    received have finished, then restart it.
  - Reads each instance's C(/metrics) gauges C(sglang:num_running_reqs) and
    C(sglang:num_queue_reqs) (SGLang with C(--enable-metrics); every profile of the collection
    turns it on) until both are 0, at most O(timeout) seconds. An instance without C(/metrics)
    gets O(grace) seconds instead. SGLang asks no key for C(/metrics); O(api_key) is sent all
    the same.
  - Never fails because of a drain that timed out - it reports it (C(idle=false)); the caller
    decides. Changes nothing.
author:
  - llmops.sglang contributors (@llmops)
options:
  instances:
    description: The instances to wait for.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Instance name.
        type: str
        required: true
      url:
        description: Its base URL.
        type: str
        required: true
  timeout:
    description: Seconds to wait for one instance.
    type: float
    default: 120
  grace:
    description: Seconds to wait for an instance that has no C(/metrics).
    type: float
    default: 5
  interval:
    description: Seconds between polls.
    type: float
    default: 0.5
extends_documentation_fragment:
  - llmops.sglang.server_api
attributes:
  check_mode:
    description: Only reads; in check mode nothing is polled.
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
"""

EXAMPLES = r"""
- name: Let gpu0 finish what it is doing
  llmops.sglang.wait_idle:
    instances:
      - {name: gpu0, url: "http://127.0.0.1:30000"}
    timeout: 300
"""

RETURN = r"""
instances:
  description: Per instance name, what the wait found.
  returned: always
  type: dict
  contains:
    idle:
      description: No request was running or queued when the wait ended (or the grace passed).
      type: bool
    waited_s:
      description: Seconds waited.
      type: float
    in_flight:
      description: Running plus queued requests last seen (null without /metrics).
      type: float
    how:
      description: C(metrics), C(grace) (no /metrics) or C(gone) (no answer).
      type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._server.deploy import wait_for_idle
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("wait_idle"),
        supports_check_mode=True,
    )
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, instances={})
    results = wait_for_idle(params["instances"], timeout=params["timeout"], grace=params["grace"],
                            interval=params["interval"], api_key=params["api_key"])
    for name, res in results.items():
        if not res["idle"]:
            module.warn(f"{name} still had {res['in_flight']:g} request(s) running or queued after {res['waited_s']} s: "
                        "restarting it fails them")
    module.exit_json(changed=False, instances=results)


if __name__ == "__main__":
    main()
