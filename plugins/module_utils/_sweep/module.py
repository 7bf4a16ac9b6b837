# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What the ``llmops.sglang.throughput_sweep`` module does (``plugins/modules/throughput_sweep.py``
is its documentation and this file's caller): its argument spec (``spec.py``, generated from that
documentation) and ``run(module)``, which turns
the parameters into ``SweepOptions``, runs the sweep with the progress file and stop signals, and
exits with the facts, a summary line and the warnings. ``module`` is the ``AnsibleModule`` (any
object with ``params``, ``check_mode``, ``warn``, ``exit_json`` and ``fail_json``), so this file
imports nothing of Ansible.
"""
from __future__ import annotations

import sys
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench import progress as _progress
from ansible_collections.llmops.sglang.plugins.module_utils._bench.interrupt import STOP_SIGNALS
from ansible_collections.llmops.sglang.plugins.module_utils._bench.stats import clean
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.client import (
    HAS_AIOHTTP,
    missing_aiohttp_message,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import SweepError, level_label
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.curve import error_summary
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.options import SweepOptions
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.run import run_sweep
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.spec import ACTION_ONLY, ARGUMENT_SPEC

__all__ = ["ARGUMENT_SPEC", "MUTUALLY_EXCLUSIVE", "failed_levels", "run", "summary"]

MUTUALLY_EXCLUSIVE = [("requests", "duration")]


def summary(facts: dict[str, Any]) -> str:
    peak = facts.get("peak")
    knee = facts.get("knee")
    parts = [f"{len(facts.get('points') or [])} levels"]
    parts.append(f"peak {peak['output_tok_s']} tok/s at {level_label(peak)}" if peak else "no successful level")
    limit = facts.get("slo_limit")
    if limit:
        parts.append(f"SLO limit {limit['highest_pass']} {limit['unit']} (lowest failing {limit['lowest_fail']})")
    parts.append(f"knee {level_label(knee)}" if knee else "no knee")
    if facts.get("stopped_on_plateau"):
        parts.append("stopped on plateau")
    if facts.get("stopped_on_timeout"):
        parts.append("stopped by sweep_timeout")
    if facts.get("levels_with_errors"):
        if facts.get("mode") == "rate":  # every rate level has the same C (its in-flight cap)
            parts.append("requests failed at " + ", ".join(level_label(p) for p in facts.get("points") or [] if not clean(p)))
        else:
            parts.append("requests failed at C=" + ", ".join(map(str, facts["levels_with_errors"])))
    return ", ".join(parts)


def failed_levels(facts: dict[str, Any]) -> str:
    """``C=4: 4 of 8 requests failed (50%: connection 4); C=8: ...`` (``4 req/s: ...`` in rate
    mode) for fail_on_errors."""
    bad = [p for p in facts.get("points") or [] if not clean(p)]
    return "; ".join(f"{level_label(p)}: {error_summary(p)}" for p in bad)


def run(module: Any) -> None:
    """The module's work, from its parsed parameters to ``exit_json``/``fail_json``."""
    params: dict[str, Any] = module.params
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: no requests sent")
    if not HAS_AIOHTTP:
        module.fail_json(msg=missing_aiohttp_message(sys.executable))
    for name in ACTION_ONLY:  # the action plugin's (it filled the options, set watch_pid, expanded sweep)
        params.pop(name, None)
    options = SweepOptions(**params)
    progress, labels = options.progress_file, options.progress_labels or {}

    def on_level(point: dict[str, Any], time_scale: Any) -> None:
        if progress:
            _progress.append(progress, _progress.record(point, labels, time_scale))

    try:
        # stdout: the result's way back; when its reader is gone, so is whoever wanted the sweep
        facts = run_sweep(options, signals=STOP_SIGNALS, output_fd=1, on_level=on_level)
    except SweepError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"cannot write the progress file {progress}: {exc}")
    for warning in facts.get("warnings") or []:
        module.warn(warning)
    if params["fail_on_errors"] and facts.get("levels_with_errors"):
        module.fail_json(
            msg=f"requests failed at {failed_levels(facts)} (fail_on_errors); the sweep is in ansible_facts.sglang_sweep",
            ansible_facts={"sglang_sweep": facts},
        )
    module.exit_json(changed=False, msg=summary(facts), ansible_facts={"sglang_sweep": facts})
