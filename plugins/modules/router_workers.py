#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.router_workers: a thin shell over module_utils/_router/workers.py."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: router_workers
short_description: Add and remove the workers of a running SGLang router through its worker API
version_added: "0.2.0"
description:
  - Reconciles the workers of a running C(sglang-router) (0.3.2, as the role C(llmops.sglang.router)
    installs it) with a list of worker URLs, without restarting it.
  - Reads C(GET /workers), adds with C(POST /workers) (body C({"url", "api_key"}), answered with
    202, the router registering the worker in the background) and removes with
    C(DELETE /workers/{id}), the id looked up by URL in the list. The old C(/add_worker) and C(/remove_worker) endpoints
    answer 404 on 0.3.2 and are not used.
  - Removals are waited for until the router no longer lists the worker (it leaves at once;
    requests already running on it finish). With O(wait_healthy), every added worker is waited
    for until the router lists it healthy.
  - Idempotent; reports a change only when it added or removed a worker.
  - Worker URLs are compared as C(http(s)://host:port) with no trailing slash (a trailing slash
    would make the router probe C(//health) and never register the worker).
author:
  - llmops.sglang contributors (@llmops)
options:
  router_url:
    description: Base URL of the router as seen from the host the task runs on, for example V(http://127.0.0.1:8000).
    type: str
    required: true
  workers:
    description:
      - Base URLs of SGLang servers (rank 0 of a multi-node server only), for example V(http://10.0.0.11:30000).
      - With O(state=present) and an empty list nothing changes and the module only reports the
        router's workers.
    type: list
    elements: str
    default: []
  worker_types:
    description:
      - The side of each prefill/decode worker, by URL - C({worker_type, bootstrap_port}) with
        C(worker_type) V(prefill) or V(decode) and a prefill's C(bootstrap_port) - sent with its
        C(POST /workers) to a router in PD mode (O(deployment_hosts) and O(deployments) give it from
        each instance's C(pd_role) and C(bootstrap_port)). A worker the router lists with another
        side is removed and added again. Workers not named here are registered as C(regular).
    type: dict
    default: {}
  deployment_hosts:
    description:
      - Server hosts (inventory names, for example C(groups['sglang_servers'])) whose deployments
        the router gets - every rank-0 instance of each host's C(sglang_deployment) fact (its
        deployment manifest, which the server role sets; null for a host with none), after
        O(workers).
      - An instance on O(router_host) is registered at its C(connect_url), the address a client
        on that host uses (loopback for a wildcard or a loopback bind); one on another host at
        its C(advertise_url). Ranks above 0 (multi-node tensor parallel) and a live instance its
        manifest does not list are left out.
      - The task fails, naming each, when a host's fact is not set (left out of the play by
        C(--limit), or failed) or an instance on another host listens on loopback only - a
        partial list never replaces a router's workers.
      - Resolved on the controller (this module's action plugin).
    type: list
    elements: str
  deployments:
    description:
      - 'Deployments given as data, by server host - each a manifest or C({instances: [...]})
        (the server role passes a batch of its instances this way) - resolved as O(deployment_hosts).'
    type: dict
  router_host:
    description:
      - The router's inventory host, required with O(deployment_hosts) or O(deployments) (the
        host the task runs on - C(delegate_to)).
    type: str
  state:
    description:
      - V(present) adds the listed workers that the router does not have.
      - V(absent) removes the listed workers that the router has.
      - V(exact) adds the missing ones and removes every worker that is not listed.
    type: str
    choices: [present, absent, exact]
    default: present
  worker_api_key:
    description:
      - The key the router sends to the workers it adds (the C(api_key) field of C(POST /workers));
        the servers' C(--api-key). Without it the router forwards each client's own
        C(Authorization) header.
    type: str
  wait_healthy:
    description:
      - After adding, poll C(GET /workers) until every added worker is listed and healthy, for
        at most O(timeout) seconds. A worker that never becomes healthy fails the task with its
        URL and the router's view of it (its entry, or its registration job while the router
        still cannot reach it).
    type: bool
    default: false
  timeout:
    description: Seconds to wait for removals to take effect and, with O(wait_healthy), for added workers to be healthy.
    type: float
    default: 60
  request_timeout:
    description: Seconds one HTTP request to the router may take.
    type: float
    default: 10
  ready:
    description:
      - After reconciling, when the router has at least one worker, wait until it answers
        C(/readiness) with 200 (a healthy worker; 503 until then), polled every second, as
        M(llmops.sglang.wait_ready) does. One that does not within O(ready.timeout) fails the
        task with the reason and the last lines of O(ready.log_file). Not in check mode.
    type: dict
    suboptions:
      timeout:
        description: Seconds to wait for C(/readiness).
        type: float
        default: 300
      log_file:
        description: The router's log, whose last lines a failure shows.
        type: path
      name:
        description: The router's name in a failure's message (its inventory host).
        type: str
        default: router
extends_documentation_fragment:
  - llmops.sglang.server_api
attributes:
  check_mode:
    description:
      - Reads the router's list and reports what would be added and removed; changes nothing.
      - A router that does not answer is taken, with a warning, as one with no worker (as before
        its first start, which the role would do in the same run).
    support: full
  diff_mode:
    description: Shows the router's worker URLs before and after.
    support: full
notes:
  - A worker whose registration the router is still retrying (it does not answer C(/health) yet)
    is not listed by C(GET /workers) on 0.3.2; a second run adds it again, which the router
    answers with the same id.
  - The router keeps its workers in memory only; after a restart it has none until they are
    added again.
  - O(api_key) is the router's own key (every C(/workers) call sends it); O(worker_api_key) is
    the workers' key, which the router sends them.
seealso:
  - name: docs/fleet.md
    description: The router, its worker API and the facts behind the role's defaults.
    link: https://github.com/llmops/llmops.sglang/tree/main/docs/fleet.md
"""

EXAMPLES = r"""
- name: Register this host's instances and wait until the router sends them traffic
  llmops.sglang.router_workers:
    router_url: http://10.0.0.10:8000
    workers: [http://10.0.0.11:30000, http://10.0.0.11:30001]
    worker_api_key: "{{ sglang_api_key }}"
    api_key: "{{ sglang_api_key }}"
    wait_healthy: true
    timeout: 120

- name: Take one instance out before restarting it
  llmops.sglang.router_workers:
    router_url: http://10.0.0.10:8000
    workers: [http://10.0.0.11:30000]
    state: absent
    api_key: "{{ sglang_api_key }}"

- name: Give the router on this host exactly the deployed instances of every server host
  llmops.sglang.router_workers:
    router_url: http://127.0.0.1:8000
    deployment_hosts: "{{ groups['sglang_servers'] }}"
    router_host: "{{ inventory_hostname }}"
    state: exact

- name: List the router's workers (changes nothing)
  llmops.sglang.router_workers:
    router_url: http://127.0.0.1:8000
  register: __router
"""

RETURN = r"""
router_url:
  description: The router's base URL, as given (without a trailing slash).
  returned: always
  type: str
  sample: http://10.0.0.10:8000
added:
  description: Worker URLs added (in check mode, that would be added).
  returned: always
  type: list
  elements: str
  sample: [http://10.0.0.11:30001]
removed:
  description: Worker URLs removed (in check mode, that would be removed).
  returned: always
  type: list
  elements: str
  sample: []
workers:
  description:
    - The router's workers after the change (in check mode, as they are). Without O(wait_healthy)
      a worker just added may not be listed yet (the router registers it in the background).
  returned: always
  type: list
  elements: dict
  contains:
    url:
      description: The worker's URL.
      type: str
      sample: http://10.0.0.11:30000
    id:
      description: The router's id of the worker (for C(/workers/{id})).
      type: str
      sample: c07e9569-ba30-47f7-bee2-0b7345093c1b
    is_healthy:
      description: Whether the router's health checks pass (an unhealthy worker gets no traffic).
      type: bool
      sample: true
    load:
      description: Requests the router has running on it.
      type: int
      sample: 0
ready:
  description: With O(ready), the readiness wait's result (C(ready), C(status), C(waited_s), C(reason)) when it failed.
  returned: failure of the readiness wait
  type: dict
"""

# Imports follow the documentation blocks, as ansible-test validate-modules requires.
from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.llmops.sglang.plugins.module_utils._router.workers import (  # noqa: E402
    RouterClient,
    RouterError,
    reconcile,
)
from ansible_collections.llmops.sglang.plugins.module_utils._server.deploy import wait_for_ready  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("router_workers"),
        supports_check_mode=True,
    )
    p = module.params
    if p["deployment_hosts"] or p["deployments"]:
        module.fail_json(msg="deployment_hosts and deployments are resolved on the controller by the action "
                             "llmops.sglang.router_workers: call the module by that name, not ansible.legacy")
    client = RouterClient(p["router_url"], api_key=p["api_key"], timeout=p["request_timeout"])
    try:
        result = reconcile(client, p["workers"], p["state"], types=p["worker_types"], worker_api_key=p["worker_api_key"],
                           wait_healthy=p["wait_healthy"], timeout=p["timeout"], check_mode=module.check_mode)
    except RouterError as err:
        module.fail_json(msg=str(err), router_url=client.base_url)
    if result.msg:
        module.warn(result.msg)
    after = sorted(set(result.before) - set(result.removed) | set(result.added))
    ready = p["ready"]
    if ready and result.workers and not module.check_mode:
        state = wait_for_ready([{"name": ready["name"], "url": client.base_url, "path": "/readiness",
                                 "timeout": ready["timeout"], "log_file": ready["log_file"]}],
                               interval=1, request_timeout=5)[ready["name"]]
        if not state["ready"]:
            module.fail_json(msg=f"the router on {ready['name']} is not ready: {state['reason']}.\n"
                                 f"--- last 50 lines of its log ---\n{state['log_tail']}",
                             router_url=client.base_url, workers=result.workers, ready=state)
    extra = {}
    if module._diff:
        extra["diff"] = {"before": "".join(u + "\n" for u in result.before),
                         "after": "".join(u + "\n" for u in after)}
    module.exit_json(changed=result.changed, added=result.added, removed=result.removed, workers=result.workers,
                     router_url=client.base_url, **extra)


if __name__ == "__main__":
    main()
