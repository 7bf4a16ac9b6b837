#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Documentation of the action llmops.sglang.bench_plan (plugins/action/bench_plan.py does the
work on the controller, plugins/plugin_utils/_benchplan.py holds the rules; nothing of this file
runs)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: bench_plan
short_description: Plan the throughput sweeps of one host for the bench role, changing nothing
version_added: "0.3.0"
description:
  - Made on the controller from the host's deployment manifest and the role C(llmops.sglang.bench)'s
    variables (C(sglang_bench_instances), C(sglang_bench_parallel_instances),
    C(sglang_bench_run_on), C(sglang_bench_python), C(sglang_bench_progress_poll),
    C(sglang_bench_sweep_timeout), C(sglang_bench_heartbeat_limit), C(sglang_bench_run_id),
    C(sglang_bench_target)), read from
    the task's variables.
    Nothing runs on the host.
  - The instances to sweep - C(sglang_bench_instances), or every instance of the manifest; a
    name the host does not have is warned about, and a list of which the host has none fails,
    naming the host's instances - and the batches they are swept in (one instance each, or all at
    once with C(sglang_bench_parallel_instances)).
  - A host's prefill/decode instances (C(sglang_pd)) are swept as the pair they are - one sweep,
    named after them (C(gpu1+gpu0), decodes first), whose requests go each to a prefill and a decode
    with a bootstrap room as the PD router sends them (M(llmops.sglang.throughput_sweep)'s
    O(llmops.sglang.throughput_sweep#module:pd)), with each side's C(/metrics) read. Every PD instance
    of the host that is up takes part, whichever C(sglang_bench_instances) named. A host with one side
    only (its pairs span hosts) cannot pair on its own - each instance is swept unpaired, with a
    warning naming the PD router's sweep (C(sglang_bench_target=router)) as the pair's.
  - The URL each sweep is sent to (the instance's C(connect_url) next to the server or on a
    local host, its C(advertise_url) from the controller), where the sweeps run (the host, or
    C(localhost) with C(sglang_bench_run_on=controller)) and with which Python (the controller's
    C(ansible_playbook_python); on the host C(sglang_bench_python), else the manifest's engine
    venv, else the host's C(ansible_python_interpreter)).
  - The waits (the async job's and M(llmops.sglang.sweep_wait)'s limit,
    C(sglang_bench_sweep_timeout) + 120 s; the heartbeat timeout of a remote sweep,
    C(sglang_bench_heartbeat_limit), 0 for max(30, 5 x C(sglang_bench_progress_poll)) s), the run's id and the names of this host's
    progress and heartbeat files.
author:
  - llmops.sglang contributors (@llmops)
options:
  manifest:
    description:
      - The deployment manifest (M(llmops.sglang.server_status)'s C(manifest)), or, for the sweep
        through a router, a manifest of one instance, the router (with O(through_router)).
    type: dict
    required: true
  through_router:
    description:
      - The manifest is the router's, and C(sglang_bench_instances) (names of workers) does not apply.
    type: bool
    default: false
  health:
    description:
      - >-
        The host's instances as M(llmops.sglang.server_status) probed them (C(name), C(up)), with
        C(sglang_bench_target=router) - an instance that is down is not swept, and comes back in
        RV(plan.down). Not read with O(through_router).
    type: list
    elements: dict
  workers:
    description:
      - With O(through_router), the deployments behind the router, each C({host, manifest}). When
        one of their instances is a prefill or a decode (C(sglang_pd)), the router's sweep's
        C(worker_metrics) (in RV(plan.sweeps)) lists every rank-0 instance with its side, and the router's sweep reads their C(/metrics)
        (the per-side tables of the report).
    type: list
    elements: dict
attributes:
  check_mode:
    description: Reads only; runs in check mode too.
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
  action:
    description: Runs on the controller only.
    support: full
notes:
  - The run's id, without C(sglang_bench_run_id), is the time the controller's C(ansible-playbook)
    started (UTC, C(%Y%m%dT%H%M%SZ)) - every host of every play of one run computes the same one,
    so the workers' play and the routers' play of C(playbooks/bench.yml) write one report folder.
seealso:
  - module: llmops.sglang.throughput_sweep
  - module: llmops.sglang.sweep_wait
"""

EXAMPLES = r"""
- name: Plan this host's sweeps
  llmops.sglang.bench_plan:
    manifest: "{{ status.manifest }}"
  register: bench

- name: Sweep them, one batch after another
  ansible.builtin.debug:
    msg: "{{ item | map(attribute='url') | list }}"
  loop: "{{ bench.plan.batches }}"
"""

RETURN = r"""
plan:
  description: The plan of this host's sweeps.
  returned: success
  type: dict
  contains:
    run_id:
      description: The run's id, the name of its report folder.
      type: str
      sample: 20261204T160512Z
    run_key:
      description: Names this host's progress and heartbeat files (never a leftover of an earlier run).
      type: str
    sweeps:
      description:
        - The sweeps, each with C(name) (an instance's, or a PD pair's), C(url), C(progress_file),
          C(heartbeat_file), and for a PD host's pair C(pd) (throughput_sweep's
          O(llmops.sglang.throughput_sweep#module:pd)); C(worker_metrics) for a PD pair, and with
          O(through_router) and a prefill/decode deployment in O(workers), its instances as
          M(llmops.sglang.throughput_sweep)'s O(llmops.sglang.throughput_sweep#module:worker_metrics)
          takes them (C(name) host/instance, C(url), C(side)).
      type: list
      elements: dict
    batches:
      description: RV(plan.sweeps) in the batches they are swept in.
      type: list
      elements: list
    down:
      description: With O(health), the instances that were down (not swept), each with C(host).
      type: list
      elements: dict
    python:
      description: The Python that runs the sweeps.
      type: str
    delegate_to:
      description: Where the sweeps run, C(localhost) or the host.
      type: str
    heartbeat_timeout:
      description: Seconds without a heartbeat after which a sweep stops.
      type: float
    job_timeout:
      description: Seconds the async job and M(llmops.sglang.sweep_wait) wait at most.
      type: int
    progress_file:
      description: The progress file of each sweep, C({instance}) standing for its name.
      type: str
    heartbeat_file:
      description: The heartbeat file of each sweep, C({instance}) standing for its name.
      type: str
    warnings:
      description: What the plan warned about (names of C(sglang_bench_instances) the host does not have).
      type: list
      elements: str
"""
