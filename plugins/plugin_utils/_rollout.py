# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The order in which a host's instances are started and replaced (controller side).

A deploy starts what does not run and replaces what changed, in batches, each batch ready
before the next. Without a router: one batch of every instance (``parallel``: the plan checked
that their pinned total fits) or one instance per batch (``serial``). Behind a router, no
request may be lost: instances that do not run yet (and those that keep running) come first,
then the instances to replace, ``at_once`` at a time and never all of the host's at once, each
taken out of the routers, drained, restarted, ready and put back before the next batch.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    size = max(1, size)
    return [items[i:i + size] for i in range(0, len(items), size)]


def rollout_batches(plan: Mapping[str, Any], restart: Sequence[str], running: Sequence[str], *,
                    policy: str = "parallel", routed: bool = False, at_once: int = 1,
                    ) -> tuple[list[dict[str, Any]], list[str]]:
    """([{instances: [plan instances], restart: [names to stop first], replace: bool}], warnings).

    ``restart``: the instances whose script, environment or engine changed; ``running``: the
    instances that run now (only those are stopped and, behind a router, drained).
    """
    instances = list(plan.get("instances") or [])
    by_name = {i["name"]: i for i in instances}
    replace = [i["name"] for i in instances if i["name"] in restart and i["name"] in running]
    fresh = [i["name"] for i in instances if i["name"] not in replace]
    restarted_stopped = [n for n in fresh if n in restart]  # changed but not running: just start
    warnings: list[str] = []

    def batch(names: list[str], replacing: bool) -> dict[str, Any]:
        return {"instances": [by_name[n] for n in names],
                "restart": [n for n in names if n in replace or n in restarted_stopped],
                "replace": replacing}

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
    batches += [batch(g, True) for g in _chunks(replace, size)]
    return batches, warnings
