#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_lock
short_description: Take, renew or release the run lock of a host's SGLang deployment
version_added: "0.1.0"
description:
  - Runs that change a host (C(deploy.yml), C(stop.yml), C(tune.yml)) exclude each other on that
    host through one lock file, C(.run.lock) under O(path) (the deployment's C(sglang_base_dir)),
    naming its holder (the controller host, the pid and start time of its C(ansible-playbook)
    process, the playbook, when it took the lock and when its lease was last renewed).
  - Changes happen under an exclusive C(flock) of C(.run.lock.guard) beside it; the lock file is
    linked into place (it is never half written), so of two runs taking it at once exactly one gets it.
  - Use it through its action (same name), which fills in O(holder) with the run's identity, judges
    on the controller whether another holder is alive (same controller host - its process; another
    controller host - its lease), takes over a stale lock, waits or refuses, and keeps the lease
    renewed while the run lives. The module alone only does the file operations on the host.
  - The action reports C(changed=false) for taking and releasing the lock - it is the run's own
    bookkeeping, gone at its end - so that a run that changes nothing else reports no change.
  - Logic in C(plugins/module_utils/_server/runlock.py); docs/deploy.md ("One run at a time") says how it behaves.
options:
  path:
    description: The deployment's base folder on the host (C(sglang_base_dir)); created when missing.
    type: path
    required: true
  state:
    description:
      - V(acquired) takes the lock (for the run in O(holder)); V(released) removes it if this run
        holds it; V(renewed) renews its lease if this run holds it; V(query) only reads it.
    type: str
    choices: [acquired, released, renewed, query]
    default: acquired
  timeout:
    description:
      - Seconds to wait while another live run holds the lock (action); V(0) refuses at once,
        naming the holder.
    type: int
    default: 0
  lease:
    description:
      - Seconds after its last renewal at which a lock whose holder runs on another controller host
        is stale (its process cannot be seen from here). The action renews it every third of this
        while the run lives.
    type: int
    default: 120
  playbook:
    description: What the run is, for the holder record and the messages (for example V(deploy.yml)).
    type: str
    default: ""
  holder:
    description: The run's identity (set by the action; the module alone needs it for V(acquired)).
    type: dict
  token:
    description: The run's token (set by the action) for V(released) and V(renewed).
    type: str
  takeover:
    description: The token of a holder the controller judged stale; replaced only while it still holds the lock.
    type: str
author:
  - llmops.sglang contributors (@llmops)
attributes:
  check_mode:
    description: In check mode nothing is written; the lock is read and its holder reported.
    support: full
  action:
    description: An action plugin of the same name runs on the controller.
    support: full
"""

EXAMPLES = r"""
- name: Take this run's lock on the host (refused at once when another run holds it)
  llmops.sglang.run_lock:
    path: /opt/sglang
    playbook: deploy.yml

- name: Wait up to ten minutes for another run to end
  llmops.sglang.run_lock:
    path: /opt/sglang
    timeout: 600

- name: Release it at the end of the run
  llmops.sglang.run_lock:
    path: /opt/sglang
    state: released
"""

RETURN = r"""
acquired:
  description: This run holds the lock now (V(acquired)).
  returned: always
  type: bool
held:
  description: A lock exists (V(query)), or another run holds it.
  returned: always
  type: bool
holder:
  description: The lock's record (this run's when it took it, the other run's when it did not).
  returned: always
  type: dict
took_over:
  description: The record of the stale holder this run replaced (null when none).
  returned: always
  type: dict
age_s:
  description: Seconds since the holder's lease was last renewed (host clock).
  returned: always
  type: float
expired:
  description: The holder's lease has expired.
  returned: always
  type: bool
released:
  description: This run's lock was removed (V(released)).
  returned: always
  type: bool
message:
  description: What status shows while a run holds the lock ('' when none does).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._server import runlock as _runlock
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("run_lock", no_log={"token": False, "takeover": False}),
        required_if=[("state", "acquired", ("holder",)), ("state", "released", ("token",)),
                     ("state", "renewed", ("token",))],
        supports_check_mode=True,
    )
    params = module.params
    path, state = params["path"], params["state"]
    out = {"acquired": False, "held": False, "holder": None, "took_over": None, "age_s": None, "expired": False,
           "released": False, "message": "", "changed": False}
    try:
        if state == "query" or module.check_mode:
            found = _runlock.query(path)
            out.update(held=found["held"], holder=found["holder"], age_s=found["age_s"], expired=found["expired"],
                       message=found["message"])
        elif state == "acquired":
            if params["lease"] < 1:
                module.fail_json(msg=f"lease={params['lease']}: the lease is at least 1 second (default "
                                     f"{_runlock.DEFAULT_LEASE_S})", **out)
            res = _runlock.acquire(path, params["holder"], params["lease"], params["takeover"])
            out.update(acquired=res["acquired"], held=True, holder=res["holder"], took_over=res["took_over"],
                       age_s=res["age_s"], expired=res["expired"], changed=res["acquired"] and not res["reentered"])
        elif state == "renewed":
            out.update(acquired=_runlock.renew(path, params["token"]), held=True)
        else:
            res = _runlock.release(path, params["token"])
            out.update(released=res["released"], holder=res["holder"], held=res["holder"] is not None,
                       changed=res["released"])
    except (_runlock.RunLockError, OSError) as exc:
        module.fail_json(msg=f"run lock under {path}: {exc}", **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
