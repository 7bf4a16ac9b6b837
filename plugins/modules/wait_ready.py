#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: wait_ready
short_description: Wait until SGLang instances answer C(/health_generate) (or another endpoint) with 200
version_added: "0.1.0"
description:
  - Polls every instance's C(/health_generate) endpoint (or its O(instances[].path)) in
    parallel, from the host the instances run on, until it answers 200 (one token generated),
    the instance's process dies, or the instance's timeout passes.
  - Readiness is never judged from an open port or C(/v1/models); both answer before the
    server has warmed up.
  - On failure the module fails naming each instance that is not ready, with the last lines
    of its log. Instances that became ready are left running.
options:
  instances:
    description:
      - The instances to wait for.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Instance name, used in messages.
        type: str
        required: true
      url:
        description: Base URL, for example C(http://127.0.0.1:30000).
        type: str
        required: true
      path:
        description:
          - The endpoint polled. The router role waits for a router's C(/health) after its
            start and C(/readiness) (200 once it has a healthy worker) after registering workers.
        type: str
        default: /health_generate
      timeout:
        description: Seconds to wait for this instance.
        type: float
        default: 600
      log_file:
        description: The instance's log, whose tail is shown on failure.
        type: path
      pid_file:
        description: The instance's pid file; a dead process fails at once.
        type: path
      unit:
        description:
          - The instance's systemd unit; a unit that failed, or that systemd restarted while
            waiting (C(Restart=on-failure) after the server died), fails at once.
        type: str
      prime:
        description:
          - After the O(warmup), one more request the instance must answer with 200 before it is
            ready (C(path), C(body), C(timeout)), as O(warmup)'s; C(words) instead of C(body) sends a
            greedy one-token request of that many words of a fixed text. The server role gives it to an
            instance with HiCache's storage tier (its plan's C(hicache_storage.prime)) - a prompt
            long enough to fill pages past the tier's prefetch threshold - because SGLang 0.5.17
            compiles the tier's page-hash extension at the first prefill that reaches it; a host that
            cannot compile it kills the server there, so that server never counts as ready, and the
            compile is paid by the deploy, not by the first users.
        type: dict
      bootstrap:
        description:
          - A prefill instance's bootstrap server (its C(--disaggregation-bootstrap-port), C(/health)),
            which must answer 200 too before the instance is ready - where decodes fetch its KV, so
            the router is not given a prefill whose KV no decode could fetch yet. The server role
            gives it to each prefill instance of C(sglang_pd).
        type: str
  interval:
    description: Seconds between polls of one instance.
    type: float
    default: 2
  request_timeout:
    description: Seconds one poll may take (a one-token generation).
    type: float
    default: 30
  what:
    description: What the instances are, for the failure message (C(instance gpu0 is not ready ...)).
    type: str
    default: instance
  warmup:
    description:
      - After an instance answered 200, one request as real traffic sends it; the instance is
        ready once that answered 200 too, and fails naming it otherwise. On SGLang 0.5.17 the first
        I(sampled) request (C(temperature), C(top_p)) after readiness took 100-140 s on an H200,
        while C(/health_generate) and greedy requests answered at once; without this the first
        user (or the bench's warm-up) paid it.
      - Omit it (or give an empty dict) for none.
    type: dict
    suboptions:
      path:
        description: The endpoint, SGLang's native C(/generate) by default.
        type: str
        default: /generate
      body:
        description: "The JSON body, e.g. C({text, sampling_params: {temperature, top_p, max_new_tokens}})."
        type: dict
        required: true
      timeout:
        description: Seconds the warm-up request may take.
        type: float
        default: 300
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.server_api
  - llmops.sglang.service_log
attributes:
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: full
    details: In check mode nothing is polled.
"""

EXAMPLES = r"""
- name: Wait for both GPUs' servers
  llmops.sglang.wait_ready:
    instances:
      - {name: gpu0, url: "http://127.0.0.1:30000", timeout: 900, log_file: /opt/sglang/gpu0/server.log}
      - {name: gpu1, url: "http://127.0.0.1:30001", timeout: 900, log_file: /opt/sglang/gpu1/server.log}

- name: Wait until a router has a healthy worker
  llmops.sglang.wait_ready:
    what: router
    instances:
      - {name: router-01, url: "http://127.0.0.1:8000", path: /readiness, timeout: 300}
"""

RETURN = r"""
instances:
  description: Per instance name, the result of waiting.
  returned: always
  type: dict
  contains:
    ready:
      description: Whether C(/health_generate) (or the instance's O(instances[].path)) answered 200.
      type: bool
    status:
      description: The last HTTP status (0 = no answer).
      type: int
    waited_s:
      description: Seconds waited.
      type: float
    ready_at:
      description: UTC time it became ready (ISO 8601), or null.
      type: str
    reason:
      description: Why it is not ready (empty when ready).
      type: str
    warmup_s:
      description: Seconds the O(warmup) request took (null without one, or when it was not reached).
      type: float
    log_tail:
      description: The last lines of its log when not ready.
      type: str
not_ready:
  description: Names of the instances that did not become ready.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._server.deploy import wait_for_ready
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("wait_ready"),
        supports_check_mode=True,
    )
    params = module.params
    if module.check_mode:
        module.exit_json(changed=False, instances={}, not_ready=[], msg="check mode: not polled")
    results = wait_for_ready(
        params["instances"],
        interval=params["interval"],
        request_timeout=params["request_timeout"],
        api_key=params["api_key"],
        tail_lines=params["log_tail_lines"],
        warmup=params["warmup"] or None,
    )
    not_ready = [name for name, res in results.items() if not res["ready"]]
    if not_ready:
        parts = []
        for name in not_ready:
            res = results[name]
            parts.append(
                f"{params['what']} {name} is not ready: {res['reason']}.\n"
                f"--- last {params['log_tail_lines']} lines of its log ---\n{res['log_tail']}"
            )
        module.fail_json(msg="\n\n".join(parts), instances=results, not_ready=sorted(not_ready))
    module.exit_json(changed=False, instances=results, not_ready=[])


if __name__ == "__main__":
    main()
