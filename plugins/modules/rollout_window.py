#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.rollout_window: a thin shell over module_utils/_rollout/window.py."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: rollout_window
short_description: Read SGLang servers' and a router's /metrics over one rollout guard window
version_added: "0.3.0"
description:
  - The measuring half of the rollout guard (canary and guarded batches of C(deploy.yml)); the
    deciding half is the C(llmops.sglang.rollout_guard) action, which runs this module on the
    router's host (where every worker URL is reachable) and judges what it returns.
  - Reads every URL's C(/metrics) at the start and at the end of O(seconds) (measured with the
    host's monotonic clock), samples each one's C(sglang:num_running_reqs) every O(interval)
    seconds in between, and reads O(router_metrics_url)'s C(/metrics) at both ends. Needs the
    servers started with C(--enable-metrics) (every profile of the collection sets it).
  - Returns the texts as read; a scrape that fails is reported with its error. Changes nothing.
author:
  - llmops.sglang contributors (@llmops)
options:
  urls:
    description: Base URLs of the instances to watch (canary and baseline together).
    type: list
    elements: str
    required: true
  seconds:
    description: Length of the window.
    type: float
    required: true
  interval:
    description: Seconds between samples of the running-requests gauge.
    type: float
    default: 1.0
  router_metrics_url:
    description: Base URL of the router's Prometheus endpoint (C(--prometheus-port)), read at both ends.
    type: str
  timeout:
    description: Seconds one scrape may take.
    type: float
    default: 10
  probe_rate:
    description:
      - Requests per second sent to every watched instance alike during the window (a short
        synthetic load, each request its own prompt of 16 tokens out), for when the routers'
        traffic is too low to judge; 0 - none. Bounded to O(probe_rate) x O(seconds) per instance.
    type: float
    default: 0
extends_documentation_fragment:
  - llmops.sglang.server_api
attributes:
  check_mode:
    description: Only reads; in check mode nothing is read.
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
"""

EXAMPLES = r"""
- name: Watch two instances for a minute
  llmops.sglang.rollout_window:
    urls: ["http://10.0.0.11:30000", "http://10.0.0.12:30000"]
    seconds: 60
    router_metrics_url: "http://127.0.0.1:29000"
"""

RETURN = r"""
seconds:
  description: Length of the window as measured on the host.
  returned: always
  type: float
instances:
  description: Per URL, C(start) and C(end) (the /metrics texts, null when a scrape failed),
    C(running_mean) and C(running_samples) (the gauge sampled in between) and C(error).
  returned: always
  type: dict
probe:
  description: With O(probe_rate), C(rate) and per URL C(sent), C(failed) and the first C(errors); null without.
  returned: always
  type: dict
router:
  description: The router's C(start) and C(end) texts and C(error); null without O(router_metrics_url).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._rollout.window import measure
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("rollout_window"),
        supports_check_mode=True,
    )
    params = module.params
    if params["seconds"] < 0 or params["interval"] <= 0:
        module.fail_json(msg=f"seconds must be >= 0 and interval > 0 (seconds={params['seconds']}, "
                             f"interval={params['interval']})")
    if module.check_mode:
        module.exit_json(changed=False, seconds=0.0, instances={}, router=None)
    result = measure(params["urls"], params["seconds"], interval=params["interval"],
                     router_metrics_url=params["router_metrics_url"], api_key=params["api_key"],
                     timeout=params["timeout"], probe_rate=max(0.0, params["probe_rate"]))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
