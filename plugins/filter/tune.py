# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Filters of the tune role: thin shells over plugin_utils/_tune.py (the search) and _tunereport.py (its report)."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.sglang.plugins.plugin_utils import _tune, _tunereport


def _wrap(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """Bad input becomes an AnsibleFilterError naming the filter (the message names the fix)."""
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except _tune.TuneError as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from exc
    call.__doc__ = func.__doc__
    return call


def _tune_slo(settings: dict[str, Any]) -> dict[str, Any]:
    """{ttft_p99_ms, itl_p50_ms, concurrency, score, target_rps} -> the checked objective."""
    return _tune.slo(**{k: settings.get(k) for k in ("ttft_p99_ms", "itl_p50_ms", "concurrency", "score", "target_rps")
                        if k in settings})


def _tune_classes(hosts: list[str], hostvars: Any, groups: dict[str, list[str]],
                  class_groups: list[str] | None = None, vars_dir: str = "") -> dict[str, Any]:
    """Play hosts -> {class: {hosts, representative, group, vars_files}} (vars_dir: the
    inventory folder, where an existing vars file can rule a target out)."""
    facts = {h: ((hostvars[h].get("ansible_facts") or {}).get("sglang_host") or {}) for h in hosts}
    return _tune.classes(hosts, facts, groups, class_groups or [], vars_dir)


def _tune_decide(probe: dict[str, Any], results: list[dict[str, Any]], levels: list[int],
                 slo: dict[str, Any]) -> dict[str, Any]:
    """The probe sweep (lowest level) -> {action: sweep|prune, bound, reason, rest_levels}."""
    decision = _tune.decide(probe, levels, slo, _tune.best_so_far(results))
    decision["rest_levels"] = _tune.rest_levels(levels, slo) if decision["action"] == "sweep" else []
    return decision


def _tune_result(candidate: dict[str, Any], slo: dict[str, Any], plateau_gain: float = 0.05,
                 probe: dict[str, Any] | None = None, rest: dict[str, Any] | None = None,
                 decision: dict[str, Any] | None = None, error: str = "") -> dict[str, Any]:
    """One candidate's record for the search's results."""
    return _tune.result(candidate, slo, float(plateau_gain), probe or None, rest or None, decision, error)


def _tune_outcome(results: list[dict[str, Any]], objective: dict[str, Any], info: dict[str, Any],
                  extra_args: Any = None, generated: str = "") -> dict[str, Any]:
    """A class's outcome; info's vars_dir is where the vars files are read (what is there before)."""
    vars_dir = str(info.get("vars_dir") or "")

    def read(rel: str) -> str | None:
        path = os.path.join(vars_dir, rel)
        if not vars_dir or not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    return _tunereport.outcome(results, objective, info, extra_args, generated, read)


class FilterModule:
    """Tune filters."""

    def filters(self) -> dict[str, Any]:
        funcs: dict[str, Callable[..., Any]] = {
            "tune_slo": _tune_slo, "tune_classes": _tune_classes, "tune_candidates": _tune.candidates,
            "tune_candidate_vars": _tune.candidate_vars, "tune_decide": _tune_decide, "tune_result": _tune_result,
            "tune_outcome": _tune_outcome, "tune_report_files": _tunereport.report_files,
        }
        return {name: _wrap(name, func) for name, func in funcs.items()}
