# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""GPU specs: ``data/gpus.json`` (``_defaults`` merged under each GPU) and the look-up by an
nvidia-smi name or an alias."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._shared.paths import load_json


class UnknownGpuError(ValueError):
    """The GPU name is not in data/gpus.json."""


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_mib: int
    hbm_tb_s: float
    bf16_tflops: float
    aliases: tuple[str, ...] = ()
    hbm_efficiency: float = 0.85
    decode_compute_efficiency: float = 0.3
    prefill_compute_efficiency: float = 0.5
    step_overhead_s: float = 0.0015
    draft_step_overhead_s: float = 0.0008
    eager_overhead_per_layer_s: float = 0.0006
    cuda_context_gib: float = 1.31
    cuda_graph_max_bs_default: int = 256

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024.0

    @property
    def eff_bandwidth(self) -> float:
        """Achieved HBM bytes per second."""
        return self.hbm_tb_s * 1e12 * self.hbm_efficiency


_GPU_FLOAT_FIELDS = (
    "hbm_efficiency",
    "decode_compute_efficiency",
    "prefill_compute_efficiency",
    "step_overhead_s",
    "draft_step_overhead_s",
    "eager_overhead_per_layer_s",
    "cuda_context_gib",
)


def _spec(name: str, merged: dict[str, Any]) -> GpuSpec:
    kwargs: dict[str, Any] = {
        key: float(merged[key]) for key in _GPU_FLOAT_FIELDS if key in merged
    }
    if "cuda_graph_max_bs_default" in merged:
        kwargs["cuda_graph_max_bs_default"] = int(merged["cuda_graph_max_bs_default"])
    return GpuSpec(
        name=name,
        memory_mib=int(merged["memory_mib"]),
        hbm_tb_s=float(merged["hbm_tb_s"]),
        bf16_tflops=float(merged["bf16_tflops"]),
        aliases=tuple(str(a) for a in merged.get("aliases", [])),
        **kwargs,
    )


def load_gpu_specs() -> dict[str, GpuSpec]:
    """All GPUs of data/gpus.json by canonical name."""
    raw: dict[str, Any] = load_json("gpus.json")
    defaults: dict[str, Any] = dict(raw.get("_defaults", {}))
    return {name: _spec(name, {**defaults, **entry})
            for name, entry in raw.items() if not name.startswith("_")}


def _norm(name: str) -> str:
    return " ".join(name.replace("_", " ").replace("-", " ").lower().split())


def find_gpu(name: str) -> GpuSpec:
    """Look a GPU up by its nvidia-smi name or an alias (case-insensitive)."""
    specs = load_gpu_specs()
    wanted = _norm(name)
    for spec in specs.values():
        if _norm(spec.name) == wanted or any(_norm(a) == wanted for a in spec.aliases):
            return spec
    known = ", ".join(sorted(specs))
    raise UnknownGpuError(f"unknown GPU {name!r}; known GPUs: {known}")
