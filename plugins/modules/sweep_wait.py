#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Documentation of the action llmops.sglang.sweep_wait (plugins/action/sweep_wait.py does the
work on the controller; nothing of this file runs)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sweep_wait
short_description: Wait for async throughput sweeps, printing each level as it finishes
version_added: "0.2.0"
description:
  - Waits for the C(async) jobs that M(llmops.sglang.throughput_sweep) tasks started with
    C(poll=0), and while they run prints one line per finished level (host, instance, profile,
    concurrency, output tok/s, TTFT p50, errors, status and the server's running and queued
    maxima) as it lands, instead of silence or C(FAILED - RETRYING) countdowns.
  - Each poll asks the job's machine for the job's status (C(ansible.builtin.async_status)) and
    for the job's O(progress_file) (C(ansible.builtin.slurp)); new whole lines are printed and
    appended to O(dest) on the controller. When a job has finished, its last lines are read,
    its progress file is removed and its result is kept.
  - With O(heartbeat_file), each poll first refreshes the running jobs' heartbeat files (one
    C(touch -c) of them all through the connection, no module), so that a sweep started with
    O(llmops.sglang.throughput_sweep#module:heartbeat_file) stops when nobody polls it any more
    (the controller killed, its machine or its network gone). When the controller's main process is
    gone (this action's worker left orphaned), the action fails at its next poll and refreshes
    nothing more.
  - Runs with the task's connection, so with the same C(delegate_to) as the sweep task.
  - Lines already appended to O(dest) stay when the play is interrupted.
  - Action plugin; this file is its documentation.
author:
  - llmops.sglang developers (@llmops)
options:
  jobs:
    description:
      - The C(results) of the registered throughput_sweep loop that ran with C(async) and
        C(poll=0); each carries C(ansible_job_id) and the loop C(item) (an instance with
        C(name)). Skipped items (no job id) are passed through.
    type: list
    elements: dict
    required: true
  progress_file:
    description:
      - The sweep's progress file on the job's machine, with C({instance}) replaced by each
        job's C(item.name) (the value the sweep task gave its O(llmops.sglang.throughput_sweep#module:progress_file)).
      - Without it only the jobs' ends are waited for.
    type: str
  heartbeat_file:
    description:
      - The sweep's heartbeat file on the job's machine, with C({instance}) replaced by each job's
        C(item.name) (the value the sweep task gave its
        O(llmops.sglang.throughput_sweep#module:heartbeat_file)); its modification time is
        refreshed at each poll, and it is never created (the sweep creates it and removes it).
      - Keep O(poll), plus the time one poll of all the jobs takes, well below the sweep's
        O(llmops.sglang.throughput_sweep#module:heartbeat_timeout).
      - Without it no heartbeat is refreshed.
    type: str
  dest:
    description:
      - The controller's progress file (the bench role's C(reports/<run id>/progress.jsonl));
        created with its folder when missing, appended to under a lock (several hosts write it).
        Not written in check mode.
    type: path
  poll:
    description: Seconds between two looks at the jobs.
    type: float
    default: 2
  timeout:
    description: Seconds after which jobs still running fail the task.
    type: float
    default: 7320
attributes:
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: full
    details: In check mode the jobs (which send nothing then) are waited for and O(dest) is not written.
  diff_mode:
    description: Returns details on what changed, or would change, in diff mode.
    support: none
notes:
  - A job that failed fails the task, with the job's message; its result is in RV(results).
  - The jobs' own warnings (failed levels, drift, ...) are shown as this task's warnings.
seealso:
  - module: llmops.sglang.throughput_sweep
"""

EXAMPLES = r"""
- name: Start the sweeps
  llmops.sglang.throughput_sweep:
    url: "{{ item.connect_url }}"
    progress_file: "/tmp/sweep-{{ item.name }}.jsonl"
    progress_labels: {host: "{{ inventory_hostname }}", instance: "{{ item.name }}"}
    heartbeat_file: "/tmp/sweep-{{ item.name }}.heartbeat"
    heartbeat_timeout: 30
  loop: "{{ instances }}"
  async: 7320
  poll: 0
  register: started

- name: Wait, printing each level as it finishes
  llmops.sglang.sweep_wait:
    jobs: "{{ started.results }}"
    progress_file: "/tmp/sweep-{instance}.jsonl"
    heartbeat_file: "/tmp/sweep-{instance}.heartbeat"
    dest: "{{ playbook_dir }}/reports/run1/progress.jsonl"
  register: swept
"""

RETURN = r"""
results:
  description: One result per job, as C(ansible.builtin.async_status) returned it when the job
    finished (the sweep's C(ansible_facts) included), with the start result as C(item).
  returned: always
  type: list
  elements: dict
sweeps:
  description:
    - The finished sweeps by instance (the loop item's C(name)) - each job's C(sglang_sweep)
      fact, in the order of O(jobs); a job that failed or was skipped has none.
  returned: always
  type: dict
  sample: {gpu0: {schema_version: 1, points: []}}
"""
