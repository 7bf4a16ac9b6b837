#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Documentation of the action llmops.sglang.generate_plan (plugins/action/generate_plan.py and
plugins/plugin_utils/_generateplan.py do the work on the controller; nothing of this file runs)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: generate_plan
short_description: Plan a generation job - where it runs, its targets and their concurrency, its input
version_added: "0.3.0"
description:
  - Runs on the controller, once for the play (the generate role runs it with C(run_once)). Reads
    the generate role's variables (C(sglang_generate_*)) and, from the play's hosts' variables,
    each server host's deployment manifest (C(__sglang_generate_manifest), read by the role with
    M(llmops.sglang.server_status)), its tuned result (C(sglang_tuned)), its sweeps
    (C(sglang_sweeps)) and each router host's C(sglang_router_client).
  - Targets - through the router (one target, the sum of the instances' concurrency; the job runs on
    the router host) or straight to every rank-0 instance (each its own target; the job runs on
    C(sglang_generate_host), the first server host when unset); C(auto) takes the router when the
    play has one.
  - An instance's concurrency - C(sglang_generate_concurrency), else its host's
    C(sglang_tuned.at_concurrency), else its last sweep's knee (or peak), else its
    C(max_running_requests), else C(sglang_generate_fallback_concurrency) (with a warning); each target says where its number came from.
  - Checks the input on the controller, before anything is copied or sent - every line, each
    refused one with its number and reason (unless C(sglang_generate_input_on_host)) - and names
    its copy on the host by its sha256 (C(input-<sha256[:16]>.jsonl) in the job's folder), so that
    a changed input never overwrites the one a job began with.
  - Action plugin; this file is its documentation.
author:
  - llmops.sglang developers (@llmops)
options: {}
attributes:
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: full
  diff_mode:
    description: Returns details on what changed, or would change, in diff mode.
    support: none
seealso:
  - module: llmops.sglang.generate_job
"""

EXAMPLES = r"""
- name: Plan the job
  llmops.sglang.generate_plan:
  run_once: true
  register: plan
"""

RETURN = r"""
plan:
  description: The plan.
  returned: success
  type: dict
  contains:
    job:
      description: The job's name (C(sglang_generate_job), else the input file's name without C(.jsonl)).
      type: str
    host:
      description: The inventory host the job runs on.
      type: str
    via:
      description: C(router) or C(instances).
      type: str
    python:
      description: The Python that runs the job there (it has aiohttp - the router's or the engine's venv).
      type: str
    folder:
      description: The job's folder on that host (C(sglang_generate_dir)/<job>).
      type: str
    input:
      description: C(src) (on the controller, or null), C(path) (on the host), C(digest), C(requests), C(checked).
      type: dict
    targets:
      description: Each target's C(name), C(url), C(concurrency) and C(source) (where the concurrency came from).
      type: list
      elements: dict
    instances:
      description:
        - Through the router, the instances behind it (C(name), C(url) as the router's host reaches
          them), whose C(/metrics) give each one's share; empty otherwise.
      type: list
      elements: dict
    concurrency:
      description: The targets' concurrency summed.
      type: int
    warnings:
      description: What the plan warns about.
      type: list
      elements: str
"""
