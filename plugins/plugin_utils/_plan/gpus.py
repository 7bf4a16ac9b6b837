# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Which GPUs each instance gets: one per GPU, or groups of tp_size GPUs, never a busy one."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import PlanError


def _in_use(gpu: Mapping[str, Any]) -> str | None:
    """Why a GPU is in use by something that is not this deployment, or None.

    host_facts decides ``busy`` knowing which processes are the deployment's own (their
    ``owner``); facts without it count every listed process as foreign."""
    processes = gpu.get("processes") or []
    foreign = [p for p in processes if not p.get("owner")]
    in_use = bool(gpu["busy"]) if "busy" in gpu else bool(foreign)
    if not in_use:
        return None
    listed = ", ".join(f"pid {p.get('pid')} {p.get('name') or p.get('process_name') or ''}".strip()
                       for p in foreign)
    return listed or f"{gpu.get('memory_used_mib', '?')} MiB in use by no process that nvidia-smi lists"


def gpu_groups(host: Mapping[str, Any], gpus: list[int] | None, tp_size: int, force_busy: bool,
               warnings: list[str]) -> list[list[dict[str, Any]]]:
    """The GPU groups of the host's instances, in order; refuses GPUs that are missing, a count
    tp_size does not divide, and (unless force_busy) GPUs in use by foreign processes."""
    known = host.get("gpus") or []
    if not known:
        raise PlanError("the host facts list no GPU: nothing to deploy on (declare GPUs with "
                        "sglang_declared_gpus to plan for them)")
    by_index = {int(gpu["index"]): gpu for gpu in known}
    chosen = sorted(by_index) if gpus is None else list(gpus)
    missing = [g for g in chosen if g not in by_index]
    if missing:
        raise PlanError(f"sglang_gpus: GPU(s) {', '.join(map(str, missing))} not present on "
                        f"{host.get('hostname', 'the host')}: it has GPU(s) "
                        f"{', '.join(map(str, sorted(by_index)))}")
    if len(chosen) % tp_size:
        raise PlanError(f"{len(chosen)} GPU(s) ({', '.join(map(str, chosen))}) cannot be divided into "
                        f"tensor-parallel groups of {tp_size}: choose sglang_gpus or sglang_tp_size so that "
                        "it divides")
    busy = []
    for index in chosen:
        why = _in_use(by_index[index])
        if why:
            busy.append(f"GPU {index} ({why})")
        if by_index[index].get("mig_enabled"):
            warnings.append(f"GPU {index} has MIG enabled: SGLang sees MIG instances, not the whole GPU")
    if busy:
        if not force_busy:
            raise PlanError(f"GPU(s) in use by processes that are not this deployment's: {'; '.join(busy)}. "
                            "Stop them, choose other GPUs (sglang_gpus), or set sglang_force_busy_gpus: "
                            "true to deploy anyway")
        warnings.append(f"deploying on busy GPU(s) because force_busy is set: {'; '.join(busy)}")
    return [[by_index[i] for i in chosen[start:start + tp_size]] for start in range(0, len(chosen), tp_size)]
