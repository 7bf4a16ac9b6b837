#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Documentation of the action llmops.sglang.tune_search (plugins/action/tune_search.py does the
work on the controller, plugins/plugin_utils/_tune.py and _tunereport.py hold the rules; nothing
of this file runs)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: tune_search
short_description: One step of the tune role's search for the best server settings, on the controller
version_added: "0.3.0"
description:
  - The decisions of C(playbooks/tune.yml) (role C(llmops.sglang.tune)), each made on the
    controller from what the play already has; nothing runs on a host. See C(docs/tune.md).
  - V(plan) - the objective from O(slo), the candidates of O(space) in order (each with C(vars),
    the server role's variables that deploy it, O(extra_args) kept) and the classes of O(hosts)
    (hosts with equal GPUs, from their C(sglang_host) facts, or the groups O(class_groups)),
    with their representative and the vars files a winner is written to (read under
    O(vars_dir)); C(class) is the task's own host's.
  - V(decide) - after a candidate's lowest level (O(probe)), sweep the other levels of O(levels)
    or prune it, with the bound against the best of O(results) so far; a split's (O(candidate) with
    C(pd)) in the unit of one instance (its pair's figures divided by its C(instances)).
  - V(record) - a candidate's record for the results - swept, pruned, or failed with O(error).
  - V(outcome) - a class's winner from O(results) (or why there is none), why each other
    candidate lost, the C(sglang_tuned) fact, the vars file's text and what becomes of the vars
    files (O(info)).
  - V(report) - C(tune.md), C(tune.json) and C(tune.csv) of the run from the classes' O(outcomes).
  - A bad input fails the task naming the variable, the value and the fix.
author:
  - llmops.sglang contributors (@llmops)
options:
  step:
    description: Which decision.
    type: str
    choices: [plan, decide, record, outcome, report]
    required: true
  slo:
    description:
      - V(plan) - the role's settings C(ttft_p99_ms), C(itl_p50_ms), C(concurrency), C(score),
        C(target_rps) (C(sglang_tune_slo_ttft_p99_ms) ...); 0 turns a part off.
      - V(decide), V(record), V(outcome) - the objective V(plan) returned.
    type: dict
  space:
    description: V(plan) - the search space (C(sglang_tune_space)).
    type: dict
  profiles:
    description: V(plan) - the user's profiles (C(sglang_profiles)), beside the built-in ones.
    type: dict
  extra_args:
    description: V(plan), V(outcome) - the user's C(sglang_extra_args), kept in each candidate's variables.
    type: raw
  pd:
    description:
      - V(plan) - the host's C(sglang_pd); a candidate of the space's C(pd) keeps its transfer backend,
        bootstrap port and IB device, with its own roles (none for unified).
    type: dict
  hosts:
    description: V(plan) - the play's hosts.
    type: list
    elements: str
  class_groups:
    description: V(plan) - inventory groups that are the classes (C(sglang_tune_class_groups)); empty - by GPUs.
    type: list
    elements: str
  vars_dir:
    description: V(plan) - the inventory folder whose vars files a winner is written to; empty - nothing is written.
    type: str
  probe:
    description: V(decide), V(record) - the sweep of the candidate's lowest level (C(sglang_sweep)).
    type: dict
  results:
    description: V(decide), V(outcome) - the records of the candidates so far.
    type: list
    elements: dict
  levels:
    description:
      - V(plan), V(decide) - the concurrency levels (C(sglang_tune_concurrency_levels)), per instance - a
        split's sweep runs each at C x its C(instances) over the pair, and its figures are divided by them.
    type: list
    elements: int
  candidate:
    description: V(decide), V(record) - the candidate, as V(plan) returned it.
    type: dict
  plateau_gain:
    description: V(record) - the gain below which a higher level is a plateau (C(sglang_tune_plateau_gain)).
    type: float
    # derived: default of module throughput_sweep plateau_gain
    default: 0.05
  rest:
    description: V(record) - the sweep of the other levels, when there was one.
    type: dict
  decision:
    description: V(record) - what V(decide) said.
    type: dict
  error:
    description: V(record) - why the candidate failed (it did not start, its plan was refused ...).
    type: str
  info:
    description:
      - V(outcome) - the class and the run - C(class), C(representative), C(hosts), C(run_id),
        C(levels), C(vars_files), C(vars_moves), C(vars_others), C(vars_dir), C(write),
        C(without_winner), C(report), C(release), C(engine), C(instance).
    type: dict
  generated:
    description: V(outcome) - when (UTC, ISO 8601), for the vars file's header.
    type: str
  outcomes:
    description: V(report) - each class's outcome.
    type: list
    elements: dict
attributes:
  check_mode:
    description: Changes nothing in any mode.
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
notes:
  - An action - it runs on the controller only.
seealso:
  - module: llmops.sglang.throughput_sweep
"""

EXAMPLES = r"""
- name: Plan the search (objective, candidates, classes)
  llmops.sglang.tune_search:
    step: plan
    slo: {ttft_p99_ms: 500, itl_p50_ms: 0, concurrency: 0, score: throughput, target_rps: 0}
    space: {profiles: [mtp, mtp_hicache], max_running_requests: [32, 48]}
    hosts: "{{ ansible_play_hosts }}"
  register: __plan

- name: Bound a candidate after its probe
  llmops.sglang.tune_search:
    step: decide
    probe: "{{ sglang_sweep }}"
    results: "{{ __results }}"
    levels: [1, 8, 32]
    slo: "{{ __plan.slo }}"
  register: __decided
"""

RETURN = r"""
slo:
  description: V(plan) - the objective (C(ttft_p99_ms), C(itl_p50_ms), C(concurrency), C(score), C(target_rps)).
  returned: V(plan)
  type: dict
candidates:
  description:
    - V(plan) - the candidates in order, each with C(label), its settings, C(vars), C(pd) (none, unified
      or C({prefill, decode})), C(instances) (swept together - a split's P + D, else 1) and
      C(probe_levels) (its lowest level, at C x C(instances)).
  returned: V(plan)
  type: list
  elements: dict
classes:
  description: V(plan) - per class C(hosts), C(representative), C(group), C(vars_files), C(vars_moves), C(vars_others).
  returned: V(plan)
  type: dict
class:
  description: V(plan) - the task's host's class, C(name) and C(value) (as in RV(classes)).
  returned: V(plan)
  type: dict
decision:
  description: V(decide) - C(action) (V(sweep) or V(prune)), C(bound), C(reason) and C(rest_levels) (the levels to sweep next).
  returned: V(decide)
  type: dict
record:
  description: V(record) - the candidate's record - its status (swept, pruned, failed), sweep and score.
  returned: V(record)
  type: dict
outcome:
  description:
    - V(outcome) - C(fact) (the C(sglang_tuned) fact, null without a winner), C(markdown), C(items)
      (the candidates' sweeps for the report), C(vars_text), C(writeback), C(failure).
  returned: V(outcome)
  type: dict
files:
  description: V(report) - file name (C(tune.md), C(tune.json), C(tune.csv)) to content.
  returned: V(report)
  type: dict
"""
