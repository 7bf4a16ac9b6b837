#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Documentation of the action llmops.sglang.model_stage_wait (plugins/action/model_stage_wait.py
does the work on the controller; nothing of this file runs)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_stage_wait
short_description: Wait for async model stagings, printing their progress
version_added: "0.3.0"
description:
  - Waits for the C(async) jobs that M(llmops.sglang.model_stage) tasks started with C(poll=0)
    and, while they run, prints the last line of each job's progress file when it moved (host,
    repo, files done, GB done of the total, the rate, the file being downloaded).
  - Each poll asks the host for the job's status (C(ansible.builtin.async_status)) and reads the
    last line of its progress file (C(tail -n 1) through the connection).
  - Runs with the task's connection, so with the same C(delegate_to) as the staging task.
  - Action plugin; this file is its documentation.
author:
  - llmops.sglang contributors (@llmops)
options:
  jobs:
    description: The registered C(results) of the staging task, started with C(async) and C(poll=0).
    type: list
    elements: dict
    required: true
  progress_file:
    description:
      - The jobs' progress file on the host; C({role}) is replaced by the C(role) key of each job's
        loop item (the model role's sources, C(model) or C(draft)).
    type: str
  poll:
    description: Seconds between looks.
    type: float
    default: 5
  timeout:
    description: Seconds to wait for all jobs before failing.
    type: float
    default: 21600
attributes:
  check_mode:
    description: Only reads.
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
"""

EXAMPLES = r"""
- name: Start the stagings
  llmops.sglang.model_stage:
    repo: Qwen/Qwen3-8B
    revision: 9c925d64d72725edaf899c6cb9c377fd0709d9c5
    cache_dir: /data/models
    progress_file: /data/models/progress.jsonl
  async: 21600
  poll: 0
  register: jobs

- name: Wait for them, showing their progress
  llmops.sglang.model_stage_wait:
    jobs: "{{ [jobs] }}"
    progress_file: /data/models/progress.jsonl
"""

RETURN = r"""
results:
  description: Each job's final C(async_status) result (the module's result), in the order started.
  returned: always
  type: list
  elements: dict
"""
