# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The capacity answer (pure; sweep_report computes it on the controller): how many instances and hosts of each host class
carry a target load under the SLO the bench measured (docs/sweep.md "Capacity").

- An instance's limit is the highest request rate at which its sweep met the SLO: the highest
  ``offered_rate`` of a rate-mode level with ``slo_met`` (the SLO search's ``highest_pass`` is
  one of them), or in concurrency mode the highest ``req_s`` of a level with ``slo_met``.
- Hosts are grouped by GPU model, count and memory (``gpu_class_key`` of their
  ``sglang_host`` fact). A class's per-instance limit is the lowest of its instances' (the
  conservative answer; the mean is given too); its instances per host the most any of its
  hosts ran.
- instances needed = ceil(target / limit); hosts needed = ceil(instances / instances per host);
  ``enough``: the inventory has that many hosts of the class.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench.fleet import is_router


def gpu_class_key(host_facts: Mapping[str, Any]) -> str:
    """Hosts with equal GPU model, count and memory form one class (they tune the same way).
    The key is also a valid group name: ``<model>_x<count>_<MiB>mib``, lower case."""
    gpus = list(host_facts.get("gpus") or [])
    if not gpus:
        return "nogpu"
    names = sorted({str(g.get("name") or "unknown") for g in gpus})
    mib = sorted({int(g.get("memory_total_mib") or g.get("memory_mib") or 0) for g in gpus})
    raw = f"{'+'.join(names)}_x{len(gpus)}_{'+'.join(map(str, mib))}mib"
    return re.sub(r"[^a-z0-9_]+", "_", raw.lower()).strip("_")


class CapacityError(ValueError):
    """Input the capacity answer cannot use."""


def instance_limit(sweep: Mapping[str, Any]) -> float | None:
    """The highest request rate (req/s) at which the sweep met its SLO; None without an SLO or
    when no level met it."""
    if not sweep.get("slo"):
        return None
    key = "offered_rate" if sweep.get("mode") == "rate" else "req_s"
    rates = [float(p[key]) for p in sweep.get("points") or []
             if p.get("slo_met") and isinstance(p.get(key), (int, float))]
    return max(rates) if rates else None


def capacity(items: Sequence[Mapping[str, Any]], host_facts: Mapping[str, Mapping[str, Any]],
             target_rps: float) -> dict[str, Any]:
    """The ``sglang_capacity`` fact from report items ({meta: {host, instance}, sweep}), the
    hosts' ``sglang_host`` facts ({host: fact}, {} where unknown) and the target (req/s)."""
    try:
        target = float(target_rps)
    except (TypeError, ValueError):
        target = math.nan
    if not target > 0 or not math.isfinite(target):
        raise CapacityError(f"the target load must be a number of requests/s > 0, got {target_rps!r}: set "
                            "sglang_bench_capacity_target_rps")
    by_class: dict[str, dict[str, Any]] = {}
    for item in items:
        meta = item.get("meta") or {}
        if is_router(item):
            continue  # a router's sweep is not one instance's
        host = str(meta.get("host"))
        key = gpu_class_key(host_facts.get(host) or {})
        entry = by_class.setdefault(key, {"hosts": {}, "limits": []})
        entry["hosts"][host] = entry["hosts"].get(host, 0) + 1
        entry["limits"].append({"host": host, "instance": meta.get("instance"),
                                "limit_rps": instance_limit(item.get("sweep") or {})})
    classes = []
    for key, entry in sorted(by_class.items()):
        classes.append(_class_answer(key, entry, target, host_facts))
    slo = next((dict((i.get("sweep") or {}).get("slo") or {}) for i in items), {})
    return {"target_rps": target, "slo": slo, "classes": classes}


def _class_answer(key: str, entry: Mapping[str, Any], target: float,
                  host_facts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    limits = [x["limit_rps"] for x in entry["limits"]]
    known = [x for x in limits if x is not None]
    per_host = max(entry["hosts"].values())
    inventory = sorted(h for h, f in host_facts.items() if gpu_class_key(f or {}) == key) or sorted(entry["hosts"])
    answer: dict[str, Any] = {
        "class": key, "hosts_measured": sorted(entry["hosts"]), "instances": list(entry["limits"]),
        "instances_per_host": per_host, "hosts_in_inventory": len(inventory),
        "limit_rps_min": min(known) if known else None,
        "limit_rps_mean": round(math.fsum(known) / len(known), 4) if known else None,
        "instances_needed": None, "hosts_needed": None, "enough": None,
        "note": None,
    }
    if not known or len(known) < len(limits):
        answer["note"] = ("no SLO result for every instance (set sglang_bench_slo; a level must meet it)"
                          if not known else "some instances met the SLO at no level: they are left out")
    if known:
        needed = math.ceil(target / min(known) - 1e-9)
        hosts = math.ceil(needed / per_host)
        answer.update(instances_needed=needed, hosts_needed=hosts, enough=len(inventory) >= hosts)
    return answer


def render_markdown(fact: Mapping[str, Any]) -> str:
    """The capacity table of the report."""
    slo = ", ".join(f"{k} {v:g}" for k, v in (fact.get("slo") or {}).items()) or "none"
    lines = [
        "# Capacity",
        "",
        f"Target {fact['target_rps']:g} requests/s under the SLO ({slo}); per-instance limit: the highest rate "
        "at which an instance met the SLO (lowest of the class's instances).",
        "",
        "| host class | limit req/s per instance (min / mean) | instances per host | instances needed "
        "| hosts needed | hosts in inventory | enough |",
        "|---|---|---|---|---|---|---|",
    ]

    def f(value: Any) -> str:
        return "-" if value is None else (f"{value:g}" if isinstance(value, float) else str(value))

    for c in fact.get("classes") or []:
        enough = "-" if c["enough"] is None else ("yes" if c["enough"] else "**no**")
        lines.append(f"| {c['class']} | {f(c['limit_rps_min'])} / {f(c['limit_rps_mean'])} | "
                     f"{c['instances_per_host']} | {f(c['instances_needed'])} | {f(c['hosts_needed'])} | "
                     f"{c['hosts_in_inventory']} | {enough} |")
        if c.get("note"):
            lines.append(f"|  | {c['note']} | | | | | |")
    return "\n".join(lines) + "\n"
