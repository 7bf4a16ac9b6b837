# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The documents the engine serves about itself, with the recorded key sets and order:
``/server_info`` (every dest of the parsed argv, resolved like the real ``ServerArgs`` dump, and
the internal states), ``/model_info`` and ``/v1/models``; plus the start-up phases and memory
figures that /metrics reports too."""
from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ansible_collections.llmops.sglang.plugins.module_utils._engine.engine import Engine

GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode",
                "draft_extend")

# ServerArgs fields of 0.5.17+ that are no command-line flag (recorded server info)
_NON_FLAG_FIELDS: dict[str, Any] = {
    "custom_sigquit_handler": None, "cuda_graph_tc_compiler": None,
    "dsa_prefill_cp_mode": "round-robin-split", "elastic_ep_rejoin": False,
    "enable_dsa_prefill_context_parallel": False, "speculative_skip_dp_mlp_sync": False,
    "stat_loggers": None, "uses_mamba_radix_cache": False,
}

# flags whose None default the real server resolves before reporting (recorded values)
_RESOLVED_DEFAULTS: dict[str, Any] = {
    "page_size": 1, "device": "cuda", "speculative_moe_runner_backend": "auto",
    "mm_process_config": dict, "custom_weight_loader": list, "encoder_urls": list,
    "encoder_register_urls": list, "uvicorn_access_log_exclude_prefixes": list,
}

# parser dests that the recorded 0.5.17 ServerArgs dump lacks
_ABSENT_0_5_17 = ("config", "collect_tokens_histogram", "prefill_round_robin_balance")

PREFILL_BS = [4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208,
              224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 832,
              896, 960, 1024, 1280, 1536, 1792, 2048, 2304, 2560, 2816, 3072, 3328, 3584, 3840,
              4096, 4608, 5120, 5632, 6144, 6656, 7168, 7680, 8192]


def _decode_graph_bs(max_bs: int, spec: bool) -> list[int]:
    if spec:
        sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 257, 8))
    else:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8))
    return [s for s in sizes if s <= max_bs] or [1]


def startup_time(engine: Engine) -> dict[str, Any]:
    """Start-up phases in seconds, from the plan's load time."""
    spec = engine.config.spec
    load = float(engine.config.plan.load_seconds)
    graphs = {"prefill": round(load * 0.55, 3), "decode": 0.0 if spec else 3.3,
              "target_verify": 15.0 if spec else 0.0, "draft_prefill": 0.0,
              "draft_decode": 6.2 if spec else 0.0, "draft_extend": 1.2 if spec else 0.0}
    return {"load_weight": 0.2, "kv_cache_allocation": 0.05,
            "scheduler_e2e": round(load * 0.7, 3), "cuda_graph": graphs,
            "tokenizer_e2e": round(load * 0.85, 3)}


def memory_usage(engine: Engine) -> dict[str, Any]:
    """GiB of weights, KV cache (the draft's included) and CUDA graphs, as the recording."""
    config = engine.config
    graph = {phase: 0.0 for phase in GRAPH_PHASES}
    graph["prefill"] = 0.62
    graph["target_verify" if config.spec else "decode"] = 0.06
    shape = config.plan.shape
    tp = max(config.plan.tp_size, 1)
    weight = float(shape.weight_bytes) / tp / 2 ** 30
    kv_bytes = float(shape.kv_bytes_per_token)
    if config.spec:
        kv_bytes += float(shape.draft_kv_bytes_per_token)
    kvcache = config.max_total_tokens * kv_bytes / tp / 2 ** 30
    return {
        "weight": round(weight, 3),
        "kvcache": round(kvcache, 3),
        "startup_available": round(float(config.plan.available_gpu_mem_gb), 3),
        "token_capacity": config.max_total_tokens,
        "token_capacity_swa": None,
        "graph": graph,
    }


def _cuda_graph_config(engine: Engine) -> dict[str, Any]:
    max_bs = engine.config.graph_max_bs
    return {
        "decode": {"backend": "full", "max_bs": max_bs, "bs": _decode_graph_bs(max_bs, engine.config.spec),
                   "tc_compiler": "eager", "full_prefill_max_req": None,
                   "full_prefill_prefix_chunk_tokens": None},
        "prefill": {"backend": "breakable", "max_bs": 8192, "bs": list(PREFILL_BS),
                    "tc_compiler": "eager", "full_prefill_max_req": None,
                    "full_prefill_prefix_chunk_tokens": None}}


def _resolve_release_fields(info: dict[str, Any], release: str) -> None:
    """Defaults the real server fills in, and the fields each release's dump has or lacks."""
    for key, value in _RESOLVED_DEFAULTS.items():
        if key in info and info[key] is None:
            info[key] = value() if callable(value) else value
    if info.get("load_balance_method") == "auto":
        info["load_balance_method"] = "round_robin"
    if release != "0.5.10":
        for key, value in _NON_FLAG_FIELDS.items():
            info.setdefault(key, value)
    if release == "0.5.17":
        for key in _ABSENT_0_5_17:
            info.pop(key, None)
    info.setdefault("mm_process_config", {})


def resolved_args(engine: Engine) -> dict[str, Any]:
    """Every dest of the parsed argv, resolved like the real ``ServerArgs`` where it matters."""
    config = engine.config
    info = dict(config.args)
    info["tokenizer_path"] = info.get("tokenizer_path") or config.model_path
    info["served_model_name"] = config.served_name
    info["max_running_requests"] = config.max_running
    if info.get("random_seed") is None:
        info["random_seed"] = random.Random(engine.started_wall).randrange(1, 2 ** 30)
    if config.spec and str(info.get("speculative_algorithm")).upper() == "NEXTN":
        info["speculative_algorithm"] = "EAGLE"  # the real server resolves NEXTN to EAGLE
    if "pp_max_micro_batch_size" in info and info["pp_max_micro_batch_size"] is None:
        info["pp_max_micro_batch_size"] = config.max_running
    for key in ("chunked_prefill_size", "max_prefill_tokens"):
        value = getattr(config.plan, key)
        if key in info and info[key] is None and value is not None:
            info[key] = value
    if info.get("cuda_graph_config") is None:
        info["cuda_graph_config"] = _cuda_graph_config(engine)
    _resolve_release_fields(info, config.release)
    return info


def _internal_state(engine: Engine, info: dict[str, Any]) -> dict[str, Any]:
    config, scheduler = engine.config, engine.scheduler
    state = dict(info)
    state.update({
        "_resolved_overrides": [["_page_size_default", {"page_size": 1}]],
        "grpc_worker_threads": 4,
        "_quantization_explicitly_unset": False,
        "_cuda_graph_config_locked": [["decode", "max_bs"]],
        "_declarations_materialized": True,
        "_mx_config_cache": {},
        "max_speculative_num_draft_tokens": (config.args.get("speculative_num_draft_tokens")
                                             if config.spec else None),
        "last_gen_throughput": scheduler.stats.last_gen_throughput,
        "memory_usage": memory_usage(engine),
        "effective_max_running_requests_per_dp": config.max_running,
    })
    if config.hybrid:
        state["_mamba_cache_chunk_size"] = 64
    state["startup_time"] = startup_time(engine)
    if config.spec and scheduler.stats.verify_steps:
        state["avg_spec_accept_length"] = scheduler.avg_accept_length()
    return state


def server_info(engine: Engine) -> dict[str, Any]:
    config = engine.config
    info = resolved_args(engine)
    state = _internal_state(engine, info)
    info.update({
        "status": "ready" if engine.state == "ready" else "starting",
        "max_total_num_tokens": config.max_total_tokens,
        "max_req_input_len": config.context_len - 6,
        "startup_time": startup_time(engine),
        "internal_states": [state],
        "version": config.release,
        "kv_events": None,
        "llmops_sim": {"time_scale": config.time_scale, "gpu": config.gpu_name,
                       "release": config.release, "accept_length": config.plan.accept_length,
                       **config.faults.as_dict()},
    })
    return info


def _embedding(engine: Engine) -> dict[str, Any]:
    return {
        "family": "none", "task": "none", "execution": "none", "attention": "none",
        "pooling": "model_defined", "normalize": False, "postprocessor": "none",
        "tokenizer_special_tokens": "model_default", "supports_dimensions": False,
        "supports_token_embeddings": False, "supports_multimodal": False,
        "requires_embedding_flag": False, "auto_enable_embedding": False,
        "bcg_eligibility": "disabled", "safe_disable_kv_cache": False,
        "safe_disable_radix_cache": False, "safe_disable_chunked_prefill": False,
        "enabled": False, "matryoshka_dimensions": [],
        "bcg": {"prefill_backend": "breakable", "enabled": True,
                "capture_token_budget": 8192, "capture_batch_sizes": list(PREFILL_BS)},
        "cache": {"kv_cache_disabled": False,
                  "radix_cache_disabled": bool(engine.config.args.get("disable_radix_cache")),
                  "chunked_prefill_disabled": False},
    }


def model_info(engine: Engine) -> dict[str, Any]:
    config = engine.config
    return {
        "model_path": config.model_path,
        "tokenizer_path": config.args.get("tokenizer_path") or config.model_path,
        "is_generation": True,
        "preferred_sampling_params": config.args.get("preferred_sampling_params"),
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": config.model_config.get("model_type"),
        "architectures": config.model_config.get("architectures"),
        "embedding": _embedding(engine),
    }


def models_list(engine: Engine) -> dict[str, Any]:
    """/v1/models: the one model served."""
    config = engine.config
    return {"object": "list", "data": [{
        "id": config.served_name, "object": "model", "created": int(time.time()),
        "owned_by": "sglang", "root": config.model_path, "parent": None,
        "max_model_len": config.context_len}]}
