# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The embedded engine: a drop-in for ``python -m sglang.launch_server`` without GPUs.

It accepts exactly the flags of the emulated release (the release's own argparse schema),
serves SGLang's HTTP API with the response shapes of the real server (recordings in
``tests/fixtures/sglang-0.5.17-h200``) and paces token generation with the performance
model (``_perfmodel.Scheduler``), scaled by ``LLMOPS_SIM_TIME_SCALE``.

Run: ``python -m ansible_collections.llmops.sglang.plugins.module_utils._engine <argv>``.
Environment (never SGLang flags): LLMOPS_SGLANG_RELEASE, LLMOPS_SIM_GPUS,
CUDA_VISIBLE_DEVICES, LLMOPS_SIM_TIME_SCALE, LLMOPS_SIM_HOST_MEM_AVAILABLE_GB,
LLMOPS_SIM_ACCEPT_LENGTH, LLMOPS_SIM_LISTEN. See docs/engine-api.md.
"""
from __future__ import annotations

import asyncio
import dataclasses
import errno
import hashlib
import json
import math
import os
import random
import secrets
import signal
import socket
import sys
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from http import HTTPStatus
from typing import Any

from aiohttp import web

from ansible_collections.llmops.sglang.plugins.module_utils import (
    _engine_procs,
    _flags,
    _perfmodel,
)
from ansible_collections.llmops.sglang.plugins.module_utils._paths import load_json

DEFAULT_RELEASE = "0.5.23"
DEFAULT_GPU = "NVIDIA H200"
WARMUP_SECONDS = 6.0  # recorded: 6 s (hybrid) to 9 s (dense) from "Uvicorn running" to ready
DECODE_LOG_INTERVAL = 40
HEALTH_TIMEOUT_S = 20.0
# asyncio.wait_for raises asyncio.TimeoutError, the builtin only from Python 3.11 on
_TIMEOUTS = (asyncio.TimeoutError, TimeoutError)  # noqa: UP041
EMPTY_TEXT_EVERY = 3  # every third token id decodes to "" (the recording shows empty pieces)

_VOCAB = (
    " the", " of", " and", " to", " in", " a", " is", " that", " for", " it", " as", " with",
    " was", " on", " be", " by", " this", " are", " at", " from", " or", " an", " which",
    " script", " manage", " Parameter", " objects", " Form", " second", " fall", " entries",
    " week", " general", " exists", " those", " uid", " Raw", " attemp", "ing", "ed", "er",
    "tion", "ly", "s", "es", "al", "ment", "ness", "able", "ize", "Finder", "pressed", "dt",
    "plication", "uting", "mportError", "coeff", "heap", "replace", "group", "NAMES", "reg",
    "ground", "mix", "tail", "Generic", "surrogate", "welcome", "pro", "tle", "set", "poses",
    ".", ",", ":", ";", "(", ")", "=", "_", "'", "\n", " 1", " 2", "0", "87", "600",
)


# ---------------------------------------------------------------------------------------
# logging: the recorded format "[YYYY-MM-DD HH:MM:SS] message"
# ---------------------------------------------------------------------------------------
class _Log:
    """Server log in the real format; engine lines on stderr, access lines on stdout."""

    def __init__(self, level: str = "info") -> None:
        self.info_enabled = level.lower() in ("debug", "info")

    @staticmethod
    def _ts() -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())

    def _write(self, stream: Any, msg: str) -> None:
        try:
            stream.write(f"[{self._ts()}] {msg}\n")
            stream.flush()
        except (OSError, ValueError):
            pass

    def info(self, msg: str) -> None:
        if self.info_enabled:
            self._write(sys.stderr, msg)

    def error(self, msg: str) -> None:
        self._write(sys.stderr, msg)

    def access(self, msg: str) -> None:
        if self.info_enabled:
            self._write(sys.stdout, msg)


# ---------------------------------------------------------------------------------------
# metrics: families, names, help and labels as in the recording (metrics.txt)
# ---------------------------------------------------------------------------------------
_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ('process_cpu_seconds_total', 'counter', 'Total CPU time consumed by this process (user + system)'),
    ('startup_time_seconds', 'gauge', 'Engine startup duration by phase in seconds.'),
    ('startup_cuda_graph_time_seconds', 'gauge', 'CUDA graph capture duration by phase in seconds.'),
    ('http_requests_total', 'counter', 'Total number of HTTP requests by endpoint and method'),
    ('http_responses_total', 'counter', 'Total number of HTTP responses by endpoint and status code'),
    ('prompt_tokens_total', 'counter', 'Number of prefill tokens processed.'),
    ('generation_tokens_total', 'counter', 'Number of generation tokens processed.'),
    ('spec_verify_calls_total', 'counter', 'Number of speculative decoding verification calls.'),
    ('num_requests_total', 'counter', 'Number of requests processed.'),
    ('routing_keys_active', 'gauge', 'Number of unique routing keys with active requests'),
    ('http_requests_active', 'gauge', 'Number of currently active HTTP requests'),
    ('per_stage_req_latency_seconds', 'histogram', 'The latency of each stage of requests.'),
    ('queue_time_seconds', 'histogram', 'Histogram of queueing time in seconds.'),
    ('max_total_num_tokens', 'gauge', 'Maximum total number of tokens in the KV cache pool.'),
    ('weight_memory_usage_gb', 'gauge', 'Memory used by model weights in GB.'),
    ('kv_cache_memory_usage_gb', 'gauge', 'Memory used by the KV cache pools in GB.'),
    ('graph_memory_usage_gb', 'gauge', 'Memory used by captured device graphs in GB.'),
    ('page_size', 'gauge', 'KV cache page size in tokens.'),
    ('num_pages', 'gauge', 'Number of KV cache pages.'),
    ('context_len', 'gauge', 'Maximum context length.'),
    ('startup_available_gpu_memory_gb', 'gauge', 'Available GPU memory in GB at startup.'),
    ('num_running_reqs', 'gauge', 'The number of running requests.'),
    ('num_queue_reqs', 'gauge', 'The number of requests in the waiting queue.'),
    ('num_grammar_queue_reqs', 'gauge', 'The number of requests in the grammar waiting queue.'),
    ('gen_throughput', 'gauge', 'The generation throughput (token/s).'),
    ('cache_hit_rate', 'gauge', 'The prefix cache hit rate.'),
    ('decode_sum_seq_lens', 'gauge', 'The sum of all sequence lengths in decode.'),
    ('token_usage', 'gauge', 'The token usage.'),
    ('full_token_usage', 'gauge', 'The token usage for full attention layers.'),
    ('swa_token_usage', 'gauge', 'The token usage for SWA layers.'),
    ('mamba_usage', 'gauge', 'The token usage for Mamba layers.'),
    ('num_used_tokens', 'gauge', 'The number of used tokens.'),
    ('kv_available_tokens', 'gauge', 'Number of free token slots in the KV cache pool.'),
    ('kv_evictable_tokens', 'gauge', 'Number of evictable (radix-cached) token slots in the KV cache pool.'),
    ('kv_used_tokens', 'gauge', 'Number of actively used token slots in the KV cache pool.'),
    ('swa_available_tokens', 'gauge', 'Number of free token slots in the SWA pool (hybrid-SWA only).'),
    ('swa_evictable_tokens', 'gauge', 'Number of evictable (radix-cached) token slots in the SWA pool.'),
    ('swa_used_tokens', 'gauge', 'Number of actively used token slots in the SWA pool.'),
    ('mamba_available_tokens', 'gauge', 'Number of free state slots in the mamba SSM pool (hybrid-SSM only).'),
    ('mamba_evictable_tokens', 'gauge', 'Number of evictable (radix-cached) state slots in the mamba SSM pool.'),
    ('mamba_used_tokens', 'gauge', 'Number of actively used state slots in the mamba SSM pool.'),
    ('spec_accept_length', 'gauge', 'Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).'),
    ('spec_accept_rate', 'gauge', 'Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).'),
    ('spec_cap_length', 'gauge', 'Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot (0 when no cap is scheduled).'),
    ('spec_block_accept_length', 'gauge',
     'Mean uncapped full-block accept length per verify step (accept + cap-trimmed drafts; exact only in DSpark cap-accept mode).'),
    ('spec_num_steps', 'gauge', 'Currently active speculative_num_steps.'),
    ('spec_num_draft_tokens', 'gauge', 'Currently active speculative_num_draft_tokens (decouples from steps under topk>1).'),
    ('num_prefill_bootstrap_queue_reqs', 'gauge', 'The number of requests in the prefill bootstrap queue.'),
    ('num_prefill_inflight_queue_reqs', 'gauge', 'The number of requests in the prefill inflight queue.'),
    ('num_decode_prealloc_queue_reqs', 'gauge', 'The number of requests in the decode prealloc queue.'),
    ('num_decode_transfer_queue_reqs', 'gauge', 'The number of requests in the decode transfer queue.'),
    ('pending_prealloc_token_usage', 'gauge', 'The token usage for pending preallocated tokens (not preallocated yet).'),
    ('utilization', 'gauge', 'The utilization.'),
    ('fwd_occupancy', 'gauge', 'Forward pass GPU occupancy percentage.'),
    ('new_token_ratio', 'gauge', 'The new token ratio.'),
    ('is_cuda_graph', 'gauge', 'Whether the batch is using CUDA graph.'),
    ('hicache_host_used_tokens', 'gauge', 'Number of tokens currently used in the host KV cache.'),
    ('hicache_host_total_tokens', 'gauge', 'Total capacity of the host KV cache in tokens.'),
    ('num_unique_running_routing_keys', 'gauge', 'Number of unique routing keys in running batch.'),
    ('routing_key_running_req_count', 'gauge', 'Distribution of routing keys by running request count (gt < count <= le).'),
    ('routing_key_all_req_count', 'gauge', 'Distribution of routing keys by running+waiting request count (gt < count <= le).'),
    ('num_retracted_reqs', 'gauge', 'The number of retracted requests.'),
    ('num_paused_reqs', 'gauge', 'The number of paused requests by async weight sync.'),
    ('cuda_graph_passes_total', 'counter', 'Total number of forward passes categorized by CUDA graph.'),
    ('realtime_tokens_total', 'counter', 'Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode.'),
    ('time_to_first_token_seconds', 'histogram', 'Histogram of time to first token in seconds.'),
    ('e2e_request_latency_seconds', 'histogram', 'Histogram of End-to-end request latency in seconds'),
    ('prompt_tokens_histogram', 'histogram', 'Histogram of prompt token length.'),
    ('uncached_prompt_tokens_histogram', 'histogram', 'Histogram of uncached (compute) prompt token length.'),
    ('generation_tokens_histogram', 'histogram', 'Histogram of generation token length.'),
    ('inter_token_latency_seconds', 'histogram', 'Histogram of inter-token latency in seconds.'),
    ('cached_tokens_total', 'counter', 'Number of cached prompt tokens by source (device/host/storage).'),
)
_FAMILY_INFO = {name: (kind, help_) for name, kind, help_ in _FAMILIES}

_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0,
                 100.0, 200.0, 400.0)
_E2E_BUCKETS = _TTFT_BUCKETS + (600.0, 1200.0, 1800.0, 2400.0)
_ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06,
                0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
_QUEUE_BUCKETS = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0,
                  15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0,
                  400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0, 1600.0,
                  1800.0, 2000.0, 2500.0, 3000.0)
_STAGE_BUCKETS = tuple(0.001 * 1.62 ** i for i in range(30))
_TOKEN_BUCKETS = (100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0,
                  6000.0, 7000.0, 8000.0, 9000.0, 10000.0, 12500.0, 15000.0, 17500.0, 20000.0,
                  22500.0, 25000.0, 27500.0, 30000.0, 35000.0, 40000.0, 60000.0, 80000.0,
                  100000.0, 200000.0, 300000.0, 400000.0, 600000.0, 800000.0, 1e6, 1.1e6)
_ROUTING_BINS = (("0", "1"), ("1", "2"), ("2", "3"), ("3", "5"), ("5", "7"), ("7", "10"),
                 ("10", "20"), ("20", "50"), ("50", "100"), ("100", "200"), ("200", "+Inf"))
_GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode",
                 "draft_extend")


def _go_float(value: float) -> str:
    """Format a float as prometheus_client does (floatToGoString)."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6 and "e" not in text:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    items = sorted(pairs)
    if not items:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in items)
    return "{" + inner + "}"


class _Histogram:
    """A Prometheus histogram with fixed buckets (cumulative on render)."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
                break

    def render(self, name: str, labels: list[tuple[str, str]]) -> list[str]:
        """_sum, the cumulative _bucket lines, then _count (prometheus_client's order)."""
        lines = [f"{name}_sum{_labels(labels)} {_go_float(self.sum)}"]
        running = 0
        for i, bound in enumerate(self.buckets):
            running += self.counts[i]
            lines.append(f"{name}_bucket{_labels(labels + [('le', _go_float(bound))])} "
                         f"{_go_float(float(running))}")
        lines.append(f"{name}_bucket{_labels(labels + [('le', '+Inf')])} "
                     f"{_go_float(float(self.total))}")
        lines.append(f"{name}_count{_labels(labels)} {_go_float(float(self.total))}")
        return lines


# ---------------------------------------------------------------------------------------
# requests and validation
# ---------------------------------------------------------------------------------------
class _ValidationError(Exception):
    """A request body that the real server's pydantic models would reject."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(repr(errors))
        self.errors = errors


class _ServingError(Exception):
    """An error the real OpenAI serving layer returns as a 400 ``BadRequestError``."""


def _err(kind: str, loc: str, msg: str, value: Any) -> dict[str, Any]:
    return {"type": kind, "loc": ("body", loc), "msg": msg, "input": value}


def _get_int(body: dict[str, Any], key: str, default: int | None,
             errors: list[dict[str, Any]]) -> int | None:
    value = body.get(key, default)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        errors.append(_err("int_from_float", key, "Input should be a valid integer, got a "
                           "number with a fractional part", value))
        return default
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            errors.append(_err("int_parsing", key, "Input should be a valid integer, unable to "
                               "parse string as an integer", value))
            return default
    errors.append(_err("int_type", key, "Input should be a valid integer", value))
    return default


def _get_bool(body: dict[str, Any], key: str, default: bool,
              errors: list[dict[str, Any]]) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no",
                                                    "on", "off", "t", "f", "y", "n"):
        return value.lower() in ("true", "1", "yes", "on", "t", "y")
    errors.append(_err("bool_parsing", key, "Input should be a valid boolean, unable to "
                       "interpret input", value))
    return default


def _estimate_tokens(text: str) -> int:
    """Deterministic prompt-length estimate: about four characters per token."""
    return max(1, (len(text) + 3) // 4)


def _prompt_list(value: Any) -> list[tuple[int, str]] | None:
    """(token count, cache key) for each prompt of an OpenAI/native prompt value."""
    if isinstance(value, str):
        return [(_estimate_tokens(value), value)]
    if isinstance(value, list) and value:
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [(len(value), json.dumps(value))]
        if all(isinstance(v, str) for v in value):
            return [(_estimate_tokens(v), v) for v in value]
        if all(isinstance(v, list) and v and all(isinstance(i, int) for i in v) for v in value):
            return [(len(v), json.dumps(v)) for v in value]
    return None


def _chat_prompt(messages: list[Any]) -> tuple[int, str]:
    """Token estimate of a chat prompt after a ChatML-like template (5 tokens a message + 3)."""
    tokens = 3
    parts: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        text = str(content or "")
        parts.append(f"{message.get('role') if isinstance(message, dict) else ''}:{text}")
        tokens += 5 + (len(text) + 3) // 4
    return tokens, "\n".join(parts)


@dataclasses.dataclass
class _Req:
    """One generation request in flight."""

    rid: str
    index: int
    prompt_tokens: int
    cached_tokens: int
    max_new: int
    stream: bool
    sink: asyncio.Queue[tuple[int, list[int], bool]]
    rng: random.Random
    received_ts: float
    dispatch_ts: float
    submitted_at: float
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    forward_entry_ts: float = 0.0
    prefill_finished_ts: float = 0.0
    output_ids: list[int] = dataclasses.field(default_factory=list)
    verify_ct: int = 0
    accepted_drafts: int = 0
    accept_hist: list[int] = dataclasses.field(default_factory=list)
    done: bool = False
    internal: bool = False
    finish_reason: str = "length"
    matched_stop: int | None = None
    # the latency histograms' clock (Engine.metric_clock): arrival and last token
    m_submitted: float = 0.0
    m_last_token: float | None = None


def _piece(token_id: int) -> str:
    if token_id % EMPTY_TEXT_EVERY == 0:
        return ""
    return _VOCAB[(token_id // EMPTY_TEXT_EVERY) % len(_VOCAB)]


def _detok(ids: Iterable[int]) -> str:
    return "".join(_piece(i) for i in ids)


def _attr(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _json_dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=_json_dumps(obj), status=status, content_type="application/json")


def _is_hybrid(model_config: dict[str, Any]) -> bool:
    layer_types = model_config.get("layer_types") or []
    return any("linear" in str(t) or "mamba" in str(t) for t in layer_types) or bool(
        model_config.get("full_attention_interval"))


def _decode_graph_bs(max_bs: int, spec: bool) -> list[int]:
    if spec:
        sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 257, 8))
    else:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8))
    return [s for s in sizes if s <= max_bs] or [1]


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

_PREFILL_BS = [4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208,
               224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 832,
               896, 960, 1024, 1280, 1536, 1792, 2048, 2304, 2560, 2816, 3072, 3328, 3584, 3840,
               4096, 4608, 5120, 5632, 6144, 6656, 7168, 7680, 8192]


# ---------------------------------------------------------------------------------------
# the engine
# ---------------------------------------------------------------------------------------
class Engine:
    """Scheduler loop, request bookkeeping, metrics and the HTTP application."""

    def __init__(self, *, args: dict[str, Any], plan: Any, gpu: Any, gpu_name: str,
                 release: str, traits: dict[str, Any], model_config: dict[str, Any],
                 time_scale: float, log: _Log) -> None:
        self.args = args
        self.plan = plan
        self.gpu = gpu
        self.gpu_name = gpu_name
        self.release = release
        self.traits = traits
        self.model_config = model_config
        self.time_scale = time_scale
        self.log = log
        self.state = "loading"  # loading -> warmup -> ready -> stopping
        self.sched = _perfmodel.Scheduler(plan)
        self.reqs: dict[str, _Req] = {}
        self.wake = asyncio.Event()
        self.stop_event = asyncio.Event()
        self.started_wall = time.time()
        self.ready_wall: float | None = None
        self.model_path = str(args.get("model_path"))
        self.served_name = str(args.get("served_model_name") or self.model_path)
        shape = _attr(plan, "shape")
        hybrid = _attr(shape, "is_hybrid")
        self.hybrid = bool(hybrid) if hybrid is not None else _is_hybrid(model_config)
        self.spec_algorithm = _attr(plan, "spec_algorithm") or args.get("speculative_algorithm")
        self.spec = bool(self.spec_algorithm)
        self.context_len = int(_attr(plan, "context_len") or args.get("context_length")
                               or model_config.get("max_position_embeddings") or 32768)
        self.max_total_tokens = int(_attr(plan, "max_total_num_tokens") or 0)
        self.max_running = int(_attr(plan, "max_running_requests") or 0)
        self.vocab_size = int(model_config.get("vocab_size") or 32000)
        self.mamba_slots = (int(_attr(plan, "mamba_slots") or self.max_running * 3)
                            if self.hybrid else 0)
        graph_max = (_attr(plan, "cuda_graph_max_bs") or args.get("cuda_graph_max_bs_decode")
                     or args.get("cuda_graph_max_bs") or min(max(self.max_running, 1), 256))
        self.graph_max_bs = int(graph_max)
        self.radix_cache = not self.hybrid and not args.get("disable_radix_cache")
        self.prefix_cache: OrderedDict[str, int] = OrderedDict()
        self.loop_task: asyncio.Task[None] | None = None
        # statistics
        self.verify_steps = 0
        self.verify_tokens = 0
        self.decode_steps = 0
        self.window_tokens = 0
        self.window_time = 0.0
        self.last_gen_throughput = 0.0
        self.steps_prefill = 0
        self.steps_decode = 0
        self.realtime = {"prefill_compute": 0, "prefill_cache": 0, "decode": 0}
        self.counters: dict[tuple[str, str], float] = {}
        self.http_requests: dict[tuple[str, str], int] = {}
        self.http_active: dict[tuple[str, str], int] = {}
        self.http_responses: dict[tuple[str, str, str], int] = {}
        self.hist_stream: dict[tuple[str, str], _Histogram] = {}
        self.hist_plain: dict[str, _Histogram] = {
            "inter_token_latency_seconds": _Histogram(_ITL_BUCKETS),
            "prompt_tokens_histogram": _Histogram(_TOKEN_BUCKETS),
            "uncached_prompt_tokens_histogram": _Histogram(_TOKEN_BUCKETS),
            "generation_tokens_histogram": _Histogram(_TOKEN_BUCKETS),
        }
        self.hist_queue = _Histogram(_QUEUE_BUCKETS)
        self.hist_stage = {"request_process": _Histogram(_STAGE_BUCKETS),
                           "prefill_forward": _Histogram(_STAGE_BUCKETS)}
        # the step in flight: its scheduled loop-time start and the scheduler clock then
        # (metric_clock interpolates between them)
        self._step_wall0 = 0.0
        self._step_model0 = 0.0
        self.cached_total = 0
        self.hicache_total = self._hicache_kv_tokens()
        self.hicache_used = 0

    # -- plan helpers ------------------------------------------------------------------
    def _hicache_kv_tokens(self) -> int:
        pools = _attr(self.plan, "hicache_pools") or []
        if isinstance(pools, dict):
            pools = [dict(v, name=k) if isinstance(v, dict) else {"name": k, "tokens": v}
                     for k, v in pools.items()]
        best = 0
        for pool in pools:
            name = str(_attr(pool, "name", "") or _attr(pool, "kind", "")).lower()
            tokens = _attr(pool, "tokens", 0) or _attr(pool, "num_tokens", 0) or 0
            if "draft" in name or "mamba" in name:
                continue
            best = best or int(tokens)
        return best

    # -- token generation through the scheduler ------------------------------------------
    def submit(self, prompts: list[tuple[int, str]], max_new: int, stream: bool,
               seed: Any = None, internal: bool = False,
               ) -> tuple[list[_Req], asyncio.Queue[tuple[int, list[int], bool]]]:
        sink: asyncio.Queue[tuple[int, list[int], bool]] = asyncio.Queue()
        reqs: list[_Req] = []
        now_wall = time.time()
        loop_now = asyncio.get_running_loop().time()
        for index, (tokens, key) in enumerate(prompts):
            rid = uuid.uuid4().hex
            cached = 0
            if self.radix_cache and not internal:
                if key in self.prefix_cache:
                    cached = max(0, min(self.prefix_cache[key], tokens) - 1)
                    self.prefix_cache.move_to_end(key)
                else:
                    self.prefix_cache[key] = tokens
                    if len(self.prefix_cache) > 4096:
                        self.prefix_cache.popitem(last=False)
            digest = hashlib.sha256(f"{key}|{seed}|{index}".encode()).digest()
            req = _Req(rid=rid, index=index, prompt_tokens=tokens, cached_tokens=cached,
                       max_new=max(1, max_new), stream=stream, sink=sink,
                       rng=random.Random(int.from_bytes(digest[:8], "big")),
                       received_ts=now_wall, dispatch_ts=time.time(), submitted_at=loop_now,
                       internal=internal, m_submitted=self.metric_clock(loop_now))
            self.reqs[rid] = req
            self.sched.submit(rid, max(1, tokens - cached), req.max_new)
            reqs.append(req)
        self.wake.set()
        return reqs, sink

    def cancel(self, reqs: list[_Req]) -> None:
        for req in reqs:
            if not req.done and req.rid in self.reqs:
                try:
                    self.sched.cancel(req.rid)
                except (KeyError, ValueError):
                    pass
                self.reqs.pop(req.rid, None)
                req.done = True

    async def scheduler_loop(self) -> None:
        loop = asyncio.get_running_loop()
        target: float | None = None
        while True:
            res = self.sched.step()
            if res is None:
                target = None
                if self.reqs:  # finished bookkeeping for anything the model dropped
                    for req in list(self.reqs.values()):
                        self._finish(req, loop.time())
                self.wake.clear()
                await self.wake.wait()
                continue
            now = loop.time()
            if target is None or target < now - 0.05:
                target = now
            self._step_wall0 = target
            self._step_model0 = self.sched.clock - float(res.dt)
            target += float(res.dt) * self.time_scale
            delay = target - loop.time()
            await asyncio.sleep(delay if delay > 0.0005 else 0)
            self._dispatch(res, loop.time())

    def _token(self, req: _Req) -> int:
        return req.rng.randrange(3, self.vocab_size)

    def metric_clock(self, now: float) -> float:
        """The clock of the latency histograms (TTFT, ITL, e2e, queue time, prefill stage).

        At time scale 1 the event loop's time, like a real server. Time-scaled, the modelled GPU
        time: the scheduler's virtual clock, inside the step in flight interpolated from the
        step's scheduled start (never past the step's end), so a request that arrives during a
        step is stamped where it arrived. The histograms then hold the engine's own model,
        free of the event loop's jitter that wall-clock gaps divided by the scale would magnify.
        """
        if self.time_scale == 1.0:
            return now
        clock = float(self.sched.clock)
        if self.time_scale <= 0:
            return clock
        return min(clock, self._step_model0 + max(0.0, now - self._step_wall0) / self.time_scale)

    def _dispatch(self, res: Any, now: float) -> None:
        finished = set(res.finished or [])
        first = set(res.first_token or [])
        dt_wall = float(res.dt) * self.time_scale
        # histogram clock: a dispatched step ends exactly at the scheduler clock
        scaled = self.time_scale != 1.0
        mnow = float(self.sched.clock) if scaled else now
        dt_metric = float(res.dt) if scaled else dt_wall
        new_seqs = [self.reqs[r] for r in first if r in self.reqs]
        decode_tokens = 0
        decode_seen = False
        for rid, count in res.emitted or []:
            req = self.reqs.get(rid)
            if req is None or count <= 0:
                continue
            ids = [self._token(req) for _ in range(int(count))]
            if req.output_ids:
                decode_seen = True
                decode_tokens += len(ids)
                req.verify_ct += 1
                accepted = len(ids) - 1
                req.accepted_drafts += accepted
                if self.spec:
                    self.verify_steps += 1
                    self.verify_tokens += len(ids)
                    while len(req.accept_hist) <= accepted:
                        req.accept_hist.append(0)
                    req.accept_hist[accepted] += 1
                if req.m_last_token is not None:
                    gap = (mnow - req.m_last_token) / len(ids)
                    for _ in ids:
                        self.hist_plain["inter_token_latency_seconds"].observe(gap)
            else:
                req.first_token_at = now
                req.prefill_finished_ts = time.time()
                if not req.internal:
                    self._hist_stream("time_to_first_token_seconds", req.stream,
                                      _TTFT_BUCKETS).observe(mnow - req.m_submitted)
                if len(ids) > 1:
                    decode_tokens += len(ids) - 1
            req.last_token_at = now
            req.m_last_token = mnow
            req.output_ids.extend(ids)
            req.sink.put_nowait((req.index, ids, rid in finished))
        for req in new_seqs:
            if req.first_token_at is None:
                req.first_token_at = now
            req.forward_entry_ts = req.forward_entry_ts or time.time()
            self.hist_queue.observe(max(0.0, mnow - req.m_submitted - dt_metric))
            self.hist_stage["request_process"].observe(0.0005)
            self.hist_stage["prefill_forward"].observe(dt_metric)
        if new_seqs:
            self.steps_prefill += 1
            self._log_prefill(new_seqs, dt_wall)
        if decode_seen:
            self.steps_decode += 1
            self.decode_steps += 1
            self.window_tokens += decode_tokens
            self.window_time += dt_wall
            self.realtime["decode"] += decode_tokens
            if self.decode_steps % DECODE_LOG_INTERVAL == 0:
                self.last_gen_throughput = (self.window_tokens / self.window_time
                                            if self.window_time > 0 else 0.0)
                self._log_decode()
                self.window_tokens = 0
                self.window_time = 0.0
        for rid in finished:
            req = self.reqs.get(rid)
            if req is not None:
                self._finish(req, now, mnow)

    def _finish(self, req: _Req, now: float, mnow: float | None = None) -> None:
        if req.done:
            return
        req.done = True
        req.finished_at = now
        self.reqs.pop(req.rid, None)
        req.sink.put_nowait((req.index, [], True))
        if req.internal:
            return
        stream = "true" if req.stream else "false"
        self._count("prompt_tokens_total", stream, req.prompt_tokens)
        self._count("generation_tokens_total", stream, len(req.output_ids))
        self._count("num_requests_total", stream, 1)
        if mnow is None:
            mnow = self.metric_clock(now)
        self._hist_stream("e2e_request_latency_seconds", req.stream,
                          _E2E_BUCKETS).observe(mnow - req.m_submitted)
        self.hist_plain["prompt_tokens_histogram"].observe(req.prompt_tokens)
        self.hist_plain["uncached_prompt_tokens_histogram"].observe(
            req.prompt_tokens - req.cached_tokens)
        self.hist_plain["generation_tokens_histogram"].observe(len(req.output_ids))
        self.cached_total += req.cached_tokens
        self.realtime["prefill_compute"] += req.prompt_tokens - req.cached_tokens
        self.realtime["prefill_cache"] += req.cached_tokens
        if self.hicache_total:
            self.hicache_used = min(self.hicache_total,
                                    self.hicache_used + req.prompt_tokens + len(req.output_ids))

    def _count(self, name: str, stream: str, value: float) -> None:
        self.counters[(name, stream)] = self.counters.get((name, stream), 0.0) + value

    def _hist_stream(self, name: str, stream: bool, buckets: tuple[float, ...]) -> _Histogram:
        key = (name, "true" if stream else "false")
        if key not in self.hist_stream:
            self.hist_stream[key] = _Histogram(buckets)
        return self.hist_stream[key]

    # -- state for logs, metrics and server info -------------------------------------------
    def used_tokens(self) -> int:
        return sum(r.prompt_tokens + len(r.output_ids) for r in self.reqs.values())

    def token_usage(self) -> float:
        return self.used_tokens() / self.max_total_tokens if self.max_total_tokens else 0.0

    def avg_accept_length(self) -> float:
        return self.verify_tokens / self.verify_steps if self.verify_steps else 1.0

    def accept_rate(self) -> float:
        drafts = int(self.args.get("speculative_num_draft_tokens") or 1) - 1
        if not self.verify_steps or drafts <= 0:
            return 0.0
        return max(0.0, (self.avg_accept_length() - 1.0) / drafts)

    def _num_running(self) -> int:
        return int(getattr(self.sched, "num_running", 0))

    def _num_queued(self) -> int:
        return int(getattr(self.sched, "num_queued", 0))

    def _log_prefill(self, new_seqs: list[_Req], dt_wall: float) -> None:
        new_tokens = sum(r.prompt_tokens - r.cached_tokens for r in new_seqs)
        cached = sum(r.cached_tokens for r in new_seqs)
        usage = f"token usage: {self.token_usage():.2f}, "
        if self.hybrid:
            usage = f"full token usage: {self.token_usage():.2f}, mamba usage: " \
                    f"{self._num_running() / max(self.mamba_slots, 1):.2f}, "
        running = max(0, self._num_running() - len(new_seqs))
        throughput = new_tokens / dt_wall if dt_wall > 0 else 0.0
        graph = "True" if running + len(new_seqs) <= self.graph_max_bs else "False"
        self.log.info(f"Prefill batch, #new-seq: {len(new_seqs)}, #new-token: {new_tokens}, "
                      f"#cached-token: {cached}, {usage}#running-req: {running}, "
                      f"#queue-req: {self._num_queued()}, #pending-token: 0, cuda graph: "
                      f"{graph}, input throughput (token/s): {throughput:.2f}")

    def _log_decode(self) -> None:
        running = self._num_running()
        graph = "True" if running <= self.graph_max_bs else "False"
        spec = ""
        if self.spec:
            spec = f"accept len: {self.avg_accept_length():.2f}, accept rate: " \
                   f"{self.accept_rate():.2f}, "
        if self.hybrid:
            head = (f"#running-req: {running}, #full token: {self.used_tokens()}, full token "
                    f"usage: {self.token_usage():.2f}, mamba num: {running * 3}, mamba usage: "
                    f"{running / max(self.mamba_slots, 1):.2f}, ")
        else:
            head = (f"#running-req: {running}, #token: {self.used_tokens()}, token usage: "
                    f"{self.token_usage():.2f}, ")
        self.log.info(f"Decode batch, {head}{spec}cuda graph: {graph}, gen throughput "
                      f"(token/s): {self.last_gen_throughput:.2f}, #queue-req: "
                      f"{self._num_queued()}")

    # -- /metrics --------------------------------------------------------------------------
    def render_metrics(self) -> str:
        out: list[str] = []
        base = [("engine_type", "unified"), ("model_name", self.served_name)]
        sched = base + [("moe_ep_rank", "0"), ("pp_rank", "0"), ("tp_rank", "0")]

        def family(name: str, samples: list[str]) -> None:
            kind, help_ = _FAMILY_INFO[name]
            out.append(f"# HELP sglang:{name} {help_}")
            out.append(f"# TYPE sglang:{name} {kind}")
            out.extend(samples)

        def gauge(name: str, value: float, labels: list[tuple[str, str]] | None = None) -> None:
            family(name, [f"sglang:{name}{_labels(sched if labels is None else labels)} "
                          f"{_go_float(value)}"])

        cpu = time.process_time()
        family("process_cpu_seconds_total", [
            f'sglang:process_cpu_seconds_total{{component="detokenizer"}} {_go_float(cpu / 3)}',
            f'sglang:process_cpu_seconds_total{{component="tokenizer"}} '
            f"{_go_float(cpu * 2 / 3)}"])
        startup = self.startup_time()
        family("startup_time_seconds", [
            f"sglang:startup_time_seconds{_labels(base + [('phase', k)])} {_go_float(startup[k])}"
            for k in ("load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e")])
        family("startup_cuda_graph_time_seconds", [
            f"sglang:startup_cuda_graph_time_seconds{_labels(base + [('phase', k)])} "
            f"{_go_float(v)}" for k, v in startup["cuda_graph"].items()])
        family("http_requests_total", [
            f"sglang:http_requests_total{_labels([('endpoint', e), ('method', m)])} "
            f"{_go_float(float(n))}" for (e, m), n in self.http_requests.items()])
        family("http_responses_total", [
            f"sglang:http_responses_total"
            f"{_labels([('endpoint', e), ('method', m), ('status_code', s)])} "
            f"{_go_float(float(n))}" for (e, m, s), n in self.http_responses.items()])
        for name in ("prompt_tokens_total", "generation_tokens_total"):
            family(name, [f"sglang:{name}{_labels(base + [('is_streaming', s)])} "
                          f"{_go_float(self.counters.get((name, s), 0.0))}"
                          for s in ("false", "true") if (name, s) in self.counters])
        if self.spec:
            family("spec_verify_calls_total", [
                f"sglang:spec_verify_calls_total{_labels(base)} {_go_float(self.verify_steps)}"])
        family("num_requests_total", [
            f"sglang:num_requests_total{_labels(base + [('is_streaming', s)])} "
            f"{_go_float(self.counters.get(('num_requests_total', s), 0.0))}"
            for s in ("false", "true") if ("num_requests_total", s) in self.counters])
        family("cached_tokens_total", [
            f"sglang:cached_tokens_total{_labels(base + [('cache_source', 'device')])} "
            f"{_go_float(self.cached_total)}"])
        family("routing_keys_active", ["sglang:routing_keys_active 0.0"])
        family("http_requests_active", [
            f"sglang:http_requests_active{_labels([('endpoint', e), ('method', m)])} "
            f"{_go_float(float(n))}" for (e, m), n in self.http_active.items()])
        stage_lines: list[str] = []
        for stage, hist in self.hist_stage.items():
            stage_lines += hist.render("sglang:per_stage_req_latency_seconds",
                                       sched + [("stage", stage)])
        family("per_stage_req_latency_seconds", stage_lines)
        family("queue_time_seconds", self.hist_queue.render("sglang:queue_time_seconds", sched))
        memory = self.memory_usage()
        gauge("max_total_num_tokens", self.max_total_tokens)
        gauge("weight_memory_usage_gb", memory["weight"])
        gauge("kv_cache_memory_usage_gb", memory["kvcache"])
        family("graph_memory_usage_gb", [
            f"sglang:graph_memory_usage_gb{_labels(sched + [('phase', k)])} {_go_float(v)}"
            for k, v in memory["graph"].items()])
        gauge("page_size", float(self.args.get("page_size") or 1))
        gauge("num_pages", self.max_total_tokens / float(self.args.get("page_size") or 1))
        gauge("context_len", self.context_len)
        gauge("startup_available_gpu_memory_gb", memory["startup_available"])
        running = self._num_running()
        used = self.used_tokens()
        gauge("num_running_reqs", running)
        gauge("num_queue_reqs", self._num_queued())
        gauge("num_grammar_queue_reqs", 0.0)
        gauge("gen_throughput", self.last_gen_throughput if running else 0.0)
        total_prompt = sum(self.counters.get(("prompt_tokens_total", s), 0.0)
                           for s in ("true", "false"))
        gauge("cache_hit_rate", self.cached_total / total_prompt if total_prompt else 0.0)
        gauge("decode_sum_seq_lens", used)
        gauge("token_usage", self.token_usage())
        gauge("full_token_usage", self.token_usage() if self.hybrid else 0.0)
        gauge("swa_token_usage", 0.0)
        mamba_slots = self.mamba_slots
        gauge("mamba_usage", running / mamba_slots if mamba_slots else 0.0)
        gauge("num_used_tokens", used)
        gauge("kv_available_tokens", max(0, self.max_total_tokens - used))
        gauge("kv_evictable_tokens", float(sum(self.prefix_cache.values())) if self.radix_cache
              else 0.0)
        gauge("kv_used_tokens", used)
        for name in ("swa_available_tokens", "swa_evictable_tokens", "swa_used_tokens"):
            gauge(name, 0.0)
        gauge("mamba_available_tokens", max(0, mamba_slots - running * 3))
        gauge("mamba_evictable_tokens", 0.0)
        gauge("mamba_used_tokens", running * 3 if self.hybrid else 0)
        gauge("spec_accept_length", self.avg_accept_length() if self.spec else 0.0)
        gauge("spec_accept_rate", self.accept_rate())
        gauge("spec_cap_length", 0.0)
        gauge("spec_block_accept_length", 0.0)
        gauge("spec_num_steps", float(self.args.get("speculative_num_steps") or 0)
              if self.spec else 0.0)
        gauge("spec_num_draft_tokens", float(self.args.get("speculative_num_draft_tokens") or 0)
              if self.spec else 0.0)
        for name in ("num_prefill_bootstrap_queue_reqs", "num_prefill_inflight_queue_reqs",
                     "num_decode_prealloc_queue_reqs", "num_decode_transfer_queue_reqs",
                     "pending_prealloc_token_usage"):
            gauge(name, 0.0)
        gauge("utilization", min(1.0, running / self.max_running) if self.max_running else 0.0)
        gauge("fwd_occupancy", float("nan"))
        gauge("new_token_ratio", 0.7 if running else 0.0)
        gauge("is_cuda_graph", 1.0 if 0 < running <= self.graph_max_bs else 0.0)
        if self.hicache_total:
            gauge("hicache_host_used_tokens", self.hicache_used)
            gauge("hicache_host_total_tokens", self.hicache_total)
        gauge("num_unique_running_routing_keys", 0.0)
        for name in ("routing_key_running_req_count", "routing_key_all_req_count"):
            family(name, [f"sglang:{name}{_labels(sched + [('gt', gt), ('le', le)])} 0.0"
                          for gt, le in _ROUTING_BINS])
        pid_labels = sched + [("pid", str(os.getpid()))]
        gauge("num_retracted_reqs", 0.0, pid_labels)
        gauge("num_paused_reqs", 0.0, pid_labels)
        family("cuda_graph_passes_total", [
            f"sglang:cuda_graph_passes_total{_labels(sched + [('mode', mode)])} {_go_float(n)}"
            for mode, n in (("prefill_cuda_graph", self.steps_prefill),
                            ("decode_cuda_graph", self.steps_decode))])
        family("realtime_tokens_total", [
            f"sglang:realtime_tokens_total{_labels(sched + [('mode', mode)])} {_go_float(n)}"
            for mode, n in self.realtime.items() if n or mode != "prefill_cache"])
        for name in ("time_to_first_token_seconds", "e2e_request_latency_seconds"):
            lines: list[str] = []
            for stream in ("false", "true"):
                hist = self.hist_stream.get((name, stream))
                if hist is not None:
                    lines += hist.render(f"sglang:{name}", base + [("is_streaming", stream)])
            family(name, lines)
        for name in ("prompt_tokens_histogram", "uncached_prompt_tokens_histogram",
                     "generation_tokens_histogram", "inter_token_latency_seconds"):
            family(name, self.hist_plain[name].render(f"sglang:{name}", base))
        return "\n".join(out) + "\n"

    # -- server info ---------------------------------------------------------------------
    def startup_time(self) -> dict[str, Any]:
        load = float(_attr(self.plan, "load_seconds") or 0.0)
        graphs = _attr(self.plan, "cuda_graph_seconds")
        if not isinstance(graphs, dict):
            graphs = {"prefill": round(load * 0.55, 3), "decode": 0.0 if self.spec else 3.3,
                      "target_verify": 15.0 if self.spec else 0.0, "draft_prefill": 0.0,
                      "draft_decode": 6.2 if self.spec else 0.0,
                      "draft_extend": 1.2 if self.spec else 0.0}
        return {"load_weight": float(_attr(self.plan, "load_weight_seconds") or 0.2),
                "kv_cache_allocation": float(_attr(self.plan, "kv_cache_seconds") or 0.05),
                "scheduler_e2e": round(load * 0.7, 3), "cuda_graph": dict(graphs),
                "tokenizer_e2e": round(load * 0.85, 3)}

    def memory_usage(self) -> dict[str, Any]:
        graph = _attr(self.plan, "graph_memory_gb")
        if not isinstance(graph, dict):
            graph = {phase: 0.0 for phase in _GRAPH_PHASES}
            graph["prefill"] = 0.62
            graph["target_verify" if self.spec else "decode"] = 0.06
        shape = _attr(self.plan, "shape")
        tp = max(int(_attr(self.plan, "tp_size") or 1), 1)
        weight = float(_attr(shape, "weight_bytes") or 0) / tp / 2 ** 30
        kv_bytes = float(_attr(shape, "kv_bytes_per_token") or 0)
        if self.spec:
            kv_bytes += float(_attr(shape, "draft_kv_bytes_per_token") or 0)
        kvcache = self.max_total_tokens * kv_bytes / tp / 2 ** 30
        return {
            "weight": round(weight, 3),
            "kvcache": round(kvcache, 3),
            "startup_available": round(float(_attr(self.plan, "available_gpu_mem_gb") or 0.0), 3),
            "token_capacity": self.max_total_tokens,
            "token_capacity_swa": None,
            "graph": graph,
        }

    def resolved_args(self) -> dict[str, Any]:
        info = dict(self.args)
        info["tokenizer_path"] = info.get("tokenizer_path") or self.model_path
        info["served_model_name"] = self.served_name
        info["max_running_requests"] = self.max_running
        if info.get("random_seed") is None:
            info["random_seed"] = random.Random(self.started_wall).randrange(1, 2 ** 30)
        if self.spec and str(info.get("speculative_algorithm")).upper() == "NEXTN":
            info["speculative_algorithm"] = "EAGLE"  # the real server resolves NEXTN to EAGLE
        if "pp_max_micro_batch_size" in info and info["pp_max_micro_batch_size"] is None:
            info["pp_max_micro_batch_size"] = self.max_running
        for key in ("chunked_prefill_size", "max_prefill_tokens"):
            value = _attr(self.plan, key)
            if key in info and info[key] is None and value is not None:
                info[key] = value
        if info.get("cuda_graph_config") is None:
            bs = _decode_graph_bs(self.graph_max_bs, self.spec)
            info["cuda_graph_config"] = {
                "decode": {"backend": "full", "max_bs": self.graph_max_bs, "bs": bs,
                           "tc_compiler": "eager", "full_prefill_max_req": None,
                           "full_prefill_prefix_chunk_tokens": None},
                "prefill": {"backend": "breakable", "max_bs": 8192, "bs": list(_PREFILL_BS),
                            "tc_compiler": "eager", "full_prefill_max_req": None,
                            "full_prefill_prefix_chunk_tokens": None}}
        for key, value in _RESOLVED_DEFAULTS.items():
            if key in info and info[key] is None:
                info[key] = value() if callable(value) else value
        if info.get("load_balance_method") == "auto":
            info["load_balance_method"] = "round_robin"
        if self.release != "0.5.10":
            for key, value in _NON_FLAG_FIELDS.items():
                info.setdefault(key, value)
        if self.release == "0.5.17":  # parser dests that the recorded ServerArgs dump lacks
            for key in ("config", "collect_tokens_histogram", "prefill_round_robin_balance"):
                info.pop(key, None)
        info.setdefault("mm_process_config", {})
        return info

    def server_info(self) -> dict[str, Any]:
        info = self.resolved_args()
        state = dict(info)
        state.update({
            "_resolved_overrides": [["_page_size_default", {"page_size": 1}]],
            "grpc_worker_threads": 4,
            "_quantization_explicitly_unset": False,
            "_cuda_graph_config_locked": [["decode", "max_bs"]],
            "_declarations_materialized": True,
            "_mx_config_cache": {},
            "max_speculative_num_draft_tokens": (self.args.get("speculative_num_draft_tokens")
                                                 if self.spec else None),
            "last_gen_throughput": self.last_gen_throughput,
            "memory_usage": self.memory_usage(),
            "effective_max_running_requests_per_dp": self.max_running,
        })
        if self.hybrid:
            state["_mamba_cache_chunk_size"] = 64
        state["startup_time"] = self.startup_time()
        if self.spec and self.verify_steps:
            state["avg_spec_accept_length"] = self.avg_accept_length()
        info.update({
            "status": "ready" if self.state == "ready" else "starting",
            "max_total_num_tokens": self.max_total_tokens,
            "max_req_input_len": self.context_len - 6,
            "startup_time": self.startup_time(),
            "internal_states": [state],
            "version": self.release,
            "kv_events": None,
            "llmops_sim": {"time_scale": self.time_scale, "gpu": self.gpu_name,
                           "release": self.release,
                           "accept_length": _attr(self.plan, "accept_length")},
        })
        return info

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.args.get("tokenizer_path") or self.model_path,
            "is_generation": True,
            "preferred_sampling_params": self.args.get("preferred_sampling_params"),
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": self.model_config.get("model_type"),
            "architectures": self.model_config.get("architectures"),
            "embedding": {
                "family": "none", "task": "none", "execution": "none", "attention": "none",
                "pooling": "model_defined", "normalize": False, "postprocessor": "none",
                "tokenizer_special_tokens": "model_default", "supports_dimensions": False,
                "supports_token_embeddings": False, "supports_multimodal": False,
                "requires_embedding_flag": False, "auto_enable_embedding": False,
                "bcg_eligibility": "disabled", "safe_disable_kv_cache": False,
                "safe_disable_radix_cache": False, "safe_disable_chunked_prefill": False,
                "enabled": False, "matryoshka_dimensions": [],
                "bcg": {"prefill_backend": "breakable", "enabled": True,
                        "capture_token_budget": 8192, "capture_batch_sizes": list(_PREFILL_BS)},
                "cache": {"kv_cache_disabled": False,
                          "radix_cache_disabled": bool(self.args.get("disable_radix_cache")),
                          "chunked_prefill_disabled": False},
            },
        }

    # -- HTTP ------------------------------------------------------------------------------
    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._mw_common, self._mw_auth],
                              client_max_size=64 * 1024 * 1024)
        app.on_response_prepare.append(self._headers)
        add = app.router.add_route
        add("GET", "/health", self.h_health)
        add("GET", "/health_generate", self.h_health)
        add("GET", "/get_model_info", self.h_model_info)
        add("GET", "/model_info", self.h_model_info)
        add("GET", "/v1/models", self.h_models)
        info_path = str(self.traits.get("server_info_path") or "/get_server_info")
        add("GET", info_path, self.h_server_info)
        old_path = self.traits.get("server_info_deprecated_path")
        if old_path and old_path != info_path:
            add("GET", str(old_path), self.h_server_info)
        add("POST", "/v1/completions", self.h_completions)
        add("POST", "/v1/chat/completions", self.h_chat)
        add("POST", "/generate", self.h_generate)
        add("PUT", "/generate", self.h_generate)
        if self.args.get("enable_metrics"):
            add("GET", "/metrics", self.h_metrics)
        return app

    @staticmethod
    async def _headers(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["server"] = "uvicorn"
        response.headers["vary"] = "Origin"

    @web.middleware
    async def _mw_common(self, request: web.Request, handler: Any) -> web.StreamResponse:
        route = request.match_info.route.resource
        endpoint = route.canonical if route is not None else None
        key = (endpoint or "", request.method)
        if endpoint:
            self.http_requests[key] = self.http_requests.get(key, 0) + 1
            self.http_active[key] = self.http_active.get(key, 0) + 1
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            detail = exc.reason if exc.status in (404, 405) else exc.text
            return _json_response({"detail": detail}, exc.status)
        finally:
            if endpoint:
                self.http_active[key] -= 1
                rkey = (endpoint, request.method, str(status))
                self.http_responses[rkey] = self.http_responses.get(rkey, 0) + 1
            peer = request.transport.get_extra_info("peername") if request.transport else None
            client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "-"
            try:
                phrase = HTTPStatus(status).phrase
            except ValueError:
                phrase = ""
            self.log.access(f'INFO:     {client} - "{request.method} {request.path_qs} HTTP/'
                            f'{request.version.major}.{request.version.minor}" {status} {phrase}')

    @web.middleware
    async def _mw_auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        api_key = self.args.get("api_key")
        path = request.path
        if (not api_key or request.method == "OPTIONS" or path.startswith("/health")
                or path.startswith("/ready") or path.startswith("/metrics")):
            return await handler(request)
        authz = request.headers.get("Authorization", "")
        scheme, _, token = authz.partition(" ")
        ok = scheme.lower() == "bearer" and secrets.compare_digest(token, str(api_key))
        x_key = request.headers.get("x-api-key")
        ok = ok or bool(x_key and secrets.compare_digest(x_key, str(api_key)))
        if not ok:
            return _json_response({"error": "Unauthorized"}, 401)
        return await handler(request)

    def _deprecated(self, old: str, new: str) -> None:
        if self.traits.get("server_info_deprecated_path"):
            self.log.info(f"Endpoint '{old}' is deprecated and will be removed in a future "
                          f"version. Please use '{new}' instead.")

    async def one_token(self) -> bool:
        reqs, sink = self.submit([(1, "health")], 1, False, internal=True)

        async def _wait() -> bool:
            while True:
                _, _, done = await sink.get()
                if done:
                    return True

        try:
            return await asyncio.wait_for(_wait(), timeout=HEALTH_TIMEOUT_S)
        except _TIMEOUTS:
            self.cancel(reqs)
            return False

    async def h_health(self, request: web.Request) -> web.StreamResponse:
        if self.state != "ready":
            return web.Response(status=503)
        if not await self.one_token() or self.state != "ready":
            return web.Response(status=503)
        return web.Response(status=200)

    async def h_model_info(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/get_model_info":
            self._deprecated("/get_model_info", "/model_info")
        return _json_response(self.model_info())

    async def h_server_info(self, request: web.Request) -> web.StreamResponse:
        if request.path == self.traits.get("server_info_deprecated_path"):
            self._deprecated(request.path, str(self.traits.get("server_info_path")))
        return _json_response(self.server_info())

    async def h_models(self, request: web.Request) -> web.StreamResponse:
        return _json_response({"object": "list", "data": [{
            "id": self.served_name, "object": "model", "created": int(time.time()),
            "owned_by": "sglang", "root": self.model_path, "parent": None,
            "max_model_len": self.context_len}]})

    async def h_metrics(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=self.render_metrics(),
                            content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})

    # -- request parsing -------------------------------------------------------------------
    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            raise _ValidationError([{"type": "json_invalid", "loc": ("body", 0),
                                     "msg": "JSON decode error", "input": {},
                                     "ctx": {"error": str(exc).split(":")[0]}}]) from exc
        if not isinstance(body, dict):
            raise _ValidationError([{"type": "model_attributes_type", "loc": ("body",),
                                     "msg": "Input should be a valid dictionary or object to "
                                            "extract fields from", "input": body}])
        return body

    @staticmethod
    def _bad_request(request: web.Request, exc: _ValidationError) -> web.Response:
        count = len(exc.errors)
        summary = f"{count} validation error{'s' if count != 1 else ''}:\n" + "\n".join(
            f"  {e!r}" for e in exc.errors)
        message = f"{summary}\n\n    {request.method} {request.path} {exc.errors!r}"
        return _json_response({"object": "error", "message": message, "type": "Bad Request",
                               "param": None, "code": 400}, 400)

    @staticmethod
    def _serving_error(message: str) -> web.Response:
        return _json_response({"object": "error", "message": message,
                               "type": "BadRequestError", "param": None, "code": 400}, 400)

    def _check_len(self, prompts: list[tuple[int, str]], max_new: int) -> None:
        for tokens, _ in prompts:
            if tokens + max_new > self.context_len:
                raise _ServingError(
                    f"Requested token count exceeds the model's maximum context length of "
                    f"{self.context_len} tokens. You requested a total of {tokens + max_new} "
                    f"tokens: {tokens} tokens from the input messages and {max_new} tokens "
                    f"for the completion. Please reduce the number of tokens in the input "
                    f"messages or the completion to fit within the limit.")

    def _openai_common(self, body: dict[str, Any], errors: list[dict[str, Any]],
                       default_max: int | None) -> tuple[int, bool, bool, int]:
        max_tokens = _get_int(body, "max_tokens", default_max, errors)
        if "max_completion_tokens" in body and body.get("max_completion_tokens") is not None:
            max_tokens = _get_int(body, "max_completion_tokens", max_tokens, errors)
        stream = _get_bool(body, "stream", False, errors)
        ignore_eos = _get_bool(body, "ignore_eos", False, errors)
        n = _get_int(body, "n", 1, errors) or 1
        options = body.get("stream_options")
        if options is not None and not isinstance(options, dict):
            errors.append(_err("model_type", "stream_options", "Input should be a valid "
                               "dictionary or instance of StreamOptions", options))
        return (max_tokens if max_tokens is not None else -1), stream, ignore_eos, n

    def _not_ready(self) -> web.Response | None:
        if self.state in ("loading", "stopping"):
            return _json_response({"object": "error", "message": "The server is not ready.",
                                   "type": "Service Unavailable", "param": None,
                                   "code": 503}, 503)
        return None

    def _admit(self, body: dict[str, Any], prompts: list[Any], max_tokens: int,
               stream: bool) -> web.StreamResponse | tuple[str, str, int, bool, Any, Any]:
        """Submit a validated OpenAI request: (model, id, created, include_usage, reqs, sink),
        or the 503 the real server answers while it is not ready."""
        busy = self._not_ready()
        if busy is not None:
            return busy
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        reqs, sink = self.submit(prompts, max_tokens, stream, seed=body.get("seed"))
        return (str(body.get("model") or "default"), uuid.uuid4().hex, int(time.time()),
                include_usage, reqs, sink)

    # -- OpenAI completions --------------------------------------------------------------
    async def h_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._body(request)
            errors: list[dict[str, Any]] = []
            if "prompt" not in body:
                errors.append({"type": "missing", "loc": ("body", "prompt"),
                               "msg": "Field required", "input": body})
            prompts = _prompt_list(body.get("prompt")) if "prompt" in body else []
            if prompts is None:
                errors.append(_err("string_type", "prompt", "Input should be a valid string",
                                   body.get("prompt")))
            max_tokens, stream, _ignore_eos, n = self._openai_common(body, errors, 16)
            if errors:
                raise _ValidationError(errors)
            if prompts is None:  # validated above; narrows the type
                raise AssertionError("prompts")
            prompts = [p for p in prompts for _ in range(max(1, n))]
            if max_tokens < 0:
                max_tokens = max(1, self.context_len - max(t for t, _ in prompts))
            self._check_len(prompts, max_tokens)
        except _ValidationError as exc:
            return self._bad_request(request, exc)
        except _ServingError as exc:
            return self._serving_error(str(exc))
        admitted = self._admit(body, prompts, max_tokens, stream)
        if isinstance(admitted, web.StreamResponse):
            return admitted
        model, cid, created, include_usage, reqs, sink = admitted
        if not stream:
            await self._drain(reqs, sink)
            return _json_response({
                "id": cid, "object": "text_completion", "created": created, "model": model,
                "choices": [{"index": r.index, "text": _detok(r.output_ids), "logprobs": None,
                             "finish_reason": r.finish_reason, "matched_stop": r.matched_stop}
                            for r in reqs],
                "usage": self._usage(reqs, details=True),
                "metadata": {"weight_version": "default"}})
        resp = await self._sse_start(request)
        try:
            async for index, ids, done in self._events(reqs, sink):
                if not ids and not done:
                    continue
                await self._sse(resp, {
                    "id": cid, "object": "text_completion", "created": created, "model": model,
                    "choices": [{"index": index, "text": _detok(ids), "logprobs": None,
                                 "finish_reason": reqs[index].finish_reason if done else None,
                                 "matched_stop": reqs[index].matched_stop if done else None}],
                    "usage": None})
            if include_usage:
                usage = self._usage(reqs, details=False)
                await self._sse(resp, {"id": cid, "object": "text_completion",
                                       "created": created, "model": model, "choices": [],
                                       "usage": usage})
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionError, asyncio.CancelledError):
            self.cancel(reqs)
            raise
        return resp

    # -- OpenAI chat completions ---------------------------------------------------------
    async def h_chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._body(request)
            errors: list[dict[str, Any]] = []
            messages = body.get("messages")
            if "messages" not in body:
                errors.append({"type": "missing", "loc": ("body", "messages"),
                               "msg": "Field required", "input": body})
            elif not isinstance(messages, list):
                errors.append(_err("list_type", "messages", "Input should be a valid list",
                                   messages))
            max_tokens, stream, ignore_eos, n = self._openai_common(body, errors, None)
            if errors:
                raise _ValidationError(errors)
            if not isinstance(messages, list):  # validated above; narrows the type
                raise AssertionError("messages")
            prompts = [_chat_prompt(messages)] * max(1, n)
            eos_at: int | None = None
            if max_tokens < 0:
                max_tokens = max(1, self.context_len - prompts[0][0])
                if not ignore_eos:  # no limit: the model "samples EOS" after 64-511 tokens
                    eos_at = 64 + int(hashlib.sha256(prompts[0][1].encode()).hexdigest(), 16) % 448
                    max_tokens = min(max_tokens, eos_at)
            self._check_len(prompts, max_tokens)
        except _ValidationError as exc:
            return self._bad_request(request, exc)
        except _ServingError as exc:
            return self._serving_error(str(exc))
        admitted = self._admit(body, prompts, max_tokens, stream)
        if isinstance(admitted, web.StreamResponse):
            return admitted
        model, cid, created, include_usage, reqs, sink = admitted
        if eos_at is not None and eos_at == max_tokens:
            for req in reqs:
                req.finish_reason = "stop"
                req.matched_stop = int(self.model_config.get("eos_token_id") or 2) if not \
                    isinstance(self.model_config.get("eos_token_id"), list) else int(
                    self.model_config["eos_token_id"][0])
        if not stream:
            await self._drain(reqs, sink)
            return _json_response({
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": r.index, "message": {
                    "role": "assistant", "content": _detok(r.output_ids),
                    "reasoning_content": None, "tool_calls": None},
                    "logprobs": None, "finish_reason": r.finish_reason,
                    "matched_stop": r.matched_stop} for r in reqs],
                "usage": self._usage(reqs, details=True),
                "metadata": {"weight_version": "default"}})
        resp = await self._sse_start(request)

        def chunk(index: int, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return {"id": cid, "object": "chat.completion.chunk", "created": created,
                    "model": model, "choices": [{
                        "index": index, "delta": delta, "logprobs": None, "finish_reason": finish,
                        "matched_stop": reqs[index].matched_stop if finish else None}]}
        try:
            started: set[int] = set()
            async for index, ids, done in self._events(reqs, sink):
                if index not in started:
                    started.add(index)
                    await self._sse(resp, chunk(index, {"reasoning_content": None,
                                                        "role": "assistant", "content": ""},
                                                None))
                text = _detok(ids)
                if text:
                    await self._sse(resp, chunk(index, {"reasoning_content": None,
                                                        "content": text}, None))
                if done:
                    await self._sse(resp, chunk(index, {"reasoning_content": None},
                                                reqs[index].finish_reason))
            if include_usage:
                await self._sse(resp, {"id": cid, "object": "chat.completion.chunk",
                                       "created": created, "model": model, "choices": [],
                                       "usage": self._usage(reqs, details=True)})
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionError, asyncio.CancelledError):
            self.cancel(reqs)
            raise
        return resp

    @staticmethod
    def _usage(reqs: list[_Req], details: bool) -> dict[str, Any]:
        prompt = sum(r.prompt_tokens for r in reqs)
        completion = sum(len(r.output_ids) for r in reqs)
        usage: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                                 "completion_tokens": completion}
        if details:
            usage["prompt_tokens_details"] = None
        usage["reasoning_tokens"] = 0
        return usage

    # -- native /generate ----------------------------------------------------------------
    async def h_generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._body(request)
        except _ValidationError as exc:
            return _json_response({"error": {"message": repr(exc.errors)}}, 400)
        text = body.get("text")
        input_ids = body.get("input_ids")
        prompts = _prompt_list(text if text is not None else input_ids)
        params = body.get("sampling_params") or {}
        errors: list[dict[str, Any]] = []
        if not isinstance(params, dict):
            params = {}
            errors.append(_err("dict_type", "sampling_params", "Input should be a valid "
                               "dictionary", body.get("sampling_params")))
        max_new = _get_int(params, "max_new_tokens", 128, errors)
        stream = _get_bool(body, "stream", False, errors)
        if prompts is None:
            return _json_response({"error": {"message": "Either text or input_ids should be "
                                                        "provided."}}, 400)
        if errors:
            return _json_response({"error": {"message": repr(errors)}}, 400)
        max_new = 128 if max_new is None else max_new
        for tokens, _ in prompts:
            if tokens + max_new > self.context_len:
                return _json_response({"error": {"message": (
                    f"Requested token count exceeds the model's maximum context length of "
                    f"{self.context_len} tokens. You requested a total of {tokens + max_new} "
                    f"tokens: {tokens} tokens from the input messages and {max_new} tokens "
                    f"for the completion. Please reduce the number of tokens in the input "
                    f"messages or the completion to fit within the limit.")}}, 400)
        busy = self._not_ready()
        if busy is not None:
            return busy
        batch = isinstance(text, list) and not all(isinstance(t, int) for t in text) or (
            isinstance(input_ids, list) and bool(input_ids) and isinstance(input_ids[0], list))
        reqs, sink = self.submit(prompts, max_new, stream, seed=params.get("seed"))
        if not stream:
            await self._drain(reqs, sink)
            results = [self._gen_result(r, final=True, first=False) for r in reqs]
            return _json_response(results if batch else results[0])
        resp = await self._sse_start(request)
        try:
            sent: set[int] = set()
            async for index, ids, done in self._events(reqs, sink):
                req = reqs[index]
                if not ids and not done:
                    continue
                first = index not in sent
                sent.add(index)
                await self._sse(resp, self._gen_result(req, final=done, first=first))
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionError, asyncio.CancelledError):
            self.cancel(reqs)
            raise
        return resp

    def _gen_result(self, req: _Req, final: bool, first: bool) -> dict[str, Any]:
        done_len = len(req.output_ids) if final else None
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": {"type": "length", "length": done_len} if final else None,
            "prompt_tokens": req.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "forward_entry_time": req.forward_entry_ts or req.dispatch_ts,
            "prefill_finished_time": req.prefill_finished_ts or req.dispatch_ts,
            "queue_time": max(0.0, (req.forward_entry_ts or req.dispatch_ts) - req.dispatch_ts),
            "reasoning_tokens": 0,
            "completion_tokens": len(req.output_ids),
            "cached_tokens": req.cached_tokens,
            "cached_tokens_details": ({"device": req.cached_tokens, "host": 0}
                                      if req.cached_tokens else None),
            "dp_rank": None,
        }
        now = time.time()
        if final:
            e2e = (req.finished_at or 0.0) - req.submitted_at
            meta["e2e_latency"] = max(0.0, e2e)
            if self.spec:
                drafts = int(self.args.get("speculative_num_draft_tokens") or 1) - 1
                proposed = req.verify_ct * max(drafts, 0)
                meta.update({
                    "spec_accept_rate": (req.accepted_drafts / proposed) if proposed else 0.0,
                    "spec_accept_length": (len(req.output_ids) / req.verify_ct
                                           if req.verify_ct else 1.0),
                    "spec_num_correct_drafts": req.accepted_drafts,
                    "spec_num_proposed_drafts": proposed,
                    "spec_verify_ct": req.verify_ct,
                    "spec_accepted_drafts": req.accepted_drafts,
                    "spec_proposed_drafts": proposed,
                    "spec_correct_drafts_histogram": list(req.accept_hist),
                    "spec_accept_histogram": list(req.accept_hist),
                })
            decode_time = (req.finished_at or 0.0) - (req.first_token_at or 0.0)
            meta["request_received_ts"] = req.received_ts
            meta["api_server_dispatch_finish_ts"] = req.dispatch_ts
            if req.stream:
                meta["response_sent_to_client_ts"] = now
                meta["request_finished_ts"] = now
            else:
                meta["request_finished_ts"] = now
            meta["decode_throughput"] = ((len(req.output_ids) - 1) / decode_time
                                         if decode_time > 0 else 0.0)
            if not req.stream:
                meta["response_sent_to_client_ts"] = now
        elif first:
            meta["response_sent_to_client_ts"] = now
        return {"text": _detok(req.output_ids), "output_ids": list(req.output_ids),
                "meta_info": meta}

    # -- streaming helpers -----------------------------------------------------------------
    async def _drain(self, reqs: list[_Req], sink: asyncio.Queue[Any]) -> None:
        try:
            async for _ in self._events(reqs, sink):
                pass
        except asyncio.CancelledError:
            self.cancel(reqs)
            raise

    @staticmethod
    async def _events(reqs: list[_Req], sink: asyncio.Queue[tuple[int, list[int], bool]],
                      ) -> AsyncIterator[tuple[int, list[int], bool]]:
        remaining = {r.index for r in reqs}
        while remaining:
            index, ids, done = await sink.get()
            if index not in remaining:
                continue
            if done:
                remaining.discard(index)
            yield index, ids, done

    @staticmethod
    async def _sse_start(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={
            "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        return resp

    @staticmethod
    async def _sse(resp: web.StreamResponse, obj: Any) -> None:
        await resp.write(f"data: {_json_dumps(obj)}\n\n".encode())

    # -- lifecycle -------------------------------------------------------------------------
    async def run(self, sock: socket.socket,
                  schedule: tuple[list[tuple[float, str]], float], listen_early: bool) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        self.loop_task = asyncio.create_task(self.scheduler_loop())
        runner = web.AppRunner(self.build_app(), access_log=None, handle_signals=False,
                               shutdown_timeout=0.25)
        await runner.setup()
        site: web.SockSite | None = None
        if listen_early:
            site = web.SockSite(runner, sock)
            await site.start()
        start = loop.time()
        startup, uvicorn_at = schedule
        try:
            for at, message in startup:
                if await self._sleep_until(start + at * self.time_scale):
                    return await self._shutdown(runner)
                self.log.info(message)
            if await self._sleep_until(start + uvicorn_at * self.time_scale):
                return await self._shutdown(runner)
            if site is None:
                site = web.SockSite(runner, sock)
                await site.start()
            host, port = self.args.get("host") or "127.0.0.1", self.args.get("port")
            self.log.info(f"INFO:     Started server process [{os.getpid()}]")
            self.log.info("INFO:     Waiting for application startup.")
            self.log.info("INFO:     Application startup complete.")
            self.log.info(f"INFO:     Uvicorn running on http://{host}:{port} "
                          "(Press CTRL+C to quit)")
            self.state = "warmup"
            warm_start = loop.time()
            await self.one_token()
            self.log.access(f"INFO:     127.0.0.1:{random.randint(32768, 60999)} - "
                            '"POST /generate HTTP/1.1" 200 OK')
            if await self._sleep_until(warm_start + WARMUP_SECONDS * self.time_scale):
                return await self._shutdown(runner)
            self.state = "ready"
            self.ready_wall = time.time()
            self.log.info("The server is fired up and ready to roll!")
            await self.stop_event.wait()
        except asyncio.CancelledError:
            pass
        return await self._shutdown(runner)

    def _on_signal(self, sig: int) -> None:
        if self.stop_event.is_set():
            return
        name = "SIGTERM" if sig == signal.SIGTERM else "SIGINT"
        self.log.info(f"{name} received. signum=None frame=None. Draining requests and "
                      "shutting down...")
        self.state = "stopping"
        self.stop_event.set()

    async def _sleep_until(self, deadline: float) -> bool:
        """Sleep until the loop time reaches deadline; True when a stop was requested."""
        delay = deadline - asyncio.get_running_loop().time()
        if delay <= 0:
            return self.stop_event.is_set()
        try:
            await asyncio.wait_for(self.stop_event.wait(), timeout=delay)
        except _TIMEOUTS:
            return False
        return True

    async def _shutdown(self, runner: web.AppRunner) -> int:
        self.state = "stopping"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1.0
        while self.reqs and loop.time() < deadline:
            await asyncio.sleep(0.02)
        await runner.cleanup()
        if self.loop_task is not None:
            self.loop_task.cancel()
            try:
                await self.loop_task
            except asyncio.CancelledError:
                pass
        return 0


# ---------------------------------------------------------------------------------------
# startup: argv, model, GPU, host memory, plan
# ---------------------------------------------------------------------------------------
class _StartupError(Exception):
    """Startup failed; the message is what the real server would print."""


def _server_args_line(args: dict[str, Any]) -> str:
    inner = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return f"server_args=ServerArgs({inner})"


def _visible_gpu(args: dict[str, Any]) -> tuple[str, int]:
    names = [n.strip() for n in os.environ.get("LLMOPS_SIM_GPUS", DEFAULT_GPU).split(",")
             if n.strip()] or [DEFAULT_GPU]
    visible_env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible_env is None or not visible_env.strip():
        visible = list(range(len(names)))
    else:
        try:
            visible = [int(v) for v in visible_env.split(",") if v.strip()]
        except ValueError as exc:
            raise _StartupError("RuntimeError: No CUDA GPUs are available") from exc
    if not visible:
        raise _StartupError("RuntimeError: No CUDA GPUs are available")
    base = int(args.get("base_gpu_id") or 0)
    needed = (int(args.get("tp_size") or 1) * int(args.get("pp_size") or 1)
              * int(args.get("dp_size") or 1)) // max(int(args.get("nnodes") or 1), 1)
    needed = max(needed, 1)
    if base + needed > len(visible) or any(v >= len(names) or v < 0 for v in visible):
        raise _StartupError(
            f"RuntimeError: CUDA error: invalid device ordinal (the instance needs {needed} "
            f"GPU(s) from base_gpu_id {base}; visible: {visible_env or 'all'}; simulated "
            f"GPUs: {', '.join(names)})")
    return names[visible[base]], needed


def _host_available_bytes() -> int | None:
    env = os.environ.get("LLMOPS_SIM_HOST_MEM_AVAILABLE_GB")
    if env:
        try:
            return int(float(env) * 1e9)
        except ValueError as exc:
            raise _StartupError(f"invalid LLMOPS_SIM_HOST_MEM_AVAILABLE_GB={env!r}") from exc
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _apply_accept_length(plan: Any) -> Any:
    env = os.environ.get("LLMOPS_SIM_ACCEPT_LENGTH")
    if not env or not _attr(plan, "spec_algorithm"):
        return plan
    try:
        value = float(env)
    except ValueError as exc:
        raise _StartupError(f"invalid LLMOPS_SIM_ACCEPT_LENGTH={env!r}") from exc
    if dataclasses.is_dataclass(plan) and not isinstance(plan, type):
        try:
            return dataclasses.replace(plan, accept_length=value)
        except (TypeError, dataclasses.FrozenInstanceError):
            pass
    try:
        plan.accept_length = value
    except AttributeError:
        pass
    return plan


def _startup_schedule(args: dict[str, Any], plan: Any, traits: dict[str, Any],
                      ) -> tuple[list[tuple[float, str]], float]:
    """Startup log lines with their modelled times, up to the uvicorn start."""
    lines: list[tuple[float, str]] = []
    if os.environ.get("SGLANG_ENABLE_SPEC_V2") is not None and traits.get("spec_v2_env") == \
            "removed":
        lines.append((0.0, "SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always "
                           "runs the V2 worker. Use --disable-overlap-schedule to select the "
                           "non-overlap (synchronous) path."))
    lines.append((0.0, _server_args_line(args)))
    plan_lines = [(float(t), str(m)) for t, m in (_attr(plan, "log_lines") or [])]
    lines += sorted(plan_lines, key=lambda item: item[0])
    last = lines[-1][0]
    if not any("max_total_num_tokens=" in m for _, m in plan_lines):
        lines.append((last, (
            f"max_total_num_tokens={_attr(plan, 'max_total_num_tokens')}, chunked_prefill_size="
            f"{args.get('chunked_prefill_size') or 8192}, max_prefill_tokens="
            f"{args.get('max_prefill_tokens') or 16384}, max_running_requests="
            f"{_attr(plan, 'max_running_requests')}, context_len={_attr(plan, 'context_len')}, "
            f"available_gpu_mem={float(_attr(plan, 'available_gpu_mem_gb') or 0.0):.2f} GB")))
    # readiness = load + HiCache pinning (the plan's lines already carry the pinning times);
    # the warm-up request (WARMUP_SECONDS) runs after the uvicorn start, as recorded
    ready = float(_attr(plan, "load_seconds") or 0.0) + float(_attr(plan, "pin_seconds") or 0.0)
    return lines, max(last, ready - WARMUP_SECONDS)


def _warn_deprecated_flags(argv: list[str], traits: dict[str, Any]) -> None:
    """The parser's warning for a deprecated alias (recorded: bold yellow, no timestamp)."""
    given = {token.split("=", 1)[0] for token in argv if token.startswith("--")}
    for aliases_key, flag_key in (("cuda_graph_bs_deprecated_aliases", "cuda_graph_bs_flag"),
                                  ("mamba_strategy_deprecated_aliases", "mamba_strategy_flag")):
        for alias in traits.get(aliases_key) or []:
            if alias in given and traits.get(flag_key):
                sys.stderr.write(f"\x1b[1;33m'{alias}' is deprecated and will be removed in a "
                                 f"future release. Use '{traits[flag_key]}' instead.\x1b[0m\n")
    sys.stderr.flush()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise _StartupError(
                f"ERROR:    [Errno 98] error while attempting to bind on address "
                f"('{host}', {port}): [errno 98] address already in use") from exc
        raise _StartupError(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on "
                            f"address ('{host}', {port}): {exc.strerror}") from exc
    sock.setblocking(False)
    return sock


def main(argv: list[str] | None = None) -> int:
    """Run the embedded engine with a real SGLang argv; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    release = os.environ.get("LLMOPS_SGLANG_RELEASE", DEFAULT_RELEASE)
    log = _Log()
    try:
        parser = _flags.build_parser(release)
    except Exception as exc:  # unknown release: nothing the real server would print
        sys.stderr.write(f"llmops embedded engine: cannot emulate SGLang {release}: {exc}\n")
        return 2
    try:
        namespace = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage + message on stderr, exit 2 (or 0 for -h)
        return int(exc.code) if isinstance(exc.code, int) else 2
    args = vars(namespace)
    log = _Log(str(args.get("log_level") or "info"))
    traits: dict[str, Any] = load_json("releases.json").get(release, {})
    _warn_deprecated_flags(argv, traits)
    try:
        time_scale = float(os.environ.get("LLMOPS_SIM_TIME_SCALE", "1.0"))
        if time_scale < 0:
            raise ValueError(time_scale)
    except ValueError:
        log.error(f"invalid LLMOPS_SIM_TIME_SCALE={os.environ.get('LLMOPS_SIM_TIME_SCALE')!r}")
        return 1
    try:
        model_path = str(args.get("model_path"))
        try:
            model_config = _perfmodel.load_model_config(model_path)
        except _perfmodel.ModelConfigError as exc:
            raise _StartupError(f"OSError: {exc}") from exc
        gpu_name, _count = _visible_gpu(args)
        try:
            gpu = _perfmodel.find_gpu(gpu_name)
        except _perfmodel.UnknownGpuError as exc:
            raise _StartupError(f"RuntimeError: unknown GPU {gpu_name!r} (LLMOPS_SIM_GPUS): "
                                f"{exc}") from exc
        try:
            plan = _perfmodel.plan_engine(args, model_config, gpu, release,
                                          _host_available_bytes())
        except _perfmodel.EngineStartError as exc:
            log.info(_server_args_line(args))
            log.error("Scheduler hit an exception: Traceback (most recent call last):")
            sys.stderr.write(f"{exc}\n")
            log.error("SIGQUIT received. signum=None, frame=None. It usually means one child "
                      "failed.")
            return 1
        plan = _apply_accept_length(plan)
        sock = _bind(str(args.get("host") or "127.0.0.1"), int(args.get("port") or 30000))
    except _StartupError as exc:
        log.error(str(exc))
        return 1
    try:  # SGLang's scheduler and detokenizer processes (docs/engine-api.md "Processes")
        procs = _engine_procs.EngineProcs.spawn(args, log, time_scale)
    except OSError as exc:
        log.error(f"cannot start the engine's child processes: {exc}")
        sock.close()
        return 1
    engine_holder: dict[str, Engine] = {}

    async def _amain() -> int:
        engine = Engine(args=args, plan=plan, gpu=gpu, gpu_name=gpu_name, release=release,
                        traits=traits, model_config=model_config, time_scale=time_scale,
                        log=log)
        engine_holder["engine"] = engine
        listen_early = os.environ.get("LLMOPS_SIM_LISTEN", "early").lower() != "ready"
        return await procs.supervise(
            engine.run(sock, _startup_schedule(args, plan, traits), listen_early),
            phase=lambda: engine.state, stop=engine.stop_event.set)

    try:
        return asyncio.run(_amain())
    except KeyboardInterrupt:
        return 0
    finally:
        procs.stop()
        sock.close()


if __name__ == "__main__":
    sys.exit(main())
