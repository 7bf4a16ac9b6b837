# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.tune_search: one step of the tune role's search, on the controller
(documentation: plugins/modules/tune_search.py; the rules: plugins/plugin_utils/_tune.py and
_tunereport.py).

Why an action: every step is a decision made on the controller from what the play already has
(the role's variables, the hosts' GPU facts, the sweeps so far, the vars files under the
inventory); nothing runs on a host. The role names the step it is at; each step's inputs are
options, checked here, and a bad one fails the task naming it (the rules' ``TuneError``)."""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils import _tune, _tunereport
from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import StepAction

SLO_KEYS = ("ttft_p99_ms", "itl_p50_ms", "concurrency", "score", "target_rps")


def host_facts(hosts: list[str], hostvars: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each host's sglang_host fact ({} where there is none): the GPUs its class is made of."""
    out = {}
    for host in hosts:
        host_vars = hostvars[host] if host in hostvars else {}
        facts = host_vars["ansible_facts"] if "ansible_facts" in host_vars else {}
        out[host] = dict((facts or {}).get("sglang_host") or {})
    return out


def plan(args: Mapping[str, Any], host: str, hostvars: Mapping[str, Any], groups: Mapping[str, Any]) -> dict[str, Any]:
    """The objective, the candidates in order (each with the server variables that deploy it)
    and the play's classes, with this host's own."""
    settings = dict(args.get("slo") or {})
    objective = _tune.slo(**{k: settings[k] for k in SLO_KEYS if k in settings})
    lowest = min([int(c) for c in args.get("levels") or []] or [1])
    candidates = [{**c, "vars": _tune.candidate_vars(c, args.get("extra_args"), args.get("pd")),
                   "probe_levels": [lowest * c["instances"]]}
                  for c in _tune.candidates(args.get("space") or {}, args.get("profiles") or {})]
    hosts = [str(h) for h in args.get("hosts") or []]
    _tune.refuse_pd({h: (hostvars.get(h) or {}).get("sglang_pd") for h in hosts if h in hostvars}, candidates)
    classes = _tune.classes(hosts, host_facts(hosts, hostvars), groups, list(args.get("class_groups") or []),
                            str(args.get("vars_dir") or ""))
    mine = next(({"name": name, "value": value} for name, value in classes.items() if host in value["hosts"]), None)
    return {"slo": objective, "candidates": candidates, "classes": classes, "class": mine}


def decide(args: Mapping[str, Any]) -> dict[str, Any]:
    """After a candidate's probe (its lowest level): sweep the rest (``rest_levels``) or prune it."""
    levels = [int(c) for c in args.get("levels") or []]
    objective = dict(args.get("slo") or {})
    instances = _tune.pd_instances(dict(args.get("candidate") or {}))
    probe = _tune.per_instance(dict(args.get("probe") or {}), instances) or {}
    decision = _tune.decide(probe, levels, objective, _tune.best_so_far(list(args.get("results") or [])))
    decision["rest_levels"] = [c * instances for c in _tune.rest_levels(levels, objective)] \
        if decision["action"] == "sweep" else []
    return {"decision": decision}


def record(args: Mapping[str, Any]) -> dict[str, Any]:
    """One candidate's record for the search's results (swept, pruned or failed)."""
    candidate = dict(args.get("candidate") or {})
    instances = _tune.pd_instances(candidate)  # a split's sweeps, in the unit of one instance
    return {"record": _tune.result(candidate, dict(args.get("slo") or {}), args["plateau_gain"],
                                   _tune.per_instance(args.get("probe") or None, instances),
                                   _tune.per_instance(args.get("rest") or None, instances),
                                   args.get("decision") or None, str(args.get("error") or ""))}


def _reader(vars_dir: str) -> Callable[[str], str | None]:
    def read(rel: str) -> str | None:
        path = os.path.join(vars_dir, rel)
        if not vars_dir or not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    return read


def outcome(args: Mapping[str, Any]) -> dict[str, Any]:
    """A class's outcome: the winner (or why there is none), its fact, the vars file's text, what
    becomes of the vars files (read under ``info.vars_dir``: what is there before)."""
    info = dict(args.get("info") or {})
    return {"outcome": _tunereport.outcome(list(args.get("results") or []), dict(args.get("slo") or {}), info,
                                           args.get("extra_args"), str(args.get("generated") or ""),
                                           _reader(str(info.get("vars_dir") or "")))}


def report(args: Mapping[str, Any]) -> dict[str, Any]:
    """tune.md, tune.json and tune.csv of the run, from the classes' outcomes."""
    return {"files": _tunereport.report_files([o for o in args.get("outcomes") or [] if isinstance(o, Mapping)])}


class ActionModule(StepAction):
    """Run the named step of the search on the controller."""

    NAME = "tune_search"
    STEPS = ("plan", "decide", "record", "outcome", "report")
    ERRORS = (_tune.TuneError,)
    LABEL = "tune "

    def step_plan(self, args: Mapping[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return plan(args, str(task_vars.get("inventory_hostname")), task_vars.get("hostvars") or {},
                    task_vars.get("groups") or {})

    def step_decide(self, args: Mapping[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return decide(args)

    def step_record(self, args: Mapping[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return record(args)

    def step_outcome(self, args: Mapping[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return outcome(args)

    def step_report(self, args: Mapping[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        return report(args)
