# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The deployment plan: host facts + profile + release traits + model config -> instances.

Pure functions (the only I/O is loading the collection's data files through ``_paths``):

- ``hicache_plan``: the HiCache host-pool size for ``--hicache-size`` from the host's memory
  facts, counting everything the release pins beyond the size (the second pool of a hybrid
  model on per-pool releases, the speculative draft model's KV host pool).
- ``load_profiles`` / ``resolve_profile``: the profiles of ``data/profiles.yml`` with the
  user's profiles merged over them.
- ``instance_plan``: one SGLang server per GPU (or per TP group of GPUs), with its name, GPUs,
  ports, argv and env rendered for the chosen release.
- ``validate_plan``: every instance's argv checked against the release's flag schema.

Every refusal is a ``PlanError`` whose message says what to change. See docs/planning.md.
"""
from __future__ import annotations

import copy
import difflib
import math
from collections.abc import Mapping
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils import _layout, _paths

GB = 10**9  # --hicache-size is in decimal GB (size * 1e9 bytes)
GIB = 2**30  # the reserve is in GiB, as SGLang's own "available - 10 GiB" check
DEFAULT_DRAFT_HOST_POOL_FACTOR = 0.19  # measured on 0.5.17 (1.44 GB on 8, 3.61 GB on 20), rounded up
PERFMODEL_FILE = "perfmodel.json"  # owns the pinning speed (pin_fixed_s, pin_gb_s), shared with the engine
SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"
API_KEY_ENV = "SGLANG_API_KEY"
PROFILES_FILE = "profiles.yml"
RELEASES_FILE = "releases.json"

# Flags the plan owns: set through a parameter, never through extra_args.
OWNED_FLAGS: dict[str, str] = {
    "--model-path": "model_path (sglang_model_path)",
    "--model": "model_path (sglang_model_path)",
    "--host": "host_address",
    "--port": "base_port (the port is base_port + instance index)",
    "--nccl-port": "nccl_port_base",
    "--tp-size": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--api-key": "api_key_env (the key goes through the env file, never argv)",
    "--admin-api-key": "the env file (secrets never go into argv)",
}

PROFILE_KEYS = (
    "description", "extends", "mem_fraction_static", "max_running_requests", "cuda_graph_max_bs",
    "metrics", "mamba_strategy", "speculative", "hicache",
)
SPECULATIVE_KEYS = ("algorithm", "steps", "topk", "draft_tokens")
HICACHE_KEYS = ("enabled", "size", "ratio", "write_policy", "io_backend", "mem_layout")
ARCH_KINDS = ("dense", "hybrid")

# Architectures whose models keep linear-attention / Mamba state (used when config.json has no
# layer_types). Matched as substrings of config.architectures.
HYBRID_ARCH_HINTS = (
    "Qwen3Next", "Qwen3_5", "Qwen3_6", "NemotronH", "FalconH1", "Jamba", "Mamba", "GraniteMoeHybrid",
    "Lfm2", "KimiLinear", "BailingMoeV2_5", "MiniMaxText01", "Plamo2",
)
HYBRID_LAYER_WORDS = ("linear", "mamba", "ssm", "delta")
HYBRID_CONFIG_KEYS = (
    "linear_num_value_heads", "linear_num_key_heads", "mamba_d_state", "ssm_state_size",
    "hybrid_override_pattern", "mamba_num_heads",
)


class PlanError(ValueError):
    """A plan that cannot be made; the message says why and what to change."""


# ---------------------------------------------------------------------------------------------
# Small helpers


def _gb(value: float) -> str:
    return f"{value / GB:.2f} GB"


def _closest(word: str, choices: list[str] | tuple[str, ...]) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _host(facts: Mapping[str, Any]) -> Mapping[str, Any]:
    """Accept the ``sglang_host`` facts themselves or a dict holding them (ansible_facts)."""
    if not isinstance(facts, Mapping):
        raise PlanError(f"host facts must be a dict (the sglang_host facts), not {type(facts).__name__}")
    inner = facts.get("sglang_host")
    return inner if isinstance(inner, Mapping) else facts


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _by_arch(value: Any, arch: str) -> Any:
    """A profile value given as {dense: X, hybrid: Y} picks the model's kind."""
    if isinstance(value, Mapping) and value and set(value) <= set(ARCH_KINDS):
        return value.get(arch)
    return value


def _int_or_none(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise PlanError(f"{what} must be an integer, not {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise PlanError(f"{what} must be an integer, not {value!r}") from None
    if number != float(value):
        raise PlanError(f"{what} must be a whole number, not {value!r}")
    return number


def _render(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


# ---------------------------------------------------------------------------------------------
# Release traits


def load_releases() -> dict[str, dict[str, Any]]:
    """The traits of each supported release (``data/releases.json``)."""
    data = _paths.load_json(RELEASES_FILE)
    return {key: value for key, value in data.items() if not key.startswith("_") and isinstance(value, dict)}


def release_traits(release: str) -> dict[str, Any]:
    """The traits of one release; an unknown release raises PlanError listing the known ones."""
    releases = load_releases()
    key = str(release)
    if key not in releases:
        raise PlanError(
            f"SGLang release {key!r} is not supported: supported releases are "
            f"{', '.join(sorted(releases, key=_version_key))}{_closest(key, sorted(releases))}"
        )
    return copy.deepcopy(releases[key])


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


# ---------------------------------------------------------------------------------------------
# HiCache sizing


def _available_bytes(host: Mapping[str, Any]) -> tuple[int, str]:
    memory = host.get("memory")
    if not isinstance(memory, Mapping):
        raise PlanError("the host facts have no 'memory': gather them with llmops.sglang.host_facts first")
    effective = memory.get("effective_available_bytes")
    if effective is not None:
        return int(effective), str(memory.get("limited_by") or "meminfo")
    available = memory.get("available_bytes")
    if available is None:
        raise PlanError("the host facts have no memory.available_bytes: gather them with llmops.sglang.host_facts")
    cgroup = memory.get("cgroup") or {}
    limit = cgroup.get("available_bytes") if isinstance(cgroup, Mapping) else None
    if limit is not None and int(limit) < int(available):
        return int(limit), "cgroup"
    return int(available), "meminfo"


def pin_seconds(pinned_bytes: float) -> int:
    """Seconds to pin `pinned_bytes` of HiCache host pools: a fixed start plus a rate, the
    same constants as the embedded engine (measured on a real H200 host: 9.43 GB in 20 s,
    191.87 GB in 168 s; see docs/PERFORMANCE.md, "Real GPU")."""
    consts = _paths.load_json(PERFMODEL_FILE)
    if pinned_bytes <= 0:
        return 0
    return math.ceil(float(consts["pin_fixed_s"]) + pinned_bytes / (float(consts["pin_gb_s"]) * GB))


def hicache_plan(
    facts: dict[str, Any],
    *,
    release: str,
    instances: int,
    tp_size: int,
    hybrid: bool,
    spec: bool,
    reserve_gib: float = 10,
    fraction: float = 0.75,
    explicit_size_gb: int | None = None,
    traits: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Size ``--hicache-size`` (decimal GB per rank) so that every pool of every rank fits.

    budget = (min(MemAvailable, cgroup headroom) - reserve) x fraction; each rank may pin
    budget / (instances x tp_size); a rank pins size x (pools_per_rank + draft_factor), where
    pools_per_rank is 2 for a hybrid model on a per-pool release (0.5.10 gives the size to the
    KV pool and to the Mamba pool) and draft_factor is the release's draft-model KV host pool
    (speculative decoding only). An explicit size that does not fit raises PlanError with the
    arithmetic and the largest size that fits; so does a plan with less than 1 GB per rank.
    """
    host = _host(facts)
    traits = release_traits(release) if traits is None else traits
    instances = _int_or_none(instances, "instances") or 0
    tp_size = _int_or_none(tp_size, "tp_size") or 0
    if instances < 1 or tp_size < 1:
        raise PlanError(f"instances ({instances}) and tp_size ({tp_size}) must be at least 1")
    fraction = float(fraction)
    if not 0 < fraction <= 1:
        raise PlanError(f"hicache fraction must be in (0, 1], not {fraction}")
    reserve_gib = float(reserve_gib)
    if reserve_gib < 0:
        raise PlanError(f"hicache reserve must not be negative, not {reserve_gib} GiB")

    available, limited_by = _available_bytes(host)
    reserve = int(round(reserve_gib * GIB))
    budget = max(int((available - reserve) * fraction), 0)
    per_pool = traits.get("hicache_hybrid_semantics") == "per_pool"
    pools = 2 if (hybrid and per_pool) else 1
    draft = float(traits.get("draft_host_pool_factor", DEFAULT_DRAFT_HOST_POOL_FACTOR)) \
        if (spec and traits.get("draft_host_pool", True)) else 0.0
    per_gb = pools + draft
    ranks = instances * tp_size

    def pinned_rank(size_gb: int) -> int:
        return math.ceil(size_gb * GB * per_gb)

    largest = math.floor(budget / ranks / (GB * per_gb)) if budget > 0 else 0
    while largest > 0 and pinned_rank(largest) * ranks > budget:
        largest -= 1

    reasoning = [
        f"available: {_gb(available)} (limited by {limited_by}; the smaller of MemAvailable and the "
        "cgroup headroom)",
        f"budget: ({_gb(available)} - reserve {reserve_gib:g} GiB = {_gb(reserve)}) x {fraction:g} = {_gb(budget)}",
        f"ranks: {instances} instance(s) x TP {tp_size} = {ranks}; each rank may pin {_gb(budget / ranks)}",
        "each rank pins size x ("
        + (f"{pools} pools: release {release} gives --hicache-size to the KV pool and to the Mamba pool"
           if pools == 2 else "1 pool: the size covers the rank's host pools")
        + (f" + {draft:g} for the draft model's KV host pool" if draft else "")
        + f") = {per_gb:g} x size",
        f"largest size that fits: floor({_gb(budget / ranks)} / {per_gb:g}) = {largest} GB",
    ]

    if explicit_size_gb is not None:
        size = _int_or_none(explicit_size_gb, "hicache size") or 0
        if size < 1:
            raise PlanError(f"hicache size must be at least 1 GB, not {explicit_size_gb!r}")
        total = pinned_rank(size) * ranks
        if total > budget:
            fit = (f"the largest size that fits is {largest} GB" if largest >= 1 else
                   "no size fits: disable HiCache (a profile without it) or run fewer instances")
            raise PlanError(
                f"--hicache-size {size} oversubscribes host memory on release {release}: "
                f"{size} GB x {per_gb:g} per rank x {ranks} rank(s) = {_gb(total)} pinned > budget "
                f"{_gb(budget)} = ({_gb(available)} available - {reserve_gib:g} GiB reserve) x {fraction:g}; "
                f"{fit}"
            )
        reasoning.append(f"explicit size {size} GB: {_gb(total)} pinned <= budget {_gb(budget)}")
    else:
        size = largest
        if size < 1:
            raise PlanError(
                f"not enough host memory for HiCache: {_gb(available)} available - {reserve_gib:g} GiB "
                f"reserve, x {fraction:g} = budget {_gb(budget)}, over {ranks} rank(s) at {per_gb:g} x size "
                "leaves less than 1 GB per rank; disable HiCache (choose a profile without it) or run "
                "fewer instances"
            )
    per_instance = pinned_rank(size) * tp_size
    total = per_instance * instances
    reasoning.append(
        f"size {size} GB: pins {_gb(pinned_rank(size))} per rank, {_gb(per_instance)} per instance, "
        f"{_gb(total)} for the host (budget {_gb(budget)}, {_gb(budget - total)} left)"
    )
    return {
        "size_gb": size,
        "largest_size_gb": largest,
        "pinned_per_rank_bytes": pinned_rank(size),
        "pinned_per_instance_bytes": per_instance,
        "pinned_total_bytes": total,
        "budget_bytes": budget,
        "available_bytes": available,
        "limited_by": limited_by,
        "reserve_bytes": reserve,
        "fraction": fraction,
        "instances": instances,
        "tp_size": tp_size,
        "pools_per_rank": pools,
        "draft_factor": draft,
        "explicit": explicit_size_gb is not None,
        "fits": total <= budget,
        "pin_seconds_estimate": pin_seconds(per_instance),
        "reasoning": reasoning,
    }


# ---------------------------------------------------------------------------------------------
# Profiles


def _builtin_profiles() -> dict[str, Any]:
    import yaml  # controller-only data; PyYAML ships with ansible-core

    with open(_paths.data_dir() / PROFILES_FILE, encoding="utf-8") as handle:
        data = yaml.safe_load(handle) or {}
    profiles = data.get("profiles") if isinstance(data, Mapping) else None
    if not isinstance(profiles, Mapping):
        raise PlanError(f"{PROFILES_FILE} has no 'profiles' mapping")
    return dict(profiles)


def _check_keys(where: str, value: Mapping[str, Any], known: tuple[str, ...]) -> None:
    for key in value:
        if key not in known:
            raise PlanError(f"{where}: unknown key {key!r}{_closest(str(key), known)}; known keys: "
                            f"{', '.join(known)}")


def load_profiles(user_profiles: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Built-in profiles with the user's merged over them (dicts merged key by key); a profile
    with ``extends: NAME`` starts from that profile. Returns every profile fully resolved."""
    raw: dict[str, Any] = _builtin_profiles()
    for name, body in (user_profiles or {}).items():
        if not isinstance(body, Mapping):
            raise PlanError(f"profile {name!r} must be a dict of settings, not {type(body).__name__}")
        raw[str(name)] = _deep_merge(raw.get(name) or {}, body) if name in raw else copy.deepcopy(dict(body))

    resolved: dict[str, dict[str, Any]] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> dict[str, Any]:
        if name in resolved:
            return resolved[name]
        if name in chain:
            raise PlanError(f"profiles extend each other in a loop: {' -> '.join((*chain, name))}")
        if name not in raw:
            raise PlanError(f"profile {chain[-1]!r} extends unknown profile {name!r}; valid profiles: "
                            f"{', '.join(sorted(raw))}")
        body = dict(raw[name])
        parent = body.pop("extends", None)
        result = _deep_merge(resolve(str(parent), (*chain, name)), body) if parent else body
        _check_keys(f"profile {name!r}", result, PROFILE_KEYS)
        for sub, keys in (("speculative", SPECULATIVE_KEYS), ("hicache", HICACHE_KEYS)):
            if isinstance(result.get(sub), Mapping):
                _check_keys(f"profile {name!r} {sub}", result[sub], keys)
            elif result.get(sub) is not None:
                raise PlanError(f"profile {name!r}: {sub} must be a dict or null, not {result[sub]!r}")
        resolved[name] = result
        return result

    for name in raw:
        resolve(name, ())
    return {name: copy.deepcopy(resolved[name]) for name in raw}


def resolve_profile(name: str, user_profiles: dict[str, Any] | None = None) -> dict[str, Any]:
    """One profile, resolved; an unknown name raises PlanError listing the valid ones."""
    profiles = load_profiles(user_profiles)
    if name not in profiles:
        raise PlanError(f"unknown profile {name!r}{_closest(str(name), sorted(profiles))}: valid profiles are "
                        f"{', '.join(sorted(profiles))}")
    result = profiles[name]
    result["name"] = name
    return result


# ---------------------------------------------------------------------------------------------
# The model


def model_kind(model_config: Mapping[str, Any] | None, model_arch: str | None = None) -> dict[str, Any]:
    """Whether a model is hybrid (linear-attention / Mamba state layers) and has a built-in MTP
    head, from its config.json; ``model_arch`` ("hybrid"/"dense") when the config is unknown."""
    if model_arch is not None and model_arch not in ARCH_KINDS:
        raise PlanError(f"model_arch must be one of {', '.join(ARCH_KINDS)}, not {model_arch!r}")
    if not model_config:
        if model_arch is None:
            raise PlanError("cannot tell whether the model is hybrid: give the model's config.json "
                            "(model_config) or declare model_arch: hybrid or dense")
        return {"arch": model_arch, "hybrid": model_arch == "hybrid", "has_mtp": None,
                "source": "declared", "architectures": []}
    configs: list[Mapping[str, Any]] = [model_config]
    text = model_config.get("text_config")
    if isinstance(text, Mapping):
        configs.append(text)
    architectures = [str(a) for c in configs for a in (c.get("architectures") or [])]
    hybrid = False
    has_mtp = False
    for cfg in configs:
        layer_types = cfg.get("layer_types") or []
        if any(word in str(kind).lower() for kind in layer_types for word in HYBRID_LAYER_WORDS):
            hybrid = True
        if any(cfg.get(key) for key in HYBRID_CONFIG_KEYS):
            hybrid = True
        for key in ("mtp_num_hidden_layers", "num_nextn_predict_layers", "num_mtp_layers"):
            if isinstance(cfg.get(key), int) and cfg[key] > 0:
                has_mtp = True
    if any(hint in arch for arch in architectures for hint in HYBRID_ARCH_HINTS):
        hybrid = True
    if any("MTP" in arch for arch in architectures):
        has_mtp = True
    return {"arch": "hybrid" if hybrid else "dense", "hybrid": hybrid, "has_mtp": has_mtp,
            "source": "config", "architectures": architectures}


# ---------------------------------------------------------------------------------------------
# Extra args


def _normalize_extra_args(extra_args: Mapping[str, Any] | list[Any] | None) -> list[tuple[str, list[str] | None]]:
    """extra_args as (flag, values) pairs; values None removes the flag, [] is a bare flag."""
    if not extra_args:
        return []
    pairs: list[tuple[str, list[str] | None]] = []
    if isinstance(extra_args, Mapping):
        for key, value in extra_args.items():
            flag = str(key) if str(key).startswith("-") else f"--{key}"
            if value is None or value is False:
                pairs.append((flag, None))
            elif value is True:
                pairs.append((flag, []))
            elif isinstance(value, (list, tuple)):
                pairs.append((flag, [_render(item) for item in value]))
            else:
                pairs.append((flag, [_render(value)]))
        return pairs
    if isinstance(extra_args, (list, tuple)):
        for token in (str(item) for item in extra_args):
            if token.startswith("--"):
                flag, eq, value = token.partition("=")
                pairs.append((flag, [value] if eq else []))
            elif not pairs:
                raise PlanError(f"extra_args must start with a flag (--name), not {token!r}")
            else:
                values = pairs[-1][1]
                if values is None:
                    raise AssertionError("extra_args")
                values.append(token)
        return pairs
    raise PlanError(f"extra_args must be a list of argv words or a dict of flag: value, not "
                    f"{type(extra_args).__name__}")


def _set_flag(argv: list[tuple[str, list[str]]], flag: str, values: list[str] | None) -> None:
    """Replace a flag's values in place (or append it); None removes it."""
    for position, (name, _) in enumerate(argv):
        if name == flag:
            if values is None:
                del argv[position]
            else:
                argv[position] = (flag, values)
            return
    if values is not None:
        argv.append((flag, values))


def _get_flag(argv: list[tuple[str, list[str]]], flag: str) -> list[str] | None:
    for name, values in argv:
        if name == flag:
            return values
    return None


# ---------------------------------------------------------------------------------------------
# Instances


def _gpu_groups(host: Mapping[str, Any], gpus: list[int] | None, tp_size: int, force_busy: bool,
                warnings: list[str]) -> list[list[dict[str, Any]]]:
    known = host.get("gpus") or []
    if not known:
        raise PlanError("the host facts list no GPU: nothing to deploy on (declare GPUs to plan for them)")
    by_index = {int(gpu["index"]): gpu for gpu in known}
    if isinstance(gpus, str):  # "0,1" from an inventory string
        gpus = [_int_or_none(part, "gpu index") or 0 for part in gpus.replace(" ", "").split(",") if part]
    if gpus is None:
        chosen = sorted(by_index)
    else:
        chosen = [_int_or_none(g, "gpu index") for g in gpus]  # type: ignore[misc]
        missing = [g for g in chosen if g not in by_index]
        if missing:
            raise PlanError(f"GPU(s) {', '.join(map(str, missing))} not present on "
                            f"{host.get('hostname', 'the host')}: it has GPU(s) "
                            f"{', '.join(map(str, sorted(by_index)))}")
        if len(set(chosen)) != len(chosen):
            raise PlanError(f"gpus lists a GPU twice: {chosen}")
    if not chosen:
        raise PlanError("no GPU chosen: gpus is empty")
    if len(chosen) % tp_size:
        raise PlanError(f"{len(chosen)} GPU(s) ({', '.join(map(str, chosen))}) cannot be divided into "
                        f"tensor-parallel groups of {tp_size}: choose gpus or tp_size so that it divides")
    busy = []
    for index in chosen:
        gpu = by_index[index]
        processes = gpu.get("processes") or []
        foreign = [p for p in processes if not p.get("owner")]
        # host_facts decides `busy` knowing which processes are this deployment's own
        in_use = bool(gpu["busy"]) if "busy" in gpu else bool(foreign)
        if in_use:
            procs = ", ".join(f"pid {p.get('pid')} {p.get('name') or p.get('process_name') or ''}".strip()
                              for p in foreign) or \
                f"{gpu.get('memory_used_mib', '?')} MiB in use by no process that nvidia-smi lists"
            busy.append(f"GPU {index} ({procs})")
        if gpu.get("mig_enabled"):
            warnings.append(f"GPU {index} has MIG enabled: SGLang sees MIG instances, not the whole GPU")
    if busy:
        if not force_busy:
            raise PlanError(f"GPU(s) in use by processes that are not this deployment's: {'; '.join(busy)}. "
                            "Stop them, choose other GPUs (sglang_gpus), or set sglang_force_busy_gpus: "
                            "true to deploy anyway")
        warnings.append(f"deploying on busy GPU(s) because force_busy is set: {'; '.join(busy)}")
    return [[by_index[i] for i in chosen[start:start + tp_size]] for start in range(0, len(chosen), tp_size)]


def _speculative(spec_profile: Mapping[str, Any] | None, model: Mapping[str, Any], traits: Mapping[str, Any],
                 draft_model_path: str | None, release: str, warnings: list[str]) -> dict[str, Any] | None:
    if not spec_profile:
        return None
    algorithm = str(spec_profile.get("algorithm") or "auto")
    if algorithm == "auto":
        if draft_model_path:
            algorithm = "EAGLE"
        elif model.get("has_mtp"):
            algorithm = "NEXTN"
        elif model.get("has_mtp") is None:
            algorithm = "NEXTN"
            warnings.append("model config unknown: assuming a built-in MTP head (NEXTN); give "
                            "draft_model_path for a model without one")
        else:
            raise PlanError("speculative decoding needs a draft model: the model has no built-in MTP head "
                            f"(architectures: {', '.join(model.get('architectures') or ['?'])}); give "
                            "draft_model_path (EAGLE) or choose a profile without speculative decoding")
    known = [str(a) for a in traits.get("spec_algorithms") or []]
    if known and algorithm not in known:
        raise PlanError(f"speculative algorithm {algorithm!r} is not in release {release}: "
                        f"{', '.join(known)}{_closest(algorithm, known)}")
    if algorithm in ("EAGLE", "EAGLE3", "STANDALONE") and not draft_model_path and model.get("has_mtp") is False:
        raise PlanError(f"speculative algorithm {algorithm} needs draft_model_path for this model")
    numbers = {}
    for key in ("steps", "topk", "draft_tokens"):
        value = _int_or_none(spec_profile.get(key), f"speculative {key}")
        if value is None or value < 1:
            raise PlanError(f"speculative {key} must be a positive integer (set all three of steps, topk "
                            f"and draft_tokens), not {spec_profile.get(key)!r}")
        numbers[key] = value
    return {"algorithm": algorithm, **numbers, "draft_model_path": draft_model_path}


def instance_plan(
    facts: dict[str, Any],
    *,
    profile: str,
    release: str = "0.5.23",
    model_path: str,
    model_config: dict[str, Any] | None = None,
    model_arch: str | None = None,
    tp_size: int = 1,
    gpus: list[int] | None = None,
    base_port: int = 30000,
    nccl_port_base: int | None = None,
    host_address: str = "127.0.0.1",
    hicache_size_gb: int | None = None,
    hicache_fraction: float = 0.75,
    hicache_reserve_gib: float = 10,
    extra_args: dict[str, Any] | list[Any] | None = None,
    user_profiles: dict[str, Any] | None = None,
    force_busy: bool = False,
    max_running_requests: int | None = None,
    served_model_name: str | None = None,
    api_key_env: bool = False,
    draft_model_path: str | None = None,
    base_dir: str = "/opt/sglang",
    advertise_address: str | None = None,
) -> dict[str, Any]:
    """The instances to run on one host: one per GPU (or per group of tp_size GPUs).

    Returns {release, profile, profile_settings, model, host_address, base_dir, manifest_path,
    engine_root, traits, instances, hicache, warnings}; each instance has name, index, gpu_ids,
    gpu_names, cuda_visible_devices, port, nccl_port, connect_url (local clients: a wildcard
    bind is reached on loopback), advertise_url (clients on other hosts: the bind address, or
    ``advertise_address`` for a wildcard bind; None for a loopback bind), paths (dir,
    launch_script, env_file, pid_file, log_file), unit, service, tp_size, argv (starting with
    --model-path), env, secret_args_from_env and settings. The argv is not validated here: see
    ``validate_plan``.
    """
    host = _host(facts)
    release = str(release)
    traits = release_traits(release)
    prof = resolve_profile(profile, user_profiles)
    model = model_kind(model_config, model_arch)
    warnings: list[str] = []
    if model_config and model_arch and model_arch != model["arch"]:
        warnings.append(f"model_arch {model_arch!r} disagrees with config.json ({model['arch']}): using the config")
    arch = str(model["arch"])
    hybrid = bool(model["hybrid"])
    if not model_path:
        raise PlanError("model_path is required")
    tp = _int_or_none(tp_size, "tp_size") or 0
    if tp < 1:
        raise PlanError(f"tp_size must be at least 1, not {tp_size!r}")
    groups = _gpu_groups(host, gpus, tp, bool(force_busy), warnings)
    count = len(groups)

    extras = _normalize_extra_args(extra_args)
    for flag, _ in extras:
        if flag in OWNED_FLAGS:
            raise PlanError(f"extra_args may not set {flag}: the plan sets it from {OWNED_FLAGS[flag]}")

    # Ports: HTTP base_port + i, NCCL nccl_port_base + i; no overlap, all valid.
    base = _int_or_none(base_port, "base_port") or 0
    nccl_base = _int_or_none(nccl_port_base, "nccl_port_base") if nccl_port_base is not None else base + 1000
    if nccl_base is None:
        raise AssertionError("nccl_port_base")
    http_ports = {base + i for i in range(count)}
    nccl_ports = {nccl_base + i for i in range(count)}
    if min(http_ports | nccl_ports) < 1 or max(http_ports | nccl_ports) > 65535:
        raise PlanError(f"ports out of range: HTTP {base}..{base + count - 1}, NCCL {nccl_base}..{nccl_base + count - 1}")
    if http_ports & nccl_ports:
        raise PlanError(f"NCCL ports {nccl_base}..{nccl_base + count - 1} overlap HTTP ports "
                        f"{base}..{base + count - 1}: choose another nccl_port_base")

    spec = _speculative(prof.get("speculative"), model, traits, draft_model_path, release, warnings)

    # Max running requests and the CUDA-graph maximum (kept >= max running requests).
    mrr = _int_or_none(max_running_requests if max_running_requests is not None
                       else _by_arch(prof.get("max_running_requests"), arch), "max_running_requests")
    extra_mrr = next((v for f, v in extras if f == "--max-running-requests"), None)
    if extra_mrr:
        mrr = _int_or_none(extra_mrr[0], "--max-running-requests in extra_args")
    if spec and mrr is None:
        mrr = int(traits.get("spec_max_running_default", 48))
        warnings.append(f"speculative decoding without max_running_requests: rendering SGLang's reset "
                        f"value {mrr} explicitly")
    cuda_graph = _int_or_none(_by_arch(prof.get("cuda_graph_max_bs"), arch), "cuda_graph_max_bs")
    if mrr is not None:
        cuda_graph = max(cuda_graph or 0, mrr)
    cuda_graph_flag = str(traits.get("cuda_graph_bs_flag") or "--cuda-graph-max-bs")

    # Mamba strategy: hybrid models only, flag name per release.
    strategy = _by_arch(prof.get("mamba_strategy"), arch) if hybrid else None
    mamba_flag = str(traits.get("mamba_strategy_flag") or "--mamba-radix-cache-strategy")
    if strategy is not None:
        strategy = str(strategy)
        valid = [str(s) for s in traits.get("mamba_strategies") or []]
        if valid and strategy not in valid:
            raise PlanError(f"mamba strategy {strategy!r} is not in release {release}: {', '.join(valid)}"
                            f"{_closest(strategy, valid)}")

    # HiCache.
    hc_profile = prof.get("hicache") or {}
    hc = {key: _by_arch(value, arch) for key, value in hc_profile.items()}
    hicache: dict[str, Any] | None = None
    extra_size = next((v for f, v in extras if f == "--hicache-size"), None)
    if extra_size:
        hicache_size_gb = _int_or_none(extra_size[0], "--hicache-size in extra_args")
        extras = [(f, v) for f, v in extras if f != "--hicache-size"]
    if hc.get("enabled"):
        size = hicache_size_gb if hicache_size_gb is not None else hc.get("size", "plan")
        if size is not None:
            explicit = None if size == "plan" else _int_or_none(size, "hicache size")
            hicache = hicache_plan(
                host, release=release, instances=count, tp_size=tp, hybrid=hybrid, spec=spec is not None,
                reserve_gib=hicache_reserve_gib, fraction=hicache_fraction, explicit_size_gb=explicit,
                traits=traits,
            )
        elif hc.get("ratio") is None:
            raise PlanError(f"profile {profile!r}: hicache needs size (\"plan\" or GB) or ratio")
        else:
            warnings.append("HiCache sized by ratio: the host pools follow the device pool and are not "
                            "checked against host memory; prefer size: plan")
    elif hicache_size_gb is not None:
        warnings.append(f"hicache size {hicache_size_gb} ignored: profile {profile!r} has HiCache off")
    if any(f in ("--enable-hierarchical-cache", "--enable-hicache") and v is not None for f, v in extras) \
            and not hc.get("enabled"):
        warnings.append("HiCache turned on through extra_args is not sized or checked by the plan; use "
                        "a profile with hicache enabled")

    user_cuda_graph = any(f == cuda_graph_flag and v is not None for f, v in extras)
    instances: list[dict[str, Any]] = []
    for index, group in enumerate(groups):
        gpu_ids = [int(gpu["index"]) for gpu in group]
        name = "gpu" + "-".join(map(str, gpu_ids))
        port, nccl_port = base + index, nccl_base + index
        argv: list[tuple[str, list[str]]] = [("--model-path", [str(model_path)])]
        if served_model_name:
            argv.append(("--served-model-name", [str(served_model_name)]))
        argv += [("--host", [str(host_address)]), ("--port", [str(port)]), ("--nccl-port", [str(nccl_port)])]
        if tp > 1:
            argv.append(("--tp-size", [str(tp)]))
        if prof.get("mem_fraction_static") is not None:
            argv.append(("--mem-fraction-static", [_render(_by_arch(prof["mem_fraction_static"], arch))]))
        if mrr is not None:
            argv.append(("--max-running-requests", [str(mrr)]))
        if cuda_graph is not None:
            argv.append((cuda_graph_flag, [str(cuda_graph)]))
        if _by_arch(prof.get("metrics"), arch):
            argv.append(("--enable-metrics", []))
        if spec:
            argv += [
                ("--speculative-algorithm", [spec["algorithm"]]),
                ("--speculative-num-steps", [str(spec["steps"])]),
                ("--speculative-eagle-topk", [str(spec["topk"])]),
                ("--speculative-num-draft-tokens", [str(spec["draft_tokens"])]),
            ]
            if draft_model_path:
                argv.append(("--speculative-draft-model-path", [str(draft_model_path)]))
        if strategy is not None:
            argv.append((mamba_flag, [strategy]))
        if hc.get("enabled"):
            argv.append(("--enable-hierarchical-cache", []))
            if hicache is not None:
                argv.append(("--hicache-size", [str(hicache["size_gb"])]))
            else:
                argv.append(("--hicache-ratio", [_render(hc["ratio"])]))
            for key, flag in (("write_policy", "--hicache-write-policy"), ("io_backend", "--hicache-io-backend"),
                              ("mem_layout", "--hicache-mem-layout")):
                if hc.get(key) is not None:
                    argv.append((flag, [str(hc[key])]))
        for flag, values in extras:
            _set_flag(argv, flag, values)
        # Keep the CUDA-graph maximum at or above the final max running requests.
        final_mrr = _get_flag(argv, "--max-running-requests")
        final_cg = _get_flag(argv, cuda_graph_flag)
        if final_mrr and final_mrr[0].isdigit():
            if not user_cuda_graph and (not final_cg or not final_cg[0].isdigit() or int(final_cg[0]) < int(final_mrr[0])):
                _set_flag(argv, cuda_graph_flag, [final_mrr[0]])
            elif final_cg and final_cg[0].isdigit() and int(final_cg[0]) < int(final_mrr[0]) and index == 0:
                warnings.append(f"extra_args set {cuda_graph_flag} {final_cg[0]} below --max-running-requests "
                                f"{final_mrr[0]}: larger batches run without CUDA graphs (much slower)")
        flat: list[str] = []
        for flag, values in argv:
            flat.append(flag)
            flat.extend(values)

        env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpu_ids)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        final_strategy = _get_flag(argv, mamba_flag)
        if (traits.get("spec_v2_env") == "required_for_hybrid_extra_buffer" and hybrid and spec
                and final_strategy == ["extra_buffer"]):
            env[SPEC_V2_ENV] = "1"
        cg_values = _get_flag(argv, cuda_graph_flag)
        instances.append({
            "name": name,
            "index": index,
            "gpu_ids": gpu_ids,
            "gpu_names": [str(gpu.get("name") or "") for gpu in group],
            "gpu_uuids": [str(gpu.get("uuid") or "") for gpu in group],
            "cuda_visible_devices": env["CUDA_VISIBLE_DEVICES"],
            "port": port,
            "nccl_port": nccl_port,
            "connect_url": _layout.connect_url(host_address, port),
            "advertise_url": _layout.advertise_url(host_address, port, advertise_address),
            "paths": _layout.instance_paths(base_dir, name),
            "unit": _layout.unit_name(name),
            "service": _layout.service_name(name),
            "tp_size": tp,
            "argv": flat,
            "env": env,
            "secret_args_from_env": {"--api-key": API_KEY_ENV} if api_key_env else {},
            "settings": {
                "max_running_requests": int(final_mrr[0]) if final_mrr and final_mrr[0].isdigit() else None,
                "cuda_graph_flag": cuda_graph_flag,
                "cuda_graph_max_bs": int(cg_values[0]) if cg_values and cg_values[0].isdigit() else None,
                "mamba_strategy_flag": mamba_flag if hybrid else None,
                "mamba_strategy": final_strategy[0] if final_strategy else None,
                "speculative": copy.deepcopy(spec),
                "hicache_size_gb": hicache["size_gb"] if hicache else None,
                "pinned_host_bytes": hicache["pinned_per_instance_bytes"] if hicache else 0,
            },
        })

    prof_settings = {key: value for key, value in prof.items() if key != "name"}
    return {
        "release": release,
        "profile": profile,
        "profile_settings": prof_settings,
        "model": {"path": str(model_path), **model, "draft_model_path": draft_model_path},
        "host_address": host_address,
        "base_dir": base_dir,
        "manifest_path": _layout.manifest_path(base_dir),
        "engine_root": _layout.engine_root(base_dir),
        "traits": traits,
        "instances": instances,
        "hicache": hicache,
        "warnings": warnings,
    }


# ---------------------------------------------------------------------------------------------
# Validation


def validate_plan(plan: Mapping[str, Any]) -> None:
    """Check every instance's argv against the release's flag schema; collect every problem into
    one PlanError naming the instance, the flag, the problem and the closest valid flag."""
    from ansible_collections.llmops.sglang.plugins.module_utils._flags import validate_argv

    release = str(plan["release"])
    problems: list[str] = []
    for instance in plan.get("instances") or []:
        for error in validate_argv(list(instance["argv"]), release):
            flag = getattr(error, "flag", None) or "?"
            message = getattr(error, "message", None) or str(error)
            suggestion = getattr(error, "suggestion", None)
            line = f"instance {instance['name']}: {flag}: {message}"
            if suggestion and suggestion != flag and str(suggestion) not in message:
                line += f" (closest valid flag: {suggestion})"
            problems.append(line)
    if problems:
        raise PlanError(f"the plan does not fit SGLang {release}'s flags ({len(problems)} problem(s)):\n  - "
                        + "\n  - ".join(problems))
