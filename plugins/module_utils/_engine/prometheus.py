# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The /metrics text: the families, HELP texts, types and labels of the recording
(``metrics.txt``), in its order, values formatted as prometheus_client does. One small function
per group of families; what they report comes from ``metrics``, the scheduler and ``info``."""
from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ansible_collections.llmops.sglang.plugins.module_utils._engine.info import memory_usage, startup_time
from ansible_collections.llmops.sglang.plugins.module_utils._engine.metrics import Histogram

if TYPE_CHECKING:
    from ansible_collections.llmops.sglang.plugins.module_utils._engine.engine import Engine

Labels = list[tuple[str, str]]

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
    ('load_back_tokens_total', 'counter', 'Number of tokens loaded back from host to device.'),
    ('prefetched_tokens_total', 'counter', 'Number of prefetched prompt tokens.'),
    ('backuped_tokens_total', 'counter', 'Number of backuped tokens.'),
    ('num_bootstrap_failed_reqs_total', 'counter', 'Number of bootstrap failed requests.'),
    ('num_transfer_failed_reqs_total', 'counter', 'Number of transfer failed requests.'),
    ('kv_transfer_latency_ms', 'histogram', 'Histogram of KV cache transfer latency in ms.'),
)
_FAMILY_INFO = {name: (kind, help_) for name, kind, help_ in _FAMILIES}

_ROUTING_BINS = (("0", "1"), ("1", "2"), ("2", "3"), ("3", "5"), ("5", "7"), ("7", "10"),
                 ("10", "20"), ("20", "50"), ("50", "100"), ("100", "200"), ("200", "+Inf"))
_ZERO_SWA = ("swa_available_tokens", "swa_evictable_tokens", "swa_used_tokens")
_ZERO_QUEUES = ("num_prefill_bootstrap_queue_reqs", "num_prefill_inflight_queue_reqs",
                "num_decode_prealloc_queue_reqs", "num_decode_transfer_queue_reqs",
                "pending_prealloc_token_usage")
_STREAMING = ("false", "true")


def go_float(value: float) -> str:
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


def labels(pairs: Iterable[tuple[str, str]]) -> str:
    items = sorted(pairs)
    if not items:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in items)
    return "{" + inner + "}"


def histogram_lines(hist: Histogram, name: str, base: Labels) -> list[str]:
    """_sum, the cumulative _bucket lines, then _count (prometheus_client's order)."""
    lines = [f"{name}_sum{labels(base)} {go_float(hist.sum)}"]
    running = 0
    for i, bound in enumerate(hist.buckets):
        running += hist.counts[i]
        lines.append(f"{name}_bucket{labels(base + [('le', go_float(bound))])} "
                     f"{go_float(float(running))}")
    lines.append(f"{name}_bucket{labels(base + [('le', '+Inf')])} {go_float(float(hist.total))}")
    lines.append(f"{name}_count{labels(base)} {go_float(float(hist.total))}")
    return lines


class _Text:
    """The text being written: families with their HELP and TYPE lines; tokenizer metrics carry
    ``base`` labels, scheduler metrics ``sched``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.lines: list[str] = []
        self.base: Labels = [("engine_type", "unified"), ("model_name", engine.config.served_name)]
        self.sched: Labels = self.base + [("moe_ep_rank", "0"), ("pp_rank", "0"), ("tp_rank", "0")]

    def family(self, name: str, samples: list[str]) -> None:
        kind, help_ = _FAMILY_INFO[name]
        self.lines.append(f"# HELP sglang:{name} {help_}")
        self.lines.append(f"# TYPE sglang:{name} {kind}")
        self.lines.extend(samples)

    def sample(self, name: str, extra: Labels, value: float, base: Labels | None = None) -> str:
        return f"sglang:{name}{labels((self.base if base is None else base) + extra)} {go_float(value)}"

    def gauge(self, name: str, value: float, pairs: Labels | None = None) -> None:
        self.family(name, [f"sglang:{name}{labels(self.sched if pairs is None else pairs)} "
                           f"{go_float(value)}"])


def _process_and_startup(out: _Text) -> None:
    cpu = time.process_time()
    out.family("process_cpu_seconds_total", [
        f'sglang:process_cpu_seconds_total{{component="detokenizer"}} {go_float(cpu / 3)}',
        f'sglang:process_cpu_seconds_total{{component="tokenizer"}} {go_float(cpu * 2 / 3)}'])
    startup = startup_time(out.engine)
    out.family("startup_time_seconds", [
        out.sample("startup_time_seconds", [("phase", k)], startup[k])
        for k in ("load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e")])
    out.family("startup_cuda_graph_time_seconds", [
        out.sample("startup_cuda_graph_time_seconds", [("phase", k)], v)
        for k, v in startup["cuda_graph"].items()])


def _http(out: _Text) -> None:
    m = out.engine.metrics
    out.family("http_requests_total", [
        out.sample("http_requests_total", [("endpoint", e), ("method", k)], float(n), base=[])
        for (e, k), n in m.http_requests.items()])
    out.family("http_responses_total", [
        out.sample("http_responses_total", [("endpoint", e), ("method", k), ("status_code", s)],
                   float(n), base=[])
        for (e, k, s), n in m.http_responses.items()])


def _request_counters(out: _Text) -> None:
    m = out.engine.metrics
    for name in ("prompt_tokens_total", "generation_tokens_total"):
        out.family(name, [out.sample(name, [("is_streaming", s)], m.counters.get((name, s), 0.0))
                          for s in _STREAMING if (name, s) in m.counters])
    if out.engine.config.spec:
        out.family("spec_verify_calls_total", [
            out.sample("spec_verify_calls_total", [], out.engine.scheduler.stats.verify_steps)])
    out.family("num_requests_total", [
        out.sample("num_requests_total", [("is_streaming", s)],
                   m.counters.get(("num_requests_total", s), 0.0))
        for s in _STREAMING if ("num_requests_total", s) in m.counters])
    sources = [("device", m.cached_device)]
    if m.hicache_total:
        sources.append(("host", m.cached_host))
    store = out.engine.scheduler.cache.storage if out.engine.scheduler.cache is not None else None
    if store is not None:  # the backend's class names the source (storage_HiCacheFile)
        sources.append((f"storage_{store.backend_class}", m.cached_storage))
    out.family("cached_tokens_total", [
        out.sample("cached_tokens_total", [("cache_source", source)], value)
        for source, value in sources])
    out.family("routing_keys_active", ["sglang:routing_keys_active 0.0"])
    out.family("http_requests_active", [
        out.sample("http_requests_active", [("endpoint", e), ("method", k)], float(n), base=[])
        for (e, k), n in m.http_active.items()])


def _queueing(out: _Text) -> None:
    m = out.engine.metrics
    stage_lines: list[str] = []
    for stage, hist in m.hist_stage.items():
        stage_lines += histogram_lines(hist, "sglang:per_stage_req_latency_seconds",
                                       out.sched + [("stage", stage)])
    out.family("per_stage_req_latency_seconds", stage_lines)
    out.family("queue_time_seconds", histogram_lines(m.hist_queue, "sglang:queue_time_seconds", out.sched))


def _memory(out: _Text) -> None:
    config = out.engine.config
    memory = memory_usage(out.engine)
    page_size = float(config.args.get("page_size") or 1)
    out.gauge("max_total_num_tokens", config.max_total_tokens)
    out.gauge("weight_memory_usage_gb", memory["weight"])
    out.gauge("kv_cache_memory_usage_gb", memory["kvcache"])
    out.family("graph_memory_usage_gb", [
        out.sample("graph_memory_usage_gb", [("phase", k)], v, base=out.sched)
        for k, v in memory["graph"].items()])
    out.gauge("page_size", page_size)
    out.gauge("num_pages", config.max_total_tokens / page_size)
    out.gauge("context_len", config.context_len)
    out.gauge("startup_available_gpu_memory_gb", memory["startup_available"])


def _load(out: _Text) -> None:
    """Running and queued requests, throughput, cache hits, token and Mamba usage."""
    engine = out.engine
    config, scheduler, m = engine.config, engine.scheduler, engine.metrics
    running, used = scheduler.num_running(), scheduler.used_tokens()
    out.gauge("num_running_reqs", running)
    out.gauge("num_queue_reqs", scheduler.num_queued())
    out.gauge("num_grammar_queue_reqs", 0.0)
    out.gauge("gen_throughput", scheduler.stats.last_gen_throughput if running else 0.0)
    out.gauge("cache_hit_rate", m.cache_hit_rate)
    out.gauge("decode_sum_seq_lens", used)
    out.gauge("token_usage", scheduler.token_usage())
    out.gauge("full_token_usage", scheduler.token_usage() if config.hybrid else 0.0)
    out.gauge("swa_token_usage", 0.0)
    out.gauge("mamba_usage", running / config.mamba_slots if config.mamba_slots else 0.0)


def _pools(out: _Text) -> None:
    """KV, SWA and Mamba slots: available, evictable, used."""
    engine = out.engine
    config, scheduler = engine.config, engine.scheduler
    running, used = scheduler.num_running(), scheduler.used_tokens()
    out.gauge("num_used_tokens", used)
    out.gauge("kv_available_tokens", max(0, config.max_total_tokens - used))
    cache = scheduler.cache
    out.gauge("kv_evictable_tokens", float(cache.evictable_device_tokens()) if cache else 0.0)
    out.gauge("kv_used_tokens", used)
    for name in _ZERO_SWA:
        out.gauge(name, 0.0)
    out.gauge("mamba_available_tokens", max(0, config.mamba_slots - running * 3))
    out.gauge("mamba_evictable_tokens", 0.0)
    out.gauge("mamba_used_tokens", running * 3 if config.hybrid else 0)


def _speculative(out: _Text) -> None:
    config, scheduler = out.engine.config, out.engine.scheduler
    spec, args = config.spec, config.args
    out.gauge("spec_accept_length", scheduler.avg_accept_length() if spec else 0.0)
    out.gauge("spec_accept_rate", scheduler.accept_rate())
    out.gauge("spec_cap_length", 0.0)
    out.gauge("spec_block_accept_length", 0.0)
    out.gauge("spec_num_steps", float(args.get("speculative_num_steps") or 0) if spec else 0.0)
    out.gauge("spec_num_draft_tokens",
              float(args.get("speculative_num_draft_tokens") or 0) if spec else 0.0)


def _batches(out: _Text) -> None:
    """Disaggregation queues (always empty), utilization, CUDA graphs, the HiCache host pool."""
    config, m = out.engine.config, out.engine.metrics
    running = out.engine.scheduler.num_running()
    pd = out.engine.disagg.gauges() if out.engine.disagg is not None else {}  # disagg.py
    for name in _ZERO_QUEUES:
        out.gauge(name, pd.get(name, 0.0))
    out.gauge("utilization", min(1.0, running / config.max_running) if config.max_running else 0.0)
    out.gauge("fwd_occupancy", float("nan"))
    out.gauge("new_token_ratio", 0.7 if running else 0.0)
    out.gauge("is_cuda_graph", 1.0 if 0 < running <= config.graph_max_bs else 0.0)
    _pd_counters(out)
    if m.hicache_total:
        cache = out.engine.scheduler.cache
        out.gauge("hicache_host_used_tokens", cache.host_used if cache else 0)
        out.gauge("hicache_host_total_tokens", m.hicache_total)
        if m.load_back_total:  # declared at the first load-back, as the labelled counter is
            out.family("load_back_tokens_total", [
                out.sample("load_back_tokens_total", [("pool", "kv")], m.load_back_total,
                           base=out.sched)])
        store = cache.storage if cache else None
        if store is not None:  # the storage tier's own collector (its labels, not the scheduler's)
            tier = [("storage_backend", store.backend_name), ("tp_rank", "0"), ("dp_rank", "0"), ("pp_rank", "0"),
                    ("pp_size", "1"), ("attn_cp_rank", "0"), ("attn_cp_size", "1")]
            out.family("prefetched_tokens_total", [
                out.sample("prefetched_tokens_total", [], store.prefetched_tokens, base=tier)])
            out.family("backuped_tokens_total", [
                out.sample("backuped_tokens_total", [], store.backuped_tokens, base=tier)])


def _pd_counters(out: _Text) -> None:
    """Prefill/decode disaggregation's failure counters (declared on a PD instance only)."""
    pd = out.engine.disagg
    if pd is None:
        return
    out.family("num_bootstrap_failed_reqs_total", [
        out.sample("num_bootstrap_failed_reqs_total", [], pd.counters.bootstrap_failed)])
    out.family("num_transfer_failed_reqs_total", [
        out.sample("num_transfer_failed_reqs_total", [], pd.counters.transfer_failed)])
    if pd.mode == "prefill":  # observed where the KV is sent from, in modelled ms
        out.family("kv_transfer_latency_ms", histogram_lines(pd.counters.transfer_latency_ms,
                                                             "sglang:kv_transfer_latency_ms", out.sched))


def _routing_and_passes(out: _Text) -> None:
    m = out.engine.metrics
    out.gauge("num_unique_running_routing_keys", 0.0)
    for name in ("routing_key_running_req_count", "routing_key_all_req_count"):
        out.family(name, [out.sample(name, [("gt", gt), ("le", le)], 0.0, base=out.sched)
                          for gt, le in _ROUTING_BINS])
    pid_labels = out.sched + [("pid", str(os.getpid()))]
    out.gauge("num_retracted_reqs", float(out.engine.scheduler.stats.retracted_window), pid_labels)
    out.gauge("num_paused_reqs", 0.0, pid_labels)
    out.family("cuda_graph_passes_total", [
        out.sample("cuda_graph_passes_total", [("mode", mode)], n, base=out.sched)
        for mode, n in (("prefill_cuda_graph", m.steps_prefill),
                        ("decode_cuda_graph", m.steps_decode))])
    out.family("realtime_tokens_total", [
        out.sample("realtime_tokens_total", [("mode", mode)], n, base=out.sched)
        for mode, n in m.realtime.items() if n or mode != "prefill_cache"])


def _request_histograms(out: _Text) -> None:
    m = out.engine.metrics
    for name in ("time_to_first_token_seconds", "e2e_request_latency_seconds"):
        lines: list[str] = []
        for stream in _STREAMING:
            hist = m.hist_stream.get((name, stream))
            if hist is not None:
                lines += histogram_lines(hist, f"sglang:{name}", out.base + [("is_streaming", stream)])
        out.family(name, lines)
    for name in ("prompt_tokens_histogram", "uncached_prompt_tokens_histogram",
                 "generation_tokens_histogram", "inter_token_latency_seconds"):
        out.family(name, histogram_lines(m.hist_plain[name], f"sglang:{name}", out.base))


_GROUPS = (_process_and_startup, _http, _request_counters, _queueing, _memory, _load, _pools,
           _speculative, _batches, _routing_and_passes, _request_histograms)


def render_metrics(engine: Engine) -> str:
    """The whole /metrics text, in the recording's order of families."""
    out = _Text(engine)
    for group in _GROUPS:
        group(out)
    return "\n".join(out.lines) + "\n"
