# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Performance model and continuous-batching scheduler of the embedded engine.

Pure standard library. The physics (memory traffic over HBM bandwidth, FLOPs over tensor
throughput, fixed per-forward overheads) and the memory planning (SGLang's own rules for
``mem_fraction_static``, KV / Mamba pool sizing, ``max_running_requests`` clamps, HiCache host
pools) are described with every constant's origin in ``docs/engine.md``. Constants live in
``data/gpus.json`` and ``data/perfmodel.json``, release traits in ``data/releases.json``.
"""
from __future__ import annotations

import json
import math
import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._paths import load_json

GIB = float(1 << 30)
GB = 1e9
MIB = float(1 << 20)

DEFAULT_RELEASE = "0.5.23"


class UnknownGpuError(ValueError):
    """The GPU name is not in data/gpus.json."""


class ModelConfigError(ValueError):
    """A model's config.json is missing, unreadable or not a model config."""


class EngineStartError(RuntimeError):
    """The real server would fail to start with these arguments (message as it prints)."""


# --------------------------------------------------------------------------------------------
# GPUs
# --------------------------------------------------------------------------------------------


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


def load_gpu_specs() -> dict[str, GpuSpec]:
    """All GPUs of data/gpus.json by canonical name."""
    raw: dict[str, Any] = load_json("gpus.json")
    defaults: dict[str, Any] = dict(raw.get("_defaults", {}))
    specs: dict[str, GpuSpec] = {}
    for name, entry in raw.items():
        if name.startswith("_"):
            continue
        merged = {**defaults, **entry}
        kwargs: dict[str, Any] = {
            key: float(merged[key]) for key in _GPU_FLOAT_FIELDS if key in merged
        }
        if "cuda_graph_max_bs_default" in merged:
            kwargs["cuda_graph_max_bs_default"] = int(merged["cuda_graph_max_bs_default"])
        specs[name] = GpuSpec(
            name=name,
            memory_mib=int(merged["memory_mib"]),
            hbm_tb_s=float(merged["hbm_tb_s"]),
            bf16_tflops=float(merged["bf16_tflops"]),
            aliases=tuple(str(a) for a in merged.get("aliases", [])),
            **kwargs,
        )
    return specs


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


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    architecture: str
    params: int  # text model parameters (embeddings and lm_head included, vision and MTP not)
    weight_bytes: int  # target weights loaded on the GPU (text + vision), bf16
    num_layers: int
    full_attention_layers: int
    linear_attention_layers: int
    kv_bytes_per_token: int  # K+V of all full-attention layers, bf16
    mamba_state_bytes_per_slot: int  # conv + ssm state of all linear layers (0 for dense)
    has_mtp: bool
    is_hybrid: bool
    context_len: int
    hidden_size: int = 0
    vocab_size: int = 0
    mamba_conv_bytes_per_slot: int = 0
    mamba_ssm_bytes_per_slot: int = 0
    draft_weight_bytes: int = 0  # what the MTP/draft worker loads (layer + its embed/head copy)
    draft_layer_params: int = 0  # MTP decoder layer + fc
    draft_kv_bytes_per_token: int = 0  # one full-attention layer
    lm_head_bytes: int = 0
    dense_params: int = 0  # parameters read every step regardless of batch
    expert_params: int = 0  # routed-expert parameters (MoE), read in proportion to use
    experts_per_token_fraction: float = 1.0  # top_k / num_experts
    vision_params: int = 0
    vision_layers: int = 0
    vision_hidden: int = 0
    dtype_bytes: int = 2

    @property
    def active_params_per_token(self) -> float:
        """Parameters touched per token (FLOPs / 2), embedding lookup excluded."""
        embed = self.vocab_size * self.hidden_size
        return self.dense_params - embed + self.expert_params * self.experts_per_token_fraction

    @property
    def is_multimodal(self) -> bool:
        return self.vision_params > 0


def load_model_config(model_path: str) -> dict[str, Any]:
    """Read ``<model_path>/config.json``."""
    path = os.path.join(model_path, "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            cfg = json.load(handle)
    except FileNotFoundError as exc:
        raise ModelConfigError(
            f"no config.json in model path {model_path!r} (looked for {path})"
        ) from exc
    except (OSError, ValueError) as exc:
        raise ModelConfigError(f"cannot read model config {path}: {exc}") from exc
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"model config {path} is not a JSON object")
    return cfg


def _i(cfg: dict[str, Any], key: str, default: int = 0) -> int:
    value = cfg.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def model_shape_from_config(cfg: dict[str, Any]) -> ModelShape:
    """Derive sizes from a HF config (dense Qwen3/Llama style; Qwen3.5/Qwen3-Next hybrid)."""
    archs = cfg.get("architectures") or ["unknown"]
    architecture = str(archs[0])
    text: dict[str, Any] = cfg.get("text_config") or cfg
    if not isinstance(text, dict) or "hidden_size" not in text:
        raise ModelConfigError("model config has no hidden_size (neither top level nor text_config)")
    hidden = _i(text, "hidden_size")
    layers = _i(text, "num_hidden_layers")
    if hidden <= 0 or layers <= 0:
        raise ModelConfigError("model config needs positive hidden_size and num_hidden_layers")
    vocab = _i(text, "vocab_size", _i(cfg, "vocab_size", 32000))
    heads = _i(text, "num_attention_heads", max(1, hidden // 128))
    kv_heads = _i(text, "num_key_value_heads", heads)
    head_dim = _i(text, "head_dim", hidden // heads)
    inter = _i(text, "intermediate_size", 4 * hidden)
    dtype_bytes = 2
    tied = bool(text.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))

    layer_types = text.get("layer_types")
    interval = _i(text, "full_attention_interval", 0)
    if isinstance(layer_types, list) and len(layer_types) == layers:
        full = sum(1 for t in layer_types if t == "full_attention")
        linear = sum(1 for t in layer_types if t == "linear_attention")
        full = layers - linear if full + linear != layers else full
    elif interval > 0 and "linear_num_value_heads" in text:
        full = layers // interval
        linear = layers - full
    else:
        full, linear = layers, 0
    is_hybrid = linear > 0

    gate = 2 if text.get("attn_output_gate") else 1
    attn_params = hidden * heads * head_dim * gate + 2 * hidden * kv_heads * head_dim
    attn_params += heads * head_dim * hidden
    key_dim = _i(text, "linear_num_key_heads") * _i(text, "linear_key_head_dim")
    nv = _i(text, "linear_num_value_heads")
    value_dim = nv * _i(text, "linear_value_head_dim")
    conv_k = _i(text, "linear_conv_kernel_dim", 4)
    conv_dim = 2 * key_dim + value_dim
    lin_params = hidden * (conv_dim + value_dim) + hidden * 2 * nv + conv_dim * conv_k
    lin_params += value_dim * hidden

    num_experts = _i(text, "num_experts")
    top_k = _i(text, "num_experts_per_tok")
    if num_experts > 0 and top_k > 0:
        moe_inter = _i(text, "moe_intermediate_size", inter)
        shared_inter = _i(text, "shared_expert_intermediate_size")
        mlp_dense = 3 * hidden * shared_inter + hidden * num_experts
        mlp_expert = num_experts * 3 * hidden * moe_inter
        frac = top_k / num_experts
    else:
        mlp_dense, mlp_expert, frac = 3 * hidden * inter, 0, 1.0

    embed = vocab * hidden
    head = 0 if tied else vocab * hidden
    dense = full * attn_params + linear * lin_params + layers * mlp_dense + embed + head
    experts = layers * mlp_expert
    params = dense + experts

    vision = cfg.get("vision_config") if isinstance(cfg.get("vision_config"), dict) else None
    vision_params = vision_layers = vision_hidden = 0
    if vision:
        vision_layers = _i(vision, "depth", _i(vision, "num_hidden_layers", 24))
        vision_hidden = _i(vision, "hidden_size", 1024)
        v_inter = _i(vision, "intermediate_size", 4 * vision_hidden)
        merge = _i(vision, "spatial_merge_size", 2) ** 2
        out_hidden = _i(vision, "out_hidden_size", hidden)
        vision_params = vision_layers * (4 * vision_hidden**2 + 2 * vision_hidden * v_inter)
        vision_params += (vision_hidden * merge) ** 2 + vision_hidden * merge * out_hidden

    mtp_layers = _i(text, "mtp_num_hidden_layers", _i(text, "num_nextn_predict_layers"))
    has_mtp = mtp_layers > 0
    draft_layer_params = 0
    if has_mtp:
        draft_layer_params = mtp_layers * (attn_params + mlp_dense + mlp_expert) + 2 * hidden * hidden
    # The draft worker allocates its own embedding and head when it loads (the 0.5.17
    # recording: 0.39 GB for a 75M-parameter MTP layer of a 32000 x 2048 vocabulary model).
    draft_weight_bytes = (draft_layer_params + 2 * embed) * dtype_bytes if has_mtp else 0

    kv_per_token = full * 2 * kv_heads * head_dim * dtype_bytes
    ssm_bytes = 4 if str(text.get("mamba_ssm_dtype", "float32")) == "float32" else 2
    conv_bytes = linear * (conv_k - 1) * conv_dim * dtype_bytes if is_hybrid else 0
    ssm = linear * nv * _i(text, "linear_key_head_dim") * _i(text, "linear_value_head_dim")
    ssm *= ssm_bytes
    ctx = _i(text, "max_position_embeddings", _i(cfg, "max_position_embeddings", 32768))
    return ModelShape(
        architecture=architecture,
        params=params,
        weight_bytes=(params + vision_params) * dtype_bytes,
        num_layers=layers,
        full_attention_layers=full,
        linear_attention_layers=linear,
        kv_bytes_per_token=kv_per_token,
        mamba_state_bytes_per_slot=conv_bytes + ssm if is_hybrid else 0,
        has_mtp=has_mtp,
        is_hybrid=is_hybrid,
        context_len=ctx,
        hidden_size=hidden,
        vocab_size=vocab,
        mamba_conv_bytes_per_slot=conv_bytes,
        mamba_ssm_bytes_per_slot=ssm if is_hybrid else 0,
        draft_weight_bytes=draft_weight_bytes,
        draft_layer_params=draft_layer_params,
        draft_kv_bytes_per_token=2 * kv_heads * head_dim * dtype_bytes if has_mtp else 0,
        lm_head_bytes=vocab * hidden * dtype_bytes,
        dense_params=dense,
        expert_params=experts,
        experts_per_token_fraction=frac,
        vision_params=vision_params,
        vision_layers=vision_layers,
        vision_hidden=vision_hidden,
        dtype_bytes=dtype_bytes,
    )


# --------------------------------------------------------------------------------------------
# Engine plan
# --------------------------------------------------------------------------------------------


@dataclass
class HostPool:
    name: str  # "kv" | "mamba" | "draft_kv"
    tokens: int  # tokens (kv, draft_kv) or state slots (mamba)
    bytes: int


@dataclass
class EnginePlan:
    release: str
    gpu: GpuSpec
    shape: ModelShape
    tp_size: int
    mem_fraction_static: float
    max_total_num_tokens: int
    max_running_requests: int
    mamba_slots: int
    cuda_graph_max_bs: int
    spec_algorithm: str | None
    spec_steps: int
    spec_topk: int
    spec_draft_tokens: int
    accept_length: float
    hicache_pools: list[HostPool]
    hicache_total_bytes: int
    load_seconds: float
    pin_seconds: float
    context_len: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    available_gpu_mem_gb: float
    log_lines: list[tuple[float, str]] = field(default_factory=list)
    mamba_strategy: str | None = None
    mamba_ratio: int = 1
    hicache_enabled: bool = False
    hicache_semantics: str = "split"
    host_available_bytes: int | None = None
    host_oversubscribed: bool = False
    model_path: str = ""
    constants: dict[str, Any] = field(default_factory=dict)
    overlap_schedule: bool = True

    @property
    def ready_seconds(self) -> float:
        """Modelled seconds from launch until the server can answer (load + pinning)."""
        return self.load_seconds + self.pin_seconds


def _perf_constants(release: str) -> dict[str, Any]:
    raw: dict[str, Any] = load_json("perfmodel.json")
    rel = raw.get("releases", {})
    merged = {**rel.get("_default", {}), **rel.get(release, {})}
    out = {k: v for k, v in raw.items() if k != "releases" and not k.startswith("_")}
    out.update(merged)
    return out


def _arg(args: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        value = args.get(key)
        if value is not None:
            return value
    return None


def _default_mem_fraction(
    gpu: GpuSpec, tp: int, chunked: int, graph_bs: int, spec: str | None
) -> float:
    """SGLang 0.5.x ``_handle_gpu_memory_settings`` (reserved MiB -> fraction)."""
    gpu_mem = float(gpu.memory_mib)
    reserved = 512.0 + max(chunked, 2048) * 1.5 + graph_bs * 2 + tp / 8 * 1024
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024.0)
    if spec is not None:
        if spec == "STANDALONE":
            reserved += 6 * 1024
        elif spec != "NGRAM":
            reserved += 2 * 1024
    return round((gpu_mem - reserved) / gpu_mem, 3)


def _vlm_factor(shape: ModelShape, consts: dict[str, Any]) -> float:
    """SGLang ``adjust_mem_fraction_for_vlm``: scale the default fraction for a ViT."""
    if not shape.is_multimodal:
        return 1.0
    v = consts.get("vlm_mem_fraction", {})
    base_score = float(v.get("baseline_layers", 24)) * float(v.get("baseline_hidden", 1024)) ** 2
    score = shape.vision_layers * shape.vision_hidden**2
    ratio = score / base_score if base_score > 0 else 1.0
    dyn = 1.0 - float(v.get("sensitivity", 0.1)) * (ratio - 1.0)
    dyn = max(float(v.get("min", 0.8)), min(float(v.get("max", 1.05)), dyn))
    return float(v.get("base", 0.95)) * dyn


def _resolve_strategy(args: dict[str, Any], traits: dict[str, Any]) -> str:
    strategy = _arg(args, "mamba_radix_cache_strategy", "mamba_scheduler_strategy") or "auto"
    strategy = str(strategy)
    if strategy == "auto":
        # Modelled as extra_buffer: the seed's no-spec run reported 96 slots and 19 requests,
        # i.e. the extra_buffer ratio of 5.
        strategy = "extra_buffer"
    return strategy


def _mamba_ratio(strategy: str, args: dict[str, Any]) -> int:
    """SGLang ``_calculate_mamba_ratio``: Mamba slots a running request may hold."""
    if args.get("disable_radix_cache"):
        return 1
    if strategy.startswith("extra_buffer"):
        return 3 + (1 if args.get("disable_overlap_schedule") else 2)
    return 3


def _overlap_schedule(args: dict[str, Any], spec: str | None, consts: dict[str, Any]) -> bool:
    """Whether the scheduler's CPU work overlaps the GPU forward (SGLang's overlap scheduler)."""
    if args.get("disable_overlap_schedule"):
        return False
    if spec is not None:
        return bool(consts.get("spec_overlap_schedule", True))
    return True


def _fmt_gb(value_bytes: float) -> str:
    return f"{value_bytes / GIB:.2f}"


def plan_engine(
    args: dict[str, Any],
    model_config: dict[str, Any],
    gpu: GpuSpec,
    release: str,
    host_available_bytes: int | None,
    traits: dict[str, Any] | None = None,
) -> EnginePlan:
    """Resolve what the real server of ``release`` would allocate and report at start-up."""
    if traits is None:
        all_traits: dict[str, Any] = load_json("releases.json")
        if release not in all_traits:
            known = ", ".join(k for k in all_traits if not k.startswith("_"))
            raise EngineStartError(f"unsupported SGLang release {release!r}; known: {known}")
        traits = all_traits[release]
    consts = _perf_constants(release)
    shape = model_shape_from_config(model_config)
    tp = int(_arg(args, "tp_size") or 1)

    # ---- flags with SGLang defaults ----
    spec_raw = _arg(args, "speculative_algorithm")
    spec: str | None = str(spec_raw).upper() if spec_raw else None
    steps = int(_arg(args, "speculative_num_steps") or (3 if spec else 0))
    topk = int(_arg(args, "speculative_eagle_topk") or (1 if spec else 0))
    draft_tokens = int(_arg(args, "speculative_num_draft_tokens") or (steps + 1 if spec else 0))
    if gpu.memory_mib < 35 * 1024:
        chunk_default = 2048
    elif gpu.memory_mib < 160 * 1024:
        chunk_default = 8192
    else:
        chunk_default = 16384
    chunked = int(_arg(args, "chunked_prefill_size") or chunk_default)
    max_prefill = int(_arg(args, "max_prefill_tokens") or 16384)
    graph_bs_arg = _arg(args, "cuda_graph_max_bs_decode", "cuda_graph_max_bs")
    graph_bs = int(graph_bs_arg) if graph_bs_arg else gpu.cuda_graph_max_bs_default
    ctx_arg = _arg(args, "context_length")
    context_len = int(ctx_arg) if ctx_arg else shape.context_len
    mf_arg = _arg(args, "mem_fraction_static")
    if mf_arg is not None:
        mf = float(mf_arg)
    else:
        mf = _default_mem_fraction(gpu, tp, chunked, graph_bs, spec)
        mf = round(mf * _vlm_factor(shape, consts), 3)
    explicit_mrr = _arg(args, "max_running_requests")
    strategy = _resolve_strategy(args, traits) if shape.is_hybrid else None
    ratio = _mamba_ratio(strategy, args) if strategy else 1

    # ---- GPU memory (GiB, like SGLang's "avail mem" figures) ----
    total = gpu.memory_gib
    avail0 = total - gpu.cuda_context_gib
    weights = shape.weight_bytes / tp / GIB
    draft_w = shape.draft_weight_bytes / tp / GIB if spec else 0.0
    if weights > avail0:
        need = shape.weight_bytes / tp / GIB
        raise EngineStartError(
            "torch.OutOfMemoryError: CUDA out of memory while loading weights: the model needs "
            f"{need:.2f} GiB per GPU but only {avail0:.2f} GiB is free on {gpu.name} "
            f"(tp_size={tp}). Use more GPUs (--tp-size) or a quantized model."
        )
    avail1 = avail0 - weights
    avail2 = avail1 - draft_w
    rest = avail2 - total * (1.0 - mf)
    if rest <= 0:
        raise EngineStartError(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"Current value: mem_fraction_static={mf}"
        )

    spec_default = int(traits.get("spec_max_running_default", 48))
    mamba_slots = 0
    inter_ssm = inter_conv = 0.0
    if shape.is_hybrid:
        state = shape.mamba_state_bytes_per_slot / tp
        if spec:
            reserve_reqs = consts.get("spec_intermediate_reserve_requests")
            if explicit_mrr is not None:
                reserve_reqs = int(explicit_mrr)
            elif reserve_reqs is None:
                reserve_reqs = spec_default
            rest -= state * int(reserve_reqs) * draft_tokens / GIB
        share = float(consts.get("mamba_share_of_rest", 0.4737))
        mamba_raw = max(rest, 0.0) * share
        mamba_slots = int(mamba_raw * GIB // state) if state > 0 else 0
        rest -= mamba_slots * state / GIB
        if mamba_slots < ratio:
            raise EngineStartError(
                "RuntimeError: Not enough memory for the Mamba state cache: "
                f"max_mamba_cache_size={mamba_slots}. Please try to increase "
                f"--mem-fraction-static. Current value: mem_fraction_static={mf}"
            )
    kv_cell = shape.kv_bytes_per_token / tp
    kv_tokens = int(rest * GIB // kv_cell) if kv_cell > 0 else 0
    if kv_tokens <= 0:
        raise EngineStartError(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"Current value: mem_fraction_static={mf}"
        )

    # ---- max_running_requests ----
    if explicit_mrr is not None:
        mrr = int(explicit_mrr)
    elif spec:
        mrr = spec_default
    else:
        mrr = min(max(int(kv_tokens / context_len * 512), 2048), 4096)
    if shape.is_hybrid:
        mrr = min(mrr, mamba_slots // ratio)
    mrr = max(mrr, 1)
    if spec:
        kv_tokens += mrr * steps * topk + mrr * draft_tokens + 100
        ssm_layer = shape.mamba_ssm_bytes_per_slot / max(shape.linear_attention_layers, 1)
        if shape.is_hybrid:
            inter_ssm = (mrr + 1) * draft_tokens * ssm_layer * shape.linear_attention_layers
            conv_layer = shape.mamba_conv_bytes_per_slot / max(shape.linear_attention_layers, 1)
            inter_conv = (mrr + 1) * draft_tokens * conv_layer / 3 * shape.linear_attention_layers
    graph_eff = min(graph_bs, mrr)

    # ---- HiCache host pools ----
    pools: list[HostPool] = []
    semantics = str(traits.get("hicache_hybrid_semantics", "split"))
    hicache = bool(_arg(args, "enable_hierarchical_cache", "enable_hicache"))
    kv_dev_bytes = kv_tokens * shape.kv_bytes_per_token / tp
    mamba_dev_bytes = mamba_slots * shape.mamba_state_bytes_per_slot / tp + inter_ssm + inter_conv
    if hicache:
        size_gb = int(_arg(args, "hicache_size") or 0)
        hratio = float(_arg(args, "hicache_ratio") or 2.0)
        kv_pt = shape.kv_bytes_per_token / tp
        slot_b = shape.mamba_state_bytes_per_slot / tp
        if size_gb > 0:
            size_b = size_gb * GB
            if shape.is_hybrid and semantics == "split":
                kv_share = kv_dev_bytes / (kv_dev_bytes + mamba_dev_bytes)
                host_kv_tokens = int(size_b * kv_share // kv_pt)
                host_slots = math.ceil(size_b * (1.0 - kv_share) / slot_b)
            else:
                host_kv_tokens = int(size_b // kv_pt)
                host_slots = math.ceil(size_b / slot_b) if shape.is_hybrid else 0
        else:
            host_kv_tokens = int(kv_tokens * hratio)
            host_slots = int(mamba_slots * hratio) if shape.is_hybrid else 0
        pools.append(HostPool("kv", host_kv_tokens, int(host_kv_tokens * kv_pt)))
        if shape.is_hybrid:
            pools.append(HostPool("mamba", host_slots, int(host_slots * slot_b)))
        if spec and traits.get("draft_host_pool", False) and shape.draft_kv_bytes_per_token:
            dt = host_kv_tokens + 1
            pools.append(HostPool("draft_kv", dt, int(dt * shape.draft_kv_bytes_per_token / tp)))
    hicache_total = sum(p.bytes for p in pools)
    reserve_host = int(consts.get("host_reserve_bytes", 10 * (1 << 30)))
    oversub = False
    if host_available_bytes is not None and pools:
        free_b = host_available_bytes - reserve_host
        for pool in pools:
            # Each pool checks requested <= MemAvailable - 10 GiB on its own (the release's check).
            if pool.bytes > free_b:
                raise EngineStartError(
                    "ValueError: Not enough host memory available. Requesting "
                    f"{pool.bytes / GB:.2f} GB but only have {free_b / GB:.2f} GB free. "
                    "Please reduce the size of the hierarchical cache."
                )
        oversub = hicache_total > host_available_bytes

    # ---- timings and log ----
    load_format = str(args.get("load_format") or "auto")
    disk = float(consts.get("disk_gb_s", 2.0)) * GB
    if load_format == "dummy":
        w_load = float(consts.get("dummy_load_s", 0.2))
        d_load = 0.01
    else:
        w_load = shape.weight_bytes / tp / disk
        d_load = (shape.draft_layer_params * shape.dtype_bytes / tp / disk) if spec else 0.0
    cap: dict[str, float] = dict(consts.get("graph_capture_s", {}))
    capture = cap.get("prefill", 79.0)
    if spec:
        capture += cap.get("target_verify", 14.3) + cap.get("draft_decode", 5.5)
        capture += cap.get("draft_extend", 1.25)
    else:
        capture += cap.get("decode", 3.3)
    pin_rate = float(consts.get("pin_gb_s", 1.2)) * GB
    pin_fixed = float(consts.get("pin_fixed_s", 10.0)) if pools else 0.0
    pin_seconds = pin_fixed + hicache_total / pin_rate
    t0 = float(consts.get("process_start_s", 24.0))
    load_seconds = t0 + w_load + d_load + 1.5 + capture + float(consts.get("tokenizer_warmup_s", 8.0))

    graph_mem = 0.6 + (0.3 if spec else 0.0)
    draft_kv = kv_tokens * shape.draft_kv_bytes_per_token / tp / GIB if spec else 0.0
    end_avail = total * (1.0 - mf) - draft_kv - graph_mem - (inter_ssm + inter_conv) / GIB
    end_avail = max(end_avail, 0.5)

    arch_type = shape.architecture.replace("ForConditionalGeneration", "ForCausalLM")
    lines: list[tuple[float, str]] = []
    t = t0
    lines.append((t, "Init torch distributed begin."))
    lines.append((t, "Init torch distributed ends. elapsed=0.05 s, mem usage=0.09 GB"))
    t += 1.0
    lines.append((t, f"Load weight begin. avail mem={avail0:.2f} GB"))
    t += w_load
    lines.append((t, f"Load weight end. elapsed={w_load:.2f} s, type={arch_type}, "
                     f"avail mem={avail1:.2f} GB, mem usage={weights:.2f} GB."))
    if spec:
        lines.append((t, f"Load weight begin. avail mem={avail1:.2f} GB"))
        t += d_load
        lines.append((t, f"Load weight end. elapsed={d_load:.2f} s, type={arch_type}MTP, "
                         f"avail mem={avail2:.2f} GB, mem usage={draft_w:.2f} GB."))
    t += 0.3
    if shape.is_hybrid:
        conv_g = mamba_slots * shape.mamba_conv_bytes_per_slot / tp
        ssm_g = mamba_slots * shape.mamba_ssm_bytes_per_slot / tp
        msg = (f"Mamba Cache is allocated. max_mamba_cache_size: {mamba_slots}, "
               f"conv_state size: {_fmt_gb(conv_g)}GB, ssm_state size: {_fmt_gb(ssm_g)}GB ")
        if spec:
            msg = msg.rstrip(" ") + (f" intermediate_ssm_state_cache size: {_fmt_gb(inter_ssm)}GB "
                                     f"intermediate_conv_window_cache size: {_fmt_gb(inter_conv)}GB ")
        lines.append((t, msg))
    half = kv_tokens * shape.kv_bytes_per_token / tp / 2
    t += 1.0
    lines.append((t, f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {kv_tokens}, "
                     f"K size: {_fmt_gb(half)} GB, V size: {_fmt_gb(half)} GB"))
    after_target = total * (1.0 - mf) - (inter_ssm + inter_conv) / GIB
    lines.append((t, f"Memory pool end. avail mem={after_target:.2f} GB"))
    if spec and shape.draft_kv_bytes_per_token:
        dhalf = kv_tokens * shape.draft_kv_bytes_per_token / tp / 2
        lines.append((t, f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {kv_tokens}, "
                         f"K size: {_fmt_gb(dhalf)} GB, V size: {_fmt_gb(dhalf)} GB"))
        lines.append((t, f"Memory pool end. avail mem={after_target - draft_kv:.2f} GB"))
    t += capture
    lines.append((t, f"max_total_num_tokens={kv_tokens}, chunked_prefill_size={chunked}, "
                     f"max_prefill_tokens={max_prefill}, max_running_requests={mrr}, "
                     f"context_len={context_len}, available_gpu_mem={end_avail:.2f} GB"))
    for index, pool in enumerate(pools):
        # The first pool also carries the one-off set-up (run 1: KV 115 GB in 110 s, Mamba
        # 47.6 GB in 34 s; run 2: KV 5.67 GB in 13 s, Mamba 2.34 GB in 2 s).
        dur = pool.bytes / pin_rate + (pin_fixed if index == 0 else 0.0)
        if pool.name == "kv":
            if semantics == "per_pool" and release == "0.5.10":
                text_line = f"Allocating {pool.bytes / GB:.2f} GB host memory for hierarchical KV cache."
            else:
                text_line = (f"Allocating kv hierarchical KV host pool: {pool.tokens} tokens, "
                             f"{pool.bytes / GB:.2f} GB host memory.")
        elif pool.name == "mamba":
            layout = str(args.get("hicache_mem_layout") or "layer_first")
            text_line = (f"Allocating {pool.bytes / GB:.2f} GB host memory for hierarchical "
                         f"Mamba cache (layout={layout}).")
        else:
            text_line = (f"Allocating draft hierarchical KV host pool: {pool.tokens} tokens, "
                         f"{pool.bytes / GB:.2f} GB host memory.")
        lines.append((t, text_line))
        t += dur
    lines.sort(key=lambda item: item[0])

    accept = 1.0
    if spec:
        accept = min(float(consts.get("mtp_accept_length", 3.2)), float(draft_tokens))

    return EnginePlan(
        release=release,
        gpu=gpu,
        shape=shape,
        tp_size=tp,
        mem_fraction_static=mf,
        max_total_num_tokens=kv_tokens,
        max_running_requests=mrr,
        mamba_slots=mamba_slots,
        cuda_graph_max_bs=graph_eff,
        spec_algorithm=spec,
        spec_steps=steps,
        spec_topk=topk,
        spec_draft_tokens=draft_tokens,
        accept_length=accept,
        hicache_pools=pools,
        hicache_total_bytes=hicache_total,
        load_seconds=load_seconds,
        pin_seconds=pin_seconds,
        context_len=context_len,
        chunked_prefill_size=chunked,
        max_prefill_tokens=max_prefill,
        available_gpu_mem_gb=round(end_avail, 2),
        log_lines=lines,
        mamba_strategy=strategy,
        mamba_ratio=ratio,
        hicache_enabled=hicache,
        hicache_semantics=semantics,
        host_available_bytes=host_available_bytes,
        host_oversubscribed=oversub,
        model_path=str(args.get("model_path") or ""),
        constants=consts,
        overlap_schedule=_overlap_schedule(args, spec, consts),
    )


# --------------------------------------------------------------------------------------------
# Step times
# --------------------------------------------------------------------------------------------


def _weight_read_bytes(shape: ModelShape, tokens: int, tp: int) -> float:
    """Weights read by one forward over ``tokens`` tokens (routed experts in proportion)."""
    embed = shape.vocab_size * shape.hidden_size * shape.dtype_bytes
    dense = shape.dense_params * shape.dtype_bytes - embed  # embedding rows are gathered
    experts = shape.expert_params * shape.dtype_bytes
    used = min(1.0, max(tokens, 1) * shape.experts_per_token_fraction) if experts else 0.0
    return (dense + experts * used) / tp


def decode_step_seconds(plan: EnginePlan, batch: int, context_tokens: int) -> float:
    """Modelled seconds of one decode step (or draft + verify round) for ``batch`` requests.

    ``context_tokens`` is the total context (prompt + generated) of the running requests.
    """
    if batch <= 0:
        return 0.0
    gpu, shape, tp = plan.gpu, plan.shape, plan.tp_size
    bw = gpu.eff_bandwidth
    flops = gpu.bf16_tflops * 1e12 * gpu.decode_compute_efficiency * tp
    spec = plan.spec_algorithm is not None
    tokens_per_req = plan.spec_draft_tokens if spec else 1
    tokens = batch * tokens_per_req
    state = shape.mamba_state_bytes_per_slot / tp
    # target forward (decode, or verify of draft_tokens per request)
    traffic = _weight_read_bytes(shape, tokens, tp)
    traffic += context_tokens * shape.kv_bytes_per_token / tp
    traffic += batch * 2 * state  # recurrent state read + written back
    if spec and shape.is_hybrid:
        traffic += tokens * shape.mamba_ssm_bytes_per_slot / tp  # intermediate states written
    t = gpu.step_overhead_s + traffic / bw
    t += tokens * 2.0 * shape.active_params_per_token / flops
    if batch > plan.cuda_graph_max_bs:
        t += gpu.eager_overhead_per_layer_s * shape.num_layers
    if spec:
        # draft model: num_steps forwards of the MTP layer + its lm_head
        draft_bytes = shape.draft_layer_params * shape.dtype_bytes / tp + shape.lm_head_bytes / tp
        draft_bytes += context_tokens * shape.draft_kv_bytes_per_token / tp
        draft_flops = batch * plan.spec_topk * 2.0 * (
            shape.draft_layer_params + shape.lm_head_bytes / shape.dtype_bytes
        )
        one = gpu.draft_step_overhead_s + draft_bytes / bw + draft_flops / flops
        if batch > plan.cuda_graph_max_bs:
            one += gpu.eager_overhead_per_layer_s
        t += plan.spec_steps * one
    # sampling: one top-p/top-k pass over the vocabulary per request (the verify kernel
    # treats a request's draft positions in the same pass)
    t += batch * shape.vocab_size * float(plan.constants.get("sampling_s_per_vocab_row", 0.0))
    if plan.hicache_enabled:
        t *= 1.0 + float(plan.constants.get("hicache_step_overhead", 0.0))
    cpu = scheduler_cpu_seconds(plan, batch)
    # The overlap scheduler prepares step i+1 and processes step i's results while the GPU
    # runs: the step takes the longer of the two; without overlap they add up.
    return max(t, cpu) if plan.overlap_schedule else t + cpu


def scheduler_cpu_seconds(plan: EnginePlan, batch: int) -> float:
    """CPU seconds of one scheduler iteration (batch preparation, result processing, streaming)."""
    consts = plan.constants
    per_req = float(consts.get("cpu_per_request_s", 0.0))
    if plan.spec_algorithm is not None:
        per_req += float(consts.get("cpu_per_request_spec_s", 0.0))
    return float(consts.get("cpu_step_s", 0.0)) + batch * per_req


def prefill_seconds(plan: EnginePlan, tokens: int, requests: int = 1) -> float:
    """Modelled seconds to prefill ``tokens`` prompt tokens of ``requests`` newly admitted
    requests (chunked by chunked_prefill_size).

    Besides the forward itself, a prefill batch pays a fixed cost (building the extend batch,
    radix-cache matching, the non-graph extend launch, first-token sampling; with speculative
    decoding the draft extend and the first draft) and a cost per admitted request.
    """
    if tokens <= 0:
        return 0.0
    gpu, shape, tp = plan.gpu, plan.shape, plan.tp_size
    consts = plan.constants
    bw = gpu.eff_bandwidth
    flops = gpu.bf16_tflops * 1e12 * gpu.prefill_compute_efficiency * tp
    chunk = max(plan.chunked_prefill_size, 1)
    total = float(consts.get("prefill_overhead_s", 0.0))
    total += max(requests, 1) * float(consts.get("prefill_per_request_s", 0.0))
    if plan.spec_algorithm is not None:
        total += float(consts.get("spec_prefill_overhead_s", 0.0))
    if plan.hicache_enabled:
        # write-through of the new prefixes to the host pools (KV of every prompt token, the
        # draft KV with MTP, and each request's Mamba state), done before the next batch
        kv_cell = shape.kv_bytes_per_token
        if plan.spec_algorithm is not None:
            kv_cell += shape.draft_kv_bytes_per_token
        backup = tokens * kv_cell + max(requests, 1) * shape.mamba_state_bytes_per_slot
        total += backup / tp / (float(consts.get("hicache_write_gb_s", 8.0)) * GB)
    left = tokens
    while left > 0:
        n = min(left, chunk)
        t = gpu.step_overhead_s + _weight_read_bytes(shape, n, tp) / bw
        t += n * 2.0 * shape.active_params_per_token / flops
        if plan.spec_algorithm is not None:  # draft extend over the same tokens
            t += gpu.draft_step_overhead_s + n * 2.0 * shape.draft_layer_params / flops
        total += t
        left -= n
    if plan.hicache_enabled:
        total *= 1.0 + float(plan.constants.get("hicache_step_overhead", 0.0))
    return total


def accepted_tokens(accept_length: float, step_index: int) -> int:
    """Tokens a request gains at its ``step_index``-th verify step (0-based).

    floor((i+1)*a) - floor(i*a): integers whose running mean is exactly ``a``
    (3.2 gives 3,3,3,3,4, ...).
    """
    a = max(accept_length, 1.0)
    return int(math.floor((step_index + 1) * a + 1e-9) - math.floor(step_index * a + 1e-9))


# --------------------------------------------------------------------------------------------
# Scheduler
# --------------------------------------------------------------------------------------------


@dataclass
class StepResult:
    dt: float
    emitted: list[tuple[str, int]] = field(default_factory=list)
    first_token: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    kind: str = "decode"  # "prefill" | "decode"


@dataclass
class _Req:
    req_id: str
    prompt: int
    max_new: int
    generated: int = 0
    steps: int = 0
    ready_at: float = 0.0  # virtual time the request reaches the scheduler

    @property
    def context(self) -> int:
        return self.prompt + self.generated


class Scheduler:
    """Continuous batching on a virtual clock (deterministic; no threads, no sleeping).

    Each ``step()`` is either a prefill of newly admitted requests (first token of each) or
    one decode / speculative verify round of all running requests, like SGLang's scheduler
    loop with prefill priority. Requests beyond ``max_running_requests`` (or beyond the KV
    token budget) wait in a FIFO queue.

    A submitted request reaches the scheduler only after the front end has handled it: a fixed
    latency (HTTP, chat template, tokenization, IPC, and the detokenizer/streaming path of its
    first token) plus a per-request cost served one request at a time (the tokenizer manager),
    so a burst of requests arrives spread out: the first is prefilled alone, the rest in the
    next prefill (what the H200 run shows). While requests decode, the front end overlaps the
    GPU; with nothing running, the wait is part of the next prefill step's ``dt``.
    """

    def __init__(self, plan: EnginePlan) -> None:
        self.plan = plan
        self._queue: deque[_Req] = deque()
        self._running: list[_Req] = []
        self._clock = 0.0
        self._ratio = float(plan.constants.get("init_new_token_ratio", 0.7))
        self._frontend_s = float(plan.constants.get("frontend_latency_s", 0.0))
        self._frontend_per_req_s = float(plan.constants.get("frontend_per_request_s", 0.0))
        self._frontend_free = 0.0

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_queued(self) -> int:
        return len(self._queue)

    @property
    def clock(self) -> float:
        return self._clock

    @property
    def tokens_in_use(self) -> int:
        return sum(r.context for r in self._running)

    def submit(self, req_id: str, prompt_tokens: int, max_new_tokens: int) -> None:
        req = _Req(req_id, max(int(prompt_tokens), 1), max(int(max_new_tokens), 1))
        self._frontend_free = max(self._clock, self._frontend_free) + self._frontend_per_req_s
        req.ready_at = self._frontend_free + self._frontend_s
        self._queue.append(req)

    def cancel(self, req_id: str) -> None:
        self._queue = deque(r for r in self._queue if r.req_id != req_id)
        self._running = [r for r in self._running if r.req_id != req_id]

    def _reserved(self) -> float:
        return sum(r.context + (r.max_new - r.generated) * self._ratio for r in self._running)

    def _admit(self, now: float) -> list[_Req]:
        plan = self.plan
        admitted: list[_Req] = []
        budget = plan.max_prefill_tokens
        reserved = self._reserved()
        while self._queue and len(self._running) + len(admitted) < plan.max_running_requests:
            req = self._queue[0]
            if req.ready_at > now + 1e-12:
                break
            need = req.prompt + req.max_new * self._ratio
            if admitted and req.prompt > budget:
                break
            if (self._running or admitted) and reserved + need > plan.max_total_num_tokens:
                break
            self._queue.popleft()
            admitted.append(req)
            budget -= req.prompt
            reserved += need
        return admitted

    def step(self) -> StepResult | None:
        if not self._queue and not self._running:
            return None
        wait = 0.0
        if not self._running and self._queue:
            # idle GPU: the next step starts when the head of the queue reaches the scheduler
            wait = max(0.0, self._queue[0].ready_at - self._clock)
        admitted = self._admit(self._clock + wait)
        if admitted:
            dt = wait + prefill_seconds(self.plan, sum(r.prompt for r in admitted), len(admitted))
            result = StepResult(dt=dt, kind="prefill")
            for req in admitted:
                req.generated = 1
                result.emitted.append((req.req_id, 1))
                result.first_token.append(req.req_id)
                if req.generated >= req.max_new:
                    result.finished.append(req.req_id)
                else:
                    self._running.append(req)
            self._clock += dt
            return result
        if not self._running:
            # Nothing fits (a single request larger than the KV pool): run it alone anyway.
            req = self._queue.popleft()
            self._running.append(req)
            return self.step()
        batch = len(self._running)
        dt = decode_step_seconds(self.plan, batch, self.tokens_in_use)
        result = StepResult(dt=dt)
        spec = self.plan.spec_algorithm is not None
        still: list[_Req] = []
        for req in self._running:
            gain = accepted_tokens(self.plan.accept_length, req.steps) if spec else 1
            gain = max(1, min(gain, req.max_new - req.generated))
            req.generated += gain
            req.steps += 1
            result.emitted.append((req.req_id, gain))
            if req.generated >= req.max_new:
                result.finished.append(req.req_id)
            else:
                still.append(req)
        self._running = still
        # Retract the newest request when the KV pool overflows (SGLang retraction).
        while len(self._running) > 1 and self.tokens_in_use > self.plan.max_total_num_tokens:
            victim = self._running.pop()
            victim.prompt += victim.generated
            victim.max_new -= victim.generated
            victim.generated = 0
            self._queue.appendleft(victim)
        self._clock += dt
        return result


def simulate_level(
    plan: EnginePlan,
    concurrency: int,
    n_requests: int,
    max_tokens: int,
    prompt_tokens: int = 64,
) -> dict[str, Any]:
    """Closed-loop benchmark level on the virtual clock (like the seed's sweep)."""
    sched = Scheduler(plan)
    sent = 0
    start: dict[str, float] = {}
    ttft: list[float] = []
    latency: list[float] = []
    tokens = 0
    for _ in range(min(concurrency, n_requests)):
        rid = f"r{sent}"
        sched.submit(rid, prompt_tokens, max_tokens)
        start[rid] = sched.clock
        sent += 1
    max_running = 0
    while True:
        res = sched.step()
        if res is None:
            break
        max_running = max(max_running, sched.num_running)
        now = sched.clock
        tokens += sum(n for _, n in res.emitted)
        for rid in res.first_token:
            ttft.append(now - start[rid])
        for rid in res.finished:
            latency.append(now - start[rid])
            if sent < n_requests:
                nid = f"r{sent}"
                sched.submit(nid, prompt_tokens, max_tokens)
                start[nid] = now
                sent += 1
    wall = sched.clock
    return {
        "concurrency": concurrency,
        "n": n_requests,
        "output_tokens": tokens,
        "wall_s": wall,
        "output_tok_s": tokens / wall if wall > 0 else 0.0,
        "mean_ttft_s": sum(ttft) / len(ttft) if ttft else 0.0,
        "mean_latency_s": sum(latency) / len(latency) if latency else 0.0,
        "max_running": max_running,
    }
