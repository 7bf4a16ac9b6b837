"""The time base of a time-scaled engine (module_utils/_sweep/timebase.py): model time and the
measurability of its latencies."""
from __future__ import annotations

from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw


def test_to_model_time_converts_rates_and_times_of_a_scaled_engine() -> None:
    from ansible_collections.llmops.sglang.plugins.module_utils._sweep import to_model_time

    points = [{"output_tok_s": 5000.0, "steady_output_tok_s": 6000.0, "req_s": 10.0, "duration_s": 2.0,
               "steady_window_s": 1.0, "ttft_ms": {"p50": 2.0, "p99": None}, "e2e_s": {"p50": 0.5}}]
    records = [{"ttft_ms": 2.0, "e2e_s": 0.5, "start_s": 1.0, "end_s": 1.5, "itl_ms_mean": None}]
    to_model_time(points, records, 0.01)
    p = points[0]
    assert p["output_tok_s"] == 50.0 and p["steady_output_tok_s"] == 60.0 and p["req_s"] == 0.1
    assert p["duration_s"] == 200.0 and p["ttft_ms"] == {"p50": 200.0, "p99": None} and p["e2e_s"]["p50"] == 50.0
    assert p["wall"]["output_tok_s"] == 5000.0 and p["wall"]["duration_s"] == 2.0
    assert records[0]["end_s"] == 150.0 and records[0]["itl_ms_mean"] is None
    untouched = [{"output_tok_s": 1.0}]
    to_model_time(untouched, [], 1.0)
    assert untouched == [{"output_tok_s": 1.0}]


# ------------------------------------------------------------------------------------------------
# Measurability of time-scaled latencies
# ------------------------------------------------------------------------------------------------


def _scaled_point(**server: Any) -> dict[str, Any]:
    """A C=4 level of the 27B demo engine at time scale 0.02, converted to modelled time."""
    return {
        "concurrency": 4,
        "client": {"loop_lag_ms_p99": 2.0, "cpu_util": 0.3},
        "ttft_ms": {"mean": 170.0, "p50": 165.0, "p90": 190.0, "p99": 199.0},
        "itl_ms": {"mean": 7.8, "p50": 0.3, "p90": 1.0, "p99": 40.0},  # bursts: gaps of ~0 and of steps
        "tpot_ms": {"mean": 7.9, "p50": 7.9, "p90": 8.0, "p99": 8.1},
        "e2e_s": {"mean": 8.1, "p50": 8.1, "p90": 8.2, "p99": 8.3},
        "server": {
            "requests": 8, "first_tokens": 8, "itl_tokens": 8184,
            "ttft_ms_mean": 162.7, "itl_ms_mean": 7.71, "e2e_s_mean": 8.05,
            "ttft_ms_range": {"p50": [100.0, 200.0], "p90": [100.0, 200.0], "p99": [100.0, 200.0]},
            "itl_ms_range": {"p50": [6.0, 8.0], "p90": [8.0, 10.0], "p99": [8.0, 10.0]},
            "e2e_s_range": {"p50": [8.0, 10.0], "p90": [8.0, 10.0], "p99": [8.0, 10.0]},
            **server,
        },
    }


def test_check_latency_against_the_server_model() -> None:
    point = _scaled_point()
    sw.check_latency(point, 0.02)
    # ITL mean agrees (7.8 vs 7.71), its percentiles are event-loop bursts; the rest agrees
    assert point["latency_unmeasurable"] == {"itl_ms": ["p50", "p90", "p99"]}
    assert point["latency_measurable"] is False
    check = point["latency_check"]
    assert check["method"] == {k: "server_metrics" for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_s")}
    reason = check["reasons"]["itl_ms"]
    assert "p50 0.3 ms outside the model's 6-8 ms" in reason
    assert "time scale 0.02" in reason and "0.154 ms of wall time" in reason and "2 ms" in reason
    # a mean off by more than 25% (TTFT inflated by magnified client overhead): all its statistics
    point = _scaled_point(ttft_ms_mean=78.0, ttft_ms_range={"p50": [0.0, 100.0], "p99": [100.0, 200.0]})
    sw.check_latency(point, 0.02)
    assert point["latency_unmeasurable"]["ttft_ms"] == ["mean", "p50", "p90", "p99"]
    assert "mean 170 ms vs the model's 78 ms" in point["latency_check"]["reasons"]["ttft_ms"]
    # everything within 25%: measurable
    point = _scaled_point()
    point["itl_ms"] = {"mean": 7.5, "p50": 7.0, "p90": 9.0, "p99": 12.0}
    sw.check_latency(point, 0.1)
    assert point["latency_measurable"] is True and point["latency_unmeasurable"] == {}


def test_check_latency_without_server_histograms() -> None:
    point = _scaled_point()
    point["server"] = None
    sw.check_latency(point, 0.02)
    # wall-clock p50s: TTFT 3.3 ms and ITL 0.006 ms are under 10x the 2 ms jitter; e2e 162 ms is not
    assert set(point["latency_unmeasurable"]) == {"ttft_ms", "itl_ms"}
    assert point["latency_check"]["method"]["itl_ms"] == "client_jitter"
    assert "no server histogram" in point["latency_check"]["reasons"]["ttft_ms"]


def test_to_model_time_converts_drift_and_warmup() -> None:
    points = [{"output_tok_s": 5000.0, "duration_s": 2.0,
               "drift": {"first_half_tok_s": 5000.0, "second_half_tok_s": 4000.0, "ratio": 0.8},
               "level_warmup": {"seconds": 0.1, "requests": 4},
               "server": {"ttft_ms_mean": 80.0}}]
    sw.to_model_time(points, [], 0.02)
    p = points[0]
    assert p["drift"]["first_half_tok_s"] == 100.0 and p["drift"]["second_half_tok_s"] == 80.0
    assert p["drift"]["ratio"] == 0.8 and p["wall"]["drift"]["first_half_tok_s"] == 5000.0
    assert p["level_warmup"]["seconds"] == 5.0 and p["wall"]["level_warmup_seconds"] == 0.1
    assert p["server"] == {"ttft_ms_mean": 80.0}  # already modelled by the engine
