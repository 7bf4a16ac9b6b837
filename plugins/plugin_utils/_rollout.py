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
    chunks = _chunks(replace, size)
    if canary > 0 and replace and not canary_alone:
        warnings.append(f"sglang_rollout_canary={canary}: no canary, this host is not alone in its batch of hosts "
                        "(deploy.yml's serial puts it alone only when sglang_rollout_canary is an extra var: "
                        "-e sglang_rollout_canary=N)")
        canary = 0
    if canary > 0 and replace:
        first = min(int(canary), size)
        chunks = [replace[:first]] + _chunks(replace[first:], size)
    batches += [batch(g, True, canary_s if (canary > 0 and i == 0) else guard_s, canary > 0 and i == 0)
                for i, g in enumerate(g for g in chunks if g)]
    return batches, warnings


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


def hosts_per_batch(batch: Any, hosts: int) -> int:
    """The hosts Ansible's ``serial: sglang_rollout_batch`` puts in one batch (a count, or a
    percentage of the hosts rounded down, at least 1; never more than there are hosts)."""
    size = _count_or_percent(batch, hosts, "sglang_rollout_batch", round_up=False)
    return max(1, min(size, hosts))


def out_per_host(per_host: int, at_once: int) -> int:
    """Instances of one host out of the routers at once: ``at_once``, capped below every
    instance of the host as ``rollout_batches`` does (a host of one instance: that one)."""
    if per_host <= 1:
        return per_host
    return max(1, min(int(at_once), per_host - 1))


def capacity_floor(*, hosts: int, per_host: int, at_once: int = 1, min_available: Any = None,
                   batch: Any = "100%") -> dict[str, Any]:
    """The capacity a rollout keeps and the largest batch that keeps ``min_available``.

    Every instance of a host in a batch may be replaced, ``out_per_host`` of them out of the
    routers at once, and every host of the batch works at the same time: the fewest instances
    in the routers during the batch is ``total - hosts_in_batch x out_per_host`` (the worst case:
    every instance changed). ``min_available``: instances, or ``"P%"`` of the fleet's instances
    (rounded up); None: no floor. Raises RolloutError, before anything starts, when the floor
    cannot hold even one host at a time, or when ``batch`` (``sglang_rollout_batch``) breaks it.
    """
    if hosts < 1 or per_host < 1:
        raise RolloutError(f"a rollout needs at least one host and one instance per host (hosts={hosts}, "
                           f"instances per host={per_host})")
    total = hosts * per_host
    out = out_per_host(per_host, at_once)
    requested = hosts_per_batch(batch, hosts)
    floor = (0 if min_available is None
             else _count_or_percent(min_available, total, "sglang_rollout_min_available", round_up=True))
    spare = total - floor
    max_hosts = min(hosts, spare // out) if out else hosts
    result = {"instances": total, "floor": floor, "out_per_host": out, "requested_hosts": requested,
              "requested_kept": total - requested * out, "max_hosts": max_hosts,
              "max_instances_out": max_hosts * out}
    if floor > total:
        raise RolloutError(f"sglang_rollout_min_available={min_available!r} asks for {floor} instances in the "
                           f"routers, more than the fleet's {total} ({hosts} hosts x {per_host}): lower it")
    if max_hosts < 1:
        raise RolloutError(
            f"sglang_rollout_min_available={min_available!r} keeps {floor} of {total} instances in the routers, "
            f"but replacing even one host takes {out} out (sglang_rollout_instances_at_once={at_once}), leaving "
            f"{total - out}: lower the floor to at most {total - out} or {100 * (total - out) // total}%"
            + ("" if out <= 1 else ", or set sglang_rollout_instances_at_once lower"))
    if requested > max_hosts:
        raise RolloutError(
            f"sglang_rollout_batch={batch!r} rolls {requested} hosts at once, taking {requested * out} of {total} "
            f"instances out of the routers and leaving {total - requested * out}, below "
            f"sglang_rollout_min_available={min_available!r} ({floor}): set sglang_rollout_batch to at most "
            f"{max_hosts} (or {100 * max_hosts // hosts}%)")
    return result
