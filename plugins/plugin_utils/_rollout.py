# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The order in which a host's instances are started and replaced (controller side).

A deploy starts what does not run and replaces what changed, in batches, each batch ready
before the next. Without a router: one batch of every instance (``parallel``: the plan checked
that their pinned total fits) or one instance per batch (``serial``). Behind a router, no
request may be lost: instances that do not run yet (and those that keep running) come first,
then the instances to replace, ``at_once`` at a time and never all of the host's at once, each
taken out of the routers, drained, restarted, ready and put back before the next batch.

Across hosts, ``capacity_floor`` sizes the batch of hosts (``sglang_rollout_batch``) so that
``sglang_rollout_min_available`` instances stay in the routers, and refuses before anything
starts when it cannot (docs/fleet.md "Capacity floor").
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils._declared import role_default

DEFAULT_BATCH = "100%"
# The variables deploy.yml's rollout check reads from the hosts' hostvars, where a role's defaults
# are not: the server role's declared defaults (roles/server/meta/argument_specs.yml) apply there.
# sglang_rollout_batch is a play's serial, no role variable: every host in one batch.
DEFAULTS: dict[str, Any] = {
    "sglang_rollout_batch": DEFAULT_BATCH,
    **{name: role_default("server", name) for name in (
        "sglang_rollout_min_available", "sglang_rollout_instances_at_once", "sglang_rollout_canary",
        "sglang_rollout_canary_seconds", "sglang_rollout_guard", "sglang_rollout_guard_seconds",
        "sglang_rollout_estimate")},
}
# The rollout time model's costs in seconds (_rollouttime; sglang_rollout_estimate's keys) when
# nothing better is known: the hand-run deployment's kind (docs/fleet.md "Rollout time model").
# load_s: while no instance's load time was measured (ready_after_s); set, it wins over the measurement.
ESTIMATE_DEFAULTS: dict[str, float] = {"load_s": 180.0, "host_fixed_s": 60.0, "step_s": 15.0, "run_fixed_s": 120.0}


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    size = max(1, size)
    return [items[i:i + size] for i in range(0, len(items), size)]


def rollout_batches(plan: Mapping[str, Any], restart: Sequence[str], running: Sequence[str], *,
                    policy: str = "parallel", routed: bool = False, at_once: int = 1,
                    canary: int = 0, canary_s: float = 0.0, guard_s: float = 0.0, canary_alone: bool = True,
                    ) -> tuple[list[dict[str, Any]], list[str]]:
    """([{instances: [plan instances], restart: [names to stop first], replace: bool, canary:
    bool, guard_s: seconds}], warnings).

    ``restart``: the instances whose script, environment or engine changed; ``running``: the
    instances that run now (only those are stopped and, behind a router, drained). Behind
    routers, ``canary`` > 0 (this host carries the rollout's canary) makes the first batch of
    replaced instances the canary, ``canary`` of them (at most ``at_once``), watched for
    ``canary_s`` seconds; every other batch of replaced instances is watched for ``guard_s``
    (0: not watched). A canary needs its host alone in its batch of hosts (``canary_alone``:
    else other hosts would change during its window): without that it is not made, with a
    warning. docs/fleet.md "Canary, guard and rollback".
    """
    instances = list(plan.get("instances") or [])
    by_name = {i["name"]: i for i in instances}
    replace = [i["name"] for i in instances if i["name"] in restart and i["name"] in running]
    fresh = [i["name"] for i in instances if i["name"] not in replace]
    restarted_stopped = [n for n in fresh if n in restart]  # changed but not running: just start
    warnings: list[str] = []

    def batch(names: list[str], replacing: bool, watch: float = 0.0, first: bool = False) -> dict[str, Any]:
        return {"instances": [by_name[n] for n in names],
                "restart": [n for n in names if n in replace or n in restarted_stopped],
                "replace": replacing, "canary": first, "guard_s": float(watch) if replacing else 0.0}

    if not routed:
        names = [i["name"] for i in instances]
        groups = [names] if policy == "parallel" else [[n] for n in names]
        return [batch(g, any(n in replace for n in g)) for g in groups if g], warnings
    size = max(1, int(at_once))
    if replace and len(instances) > 1 and size >= len(instances):
        size = len(instances) - 1
        warnings.append(f"sglang_rollout_instances_at_once={at_once} would take every instance of this host out "
                        f"of the routers at once: replacing {size} at a time")
    batches = []
    if fresh:
        groups = [fresh] if policy == "parallel" else [[n] for n in fresh]
        batches += [batch(g, False) for g in groups]
    chunks = _pd_chunks(replace, by_name, size, warnings) if _sides(instances) else _chunks(replace, size)
    if canary > 0 and replace and not canary_alone:
        warnings.append(f"sglang_rollout_canary={canary}: no canary, this host is not alone in its batch of hosts "
                        "(deploy.yml's serial puts it alone only when sglang_rollout_canary is an extra var: "
                        "-e sglang_rollout_canary=N)")
        canary = 0
    if canary > 0 and replace and _sides(instances):  # a PD host's canary stays on one side
        first = min(int(canary), len(chunks[0]))
        chunks = [chunks[0][:first], chunks[0][first:], *chunks[1:]]
    elif canary > 0 and replace:
        first = min(int(canary), size)
        chunks = [replace[:first]] + _chunks(replace[first:], size)
    batches += [batch(g, True, canary_s if (canary > 0 and i == 0) else guard_s, canary > 0 and i == 0)
                for i, g in enumerate(g for g in chunks if g)]
    return batches, warnings


def _sides(instances: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """A PD host's instances by side (sglang_pd: each instance's ``pd_role``); empty when unified."""
    sides: dict[str, list[str]] = {}
    for inst in instances:
        if inst.get("pd_role"):
            sides.setdefault(str(inst["pd_role"]), []).append(str(inst["name"]))
    return sides


def _pd_chunks(replace: list[str], by_name: Mapping[str, Mapping[str, Any]], size: int,
               warnings: list[str]) -> list[list[str]]:
    """The batches of a PD host's replaced instances: one side at a time (each drained as a side),
    decodes first, never every instance of a side this host has more than one of, so the router
    keeps a prefill and a decode of this host while the other is replaced. A side with a single
    instance here is out of the router during its restart: a warning names it (another host's
    instance of that side keeps the pair)."""
    sides = _sides(list(by_name.values()))
    chunks: list[list[str]] = []
    for side in ("decode", "prefill"):
        mine = [n for n in replace if n in sides.get(side, [])]
        if not mine:
            continue
        have = len(sides[side])
        if have == 1:
            warnings.append(f"{mine[0]} is this host's only {side} instance: while it is replaced the router keeps a "
                            f"prefill/decode pair only through another host's {side} instance")
        chunks += _chunks(mine, min(size, have - 1) if have > 1 else 1)
    unified = [n for n in replace if not by_name[n].get("pd_role")]
    return chunks + _chunks(unified, size)


# --------------------------------------------------------------------------------------------
# The capacity floor: how many instances stay in the routers while hosts roll in batches


class RolloutError(ValueError):
    """A rollout that cannot keep its capacity floor; the message names the values and the fix."""


def _count_or_percent(value: Any, of: int, name: str, *, round_up: bool) -> int:
    """``N`` or ``"N"`` (a count) or ``"P%"`` (a share of ``of``) as a count."""
    text = str(value).strip()
    try:
        if text.endswith("%"):
            pct = float(text[:-1])
            if not 0 <= pct <= 100:
                raise ValueError(text)
            share = of * pct / 100.0
            whole = int(share)
            return whole + 1 if round_up and share > whole else whole
        if isinstance(value, bool):
            raise ValueError(text)
        number = int(text)
        if number < 0:
            raise ValueError(text)
        return number
    except ValueError:
        raise RolloutError(f"{name}={value!r} is neither a count (a whole number >= 0) nor a percentage "
                           f"('P%' with P from 0 to 100)") from None


def count(value: Any, name: str, *, least: int = 0) -> int:
    """A whole number >= ``least`` (``3`` or ``"3"``, not ``"30%"``, ``true`` or ``2.5``)."""
    text = str(value).strip()
    if isinstance(value, bool) or not (text.isascii() and text.isdigit()) or int(text) < least:
        raise RolloutError(f"{name}={value!r} is not a count: a whole number >= {least}")
    return int(text)


def hosts_per_batch(batch: Any, hosts: int) -> int:
    """The hosts Ansible's ``serial: sglang_rollout_batch`` puts in one batch (a count, or a
    percentage of the hosts rounded down, at least 1; never more than there are hosts)."""
    size = _count_or_percent(batch, hosts, "sglang_rollout_batch", round_up=False)
    return max(1, min(size, hosts))


def batch_percent(size: int, hosts: int) -> int:
    """A percentage for ``sglang_rollout_batch`` that puts at most ``size`` of ``hosts`` in a batch:
    the one that puts exactly ``size`` where there is one (3 hosts, 2: 67%), else the largest below."""
    exact = -(-100 * size // hosts)
    return exact if hosts_per_batch(f"{exact}%", hosts) <= size else 100 * size // hosts


def out_per_host(per_host: int, at_once: int) -> int:
    """Instances of one host out of the routers at once: ``at_once``, capped below every
    instance of the host as ``rollout_batches`` does (a host of one instance: that one)."""
    if per_host <= 1:
        return per_host
    return max(1, min(int(at_once), per_host - 1))


def _host_counts(per_host: int | Sequence[int], hosts: int | None) -> list[int]:
    """Instances in the routers of each host: ``per_host`` for ``hosts`` hosts, or one count a host."""
    if isinstance(per_host, int):
        return [per_host] * int(hosts or 0)
    return [int(g) for g in per_host]


def _shape(counts: list[int]) -> str:
    low, high = min(counts), max(counts)
    return (f"{len(counts)} hosts x {high}" if low == high
            else f"{len(counts)} hosts of {low} to {high} instances")


def canary_out(canary: int, per_host: int, at_once: int) -> int:
    """Canary instances out of the routers at once: ``at_once`` on each of the ``ceil(c / g)``
    hosts the canary spans (``_rollouttime.estimate`` counts the same), never more than ``c``."""
    if canary <= 0:
        return 0
    return min(canary, out_per_host(per_host, at_once) * -(-canary // max(1, per_host)))


def capacity_floor(*, per_host: int | Sequence[int], hosts: int | None = None, at_once: int = 1,
                   min_available: Any = None, batch: Any = DEFAULT_BATCH, canary: int = 0) -> dict[str, Any]:
    """The capacity a rollout keeps and the largest batch that keeps ``min_available``.

    ``per_host``: the instances in the routers of every host (an int, with ``hosts``), or one
    count per host (hosts of different sizes; a host of only non-rank-0 instances of multi-node
    groups counts 0). Every instance of a host in a batch may be replaced, ``out_per_host`` of
    them out of the routers at once, and every host of the batch works at the same time: the
    fewest instances in the routers during a batch of b hosts is ``total`` minus the b largest
    hosts' ``out_per_host`` (the worst case: every instance changed, the largest hosts in one
    batch). ``min_available``: instances, or ``"P%"`` of the fleet's instances (rounded up);
    None or "": no floor. ``canary``: instances replaced first (``canary_out`` of them out at
    once). Raises RolloutError, before anything starts, when the floor cannot hold even one
    host at a time, when ``batch`` (``sglang_rollout_batch``) or the canary breaks it.
    """
    counts = _host_counts(per_host, hosts)
    if not counts or max(counts) < 1:
        raise RolloutError(f"a rollout needs at least one host and one instance in the routers (hosts={len(counts)}, "
                           f"instances per host={counts})")
    hosts = len(counts)
    total = sum(counts)
    outs = sorted((out_per_host(g, at_once) for g in counts), reverse=True)
    taken = [0]
    for one in outs:
        taken.append(taken[-1] + one)  # taken[b]: out of the routers with the b largest hosts in a batch
    out = outs[0]
    requested = hosts_per_batch(batch, hosts)
    floor = (0 if min_available is None or min_available == ""
             else _count_or_percent(min_available, total, "sglang_rollout_min_available", round_up=True))
    canary = count(canary or 0, "sglang_rollout_canary")
    in_canary = canary_out(canary, max(counts), at_once)
    spare = total - floor
    max_hosts = max(b for b in range(hosts + 1) if taken[b] <= spare) if spare >= 0 else 0
    result = {"instances": total, "hosts": hosts, "floor": floor, "out_per_host": out,
              "requested_hosts": requested, "requested_kept": total - taken[requested],
              "max_hosts": max_hosts, "max_instances_out": taken[max_hosts], "canary": canary,
              "canary_out": in_canary, "min_in_routers": total - max(taken[requested], in_canary)}
    shape = _shape(counts)
    if floor > total:
        raise RolloutError(f"sglang_rollout_min_available={min_available!r} asks for {floor} instances in the "
                           f"routers, more than the fleet's {total} ({shape}): lower it")
    if max_hosts < 1:
        raise RolloutError(
            f"sglang_rollout_min_available={min_available!r} keeps {floor} of {total} instances in the routers "
            f"({shape}), but replacing even one host takes {out} out (sglang_rollout_instances_at_once={at_once}), "
            f"leaving {total - out}: lower the floor to at most {total - out} or {100 * (total - out) // total}%"
            + ("" if out <= 1 else ", or set sglang_rollout_instances_at_once lower"))
    if canary > total:
        raise RolloutError(f"sglang_rollout_canary={canary} asks for more canary instances than the fleet's "
                           f"{total} ({shape}): lower it")
    if in_canary > spare:
        raise RolloutError(
            f"sglang_rollout_canary={canary} takes {in_canary} instances out of the routers at once, leaving "
            f"{total - in_canary} of {total}, below sglang_rollout_min_available={min_available!r} ({floor}): "
            f"set sglang_rollout_canary to at most {spare} or lower the floor")
    if requested > max_hosts:
        raise RolloutError(
            f"sglang_rollout_batch={batch!r} rolls {requested} hosts at once, taking {taken[requested]} of {total} "
            f"instances out of the routers and leaving {total - taken[requested]}, below "
            f"sglang_rollout_min_available={min_available!r} ({floor}): set sglang_rollout_batch to at most "
            f"{max_hosts} (or {batch_percent(max_hosts, hosts)}%)")
    return result


def pd_pair_check(sides: Mapping[str, Mapping[str, int]], *, at_once: int, batch_hosts: int) -> list[str]:
    """Whether a PD fleet's rollout keeps a prefill and a decode in the routers: for each side, the
    ``batch_hosts`` hosts with the most of it out at once (``rollout_batches``: at most ``at_once``
    of a side, never every instance of one a host has more than one of; a host's single instance
    of a side is out during its restart) must leave one. ``sides``: host -> {side: instances}.
    Returns a message per side that would be left with none (empty: the pair holds)."""
    problems = []
    for side in ("prefill", "decode"):
        per_host = [int(c.get(side, 0)) for c in sides.values() if int(c.get(side, 0)) > 0]
        if not per_host:
            continue
        outs = sorted((1 if have == 1 else min(max(1, at_once), have - 1) for have in per_host), reverse=True)
        if sum(per_host) - sum(outs[:max(1, batch_hosts)]) < 1:
            problems.append(
                f"a rollout of {batch_hosts} host(s) at once takes every {side} instance of the fleet "
                f"({sum(per_host)}, on {len(per_host)} host(s)) out of the routers at once, and requests fail "
                f"meanwhile: roll fewer hosts at once (sglang_rollout_batch) or run more {side} instances (sglang_pd)")
    return problems
