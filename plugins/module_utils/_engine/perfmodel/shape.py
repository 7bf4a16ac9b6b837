# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""A model's sizes from its config.json: parameters, weight bytes, KV bytes per token, Mamba
state per slot, the MTP draft layer and the vision tower (docs/engine.md "Model shape").

Whether the model is hybrid is the collection's one rule, ``_models.is_hybrid``; the layers are
counted here only to size the KV cache and the Mamba state.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._shared import models as _models

DTYPE_BYTES = 2  # bf16 weights, KV cache and conv state


class ModelConfigError(ValueError):
    """A model's config.json is missing, unreadable or not a model config."""


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


@dataclass(frozen=True)
class _Dims:
    """The text model's main dimensions."""

    hidden: int
    layers: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    tied: bool


@dataclass(frozen=True)
class _Linear:
    """One gated-delta-net (linear attention) layer."""

    params: int
    conv_dim: int
    conv_kernel: int
    value_heads: int


@dataclass(frozen=True)
class _Mlp:
    dense: int  # per layer, read every step (shared experts and router included)
    expert: int  # per layer, routed experts
    fraction: float  # top_k / num_experts


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    text = cfg.get("text_config") or cfg
    if not isinstance(text, dict) or "hidden_size" not in text:
        raise ModelConfigError("model config has no hidden_size (neither top level nor text_config)")
    return text


def _dims(cfg: dict[str, Any], text: dict[str, Any]) -> _Dims:
    hidden = _i(text, "hidden_size")
    layers = _i(text, "num_hidden_layers")
    if hidden <= 0 or layers <= 0:
        raise ModelConfigError("model config needs positive hidden_size and num_hidden_layers")
    heads = _i(text, "num_attention_heads", max(1, hidden // 128))
    return _Dims(
        hidden=hidden,
        layers=layers,
        vocab=_i(text, "vocab_size", _i(cfg, "vocab_size", 32000)),
        heads=heads,
        kv_heads=_i(text, "num_key_value_heads", heads),
        head_dim=_i(text, "head_dim", hidden // heads),
        inter=_i(text, "intermediate_size", 4 * hidden),
        tied=bool(text.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False))),
    )


def _layer_counts(text: dict[str, Any], layers: int) -> tuple[int, int]:
    """(full-attention layers, linear-attention layers)."""
    layer_types = text.get("layer_types")
    interval = _i(text, "full_attention_interval", 0)
    if isinstance(layer_types, list) and len(layer_types) == layers:
        full = sum(1 for t in layer_types if t == "full_attention")
        linear = sum(1 for t in layer_types if t == "linear_attention")
        return (layers - linear if full + linear != layers else full), linear
    if interval > 0 and "linear_num_value_heads" in text:
        return layers // interval, layers - layers // interval
    return layers, 0


def _attention_params(text: dict[str, Any], d: _Dims) -> int:
    """q (doubled by the output gate), k, v and o of one full-attention layer."""
    gate = 2 if text.get("attn_output_gate") else 1
    return (d.hidden * d.heads * d.head_dim * gate + 2 * d.hidden * d.kv_heads * d.head_dim
            + d.heads * d.head_dim * d.hidden)


def _linear(text: dict[str, Any], d: _Dims) -> _Linear:
    """in_proj_qkvz, in_proj_ba, conv and out_proj of one gated-delta-net layer."""
    key_dim = _i(text, "linear_num_key_heads") * _i(text, "linear_key_head_dim")
    nv = _i(text, "linear_num_value_heads")
    value_dim = nv * _i(text, "linear_value_head_dim")
    conv_k = _i(text, "linear_conv_kernel_dim", 4)
    conv_dim = 2 * key_dim + value_dim
    params = (d.hidden * (conv_dim + value_dim) + d.hidden * 2 * nv + conv_dim * conv_k
              + value_dim * d.hidden)
    return _Linear(params=params, conv_dim=conv_dim, conv_kernel=conv_k, value_heads=nv)


def _mlp(text: dict[str, Any], d: _Dims) -> _Mlp:
    """3·H·I per layer; MoE: shared expert + router read always, routed experts in proportion."""
    num_experts = _i(text, "num_experts")
    top_k = _i(text, "num_experts_per_tok")
    if num_experts > 0 and top_k > 0:
        moe_inter = _i(text, "moe_intermediate_size", d.inter)
        shared_inter = _i(text, "shared_expert_intermediate_size")
        return _Mlp(dense=3 * d.hidden * shared_inter + d.hidden * num_experts,
                    expert=num_experts * 3 * d.hidden * moe_inter, fraction=top_k / num_experts)
    return _Mlp(dense=3 * d.hidden * d.inter, expert=0, fraction=1.0)


def _vision(cfg: dict[str, Any], hidden: int) -> tuple[int, int, int]:
    """(parameters, depth, hidden size) of the vision tower; zeros without ``vision_config``."""
    vision = cfg.get("vision_config") if isinstance(cfg.get("vision_config"), dict) else None
    if not vision:
        return 0, 0, 0
    layers = _i(vision, "depth", _i(vision, "num_hidden_layers", 24))
    v_hidden = _i(vision, "hidden_size", 1024)
    v_inter = _i(vision, "intermediate_size", 4 * v_hidden)
    merge = _i(vision, "spatial_merge_size", 2) ** 2
    out_hidden = _i(vision, "out_hidden_size", hidden)
    params = layers * (4 * v_hidden**2 + 2 * v_hidden * v_inter)
    params += (v_hidden * merge) ** 2 + v_hidden * merge * out_hidden
    return params, layers, v_hidden


def _draft_layer_params(text: dict[str, Any], d: _Dims, attn: int, mlp: _Mlp) -> int:
    """The MTP decoder layer(s) + fc(2H->H); 0 without an MTP head."""
    mtp_layers = _i(text, "mtp_num_hidden_layers", _i(text, "num_nextn_predict_layers"))
    if mtp_layers <= 0:
        return 0
    return mtp_layers * (attn + mlp.dense + mlp.expert) + 2 * d.hidden * d.hidden


def _state_bytes(text: dict[str, Any], linear: int, lin: _Linear) -> tuple[int, int]:
    """(conv, ssm) state bytes of one Mamba slot over all linear layers."""
    ssm_bytes = 4 if str(text.get("mamba_ssm_dtype", "float32")) == "float32" else 2
    conv = linear * (lin.conv_kernel - 1) * lin.conv_dim * DTYPE_BYTES
    ssm = linear * lin.value_heads * _i(text, "linear_key_head_dim") * _i(text, "linear_value_head_dim")
    return conv, ssm * ssm_bytes


def model_shape_from_config(cfg: dict[str, Any]) -> ModelShape:
    """Derive sizes from a HF config (dense Qwen3/Llama style; Qwen3.5/Qwen3-Next hybrid)."""
    architecture = str((cfg.get("architectures") or ["unknown"])[0])
    text = _text_config(cfg)
    d = _dims(cfg, text)
    full, linear = _layer_counts(text, d.layers)
    hybrid = _models.is_hybrid(cfg)
    if hybrid and linear == 0:
        raise ModelConfigError(f"{architecture} is a hybrid model, but its config gives no layer_types or "
                               "full_attention_interval to count its linear-attention layers by")
    attn, lin, mlp = _attention_params(text, d), _linear(text, d), _mlp(text, d)
    embed = d.vocab * d.hidden
    dense = (full * attn + linear * lin.params + d.layers * mlp.dense + embed
             + (0 if d.tied else embed))
    experts = d.layers * mlp.expert
    vision_params, vision_layers, vision_hidden = _vision(cfg, d.hidden)
    draft_layer = _draft_layer_params(text, d, attn, mlp)
    conv, ssm = _state_bytes(text, linear, lin) if hybrid else (0, 0)
    return ModelShape(
        architecture=architecture,
        params=dense + experts,
        weight_bytes=(dense + experts + vision_params) * DTYPE_BYTES,
        num_layers=d.layers,
        full_attention_layers=full,
        linear_attention_layers=linear,
        kv_bytes_per_token=full * 2 * d.kv_heads * d.head_dim * DTYPE_BYTES,
        mamba_state_bytes_per_slot=conv + ssm,
        has_mtp=draft_layer > 0,
        is_hybrid=hybrid,
        context_len=_i(text, "max_position_embeddings", _i(cfg, "max_position_embeddings", 32768)),
        hidden_size=d.hidden,
        vocab_size=d.vocab,
        mamba_conv_bytes_per_slot=conv,
        mamba_ssm_bytes_per_slot=ssm,
        # The draft worker allocates its own embedding and head when it loads (the 0.5.17
        # recording: 0.39 GB for a 75M-parameter MTP layer of a 32000 x 2048 vocabulary model).
        draft_weight_bytes=(draft_layer + 2 * embed) * DTYPE_BYTES if draft_layer else 0,
        draft_layer_params=draft_layer,
        draft_kv_bytes_per_token=2 * d.kv_heads * d.head_dim * DTYPE_BYTES if draft_layer else 0,
        lm_head_bytes=d.vocab * d.hidden * DTYPE_BYTES,
        dense_params=dense,
        expert_params=experts,
        experts_per_token_fraction=mlp.fraction,
        vision_params=vision_params,
        vision_layers=vision_layers,
        vision_hidden=vision_hidden,
        dtype_bytes=DTYPE_BYTES,
    )
