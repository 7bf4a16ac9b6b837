#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Documentation of the action llmops.sglang.generate_wait (plugins/action/generate_wait.py does the
work on the controller; nothing of this file runs)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: generate_wait
short_description: Wait for a generation job, printing its progress
version_added: "0.3.0"
description:
  - Waits for the job that M(llmops.sglang.generate_job) runs in O(folder) (started with C(async)
    and C(poll=0), or running already from an earlier play), and prints one line of progress
    each time the job's C(progress.json) changed - lines done of total, failed, in flight,
    lines/s and tokens/s in and out over the last minute, the ETA and each target's share (and
    which are down).
  - Each poll runs M(llmops.sglang.generate_job) with C(step=status) on the task's host (the
    same C(delegate_to) as the job). While the job has not taken its folder yet (just started),
    the async job O(jid) is asked; a job that failed before it ran fails this task with its message.
  - With O(dest), appends each new progress document to C(O(dest)/progress.jsonl) and, when the
    job ended, writes C(summary.json) and C(summary.md) there (on the controller).
  - Ending this task (Ctrl-C, the controller killed, O(timeout)) does not stop the job - it runs
    on, and a later wait (C(generate.yml) again) picks it up.
  - Action plugin; this file is its documentation.
author:
  - llmops.sglang developers (@llmops)
options:
  folder:
    description: The job's folder on the host.
    type: path
    required: true
  jid:
    description: The C(ansible_job_id) of the async O(llmops.sglang.generate_job#module:step=run) task, when this play started it.
    type: str
  poll:
    description: Seconds between two looks at the job.
    type: float
    default: 5
  timeout:
    description: Seconds after which the wait ends (the job runs on); 0 waits until the job ends.
    type: float
    default: 0
  start_timeout:
    description: Seconds the job may take to take its folder after O(jid) started it.
    type: float
    default: 120
  dest:
    description: A folder on the controller for C(progress.jsonl), C(summary.json) and C(summary.md); created when missing.
    type: path
  host_label:
    description: The job host's name, for the summary.
    type: str
    default: ""
attributes:
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: full
    details: In check mode the job's status is read once and nothing is written.
  diff_mode:
    description: Returns details on what changed, or would change, in diff mode.
    support: none
seealso:
  - module: llmops.sglang.generate_job
"""

EXAMPLES = r"""
- name: Wait for the job, printing its progress
  llmops.sglang.generate_wait:
    folder: /srv/generate/prompts
    jid: "{{ started.ansible_job_id }}"
    dest: "{{ playbook_dir }}/reports/generate/prompts"
"""

RETURN = r"""
state:
  description: The job's state when the wait ended (C(finished), C(stopped), C(failed), C(interrupted), or C(running) after O(timeout)).
  returned: always
  type: str
generate:
  description: The job's last progress document (docs/generate.md "Progress").
  returned: always
  type: dict
"""
