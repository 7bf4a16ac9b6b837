#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Documentation of the action llmops.sglang.rollout_guard (plugins/action/rollout_guard.py does
the work on the controller, plugins/plugin_utils/_canary.py and _guard.py decide; nothing of
this file runs)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: rollout_guard
short_description: Watch replaced SGLang instances against the old configuration and decide whether to roll back
version_added: "0.3.0"
description:
  - The guard of C(deploy.yml)'s canary (C(sglang_rollout_canary)) and guarded batches
    (C(sglang_rollout_guard_seconds)), used by the C(llmops.sglang.server) role right after a
    batch of replaced instances is back in the routers. Delegate it to the router's host.
  - Picks the sides from every server host's plan and this run's start results - the canary
    (O(canary), instances of the task's host) and the baseline (the running rank-0 instances
    that this run has not restarted; when none is left, those replaced by earlier batches) -
    as the router reaches them.
  - Measures one window of O(seconds) on the router's host with M(llmops.sglang.rollout_window)
    (each server's C(/metrics) at both ends, running requests sampled, the router's circuit
    breaker outcomes when O(router_metrics_url) is given), then compares the sides
    (C(plugins/plugin_utils/_guard.py) - error rate with a binomial test, TTFT and ITL
    percentiles and means, throughput per running request, speculative accept length;
    docs/fleet.md "The rollout guard").
  - Returns C(decision) (C(pass), C(fail), C(inconclusive)), C(rollback) (fail, or inconclusive
    with O(on_inconclusive=rollback)), the reason and every value measured, prints them, and keeps
    the verdict as JSON in O(report_dir). Never fails because of the verdict - the role rolls back.
author:
  - llmops.sglang contributors (@llmops)
options:
  canary:
    description: Names of the task host's instances to judge (the batch just replaced).
    type: list
    elements: str
    required: true
  seconds:
    description: Length of the window (C(sglang_rollout_canary_seconds) or C(sglang_rollout_guard_seconds)).
    type: float
    required: true
  thresholds:
    description: C(sglang_rollout_guard) - overrides of the guard's limits; unknown keys are refused.
    type: dict
    default: {}
  on_inconclusive:
    description:
      - What a window that cannot decide (too little traffic, no baseline) means - C(rollback) (the
        batch goes back and the rollout stops, naming the settings that would let it decide) or
        C(proceed).
    type: str
    choices: [proceed, rollback]
    default: rollback
  router_host:
    description: The inventory host of the router whose view of the workers is used.
    type: str
    required: true
  router_metrics_url:
    description: The router's Prometheus URL, for its per-worker outcomes (what a server cannot see, such as refused connections).
    type: str
  probe_rate:
    description:
      - C(sglang_rollout_guard_probe_rate) - requests per second of synthetic load sent to every
        watched instance alike during the window, straight to the instance; said in the verdict's lines.
      - C(auto) - enough for each instance alone to reach the guard's C(min_requests) in the window
        (1.2 x min_requests / O(seconds)); a number; C(0) - none.
    type: raw
    default: auto
  interval:
    description: Seconds between samples of the running-requests gauge.
    type: float
    default: 1.0
  report_dir:
    description: Folder on the controller for the verdict's JSON.
    type: path
  changed:
    description: Names of the task host's instances whose files this run changed (the server
      role's restart list); C(restore) is computed from it.
    type: list
    elements: str
    default: []
  phase:
    description: C(canary) or C(batch), in the report's name.
    type: str
    default: batch
  step:
    description:
      - The rollout batch watched (the server role's batch record), returned unchanged as C(step)
        so that a rollback replaces that batch again.
    type: dict
extends_documentation_fragment:
  - llmops.sglang.server_api
attributes:
  check_mode:
    description: In check mode the sides are picked and nothing is watched.
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
  action:
    description: Runs on the controller; measures on the delegated host.
    support: full
seealso:
  - module: llmops.sglang.rollout_window
"""

EXAMPLES = r"""
- name: Watch the canary for five minutes
  llmops.sglang.rollout_guard:
    canary: [gpu0]
    seconds: 300
    router_host: router1
    router_metrics_url: http://127.0.0.1:29000
    report_dir: /srv/reports
  delegate_to: router1
  register: guard
"""

RETURN = r"""
decision:
  description: C(pass), C(fail) or C(inconclusive).
  returned: success
  type: str
rollback:
  description: Whether the role rolls the batch back.
  returned: success
  type: bool
restore:
  description: The host's instances whose files a rollback puts back - those of O(changed) that no
    earlier batch of this run restarted, and the batch judged.
  returned: success
  type: list
  elements: str
reason:
  description: Why.
  returned: success
  type: str
lines:
  description: The verdict as printed - sides, values, every check.
  returned: success
  type: list
  elements: str
stop:
  description: When the verdict says roll back, why the rollout stops - the batch and host rolled
    back with the reason, and the instances whose files go back without a restart (empty otherwise).
  returned: success
  type: list
  elements: str
step:
  description: O(step), unchanged.
  returned: success
  type: dict
report:
  description: Path of the verdict's JSON on the controller (null without O(report_dir)).
  returned: success
  type: str
verdict:
  description: Everything measured and decided (C(_guard.decide)'s result with the sides and the window length).
  returned: success
  type: dict
"""
