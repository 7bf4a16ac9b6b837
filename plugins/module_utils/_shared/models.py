# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What kind of model a config.json describes: hybrid (linear-attention / Mamba state layers
beside full attention) or dense, whether it has a built-in MTP head, and whether its attention is
multi-head latent attention (MLA).

The one rule, used by the planner (flags, HiCache pools), the performance model and the
embedded engine. Stdlib only, Python >= 3.10.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ARCH_KINDS = ("dense", "hybrid")
# Architectures whose models keep linear-attention / Mamba state (for configs without
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
MTP_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers", "num_mtp_layers")
# Multi-head latent attention (DeepSeek V2/V3, Kimi K2): the compressed KV's rank in config.json
MLA_KEYS = ("kv_lora_rank",)


class ModelKindError(ValueError):
    """The model's kind cannot be told; the message says what to give."""


def configs_of(model_config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The config and, for multimodal wrappers, its ``text_config``."""
    configs: list[Mapping[str, Any]] = [model_config]
    text = model_config.get("text_config")
    if isinstance(text, Mapping):
        configs.append(text)
    return configs


def architectures(model_config: Mapping[str, Any]) -> list[str]:
    return [str(a) for c in configs_of(model_config) for a in (c.get("architectures") or [])]


def is_hybrid(model_config: Mapping[str, Any]) -> bool:
    """A hybrid model: any layer type naming linear attention / Mamba / SSM state, a config key
    only such models have, or an architecture known to be hybrid."""
    for cfg in configs_of(model_config):
        layer_types = cfg.get("layer_types") or []
        if any(word in str(kind).lower() for kind in layer_types for word in HYBRID_LAYER_WORDS):
            return True
        if any(cfg.get(key) for key in HYBRID_CONFIG_KEYS):
            return True
    return any(hint in arch for arch in architectures(model_config) for hint in HYBRID_ARCH_HINTS)


def has_mtp(model_config: Mapping[str, Any]) -> bool:
    """A built-in multi-token-prediction head (NEXTN / MTP layers)."""
    for cfg in configs_of(model_config):
        for key in MTP_KEYS:
            if isinstance(cfg.get(key), int) and cfg[key] > 0:
                return True
    return any("MTP" in arch for arch in architectures(model_config))


def is_mla(model_config: Mapping[str, Any]) -> bool:
    """Multi-head latent attention (``kv_lora_rank`` in the config or its text_config): every TP
    rank holds the same compressed KV, so HiCache's storage tier keeps one set of pages (rank 0's)."""
    return any(cfg.get(key) for cfg in configs_of(model_config) for key in MLA_KEYS)


def model_kind(model_config: Mapping[str, Any] | None, model_arch: str | None = None) -> dict[str, Any]:
    """{arch, hybrid, has_mtp, mla, source, architectures} from config.json; ``model_arch``
    ("hybrid"/"dense") when the config is unknown (has_mtp and mla are then None: unknown)."""
    if model_arch is not None and model_arch not in ARCH_KINDS:
        raise ModelKindError(f"model_arch must be one of {', '.join(ARCH_KINDS)}, not {model_arch!r}")
    if not model_config:
        if model_arch is None:
            raise ModelKindError("cannot tell whether the model is hybrid: give the model's config.json "
                                 "(model_config) or declare model_arch: hybrid or dense")
        return {"arch": model_arch, "hybrid": model_arch == "hybrid", "has_mtp": None, "mla": None,
                "source": "declared", "architectures": []}
    hybrid = is_hybrid(model_config)
    return {"arch": "hybrid" if hybrid else "dense", "hybrid": hybrid, "has_mtp": has_mtp(model_config),
            "mla": is_mla(model_config), "source": "config", "architectures": architectures(model_config)}
