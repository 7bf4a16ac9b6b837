# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The settings every instance of a host shares, derived from the request, the profile, the
release's traits and the model: speculative decoding, running limits, Mamba strategy, HiCache."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import (
    PlanError,
    as_int,
    by_arch,
    closest,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.hicache import hicache_plan
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.request import PlanRequest
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.storage import lent_bytes


@dataclass
class HostSettings:
    """What the plan decided for the host, before rendering each instance's argv."""

    arch: str
    hybrid: bool
    spec: dict[str, Any] | None
    max_running_requests: int | None
    cuda_graph_flag: str
    cuda_graph_max_bs: int | None
    mamba_flag: str
    mamba_strategy: str | None
    hicache_flags: dict[str, Any]  # the profile's hicache block, per model kind
    hicache: dict[str, Any] | None  # the sizing (hicache_plan), None when off or sized by ratio
    extra_args: list[tuple[str, list[str] | None]]  # what is left for the argv after sizing took --hicache-size


def speculative(spec_profile: Mapping[str, Any] | None, model: Mapping[str, Any], traits: Mapping[str, Any],
                draft_model_path: str | None, release: str, warnings: list[str]) -> dict[str, Any] | None:
    """The speculative algorithm and its three numbers, or None without speculative decoding."""
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
                            f"(architectures: {', '.join(model.get('architectures') or ['?'])}); set "
                            "sglang_draft_model_path (EAGLE) or choose a profile without speculative decoding")
    known = [str(a) for a in traits.get("spec_algorithms") or []]
    if known and algorithm not in known:
        raise PlanError(f"speculative algorithm {algorithm!r} is not in release {release}: "
                        f"{', '.join(known)}{closest(algorithm, known)}")
    if algorithm in ("EAGLE", "EAGLE3", "STANDALONE") and not draft_model_path and model.get("has_mtp") is False:
        raise PlanError(f"speculative algorithm {algorithm} needs draft_model_path (sglang_draft_model_path) "
                        "for this model")
    numbers = {}
    for key in ("steps", "topk", "draft_tokens"):
        value = as_int(spec_profile.get(key), f"speculative {key}")
        if value is None or value < 1:
            raise PlanError(f"speculative {key} must be a positive integer (set all three of steps, topk "
                            f"and draft_tokens), not {spec_profile.get(key)!r}")
        numbers[key] = value
    return {"algorithm": algorithm, **numbers, "draft_model_path": draft_model_path}


def running_limits(req: PlanRequest, prof: Mapping[str, Any], traits: Mapping[str, Any], arch: str,
                   spec: dict[str, Any] | None, warnings: list[str]) -> tuple[int | None, str, int | None]:
    """(max_running_requests, the release's CUDA-graph flag, its maximum kept >= the limit)."""
    mrr = req.max_running_requests
    if mrr is None:
        mrr = as_int(by_arch(prof.get("max_running_requests"), arch), "max_running_requests")
    from_extra = req.extra("--max-running-requests")
    if from_extra:
        mrr = as_int(from_extra[0], "--max-running-requests in sglang_extra_args")
    if spec and mrr is None:
        mrr = int(traits.get("spec_max_running_default", 48))
        warnings.append(f"speculative decoding without max_running_requests: rendering SGLang's reset "
                        f"value {mrr} explicitly")
    cuda_graph = as_int(by_arch(prof.get("cuda_graph_max_bs"), arch), "cuda_graph_max_bs")
    if mrr is not None:
        cuda_graph = max(cuda_graph or 0, mrr)
    return mrr, str(traits.get("cuda_graph_bs_flag") or "--cuda-graph-max-bs"), cuda_graph


def mamba_strategy(prof: Mapping[str, Any], traits: Mapping[str, Any], arch: str, hybrid: bool,
                   release: str) -> tuple[str, str | None]:
    """(the release's Mamba strategy flag, the profile's strategy for hybrid models or None)."""
    flag = str(traits.get("mamba_strategy_flag") or "--mamba-radix-cache-strategy")
    strategy = by_arch(prof.get("mamba_strategy"), arch) if hybrid else None
    if strategy is None:
        return flag, None
    strategy = str(strategy)
    valid = [str(s) for s in traits.get("mamba_strategies") or []]
    if valid and strategy not in valid:
        raise PlanError(f"mamba strategy {strategy!r} is not in release {release}: {', '.join(valid)}"
                        f"{closest(strategy, valid)}")
    return flag, strategy


def hicache_sizing(req: PlanRequest, host: Mapping[str, Any], prof: Mapping[str, Any], traits: dict[str, Any],
                   arch: str, hybrid: bool, spec: bool, count: int, warnings: list[str],
                   ) -> tuple[dict[str, Any], dict[str, Any] | None, list[tuple[str, list[str] | None]]]:
    """(the profile's hicache block for this model kind, the sizing or None, extra_args without
    the --hicache-size that the sizing took over)."""
    flags = {key: by_arch(value, arch) for key, value in (prof.get("hicache") or {}).items()}
    extras = list(req.extra_args)
    size_gb, size_from = req.hicache_size_gb, "sglang_hicache_size_gb"
    from_extra = req.extra("--hicache-size")
    if from_extra:
        size_gb, size_from = as_int(from_extra[0], "--hicache-size in sglang_extra_args"), "--hicache-size"
        extras = [(f, v) for f, v in extras if f != "--hicache-size"]
    sizing = None
    if flags.get("enabled"):
        size = size_gb if size_gb is not None else flags.get("size", "plan")
        if size is not None:
            explicit = None if size == "plan" else as_int(size, "hicache size")
            sizing = hicache_plan(
                dict(host), release=req.release, instances=count, tp_size=req.gpus_per_node, hybrid=hybrid, spec=spec,
                reserve_gib=req.hicache_reserve_gib, fraction=req.hicache_fraction, explicit_size_gb=explicit,
                traits=traits, size_from=size_from if size_gb is not None else f"profile {req.profile!r} hicache.size",
                keep_size_gb=(host.get("memory") or {}).get("running_hicache_size_gb"),
                lent_bytes=lent_bytes(req.hicache_storage, traits, count, req.gpus_per_node),
            )
        elif flags.get("ratio") is None:
            raise PlanError(f"profile {req.profile!r}: hicache needs size (\"plan\" or GB) or ratio")
        else:
            warnings.append("HiCache sized by ratio: the host pools follow the device pool and are not "
                            "checked against host memory; prefer size: plan")
    elif size_gb is not None:
        warnings.append(f"hicache size {size_gb} ignored: profile {req.profile!r} has HiCache off")
    if any(f in ("--enable-hierarchical-cache", "--enable-hicache") and v is not None for f, v in extras) \
            and not flags.get("enabled"):
        warnings.append("HiCache turned on through extra_args is not sized or checked by the plan; use "
                        "a profile with hicache enabled")
    return flags, sizing, extras


def host_settings(req: PlanRequest, host: Mapping[str, Any], prof: Mapping[str, Any], traits: dict[str, Any],
                  model: Mapping[str, Any], count: int, warnings: list[str]) -> HostSettings:
    arch, hybrid = str(model["arch"]), bool(model["hybrid"])
    spec = speculative(prof.get("speculative"), model, traits, req.draft_model_path, req.release, warnings)
    mrr, cg_flag, cg_max = running_limits(req, prof, traits, arch, spec, warnings)
    mamba_flag, strategy = mamba_strategy(prof, traits, arch, hybrid, req.release)
    # count: the instances that carry HiCache (a host of decode instances only has none: _plan/instances.py)
    flags, sizing, extras = hicache_sizing(req, host, prof if count else {**prof, "hicache": None}, traits, arch,
                                           hybrid, spec is not None, count, warnings)
    return HostSettings(arch=arch, hybrid=hybrid, spec=spec, max_running_requests=mrr, cuda_graph_flag=cg_flag,
                        cuda_graph_max_bs=cg_max, mamba_flag=mamba_flag, mamba_strategy=strategy,
                        hicache_flags=flags, hicache=sizing, extra_args=extras)
