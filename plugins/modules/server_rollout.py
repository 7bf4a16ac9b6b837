#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Documentation of the action llmops.sglang.server_rollout (plugins/action/server_rollout.py does
the work on the controller, plugins/plugin_utils/_deployment.py, _rollout.py and _rollback.py hold
the rules; nothing of this file runs)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: server_rollout
short_description: One step of a host's rollout of SGLang servers - batches, records, manifest, rollback
version_added: "0.3.0"
description:
  - The decisions of the server role (C(roles/server/tasks/deploy.yml), C(start_batch.yml),
    C(rollback.yml), C(rollback_batch.yml)) between the plan and the host, on the controller. See
    C(docs/fleet.md) for the rollout and C(docs/RELIABILITY.md) for the rollback.
  - V(batches) - what this deploy does to each instance of O(plan) against O(previous) (C(diff) -
    C(restart) those whose files changed (O(restart)) or all when O(engine_changed), C(remove) the
    previous ones no longer planned, C(keep) the others; a live instance the previous manifest
    did not list is replaced) and the batches they are started and replaced in (O(policy),
    behind routers O(at_once) at a time, the canary and the guard's watch).
  - V(records) - a batch's services from its start result (O(start)) - per instance its pid and
    whether this run (re)started it.
  - V(manifest) - the deployment manifest (C(deployment.json)) from O(plan), O(services) and
    O(ready), with O(restored) (the guard rolled them back) on their previous configuration;
    written on the host by M(llmops.sglang.server_files) unless the manifest read when planning
    was intact and is exactly this one (a no-change run writes nothing).
  - V(candidate) - the manifest while the guard watches a batch - what runs at that moment - the
    instances this run started (O(services)) with their new records, the watched ones
    (O(candidates)) marked C(candidate) (not judged yet), the ones not reached yet as before; always
    written. A rollout interrupted during the watch leaves it (status shows the candidate,
    rollback.yml puts back its previous configuration, the next deploy replaces and judges it);
    the manifest at the rollout's end replaces it.
  - V(rollback_plan) - from a host's O(manifest) alone, what a rollback on demand restarts and
    how (the instances with a previous configuration, of O(only)).
  - V(rolled_back) - the manifest after O(restored) went back to their previous configuration,
    written when any did.
author:
  - llmops.sglang contributors (@llmops)
options:
  step:
    description: Which step.
    type: str
    choices: [batches, records, manifest, candidate, rollback_plan, rolled_back]
    required: true
  plan:
    description: The host's plan (M(llmops.sglang.server_plan)'s, or V(rollback_plan)'s); for every step but V(records) and V(rollback_plan).
    type: dict
  previous:
    description:
      - V(batches) - the manifest read when planning (the plan's C(previous), an empty dict where the
        host had no deployment); omitted - nothing is removed.
      - A planned instance it does not have is started, never stopped or drained first (nothing of
        it can run); omitted - not known, every changed instance is restarted.
    type: dict
  restart:
    description:
      - V(batches) - the instances whose files changed (M(llmops.sglang.server_files)'s C(restart)),
        or a rollback's restored ones.
      - V(records) - the batch's instances that were stopped before its start.
    type: list
    elements: str
  engine_changed:
    description: V(batches) - the engine changed - every instance restarts.
    type: bool
    default: false
  running:
    description: V(batches) - the instances running now (default the plan's C(running)); V(rollback_plan) - the live instance folders.
    type: list
    elements: str
  policy:
    description: V(batches) - C(sglang_start_policy) - V(parallel) or V(serial).
    type: str
    default: parallel
  routed:
    description: V(batches) - behind routers (new instances first, then the replaced ones O(at_once) at a time).
    type: bool
    default: false
  at_once:
    description: V(batches) - C(sglang_rollout_instances_at_once).
    type: int
    default: 1
  canary:
    description: V(batches) - the canary's instances on this host (0 - none).
    type: int
    default: 0
  canary_s:
    description: V(batches) - seconds the canary is watched.
    type: float
    default: 0
  guard_s:
    description: V(batches) - seconds every other replaced batch is watched.
    type: float
    default: 0
  canary_alone:
    description: V(batches) - this host is alone in its batch of hosts (a canary needs it).
    type: bool
    default: true
  replaced_only:
    description: V(batches) - keep only the batches that replace an instance (a rollback).
    type: bool
    default: false
  start:
    description: V(records) - the start task's result (M(llmops.sglang.detached_service) with C(services), or the loop of M(ansible.builtin.systemd_service)).
    type: dict
  units:
    description: V(records) - with systemd, the units queried after the start (their MainPID).
    type: dict
  host:
    description: V(manifest), V(candidate) - the inventory host (default the task's).
    type: str
  services:
    description: V(manifest), V(candidate), V(rolled_back) - per instance its pid and whether this run (re)started it (V(records)).
    type: dict
  ready:
    description: V(manifest), V(candidate), V(rolled_back) - per instance its readiness result (M(llmops.sglang.wait_ready)).
    type: dict
  candidates:
    description: V(candidate) - the instances the guard is about to watch.
    type: list
    elements: str
  restored:
    description: V(manifest), V(rolled_back) - the instances whose files went back to their previous configuration.
    type: list
    elements: str
  manifest:
    description: V(rollback_plan) - the host's manifest (M(llmops.sglang.server_status)'s).
    type: dict
  ready_timeout:
    description: V(rollback_plan) - C(sglang_ready_timeout) (0 or unset - from the engine and the HiCache size).
    type: float
  time_scale:
    description: V(rollback_plan) - C(sglang_sim_time_scale) (the embedded engine's waits).
    type: float
    default: 1.0
  only:
    description: V(rollback_plan) - the instances to roll back (empty - every one with a previous configuration).
    type: list
    elements: str
attributes:
  check_mode:
    description: Every step runs; the manifest is not written (M(llmops.sglang.server_files) in check mode).
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
notes:
  - An action - it runs on the controller; only the manifest's write runs on the host.
seealso:
  - module: llmops.sglang.server_plan
  - module: llmops.sglang.server_files
  - module: llmops.sglang.detached_service
"""

EXAMPLES = r"""
- name: Plan the rollout
  llmops.sglang.server_rollout:
    step: batches
    plan: "{{ __plan }}"
    previous: "{{ __plan.previous }}"
    restart: "{{ __files.restart }}"
    policy: serial
  register: __rollout

- name: Make and write the deployment manifest
  llmops.sglang.server_rollout:
    step: manifest
    plan: "{{ __plan }}"
    services: "{{ __services }}"
    ready: "{{ __ready }}"
  register: __manifest
"""

RETURN = r"""
diff:
  description: V(batches) - C(restart) (names), C(remove) (the previous manifest's records), C(keep) (names).
  returned: V(batches)
  type: dict
batches:
  description: V(batches) - each C(instances) (plan instances), C(restart) (names stopped first), C(replace), C(canary), C(guard_s).
  returned: V(batches)
  type: list
  elements: dict
rollout_warnings:
  description: V(batches) - what the batches could not do as asked (a canary that was not made, and why).
  returned: V(batches)
  type: list
  elements: str
records:
  description: V(records) - per instance C(pid) and C(started).
  returned: V(records)
  type: dict
started:
  description: V(records) - the instances this run (re)started.
  returned: V(records)
  type: list
  elements: str
manifest:
  description: V(manifest), V(rolled_back) - the deployment manifest.
  returned: V(manifest), V(rolled_back)
  type: dict
written:
  description: V(manifest), V(rolled_back) - the manifest was written (or, in check mode, would be).
  returned: V(manifest), V(rolled_back)
  type: bool
plan:
  description:
    - V(rollback_plan) - C(backend), C(engine), C(python), C(base_dir), C(manifest_path), C(previous),
      C(running), C(instances), C(targets), C(not_targets), C(summary).
  returned: V(rollback_plan)
  type: dict
"""
