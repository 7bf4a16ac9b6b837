# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The fleet-wide rollout check of deploy.yml's gate (controller side): the capacity floor and
the rollout time estimate, from every planned server host's variables and plan.

Action ``llmops.sglang.router_plan`` (option ``rollout``) calls ``rollout_check`` in deploy.yml's
"Plan every router" play, after every server host's plan and before any host changes; a
RolloutError fails that task, and with it the run (any_errors_fatal). The variables are read
from the server hosts' hostvars (the first planned host's; ``sglang_rollout_instances_at_once``
from each host), where a role's defaults are not: ``_rollout.DEFAULTS`` apply.
``sglang_rollout_batch`` is deploy.yml's play-level ``serial:``, which Ansible templates from
extra vars only: the batch is the extra var's, and one set in the inventory is refused (it
would be ignored by the rollout). docs/fleet.md "Capacity floor" and "Rollout time estimate".
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import flag_values
from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import (
    DEFAULT_BATCH,
    DEFAULTS,
    ESTIMATE_DEFAULTS,
    RolloutError,
    capacity_floor,
    count,
    pd_pair_check,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._rollouttime import (
    RolloutShape,
    duration,
    estimate,
    format_estimate,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._routing import RouterError, worker_types

PLAN_VAR = "__sglang_plan"
# what the check reads of a server host's hostvars
WANTED = (PLAN_VAR, *DEFAULTS)


def pd_sides(plan: Mapping[str, Any]) -> dict[str, int]:
    """A host plan's PD instances by side (sglang_pd); empty for a unified host."""
    out: dict[str, int] = {}
    for inst in plan.get("instances") or []:
        if inst.get("pd_role") and inst.get("rank0", True):
            out[str(inst["pd_role"])] = out.get(str(inst["pd_role"]), 0) + 1
    return out


def planned_hosts(hostvars: Mapping[str, Mapping[str, Any]], servers: Sequence[str]) -> list[str]:
    """The server hosts planned in this run (those with a server plan), in inventory order."""
    out = []
    for host in servers:
        plan = (hostvars.get(host) or {}).get(PLAN_VAR)
        if isinstance(plan, Mapping) and isinstance(plan.get("instances"), list):
            out.append(host)
    return out


def routed_instances(plan: Mapping[str, Any]) -> int:
    """A host's instances in the routers: its rank-0 instances (a multi-node group's other ranks are not)."""
    return sum(1 for inst in plan.get("instances") or [] if inst.get("rank0", True))


def estimate_costs(value: Any) -> tuple[dict[str, float], list[str]]:
    """``sglang_rollout_estimate`` over ESTIMATE_DEFAULTS, and the keys it set."""
    if value is None or value == "":
        value = {}
    if not isinstance(value, Mapping):
        raise RolloutError(f"sglang_rollout_estimate={value!r} must be a mapping of "
                           f"{', '.join(ESTIMATE_DEFAULTS)} (seconds)")
    unknown = sorted(set(value) - set(ESTIMATE_DEFAULTS))
    if unknown:
        raise RolloutError(f"sglang_rollout_estimate: unknown key(s) {', '.join(unknown)}; the keys are "
                           + ", ".join(f"{k} (default {v:g} s)" for k, v in ESTIMATE_DEFAULTS.items()))
    costs = dict(ESTIMATE_DEFAULTS)
    for key, raw in value.items():
        try:
            if isinstance(raw, bool):
                raise ValueError
            seconds = float(raw)
        except (TypeError, ValueError):
            seconds = -1.0
        if not seconds >= 0:
            raise RolloutError(f"sglang_rollout_estimate.{key}={raw!r} must be seconds (a number >= 0); "
                               f"default {ESTIMATE_DEFAULTS[key]:g}")
        costs[key] = seconds
    return costs, sorted(value)


def measured_load(hostvars: Mapping[str, Mapping[str, Any]], hosts: Sequence[str]) -> dict[str, Any] | None:
    """The longest start-to-ready time (``ready_after_s``) of the instances in the hosts' manifests
    before this run (the plan's ``previous``), with its host and instance; None when none measured."""
    best: dict[str, Any] | None = None
    for host in hosts:
        previous = (hostvars[host][PLAN_VAR].get("previous") or {})
        for inst in previous.get("instances") or []:
            value = inst.get("ready_after_s") if isinstance(inst, Mapping) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                continue
            if best is None or value > best["load_s"]:
                best = {"load_s": float(value), "host": host, "instance": inst.get("name")}
    return best


def pd_agreement(plans: Mapping[str, Mapping[str, Any]]) -> None:
    """RolloutError when the fleet's prefill/decode hosts disagree on what a pair must share: the
    transfer backend (a KV sent by one is not read by another), and the bootstrap port a decode
    falls back to when the router sends none (its host's ``sglang_pd.bootstrap_port``), which must
    be one that a prefill serves."""
    backends = {host: str(plan["pd"]["transfer_backend"]) for host, plan in plans.items() if plan.get("pd")}
    if len(set(backends.values())) > 1:
        said = ", ".join(f"{host} {backend}" for host, backend in backends.items())
        raise RolloutError(f"sglang_pd.transfer_backend differs between hosts ({said}): a prefill and a decode "
                           "of different backends cannot hand KV over; set the same on every host")
    served, fallbacks = set(), {}
    for host, plan in plans.items():
        for inst in plan.get("instances") or []:
            if inst.get("pd_role") == "prefill" and inst.get("bootstrap_port"):
                served.add(int(inst["bootstrap_port"]))
            elif inst.get("pd_role") == "decode":
                port = flag_values(inst.get("argv") or []).get("--disaggregation-bootstrap-port")
                if port is not None:
                    fallbacks.setdefault(int(port), []).append(f"{inst.get('name')} of {host}")
    stray = {port: names for port, names in fallbacks.items() if served and port not in served}
    if stray:
        said = "; ".join(f"{', '.join(names)}: {port}" for port, names in sorted(stray.items()))
        raise RolloutError(f"decode instances fall back to a bootstrap port no prefill instance serves ({said}; the "
                           f"prefills serve {', '.join(map(str, sorted(served)))}): set the same "
                           "sglang_pd.bootstrap_port on every host")


def router_mode_check(hostvars: Mapping[str, Mapping[str, Any]], servers: Sequence[str], *, pd_mode: bool,
                      router_host: str = "") -> None:
    """RolloutError when the router's mode does not fit the planned server hosts, before any host
    changes: prefill/decode instances (sglang_pd) behind a router not in PD mode (it would refuse
    them at registration, after it restarted) or unified instances behind one in PD mode (it
    routes to prefill and decode workers only); and, for the router on inventory host
    ``router_host``, a prefill it would register at loopback while a decode runs on another host
    (``_routing.worker_types``: that decode would ask its own loopback for the KV)."""
    hosts = planned_hosts(hostvars, servers)
    pd_agreement({host: hostvars[host][PLAN_VAR] for host in hosts})
    if pd_mode and router_host:
        try:
            worker_types({host: hostvars[host][PLAN_VAR] for host in hosts}, router_host)
        except RouterError as err:
            raise RolloutError(str(err)) from None
    sides = {host: pd_sides(hostvars[host][PLAN_VAR]) for host in hosts}
    paired = sorted(host for host, found in sides.items() if found)
    unified = sorted(host for host in hosts if routed_instances(hostvars[host][PLAN_VAR]) > sum(sides[host].values()))
    if paired and not pd_mode:
        raise RolloutError(f"the deployments of {', '.join(paired)} have prefill/decode instances (sglang_pd), and "
                           "this router is not in PD mode: set sglang_router_pd_disaggregation: true")
    if pd_mode and unified:
        raise RolloutError(f"the router is in PD mode (sglang_router_pd_disaggregation: true), which routes to "
                           f"prefill and decode workers only, and {', '.join(unified)} plan(s) unified instances: set "
                           "sglang_pd.role there, or sglang_router_pd_disaggregation: false")


def rollout_check(hostvars: Mapping[str, Mapping[str, Any]], servers: Sequence[str], *,
                  extra_vars: Mapping[str, Any], forks: int | None = None) -> dict[str, Any] | None:
    """The capacity floor (raises RolloutError when it cannot hold) and the time estimate of
    this run's rollout; None without a planned server host.

    ``hostvars``: host -> its variables (at least WANTED, templated); ``servers``: the group
    sglang_servers; ``extra_vars``: the run's extra vars (what deploy.yml's ``serial`` sees);
    ``forks``: Ansible's forks.
    """
    hosts = planned_hosts(hostvars, servers)
    if not hosts:
        return None
    first = hostvars[hosts[0]]

    def var(name: str) -> Any:
        value = first.get(name)
        return DEFAULTS[name] if value is None else value

    if "sglang_rollout_batch" in first and "sglang_rollout_batch" not in extra_vars:
        raise RolloutError(
            f"sglang_rollout_batch={first['sglang_rollout_batch']!r} is set in the inventory (host {hosts[0]}), "
            "but deploy.yml's serial: is templated at play level, from extra vars only, so the rollout would "
            f"ignore it and roll {DEFAULT_BATCH} of the hosts at once: pass it as an extra var "
            f"(-e sglang_rollout_batch={first['sglang_rollout_batch']}) and remove it from the inventory")
    if first.get("sglang_rollout_canary") not in (None, 0, "0") and "sglang_rollout_canary" not in extra_vars:
        raise RolloutError(
            f"sglang_rollout_canary={first['sglang_rollout_canary']!r} is set in the inventory (host {hosts[0]}), "
            "but deploy.yml's serial: (which puts the canary's host alone in the first batch) is templated at "
            "play level, from extra vars only, so the canary would share its batch with other hosts: pass it "
            f"as an extra var (-e sglang_rollout_canary={first['sglang_rollout_canary']}) and remove it from "
            "the inventory")
    batch = extra_vars.get("sglang_rollout_batch", DEFAULT_BATCH)
    counts = {host: routed_instances(hostvars[host][PLAN_VAR]) for host in hosts}
    at_once = max(count(hostvars[host].get("sglang_rollout_instances_at_once",
                                           DEFAULTS["sglang_rollout_instances_at_once"]),
                        "sglang_rollout_instances_at_once", least=1) for host in hosts)
    canary = count(var("sglang_rollout_canary"), "sglang_rollout_canary")
    canary_s = count(var("sglang_rollout_canary_seconds"), "sglang_rollout_canary_seconds")
    guard_s = count(var("sglang_rollout_guard_seconds"), "sglang_rollout_guard_seconds")
    min_available = var("sglang_rollout_min_available")
    floor = capacity_floor(per_host=list(counts.values()), at_once=at_once, min_available=min_available,
                           batch=batch, canary=canary)
    sides = {host: pd_sides(hostvars[host][PLAN_VAR]) for host in hosts}
    # sglang_pd: a prefill and a decode stay in the routers; refused where a floor is asked for,
    # else said (a one-host split has nothing to keep the pair with)
    unpaired = pd_pair_check(sides, at_once=at_once, batch_hosts=floor["requested_hosts"]) if any(sides.values()) else []
    if unpaired and floor["floor"]:
        raise RolloutError(f"sglang_rollout_min_available={min_available!r}: " + "; ".join(unpaired))
    costs, costs_set = estimate_costs(var("sglang_rollout_estimate"))
    measured = measured_load(hostvars, hosts)
    if "load_s" in costs_set:
        load_s, load_said = costs["load_s"], "set (sglang_rollout_estimate.load_s)"
    elif measured:
        load_s = measured["load_s"]
        load_said = f"measured (the longest ready_after_s of the last deploy: {measured['host']} {measured['instance']})"
    else:
        load_s, load_said = costs["load_s"], "a default (nothing measured yet: set sglang_rollout_estimate.load_s)"
    shape = RolloutShape(hosts=len(hosts), per_host=max(counts.values()), load_s=load_s,
                         host_fixed_s=costs["host_fixed_s"], batch_hosts=floor["requested_hosts"], at_once=at_once,
                         step_s=costs["step_s"], run_fixed_s=costs["run_fixed_s"], canary=canary,
                         canary_window_s=canary_s if canary else 0, guard_s=guard_s, forks=forks)
    result = estimate(shape)
    fixed = {key: costs[key] for key in ("host_fixed_s", "step_s", "run_fixed_s")}
    lines = format_estimate(result)
    lines.insert(1, f"  load time L {duration(load_s)}: {load_said}")
    lines.insert(2, "  fixed F {}, step S {}, run P {} ({}); worst case: every instance changes".format(
        duration(fixed["host_fixed_s"]), duration(fixed["step_s"]), duration(fixed["run_fixed_s"]),
        "sglang_rollout_estimate" if set(costs_set) & set(fixed) else "defaults, set sglang_rollout_estimate"))
    lines.append(f"  hosts per batch: sglang_rollout_batch={batch} (deploy.yml serial: an extra var, -e)")
    if floor["floor"]:
        lines.append(f"  capacity floor: sglang_rollout_min_available={min_available} = {floor['floor']} of "
                     f"{floor['instances']} instances, holds (at most {floor['max_hosts']} host(s) per batch)")
    else:
        lines.append("  capacity floor: none (sglang_rollout_min_available unset)")
    lines += [f"  prefill/decode: {line}" for line in unpaired]
    return {"hosts": hosts, "instances": counts, "batch": batch, "at_once": at_once, "floor": floor,
            "load": {"load_s": load_s, "source": load_said, "measured": measured}, "costs": costs,
            "estimate": result, "lines": lines}
