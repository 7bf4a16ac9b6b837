"""One PD instance's /metrics text as SGLang 0.5.17 serves it, for the tests of what reads it
(servermetrics, the guard, the sweep's sides): the failure counters a PD instance declares, the
queue gauges asked for, and the prefill's ``kv_transfer_latency_ms`` histogram with the release's
buckets (the embedded engine's ``KV_LATENCY_BUCKETS_MS``)."""
from __future__ import annotations

from collections.abc import Sequence

from ansible_collections.llmops.sglang.plugins.module_utils._engine.disagg import KV_LATENCY_BUCKETS_MS

GAUGES = {"running": "num_running_reqs", "prefill_inflight": "num_prefill_inflight_queue_reqs",
          "decode_waiting": "num_decode_transfer_queue_reqs"}


def pd_metrics(*, requests: int | None = None, bootstrap_failed: int = 0, transfer_failed: int = 0,
               latencies_ms: Sequence[float] | None = None, **gauges: int) -> str:
    """``requests``: ``num_requests_total``; ``latencies_ms``: the KV hand-overs observed so far
    (None: no histogram, as a decode); ``gauges``: keys of GAUGES with their value."""
    lines = []
    if requests is not None:
        lines += ["# TYPE sglang:num_requests_total counter", f'sglang:num_requests_total{{is_streaming="false"}} {requests}.0']
    for key, value in gauges.items():
        lines += [f"# TYPE sglang:{GAUGES[key]} gauge", f'sglang:{GAUGES[key]}{{engine_type="unified"}} {value}.0']
    lines += ["# TYPE sglang:num_bootstrap_failed_reqs_total counter", f"sglang:num_bootstrap_failed_reqs_total {bootstrap_failed}.0",
              "# TYPE sglang:num_transfer_failed_reqs_total counter", f"sglang:num_transfer_failed_reqs_total {transfer_failed}.0"]
    if latencies_ms is not None:
        seen = list(latencies_ms)
        lines += ["# TYPE sglang:kv_transfer_latency_ms histogram",
                  f'sglang:kv_transfer_latency_ms_sum{{tp_rank="0"}} {float(sum(seen))}']
        lines += [f'sglang:kv_transfer_latency_ms_bucket{{le="{bound}",tp_rank="0"}} {float(sum(v <= bound for v in seen))}'
                  for bound in KV_LATENCY_BUCKETS_MS]
        lines += [f'sglang:kv_transfer_latency_ms_bucket{{le="+Inf",tp_rank="0"}} {float(len(seen))}',
                  f'sglang:kv_transfer_latency_ms_count{{tp_rank="0"}} {float(len(seen))}']
    return "\n".join(lines) + "\n"
