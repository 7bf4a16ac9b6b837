# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Doc fragment llmops.sglang.sweep_action: the options throughput_sweep's action plugin reads on
the controller before the module runs (plugins/action/throughput_sweep.py)."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  watch_controller:
    description:
      - Run over the local connection (the controller's machine) without O(watch_pid), the action
        plugin sets O(watch_pid) to the controller's ansible process, so that an async sweep there
        stops with the play. V(false) lets such a sweep outlive C(ansible-playbook) (a sweep started
        with C(poll=0) and collected by a later play); elsewhere it changes nothing (a remote sweep
        stops on its O(heartbeat_file)).
    type: bool
    default: true
  sweep:
    description:
      - One sweep of the bench role's plan (M(llmops.sglang.bench_plan)'s C(plan.sweeps) item) - its
        C(url), C(pd), C(worker_metrics), C(progress_file) and C(heartbeat_file), each as if given as
        the option of its name (a key the task gives too is the task's); its other keys are not read.
    type: dict
  options_from_role:
    description:
      - Take every documented option the task does not give from that role's variables,
        C(sglang_<role>_<option>) (C(bench) - C(sglang_bench_timeout) is O(timeout)), read by the
        action plugin on the controller. An option documented here without a default is left to
        its own rule while the role's variable holds the role's declared default for it, the role's
        way to say unset (C(sglang_bench_requests=0) leaves O(requests) to max(2*C, 8)).
      - Not set, only the task's arguments count (the module used by itself).
    type: str
    choices: [bench]
"""
