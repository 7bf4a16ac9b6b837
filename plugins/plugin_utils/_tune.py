# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The auto-tuner's search (controller side): host classes, candidates from a search space,
the pruning bound, SLO scoring, the winner and why each other candidate lost.

playbooks/tune.yml (role ``tune``) only moves data: it deploys and sweeps what ``decide`` says,
one candidate after another on a class's representative host, and hands every result back here.
Kept free of Ansible so that the search is unit-tested as plain Python (tests/unit/plugins/plugin_utils/test_tune.py).
"""
from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench.capacity import gpu_class_key
from ansible_collections.llmops.sglang.plugins.module_utils._bench.stats import clean, find_knee, find_peak
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import PlanError
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.pd import ROLES as PD_SIDES
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.profiles import load_profiles
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.storage import OPTIONS as STORAGE_OPTIONS

CLASS_PREFIX = "sglang_tune_class_"
# a storage candidate's HiCache write policy (what reaches the tier): over the profile's, as the
# speculative numbers are (sglang_extra_args); the release's flag schema checks the value
WRITE_POLICY_FLAG = "--hicache-write-policy"
SPACE_KEYS = ("profiles", "max_running_requests", "hicache_size_gb", "speculative", "hicache_storage", "pd")
SPEC_KEYS = ("steps", "draft_tokens")
SPEC_FLAGS = {"steps": "--speculative-num-steps", "draft_tokens": "--speculative-num-draft-tokens"}


class TuneError(ValueError):
    """Bad tuning input: the message names the value, the rule and the fix."""


# ---- host classes ----

VARS_EXTENSIONS = ("", ".yml", ".yaml", ".json")


def _file_beside(kind: str, name: str, exists: Callable[[str], bool]) -> str:
    """The vars *file* Ansible reads for that group or host, if it reads a file: its DataLoader
    (``find_vars_files``) takes the first of ``NAME`` (a folder or a file), ``NAME.yml``,
    ``NAME.yaml``, ``NAME.json`` and reads nothing else, so a folder ``NAME/`` wins over a file
    beside it, and a folder made next to a file would hide the user's file."""
    for ext in VARS_EXTENSIONS:
        rel = f"{kind}/{name}{ext}"
        if exists(rel):
            return "" if exists(rel + "/") else rel
    return ""


def _host_move(rel: str, is_link: Callable[[str], bool]) -> dict[str, str]:
    """Where a host's vars file moves so that a folder can hold it and tuned.yml:
    ``host_vars/NAME.yml`` -> ``host_vars/NAME/main.yml`` (same extension, content unchanged)."""
    kind, base = rel.split("/", 1)
    name, dot, ext = base.rpartition(".") if base.endswith((".yml", ".yaml", ".json")) else (base, "", "")
    if not dot:
        raise TuneError(f"{rel} is a vars file without an extension: tune.yml would turn it into the folder "
                        f"{rel}/ (main.yml + tuned.yml) but cannot move a file into a folder of its own name. Rename "
                        f"it to {rel}.yml, or set sglang_tune_write_vars: false")
    if is_link(rel):
        raise TuneError(f"{rel} is a symbolic link: tune.yml would move it into the folder {kind}/{name}/ "
                        f"(Ansible reads a host's vars file or its folder, not both), which can break a "
                        f"relative link. Make it a plain file or the folder {kind}/{name}/ yourself, or set "
                        f"sglang_tune_write_vars: false")
    return {"src": rel, "dest": f"{kind}/{name}/main.{ext}"}


def vars_targets(class_hosts: Sequence[str], groups: Mapping[str, Sequence[str]], class_group: str = "",
                 exists: Callable[[str], bool] = lambda _: False,
                 is_link: Callable[[str], bool] = lambda _: False) -> dict[str, list[Any]]:
    """Where a class's tuned vars go, relative to the inventory folder (``exists`` tells what is
    there): ``{files, moves}``. A class that is an inventory group (given, or the smallest group
    whose hosts are exactly the class) gets ``group_vars/<group>/tuned.yml`` unless that group keeps
    its vars in a file; otherwise each host gets ``host_vars/<host>/tuned.yml``. A host whose vars
    are a file (``host_vars/<host>.yml``, the usual layout) has it moved, unchanged, to
    ``host_vars/<host>/main.yml`` first (``moves``), since Ansible reads a host's file or its
    folder, never both; the file then sits beside the generated tuned.yml and both are read."""
    want = set(class_hosts)
    exact = [class_group] if class_group else sorted(
        g for g, members in groups.items()
        if g not in ("all", "ungrouped") and not g.startswith(CLASS_PREFIX) and set(members) == want)
    if exact and not _file_beside("group_vars", exact[0], exists):
        return {"files": [f"group_vars/{exact[0]}/tuned.yml"], "moves": []}
    moves = [_host_move(f, is_link) for f in (_file_beside("host_vars", h, exists) for h in sorted(class_hosts)) if f]
    return {"files": [f"host_vars/{h}/tuned.yml" for h in sorted(class_hosts)], "moves": moves}


def other_places(class_hosts: Sequence[str], groups: Mapping[str, Sequence[str]], class_group: str = "") -> list[str]:
    """Every place a tuned.yml of this class can be in, whatever the layout: each host's
    host_vars folder and the folder of the group that is exactly the class (an earlier run, or
    another layout, may have written one there; it stays in force until removed)."""
    want = set(class_hosts)
    exact = [class_group] if class_group else sorted(
        g for g, members in groups.items()
        if g not in ("all", "ungrouped") and not g.startswith(CLASS_PREFIX) and set(members) == want)
    return [f"group_vars/{g}/tuned.yml" for g in exact] + [f"host_vars/{h}/tuned.yml" for h in sorted(class_hosts)]


def classes(hosts: Sequence[str], facts: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Sequence[str]],
            class_groups: Sequence[str] = (), vars_dir: str = "") -> dict[str, dict[str, Any]]:
    """{class: {hosts, representative, group, vars_files, vars_moves, vars_others}}. With ``class_groups`` each of those
    inventory groups is a class (a host in none of them, or in two, is an error); without, hosts
    with equal GPU facts (``facts``: each host's sglang_host fact) form one. The representative
    is the class's first host in inventory order."""
    out: dict[str, dict[str, Any]] = {}
    for host in hosts:
        if class_groups:
            mine = [g for g in class_groups if host in (groups.get(g) or [])]
            if len(mine) != 1:
                raise TuneError(f"sglang_tune_class_groups: host {host} is in {len(mine)} of the groups "
                                f"{', '.join(class_groups)} ({', '.join(mine) or 'none'}); each host must be in exactly "
                                f"one (or set sglang_tune_class_groups: [] to class hosts by their GPUs)")
            name, group = mine[0], mine[0]
        else:
            name, group = gpu_class_key(facts.get(host) or {}), ""
        entry = out.setdefault(name, {"hosts": [], "group": group})
        entry["hosts"].append(host)

    def exists(rel: str) -> bool:
        return bool(vars_dir) and (os.path.isdir(os.path.join(vars_dir, rel)) if rel.endswith("/")
                                   else os.path.exists(os.path.join(vars_dir, rel)))

    def is_link(rel: str) -> bool:
        return bool(vars_dir) and os.path.islink(os.path.join(vars_dir, rel))

    for entry in out.values():
        entry["representative"] = entry["hosts"][0]
        targets = vars_targets(entry["hosts"], groups, entry["group"], exists, is_link)
        entry["vars_files"], entry["vars_moves"] = targets["files"], targets["moves"]
        entry["vars_others"] = [f for f in other_places(entry["hosts"], groups, entry["group"])
                                if f not in targets["files"]]
    return out


# ---- candidates ----

def _int_list(space: Mapping[str, Any], key: str) -> list[int]:
    values = space.get(key, [0])
    values = values if isinstance(values, list) else [values]
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TuneError(f"sglang_tune_space.{key}: {value!r} is not a whole number >= 0 "
                            f"(0 = the profile's); use e.g. {key}: [0, 16]")
        out.append(value)
    return list(dict.fromkeys(out)) or [0]


def _spec_list(space: Mapping[str, Any]) -> list[dict[str, int]]:
    values = space.get("speculative", [{}])
    values = values if isinstance(values, list) else [values]
    out: list[dict[str, int]] = []
    for value in values:
        if not isinstance(value, Mapping) or set(value) - set(SPEC_KEYS) or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value.values()):
            raise TuneError(f"sglang_tune_space.speculative: {value!r} must be {{}} (the profile's) or "
                            f"{{steps: N, draft_tokens: M}} with whole numbers >= 1, e.g. {{steps: 2, draft_tokens: 3}}")
        if dict(value) not in out:
            out.append(dict(value))
    return out or [{}]


def _storage_list(space: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``hicache_storage``: each a ``sglang_hicache_storage`` ({} = no storage tier) with, optionally,
    ``write_policy`` (the HiCache write policy the candidate runs with: what reaches the tier)."""
    values = space.get("hicache_storage", [{}])
    values = values if isinstance(values, list) else [values]
    allowed = {*STORAGE_OPTIONS, "write_policy"}
    out: list[dict[str, Any]] = []
    for value in values:
        if not isinstance(value, Mapping) or set(value) - allowed or (value and not value.get("backend")):
            raise TuneError(f"sglang_tune_space.hicache_storage: {value!r} must be {{}} (no storage tier) or a "
                            f"sglang_hicache_storage with a backend (keys: {', '.join(sorted(allowed))}), e.g. "
                            "[{}, {backend: file}, {backend: file, write_policy: write_back}]")
        if dict(value) not in out:
            out.append(dict(value))
    return out or [{}]


def _pd_list(space: Mapping[str, Any]) -> list[dict[str, int] | None]:
    """``pd``: each ``{}`` (unified) or ``{prefill: P, decode: D}`` (the host's first P + D instances
    split, prefills first); absent, [None]: each candidate keeps the host's own sglang_pd."""
    if "pd" not in space:
        return [None]
    values = space["pd"] if isinstance(space["pd"], list) else [space["pd"]]
    out: list[dict[str, int] | None] = []
    for value in values:
        if not isinstance(value, Mapping) or (value and (set(value) != set(PD_SIDES) or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value.values()))):
            raise TuneError(f"sglang_tune_space.pd: {value!r} must be {{}} (unified) or {{prefill: P, decode: D}} with "
                            "whole numbers >= 1 (P + D instances of the host), e.g. pd: [{}, {prefill: 1, decode: 1}]")
        if dict(value) not in out:
            out.append(dict(value))
    return out or [None]


def pd_instances(candidate: Mapping[str, Any]) -> int:
    """The instances a candidate's sweep measures together: a split's P + D (bench.yml sweeps a PD
    host's instances as one pair), else one."""
    pd = candidate.get("pd") or {}
    return int(pd.get("prefill", 0)) + int(pd.get("decode", 0)) if pd else 1


def _label(profile: str, mrr: int, size: int, spec: Mapping[str, int], storage: Mapping[str, Any],
           pd: Mapping[str, int] | None = None) -> str:
    parts = [profile]
    if pd is not None:
        parts.append(f"pd={pd['prefill']}P:{pd['decode']}D" if pd else "unified")
    if mrr:
        parts.append(f"mrr={mrr}")
    if size:
        parts.append(f"hicache={size}GB")
    if spec:
        parts.append(f"spec={spec.get('steps', '-')}/{spec.get('draft_tokens', '-')}")
    if storage:
        policy = f"/{storage['write_policy']}" if storage.get("write_policy") else ""
        parts.append(f"storage={storage['backend']}{policy}")
    return " ".join(parts)


def candidates(space: Mapping[str, Any], user_profiles: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every candidate of the space, in its order (profiles outermost). The HiCache size and the
    storage tier vary only for profiles with HiCache, the speculative numbers only for speculative
    ones: other combinations would deploy the same server twice."""
    if not isinstance(space, Mapping):
        raise TuneError(f"sglang_tune_space must be a dict with keys {', '.join(SPACE_KEYS)}, not {space!r}")
    unknown = sorted(set(space) - set(SPACE_KEYS))
    if unknown:
        raise TuneError(f"sglang_tune_space: unknown key(s) {', '.join(unknown)}; known: {', '.join(SPACE_KEYS)}")
    names = space.get("profiles") or []
    names = [names] if isinstance(names, str) else list(names)
    try:
        profiles = load_profiles(dict(user_profiles or {}))
    except PlanError as exc:
        raise TuneError(f"sglang_profiles: {exc}") from exc
    bad = [n for n in names if n not in profiles]
    if not names or bad:
        raise TuneError(f"sglang_tune_space.profiles: {bad or names!r} must name profiles (valid: "
                        f"{', '.join(sorted(profiles))})")
    mrrs, sizes, specs = _int_list(space, "max_running_requests"), _int_list(space, "hicache_size_gb"), _spec_list(space)
    storages, pds = _storage_list(space), _pd_list(space)
    out: list[dict[str, Any]] = []
    for name in dict.fromkeys(names):
        prof = profiles[name]
        has_hicache = bool((prof.get("hicache") or {}).get("enabled"))
        for pd, mrr, size, spec, storage in itertools.product(pds, mrrs, sizes if has_hicache else [0],
                                                              specs if prof.get("speculative") else [{}],
                                                              storages if has_hicache else [{}]):
            candidate = {"index": len(out), "label": _label(name, mrr, size, spec, storage, pd), "profile": name,
                         "max_running_requests": mrr, "hicache_size_gb": size, "speculative": dict(spec),
                         "hicache_storage": dict(storage), "pd": None if pd is None else dict(pd)}
            out.append({**candidate, "instances": pd_instances(candidate)})
    return out


def candidate_vars(candidate: Mapping[str, Any], extra_args: Any = None, pd: Any = None) -> dict[str, Any]:
    """The server role's variables that deploy ``candidate`` (and, written back, the winner).
    Speculative steps and draft tokens, and a storage candidate's write policy, go through
    sglang_extra_args over the profile's flags, the user's own extra_args kept. A candidate with a
    storage tier clears it once deployed (sglang_hicache_storage_clear): each one is measured from
    an empty tier, never on the pages an earlier candidate wrote. sglang_pd is ``pd``, the host's,
    for a candidate without one of the space's ``pd``; with one, the host's transfer backend,
    bootstrap port and IB device with its roles: none (unified), or one per instance, prefills first."""
    args: Any = dict(extra_args) if isinstance(extra_args, Mapping) else list(extra_args or [])
    storage = dict(candidate.get("hicache_storage") or {})
    over = {SPEC_FLAGS[key]: value for key, value in (candidate.get("speculative") or {}).items()}
    if storage.get("write_policy"):
        over[WRITE_POLICY_FLAG] = storage.pop("write_policy")
    for flag, value in over.items():
        if isinstance(args, dict):
            args[flag] = value
        else:
            args += [flag, str(value)]
    out = {"sglang_profile": candidate["profile"],
           "sglang_max_running_requests": int(candidate.get("max_running_requests") or 0),
           "sglang_hicache_size_gb": int(candidate.get("hicache_size_gb") or 0),
           "sglang_hicache_storage": storage,
           "sglang_hicache_storage_clear": bool(storage),
           "sglang_extra_args": args}
    split = candidate.get("pd")
    base = {k: v for k, v in dict(pd or {}).items() if k != "role"}
    out["sglang_pd"] = dict(pd or {}) if split is None else (
        {**base, "role": ["prefill"] * split["prefill"] + ["decode"] * split["decode"]} if split else base)
    return out


def refuse_pd(pd_by_host: Mapping[str, Any], candidates: Sequence[Mapping[str, Any]]) -> None:
    """TuneError when a host to tune is a prefill/decode one (``sglang_pd`` with a role) and a
    candidate would deploy it as it is (the space has no ``pd``): what such a host is depends on its
    roles (a host of one side cannot be swept as a pair on its own). The space's ``pd`` says what
    each candidate is instead: unified, or a split of the host's instances."""
    if all(c.get("pd") is not None for c in candidates):
        return
    pd_hosts = sorted(host for host, value in pd_by_host.items()
                      if isinstance(value, Mapping) and value.get("role"))
    if pd_hosts:
        raise TuneError(f"sglang_pd sets prefill/decode roles on {', '.join(pd_hosts)}, and sglang_tune_space has no pd: "
                        "say what each candidate is, unified or a split of the host's instances, e.g. "
                        "-e '{\"sglang_tune_space\": {\"profiles\": [\"baseline\"], \"pd\": [{}, {\"prefill\": 1, "
                        "\"decode\": 1}]}}' (each split is swept as the pair it is, scored per instance), or tune "
                        "these hosts as unified ones (-e '{\"sglang_pd\": {}}')")


def _per(level: Any, instances: int) -> int | float:
    return int(level) // instances if int(level) % instances == 0 else int(level) / instances


def per_instance(sweep: Mapping[str, Any] | None, instances: int) -> dict[str, Any] | None:
    """A split's sweep in the unit of a unified candidate's (one instance): its levels ran at C x
    ``instances`` over the pair (bench.yml sweeps a PD host's instances as one), so each point's
    concurrency and rates are divided by ``instances`` (latencies are the requests' own), the
    level as swept kept (``concurrency_swept``); the server's running cap, one decode's, bounds
    nothing per instance and is dropped."""
    if not sweep or instances <= 1:
        return dict(sweep) if sweep else None
    out = dict(sweep)
    out["points"] = [{**p, "concurrency_swept": p["concurrency"], "concurrency": _per(p["concurrency"], instances),
                      **{k: p[k] / instances for k in ("output_tok_s", "req_s", "goodput_req_s")
                         if isinstance(p.get(k), (int, float))}} for p in sweep.get("points") or []]
    out["server"] = {**(sweep.get("server") or {}), "max_running_requests": None}
    out["per_instance_of"] = instances
    return out


# ---- the service-level objective ----

# score -> (a level's figure, the bound's key for it, the unit)
SCORES = {"throughput": ("output_tok_s", "tok_s", "tok/s"), "capacity": ("req_s", "req_s", "req/s")}


def slo(ttft_p99_ms: Any = 0, itl_p50_ms: Any = 0, concurrency: Any = 0, score: Any = "throughput",
        target_rps: Any = 0) -> dict[str, Any]:
    """The objective from the role's variables; 0 (or empty) turns an SLO part off. No limit at
    all: peak throughput wins. ``score``: ``throughput`` (output tok/s of the best level within
    the SLO) or ``capacity`` (requests/s one instance carries within the SLO, the figure the
    bench's capacity answer divides a target load by: it needs an SLO); ``target_rps`` (> 0)
    adds the instances a winner needs for that load."""
    out: dict[str, Any] = {}
    for key, value, var in (("ttft_p99_ms", ttft_p99_ms, "sglang_tune_slo_ttft_p99_ms"),
                            ("itl_p50_ms", itl_p50_ms, "sglang_tune_slo_itl_p50_ms"),
                            ("concurrency", concurrency, "sglang_tune_concurrency")):
        try:
            number = float(value or 0)
        except (TypeError, ValueError):
            number = -1.0
        if number < 0 or isinstance(value, bool) or (key == "concurrency" and number != int(number)):
            raise TuneError(f"{var}: {value!r} is not a {'whole ' if key == 'concurrency' else ''}number >= 0 "
                            f"(0 = no limit{'' if key != 'concurrency' else ': the best level'}); e.g. {var}=500")
        out[key] = (int(number) if key == "concurrency" else number) or None
    out["active"] = bool(out["ttft_p99_ms"] or out["itl_p50_ms"])
    if score not in SCORES:
        raise TuneError(f"sglang_tune_score: {score!r} must be one of {', '.join(SCORES)} (throughput: tok/s within "
                        "the SLO; capacity: requests/s per instance within the SLO)")
    if score == "capacity" and not out["active"]:
        raise TuneError("sglang_tune_score: capacity scores the requests/s an instance carries within an SLO, and no SLO "
                        "is set: set sglang_tune_slo_ttft_p99_ms and/or sglang_tune_slo_itl_p50_ms (e.g. "
                        "-e sglang_tune_slo_ttft_p99_ms=500), or score by throughput")
    try:
        target = float(target_rps or 0)
    except (TypeError, ValueError):
        target = -1.0
    if target < 0 or isinstance(target_rps, bool):
        raise TuneError(f"sglang_tune_capacity_target_rps: {target_rps!r} is not a number of requests/s >= 0 "
                        "(0 = none); e.g. sglang_tune_capacity_target_rps=40")
    out["score"] = str(score)
    out["target_rps"] = target or None
    return out


def _figure(objective: Mapping[str, Any]) -> tuple[str, str, str]:
    """A level's figure of merit (its key in a point, in a bound, its unit): output tok/s, or
    req/s for capacity."""
    return SCORES[str(objective.get("score") or "throughput")]


def latency(point: Mapping[str, Any], key: str, stat: str) -> tuple[float | None, str]:
    """A level's latency statistic (ms): the client's when measurable, else the upper bound of
    the bucket the server's own percentile lies in (conservative), else None."""
    unmeasurable = (point.get("latency_unmeasurable") or {}).get(key) or []
    value = (point.get(key) or {}).get(stat)
    if value is not None and stat not in unmeasurable:
        return float(value), "client"
    rng = ((point.get("server") or {}).get(f"{key}_range") or {}).get(stat)
    if rng and len(rng) == 2:
        return (float(rng[1]) if rng[1] is not None else float("inf")), "server bucket"
    return None, "not measured"


def level_meets(point: Mapping[str, Any], objective: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether one level meets the SLO, and the figure that decided."""
    for key, stat, limit in (("ttft_ms", "p99", objective.get("ttft_p99_ms")),
                             ("itl_ms", "p50", objective.get("itl_p50_ms"))):
        if not limit:
            continue
        value, source = latency(point, key, stat)
        name = f"{key.split('_')[0].upper()} {stat}"
        if value is None:
            return False, f"C={point['concurrency']} {name} not measured"
        if value > limit:
            return False, f"C={point['concurrency']} {name} {value:g} ms ({source}) > {limit:g} ms"
    return True, ""


def usable(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Levels that speak for the server: every request ok, throughput measured, client not the limit."""
    return sorted((dict(p) for p in points if clean(dict(p)) and (p.get("output_tok_s") or 0) > 0
                   and not p.get("client_limited")), key=lambda p: p["concurrency"])


def _scored(point: Mapping[str, Any], objective: Mapping[str, Any]) -> dict[str, Any]:
    key, _, unit = _figure(objective)
    value = point.get(key)
    return {"value": float(value) if isinstance(value, (int, float)) else None, "unit": unit,
            "tok_s": point["output_tok_s"], "req_s": point.get("req_s"), "concurrency": point["concurrency"], "reason": ""}


def _unscored(objective: Mapping[str, Any], reason: str) -> dict[str, Any]:
    return {"value": None, "unit": _figure(objective)[2], "tok_s": None, "req_s": None, "concurrency": None,
            "reason": reason}


def score(points: Sequence[Mapping[str, Any]], objective: Mapping[str, Any]) -> dict[str, Any]:
    """A candidate's figure of merit (``value``, in ``unit``): its peak tok/s without SLO; with
    one, the best tok/s of a level that meets it (only at the SLO's concurrency when that is
    set); with ``score: capacity``, the highest requests/s of a level that meets it (what one
    instance carries within the SLO: the fewest instances for any target load)."""
    key = _figure(objective)[0]
    levels = [p for p in usable(points) if isinstance(p.get(key), (int, float))]
    if objective.get("concurrency"):
        levels = [p for p in levels if p["concurrency"] == objective["concurrency"]]
    if not levels:
        return _unscored(objective, "no level ran cleanly"
                         + (f" at C={objective['concurrency']}" if objective.get("concurrency") else ""))
    if not objective.get("active"):
        return _scored(max(levels, key=lambda p: (p[key], -p["concurrency"])), objective)
    verdicts = [(p, *level_meets(p, objective)) for p in levels]
    good = [p for p, ok, _ in verdicts if ok]
    if not good:
        return _unscored(objective, "SLO violated at every level: " + "; ".join(why for _, _, why in verdicts))
    return _scored(max(good, key=lambda p: (p[key], -p["concurrency"])), objective)


# ---- pruning ----

def bound(probe: Mapping[str, Any], levels: Sequence[int], objective: Mapping[str, Any]) -> dict[str, Any]:
    """The most a candidate could reach: the per-request rate of its lowest level times the
    requests it can run at once, min(the server's effective max_running_requests, the highest
    level to sweep). A decode step never gets faster with a bigger batch, so no request runs
    faster than alone and no more than that many run: tok/s(C) <= tok/s(1) x min(C, running)."""
    points = usable(probe.get("points") or [])
    if not points:
        return {"tok_s": None, "per_request": None, "running": None, "reason": "the lowest level did not run cleanly"}
    low = points[0]
    running = (probe.get("server") or {}).get("max_running_requests")
    top = objective.get("concurrency") or max(levels)
    cap = min(int(running), top) if isinstance(running, int) and running > 0 else top
    per_request = float(low["output_tok_s"]) / max(1, min(int(low["concurrency"]), cap))
    # the same bound in requests/s (capacity scoring): a request is no faster than alone either
    req_per_request = float(low.get("req_s") or 0.0) / max(1, min(int(low["concurrency"]), cap))
    return {"tok_s": round(per_request * cap, 1), "req_s": round(req_per_request * cap, 4) if low.get("req_s") else None,
            "per_request": round(per_request, 2), "running": running,
            "cap": cap, "reason": f"{per_request:.1f} tok/s per request (C={low['concurrency']}) x {cap} "
                                  f"(min(running {running if running else '?'}, C<={top}))"}


def client_limited_only(points: Sequence[Mapping[str, Any]]) -> bool:
    """Levels whose every request succeeded, left out only because the client was the limit."""
    return bool(points) and all(clean(dict(p)) and (p.get("output_tok_s") or 0) > 0 and p.get("client_limited")
                                for p in points)


def decide(probe: Mapping[str, Any], levels: Sequence[int], objective: Mapping[str, Any],
           best: Mapping[str, Any] | None) -> dict[str, Any]:
    """After a candidate's lowest level: sweep the rest, or prune it (with the reason)."""
    b = bound(probe, levels, objective)
    points = usable(probe.get("points") or [])
    if b["tok_s"] is None:
        if client_limited_only(probe.get("points") or []):
            # what only the client limited bounds nothing: the server served every request
            return {"action": "sweep", "bound": {**b, "reason": "no bound: the client was the limit at its lowest level"},
                    "reason": ""}
        return {"action": "prune", "bound": b, "reason": f"pruned: {b['reason']}"}
    if objective.get("active"):
        ok, why = level_meets(points[0], objective)
        if not ok:
            return {"action": "prune", "bound": b,
                    "reason": f"pruned: SLO violated already at its lowest level ({why}); latency only grows with C"}
    _, key, unit = _figure(objective)
    if best and best.get("value") is not None and b.get(key) is not None and b[key] <= float(best["value"]):
        return {"action": "prune", "bound": b,
                "reason": f"pruned by bound: at most {b[key]:.1f} {unit} <= best so far "
                          f"{float(best['value']):.1f} {unit} ({best['label']})"}
    return {"action": "sweep", "bound": b, "reason": ""}


def rest_levels(levels: Sequence[int], objective: Mapping[str, Any]) -> list[int]:
    """The levels after the probe (the lowest one); with an SLO concurrency, only that one."""
    ordered = sorted(set(int(c) for c in levels))
    if objective.get("concurrency"):
        return [c for c in (objective["concurrency"],) if c != ordered[0]]
    return ordered[1:]


def merge_sweeps(probe: Mapping[str, Any], rest: Mapping[str, Any] | None, plateau_gain: float) -> dict[str, Any]:
    """One sglang_sweep from the probe's level and the rest's (two calls of the sweep module
    on the same server), peak and knee recomputed over all levels."""
    merged = dict(rest or probe)
    points = sorted([*(probe.get("points") or []), *((rest or {}).get("points") or [])], key=lambda p: p["concurrency"])
    merged.update(points=points, peak=find_peak(points), knee=find_knee(points, plateau_gain),
                  started=probe.get("started"), records=[*(probe.get("records") or []), *((rest or {}).get("records") or [])],
                  warnings=[*(probe.get("warnings") or []), *((rest or {}).get("warnings") or [])],
                  levels_with_errors=[p["concurrency"] for p in points if not clean(p)],
                  stopped_on_plateau=bool((rest or {}).get("stopped_on_plateau")))
    return merged


def score_value(record: Mapping[str, Any]) -> float | None:
    """A candidate record's score (records of older runs have only ``tok_s``)."""
    sc = record.get("score") or {}
    value = sc.get("value", sc.get("tok_s"))
    return None if value is None else float(value)


def best_so_far(results: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The best scored candidate so far ({value, tok_s, label}), None before the first."""
    scored = [r for r in results if score_value(r) is not None]
    if not scored:
        return None
    top = max(scored, key=lambda r: (score_value(r), -r["candidate"]["index"]))
    return {"value": score_value(top), "tok_s": top["score"].get("tok_s"), "label": top["candidate"]["label"]}


def result(candidate: Mapping[str, Any], objective: Mapping[str, Any], plateau_gain: float,
           probe: Mapping[str, Any] | None = None, rest: Mapping[str, Any] | None = None,
           decision: Mapping[str, Any] | None = None, error: str = "") -> dict[str, Any]:
    """One candidate's record: status (swept, pruned, failed), its sweep and score."""
    if error or not probe:
        return {"candidate": dict(candidate), "status": "failed", "reason": f"failed: {error or 'no sweep'}",
                "sweep": None, "score": _unscored(objective, ""), "bound": None}
    sweep = merge_sweeps(probe, rest, plateau_gain)
    pruned = (decision or {}).get("action") == "prune"
    sc = _unscored(objective, "") if pruned else score(sweep["points"], objective)
    return {"candidate": dict(candidate), "status": "pruned" if pruned else "swept",
            "reason": (decision or {}).get("reason") or sc.get("reason") or "", "sweep": sweep, "score": sc,
            "bound": (decision or {}).get("bound")}


# ---- the winner, and why the others lost ----

def server_context(sweep: Mapping[str, Any] | None, at: Any = None) -> str:
    """What the server said about a candidate: running requests capped, accept length, and
    (points from a sweep that reads them) the running/queued maxima and retractions."""
    if not sweep:
        return ""
    server = sweep.get("server") or {}
    parts = []
    if server.get("max_running_requests"):
        parts.append(f"running requests capped at {server['max_running_requests']}")
    accept = server.get("avg_spec_accept_length_after")
    if isinstance(accept, (int, float)) and accept > 1:
        parts.append(f"accept length {accept:.2f}")
    points = [p for p in sweep.get("points") or [] if at is None or p.get("concurrency") == at]
    metrics = (points[-1].get("server_metrics") or {}) if points else {}
    for key, text in (("running_max", "max running {:g}"), ("queued_max", "max queued {:g}"),
                      ("retracted_max", "retracted {:g}")):
        if isinstance(metrics.get(key), (int, float)) and (key != "retracted_max" or metrics[key] > 0):
            parts.append(text.format(metrics[key]) + (f" at C={at}" if at is not None and key != "retracted_max" else ""))
    return ", ".join(parts)


def choose(results: Sequence[Mapping[str, Any]], objective: Mapping[str, Any]) -> dict[str, Any]:
    """The winner (highest score; the earlier candidate on a tie) and, for every other
    candidate, why it lost."""
    scored = [r for r in results if score_value(r) is not None]
    if not scored:
        return {"winner": None, "why": {r["candidate"]["label"]: r.get("reason") or "no score" for r in results},
                "message": "no candidate " + ("met the SLO" if objective.get("active") else "ran cleanly")}
    win = max(scored, key=lambda r: (score_value(r), -r["candidate"]["index"]))
    top = float(score_value(win) or 0.0)
    what = score_words(objective)
    why: dict[str, str] = {}
    for r in results:
        label = r["candidate"]["label"]
        if r is win:
            continue
        sc = r.get("score") or {}
        value = score_value(r)
        if value is None:
            why[label] = r.get("reason") or "no score"
            continue
        ctx = server_context(r.get("sweep"), sc.get("concurrency"))
        why[label] = (f"lower {what}: {value:.{score_digits(objective)}f} at C={sc['concurrency']} vs {top:.{score_digits(objective)}f} "
                      f"({(value / top - 1) * 100:+.1f}%)" + (f"; {ctx}" if ctx else ""))
    return {"winner": dict(win), "why": why,
            "message": f"{win['candidate']['label']}: {top:.{score_digits(objective)}f} {what} at C={win['score']['concurrency']}"
                       + _needed_text(objective, top)}


def score_words(objective: Mapping[str, Any]) -> str:
    """What the score is, in words."""
    if objective.get("score") == "capacity":
        return "req/s per instance within the SLO"
    return "tok/s within the SLO" if objective.get("active") else "peak tok/s"


def score_digits(objective: Mapping[str, Any]) -> int:
    return 2 if objective.get("score") == "capacity" else 1


def instances_needed(objective: Mapping[str, Any], per_instance: float | None) -> int | None:
    """Instances that carry the objective's target load at a per-instance capacity (req/s)."""
    target = objective.get("target_rps")
    if objective.get("score") != "capacity" or not target or not per_instance:
        return None
    return math.ceil(float(target) / float(per_instance) - 1e-9)


def _needed_text(objective: Mapping[str, Any], per_instance: float) -> str:
    needed = instances_needed(objective, per_instance)
    return "" if needed is None else f"; {needed} instance(s) carry {objective['target_rps']:g} req/s"


def tuned_fact(choice: Mapping[str, Any], class_name: str, representative: str, run_id: str,
               objective: Mapping[str, Any]) -> dict[str, Any] | None:
    """The fact ``sglang_tuned``: the winning candidate, its score and where it was measured."""
    win = choice.get("winner")
    if not win:
        return None
    peak = (win.get("sweep") or {}).get("peak") or {}
    knee = (win.get("sweep") or {}).get("knee") or {}
    return {"class": class_name, "representative": representative, "run_id": run_id,
            "candidate": win["candidate"]["label"], "profile": win["candidate"]["profile"],
            "max_running_requests": win["candidate"]["max_running_requests"],
            "hicache_size_gb": win["candidate"]["hicache_size_gb"],
            "speculative": win["candidate"]["speculative"],
            "hicache_storage": win["candidate"].get("hicache_storage") or {},
            "pd": win["candidate"].get("pd"), "instances": win["candidate"].get("instances", 1),
            "score_tok_s": win["score"].get("tok_s"), "at_concurrency": win["score"]["concurrency"],
            "score": score_value(win), "score_unit": win["score"].get("unit", "tok/s"),
            "score_req_s": win["score"].get("req_s"),
            "instances_needed": instances_needed(objective, score_value(win)), "target_rps": objective.get("target_rps"),
            "peak": peak or None, "knee": knee or None,
            "server_max_running_requests": ((win.get("sweep") or {}).get("server") or {}).get("max_running_requests"),
            "slo": {k: objective.get(k) for k in ("ttft_p99_ms", "itl_p50_ms", "concurrency")},
            "scored_by": objective.get("score") or "throughput"}


# ---- write-back ----

def vars_file(fact: Mapping[str, Any], candidate: Mapping[str, Any], extra_args: Any, hosts: Sequence[str],
              generated: str, report: str) -> str:
    """The generated vars file of a class: a header saying when and how, then the variables
    deploy.yml reads. ``profile`` (not sglang_profile) so that ``-e profile=...`` still wins."""
    import json

    import yaml  # controller side: PyYAML comes with ansible-core

    deploy = candidate_vars(candidate, extra_args)
    body: dict[str, Any] = {"profile": deploy["sglang_profile"],
                            "sglang_max_running_requests": deploy["sglang_max_running_requests"],
                            "sglang_hicache_size_gb": deploy["sglang_hicache_size_gb"]}
    if candidate.get("hicache_storage"):
        body["sglang_hicache_storage"] = deploy["sglang_hicache_storage"]
    if candidate.get("speculative") or (candidate.get("hicache_storage") or {}).get("write_policy"):
        body["sglang_extra_args"] = deploy["sglang_extra_args"]
    if candidate.get("pd") is not None:  # the space's pd: unified or the split that won (as deployed)
        body["sglang_pd"] = ((candidate.get("vars") or {}).get("sglang_pd") if "vars" in candidate
                             else deploy["sglang_pd"])
    body["sglang_tuned"] = dict(fact)
    header = [
        f"# Generated by playbooks/tune.yml (llmops.sglang) at {generated}, run {fact.get('run_id')}.",
        f"# Host class {fact.get('class')} (hosts: {', '.join(hosts)}), measured on {fact.get('representative')}.",
        f"# Winner: {fact.get('candidate')} ({fact.get('score')} {fact.get('score_unit', 'tok/s')} at "
        f"C={fact.get('at_concurrency')}, scored by {fact.get('scored_by', 'throughput')}).",
        f"# Report: {report}",
        "# Review and commit it; deploy.yml reads it (Ansible's group_vars/host_vars). Delete it to",
        "# deploy the profile defaults again; a re-run of tune.yml overwrites it.",
    ]
    plain = json.loads(json.dumps(body))  # Ansible's tagged strings -> plain types PyYAML can write
    return "\n".join(header) + "\n---\n" + yaml.safe_dump(plain, sort_keys=False, default_flow_style=False)


# ---- what happens to the vars files ----

WITHOUT_WINNER = ("keep", "remove")
GENERATED = "# Generated by playbooks/tune.yml (llmops.sglang)"


def earlier(text: str | None) -> str:
    """What an existing vars file is: "run R (candidate C)" for one tune.yml wrote, else a note."""
    if text is None:
        return ""
    if not text.startswith(GENERATED):
        return "not written by tune.yml"
    import yaml  # controller side: PyYAML comes with ansible-core

    try:
        tuned = (yaml.safe_load(text) or {}).get("sglang_tuned") or {}
    except (yaml.YAMLError, AttributeError):
        tuned = {}
    return f"run {tuned.get('run_id', '?')} (candidate {tuned.get('candidate', '?')})"


def writeback_plan(files: Sequence[str], moves: Sequence[Mapping[str, str]], has_winner: bool, write: bool = True,
                   without_winner: str = "keep", read: Callable[[str], str | None] = lambda _: None,
                   others: Sequence[str] = ()) -> dict[str, Any]:
    """What happens to a class's vars files, decided before anything is written, and said in
    words (the play and tune.md print ``lines``). ``read`` gives an existing file's text (None:
    absent); ``others`` are the class's other places for a tuned.yml (another layout's: the
    hosts' host_vars, the group's group_vars), where an earlier run may have left one.
    With a winner: ``moves`` first (a host's vars file into its folder), then ``write`` every
    file, and an earlier tune.yml file in ``others`` is removed (it would override or shadow the
    new one). Without one, nothing is written or moved and each earlier file stays in force
    (``keep``, the default, said loudly) or is removed (``remove``). A file tune.yml did not
    generate is never removed."""
    if without_winner not in WITHOUT_WINNER:
        raise TuneError(f"sglang_tune_without_winner: {without_winner!r} must be one of {', '.join(WITHOUT_WINNER)} "
                        f"(what happens to an earlier tuned vars file when no candidate wins)")
    actions: list[dict[str, str]] = []
    lines: list[str] = []
    writing = has_winner and write
    why = "no winner" if write else "sglang_tune_write_vars: false"
    if writing:
        lines += [f"Moved `{m['src']}` unchanged to `{m['dest']}`: Ansible reads a host's vars file or its folder, "
                  "never both, so the folder now holds your file and the tuned one (both are read)." for m in moves]
    for rel in files:
        before = earlier(read(rel))
        if writing:
            actions.append({"file": rel, "action": "write", "before": before})
            lines.append(f"Written: `{rel}`" + (f" (replaced the file of {before})" if before else " (new)")
                         + "; review and commit it, deploy.yml reads it.")
        elif not before:
            actions.append({"file": rel, "action": "none", "before": ""})
            lines.append(f"Not written: `{rel}` ({why}); there is no earlier file, deploy.yml deploys your own settings.")
        else:
            actions.append(_earlier_action(rel, before, why, has_winner, without_winner, lines))
    for rel in others:
        before = earlier(read(rel))
        if not before:
            continue
        if writing and before.startswith("run "):
            actions.append({"file": rel, "action": "remove", "before": before})
            lines.append(f"Removed: `{rel}` ({before}), an earlier result in another place, which would otherwise "
                         "override or shadow the new one.")
        elif writing:
            actions.append({"file": rel, "action": "keep", "before": before})
            lines.append(f"Kept: `{rel}` ({before}); it may override the new file: check it.")
        else:
            actions.append(_earlier_action(rel, before, why, has_winner, without_winner, lines))
    return {"actions": actions, "moves": list(moves) if writing else [], "lines": lines,
            "written": [a["file"] for a in actions if a["action"] == "write"]}


def _earlier_action(rel: str, before: str, why: str, has_winner: bool, without_winner: str,
                    lines: list[str]) -> dict[str, str]:
    """Nothing is written: an earlier file is kept (loudly) or, asked to and when tune.yml wrote
    it, removed."""
    mine = before.startswith("run ")
    if mine and not has_winner and without_winner == "remove":
        lines.append(f"Removed: `{rel}` ({before}; {why}, sglang_tune_without_winner: remove): deploy.yml deploys "
                     "your own settings again.")
        return {"file": rel, "action": "remove", "before": before}
    lines.append(f"Not written: `{rel}` ({why}). KEPT: the earlier file ({before}) is still there and deploy.yml "
                 "still deploys it" + ("; -e sglang_tune_without_winner=remove removes it" if mine and not has_winner
                                       else "") + ".")
    return {"file": rel, "action": "keep", "before": before}
