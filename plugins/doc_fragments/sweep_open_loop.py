# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Doc fragment llmops.sglang.sweep_open_loop: the open-loop, goodput, SLO search and repeats
options of throughput_sweep (plugins/module_utils/_sweep/openloop.py checks them)."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  mode:
    description:
      - C(concurrency) (closed loop, the default) runs O(concurrency) clients that each send their next
        request when the last one ends. C(rate) (open loop) sends requests at O(rates) whatever the
        server answers, as services see them (SGLang C(bench_serving --request-rate), vLLM C(bench serve)).
    type: str
    choices: [concurrency, rate]
    default: concurrency
  rates:
    description:
      - Request rates (requests/s) of the levels in mode C(rate), sorted. With O(search), the first one
        is where the search starts.
      - On the time-scaled embedded engine, rates, O(level_duration_s) and O(slo) are in the time it
        models (like the results).
    type: list
    elements: float
  arrival:
    description:
      - Arrival process of mode C(rate), seeded by O(seed), C(poisson) (exponential gaps, mean
        1/rate) or C(constant) (every 1/rate). Sends are scheduled against absolute times, so a late
        send never delays the ones after it.
    type: str
    choices: [poisson, constant]
    default: poisson
  level_duration_s:
    description:
      - Seconds of arrivals per rate level (the level then drains its requests in flight). Exclusive with
        O(requests) (a request count per level); 60 when neither is set in mode C(rate).
    type: float
  seed:
    description:
      - Seed of every random choice, the workload's (request i is the same in every run and client
        process) and the arrival schedules of mode C(rate) (each level derives its own from it, the
        same on every run and in every repeat). Default 42; recorded in the result's options.
    type: int
  max_inflight:
    description:
      - Mode C(rate), the most requests in flight at once (C(--max-concurrency) of bench_serving). A
        request due while that many are in flight waits for a slot; that client queueing delay is
        reported apart (C(queue_delay_ms), C(queued_requests)) and is in neither TTFT nor E2E.
        Default O(max_concurrency).
    type: int
  slo:
    description:
      - Service-level objective, terms C(<metric>_<stat>_ms) with metric C(ttft), C(itl), C(tpot) or C(e2e) and
        stat C(p50), C(p90), C(p95), C(p99) or C(mean), for example C(ttft_p99_ms) 500 and C(itl_p50_ms) 50 (see EXAMPLES).
      - Each level then reports C(goodput_req_s) and C(goodput_tok_s) (requests that succeeded and met every
        term on their own, per second), C(slo_attainment), C(slo_met) (the level's statistic of each term
        within its threshold, failed requests counting as infinitely late) and C(slo_terms). See
        docs/sweep.md "Goodput and SLOs".
    type: dict
  search:
    description:
      - Find the highest load that meets O(slo) instead of measuring every level. From the first rate (mode
        C(rate)) or concurrency level, double while the level meets the SLO (halve while it does not), then
        bisect until the highest passing and lowest failing loads are within O(search_tolerance). The answer
        is the fact's C(slo_limit).
    type: bool
    default: false
  search_tolerance:
    description: Relative gap between the highest passing and lowest failing load at which the search stops (0.05 = 5%).
    type: float
    default: 0.05
  repeats:
    description:
      - Measure each level this many times. The level's point is its first run, with C(repeats) (the mean and
        the 95% Student t interval of throughput and latency percentiles over the runs, and C(disagree) when
        the interval of a throughput is wider than 5% of its mean). With O(slo), C(slo_met) only when every
        run met it.
    type: int
    default: 1
"""
