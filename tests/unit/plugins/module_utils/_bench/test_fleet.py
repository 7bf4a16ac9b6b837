"""The fleet views (_fleet) and their rendering (_report): per worker, fleet total merged from
the raw per-request records, through the router.

The sweeps here are built from records whose arithmetic is known exactly (there is no recording
of a fleet's records: the integration test in tests/integration/test_router.py runs the real
router in front of two embedded engines end to end)."""
from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._bench import fleet as _fleet
from ansible_collections.llmops.sglang.plugins.module_utils._bench.stats import percentile


def rec(c: int, start: float, end: float, tokens: int = 10, ttft: float = 100.0, ok: bool = True,
        kind: str | None = None, itl: float | None = 5.0) -> dict[str, Any]:
    return {"level": 0, "concurrency": c, "index": 0, "ok": ok, "error_kind": kind, "http_status": 200,
            "output_tokens": tokens, "finish_reason": "length", "ttft_ms": ttft if ok else None,
            "e2e_s": round(end - start, 4), "itl_ms_mean": itl, "start_s": start, "end_s": end}


def sweep(records: list[dict[str, Any]], t0: float | None = 1000.0, url: str = "http://w",
          time_base: str = "wall", scale: float | None = None,
          unmeasurable: dict[int, dict[str, list[str]]] | None = None) -> dict[str, Any]:
    levels = sorted({r["concurrency"] for r in records})
    points = [{"concurrency": c, "requests": sum(1 for r in records if r["concurrency"] == c),
               "latency_unmeasurable": (unmeasurable or {}).get(c, {})} for c in levels]
    return {"url": url, "time_base": time_base, "server": {"time_scale": scale}, "points": points,
            "records": records, "records_t0_unix": t0}


def item(sw: dict[str, Any], host: str = "h1", instance: str = "gpu0", role: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"host": host, "instance": instance, "profile": "baseline"}
    if role:
        meta["role"] = role
    return {"meta": meta, "sweep": sw}


def test_counted_tokens_as_the_sweep_counts_them() -> None:
    assert _fleet.counted_tokens(rec(1, 0, 1, tokens=7)) == 7
    assert _fleet.counted_tokens(rec(1, 0, 1, tokens=3, ok=False, kind="short")) == 3  # completed, short
    assert _fleet.counted_tokens(rec(1, 0, 1, tokens=3, ok=False, kind="connection")) == 0
    assert _fleet.counted_tokens(dict(rec(1, 0, 1), output_tokens=None)) == 0


def test_one_workers_row_is_its_records_level() -> None:
    records = [rec(2, 0.0, 1.0, ttft=100), rec(2, 0.5, 2.0, ttft=300), rec(2, 1.0, 4.0, ok=False, kind="http")]
    row = _fleet.single_row(item(sweep(records)), 2, "worker", "h1/gpu0")
    assert (row["requests"], row["ok"], row["err"], row["output_tokens"]) == (3, 2, 1, 20)
    assert row["window_s"] == 4.0  # failed requests are inside the window, as in the sweep's point
    assert row["output_tok_s"] == 5.0 and row["req_s"] == 0.5
    assert row["ttft_p50_ms"] == 200.0 and row["e2e_p99_s"] == pytest.approx(percentile([1.0, 1.5], 99), abs=1e-4)
    assert row["in_flight"] == 2 and row["alignment"] is None and not row["records_missing"]


def test_workers_swept_one_after_another_are_aligned_at_their_level_start() -> None:
    a = sweep([rec(1, 10.0, 12.0, tokens=20, ttft=100), rec(1, 12.0, 14.0, tokens=20, ttft=200)], t0=1000.0)
    b = sweep([rec(1, 3.0, 6.0, tokens=30, ttft=400)], t0=1100.0)  # long after a's level ended
    row = _fleet.merged_row([item(a), item(b, instance="gpu1")], 1)
    assert row["alignment"] == _fleet.ALIGNED
    assert (row["requests"], row["ok"], row["output_tokens"], row["in_flight"]) == (3, 3, 70, 2)
    assert row["window_s"] == 4.0  # the longer of the two levels (4 s and 3 s), not their sum or the gap
    assert row["output_tok_s"] == 17.5  # 70 tokens / 4 s: not the sum of the rates (10 + 10)
    assert row["ttft_p50_ms"] == 200.0 and row["ttft_p99_ms"] == pytest.approx(percentile([100, 200, 400], 99), abs=1e-3)
    assert row["itl_mean_ms"] == 5.0


def test_workers_swept_at_the_same_time_are_merged_on_the_wall_clock() -> None:
    a = sweep([rec(4, 1.0, 3.0, tokens=40)], t0=1000.0)
    b = sweep([rec(4, 0.5, 2.0, tokens=20)], t0=1001.0)  # on the clock: 1001.5 .. 1003.0
    row = _fleet.merged_row([item(a), item(b, instance="gpu1")], 4)
    assert row["alignment"] == _fleet.CLOCK
    assert row["window_s"] == 2.0  # union: 1001.0 .. 1003.0
    assert row["output_tok_s"] == 30.0


def test_the_clock_offset_is_converted_to_modelled_time() -> None:
    """Records of a time-scaled engine are in modelled seconds, the origins in wall seconds."""
    a = sweep([rec(1, 0.0, 100.0)], t0=1000.0, time_base="model", scale=0.01)
    b = sweep([rec(1, 0.0, 100.0)], t0=1000.5, time_base="model", scale=0.01)  # 50 modelled s later
    row = _fleet.merged_row([item(a), item(b, instance="gpu1")], 1)
    assert row["alignment"] == _fleet.CLOCK and row["window_s"] == 150.0 and row["time_base"] == "model"
    far = sweep([rec(1, 0.0, 100.0)], t0=1002.0, time_base="model", scale=0.01)  # 200 s later: no overlap
    assert _fleet.merged_row([item(a), item(far, instance="gpu1")], 1)["alignment"] == _fleet.ALIGNED


def test_without_origins_or_with_different_scales_the_levels_are_aligned() -> None:
    a = sweep([rec(1, 0.0, 2.0)], t0=None)
    b = sweep([rec(1, 0.0, 2.0)], t0=1000.0)
    assert _fleet.merged_row([item(a), item(b, instance="gpu1")], 1)["alignment"] == _fleet.ALIGNED
    c = sweep([rec(1, 0.0, 2.0)], t0=1000.0, time_base="model", scale=0.1)
    d = sweep([rec(1, 0.0, 2.0)], t0=1000.0, time_base="model", scale=0.2)
    assert _fleet.merged_row([item(c), item(d, instance="gpu1")], 1)["alignment"] == _fleet.ALIGNED


def test_missing_records_give_no_numbers_and_say_so() -> None:
    a = sweep([rec(1, 0.0, 2.0)])
    b = dict(sweep([rec(1, 0.0, 2.0)]), records=[])  # return_records: false
    row = _fleet.merged_row([item(a), item(b, instance="gpu1")], 1)
    assert row["records_missing"] and row["output_tok_s"] is None and row["requests"] is None


def test_not_measurable_statistics_are_carried_from_every_contributing_point() -> None:
    a = sweep([rec(1, 0.0, 2.0)], unmeasurable={1: {"ttft_ms": ["mean", "p50", "p90", "p99"]}})
    b = sweep([rec(1, 0.0, 2.0)], unmeasurable={1: {"itl_ms": ["mean"]}})
    assert _fleet.single_row(item(a), 1, "worker", "x")["not_measurable"] == ["ttft_p50_ms", "ttft_p99_ms"]
    merged = _fleet.merged_row([item(a), item(b, instance="gpu1")], 1)
    assert merged["not_measurable"] == ["ttft_p50_ms", "ttft_p99_ms", "itl_mean_ms"]
