# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What /metrics counts: HTTP requests and responses, tokens and requests (by streaming or not),
the latency and length histograms with the recording's buckets, cached tokens, forward passes.
Rendering the text is ``prometheus``'s job."""
from __future__ import annotations

from dataclasses import dataclass, field

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0,
                100.0, 200.0, 400.0)
E2E_BUCKETS = TTFT_BUCKETS + (600.0, 1200.0, 1800.0, 2400.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06,
               0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
QUEUE_BUCKETS = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0,
                 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0,
                 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0, 1600.0,
                 1800.0, 2000.0, 2500.0, 3000.0)
STAGE_BUCKETS = tuple(0.001 * 1.62 ** i for i in range(30))
TOKEN_BUCKETS = (100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0,
                 6000.0, 7000.0, 8000.0, 9000.0, 10000.0, 12500.0, 15000.0, 17500.0, 20000.0,
                 22500.0, 25000.0, 27500.0, 30000.0, 35000.0, 40000.0, 60000.0, 80000.0,
                 100000.0, 200000.0, 300000.0, 400000.0, 600000.0, 800000.0, 1e6, 1.1e6)
STREAM_HISTOGRAMS = {"time_to_first_token_seconds": TTFT_BUCKETS,
                     "e2e_request_latency_seconds": E2E_BUCKETS}
REQUEST_COUNTERS = ("prompt_tokens_total", "generation_tokens_total", "num_requests_total")


class Histogram:
    """A Prometheus histogram with fixed buckets (counts per bucket; cumulative on render)."""

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


def _plain_histograms() -> dict[str, Histogram]:
    return {"inter_token_latency_seconds": Histogram(ITL_BUCKETS),
            "prompt_tokens_histogram": Histogram(TOKEN_BUCKETS),
            "uncached_prompt_tokens_histogram": Histogram(TOKEN_BUCKETS),
            "generation_tokens_histogram": Histogram(TOKEN_BUCKETS)}


def _stage_histograms() -> dict[str, Histogram]:
    return {"request_process": Histogram(STAGE_BUCKETS), "prefill_forward": Histogram(STAGE_BUCKETS)}


@dataclass
class EngineMetrics:
    """The counters and histograms of one engine; ``hicache_total``: host KV pool tokens (0
    without HiCache). Cached prompt tokens by source (device, host, storage) are counted when a request
    finishes; ``cache_hit_rate`` is the last prefill batch's; ``load_back_total`` the host-to-
    device tokens so far (the prefix cache's count)."""

    hicache_total: int = 0
    cached_device: int = 0
    cached_host: int = 0
    cached_storage: int = 0
    cache_hit_rate: float = 0.0
    load_back_total: int = 0
    steps_prefill: int = 0
    steps_decode: int = 0
    counters: dict[tuple[str, str], float] = field(default_factory=dict)
    http_requests: dict[tuple[str, str], int] = field(default_factory=dict)
    http_active: dict[tuple[str, str], int] = field(default_factory=dict)
    http_responses: dict[tuple[str, str, str], int] = field(default_factory=dict)
    hist_stream: dict[tuple[str, str], Histogram] = field(default_factory=dict)
    hist_plain: dict[str, Histogram] = field(default_factory=_plain_histograms)
    hist_queue: Histogram = field(default_factory=lambda: Histogram(QUEUE_BUCKETS))
    hist_stage: dict[str, Histogram] = field(default_factory=_stage_histograms)
    realtime: dict[str, int] = field(
        default_factory=lambda: {"prefill_compute": 0, "prefill_cache": 0, "decode": 0})

    # -- HTTP ----------------------------------------------------------------------------
    def http_started(self, endpoint: str, method: str) -> None:
        key = (endpoint, method)
        self.http_requests[key] = self.http_requests.get(key, 0) + 1
        self.http_active[key] = self.http_active.get(key, 0) + 1

    def http_finished(self, endpoint: str, method: str, status: int) -> None:
        self.http_active[(endpoint, method)] -= 1
        key = (endpoint, method, str(status))
        self.http_responses[key] = self.http_responses.get(key, 0) + 1

    # -- requests ------------------------------------------------------------------------
    def stream_histogram(self, name: str, stream: bool) -> Histogram:
        key = (name, "true" if stream else "false")
        if key not in self.hist_stream:
            self.hist_stream[key] = Histogram(STREAM_HISTOGRAMS[name])
        return self.hist_stream[key]

    def observe_first_token(self, stream: bool, ttft: float) -> None:
        self.stream_histogram("time_to_first_token_seconds", stream).observe(ttft)

    def observe_inter_token(self, gap: float, tokens: int) -> None:
        for _ in range(tokens):
            self.hist_plain["inter_token_latency_seconds"].observe(gap)

    def observe_prefill(self, queue_time: float, forward: float) -> None:
        """A request that entered a prefill batch: its queueing time and the batch's forward."""
        self.hist_queue.observe(queue_time)
        self.hist_stage["request_process"].observe(0.0005)
        self.hist_stage["prefill_forward"].observe(forward)

    def _count(self, name: str, stream: str, value: float) -> None:
        self.counters[(name, stream)] = self.counters.get((name, stream), 0.0) + value

    @property
    def cached_total(self) -> int:
        return self.cached_device + self.cached_host + self.cached_storage

    def observe_finished(self, stream: bool, prompt: int, cached_device: int, cached_host: int,
                         generated: int, e2e: float, cached_storage: int = 0, received: int = 0) -> None:
        """A request that finished: token counters, e2e latency, length histograms. ``received``:
        prompt tokens whose KV came from a prefill instance (PD decode): not computed here."""
        cached = cached_device + cached_host + cached_storage
        label = "true" if stream else "false"
        self._count("prompt_tokens_total", label, prompt)
        self._count("generation_tokens_total", label, generated)
        self._count("num_requests_total", label, 1)
        self.stream_histogram("e2e_request_latency_seconds", stream).observe(e2e)
        self.hist_plain["prompt_tokens_histogram"].observe(prompt)
        self.hist_plain["uncached_prompt_tokens_histogram"].observe(prompt - cached - received)
        self.hist_plain["generation_tokens_histogram"].observe(generated)
        self.cached_device += cached_device
        self.cached_host += cached_host
        self.cached_storage += cached_storage
        self.realtime["prefill_compute"] += prompt - cached - received
        self.realtime["prefill_cache"] += cached

    def prompt_tokens(self) -> float:
        return sum(self.counters.get(("prompt_tokens_total", s), 0.0) for s in ("true", "false"))
