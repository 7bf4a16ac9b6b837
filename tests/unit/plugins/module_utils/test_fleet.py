"""The fleet views (_fleet) and their rendering (_report): per worker, fleet total merged from
the raw per-request records, through the router.

The sweeps here are built from records whose arithmetic is known exactly (there is no recording
of a fleet's records: the integration test in tests/integration/test_router.py runs the real
router in front of two embedded engines end to end)."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.filter import bench as bench_filters
from ansible_collections.llmops.sglang.plugins.module_utils import _fleet, _report
from ansible_collections.llmops.sglang.plugins.module_utils._stats import percentile


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


def fleet_items() -> list[dict[str, Any]]:
    w0 = sweep([rec(1, 0.0, 1.0), rec(1, 1.0, 2.0), rec(2, 5.0, 6.0), rec(2, 5.0, 6.5)], t0=1000.0)
    w1 = sweep([rec(1, 0.0, 2.0), rec(1, 2.0, 4.0, ok=False, kind="timeout"), rec(2, 7.0, 8.0)], t0=1100.0)
    router = sweep([rec(1, 0.0, 1.5), rec(1, 1.5, 3.0), rec(2, 4.0, 5.0), rec(2, 4.0, 5.0), rec(4, 6.0, 7.0)],
                   t0=1200.0, url="http://r:8000")
    workers = [item(w0), item(w1, instance="gpu1")]
    return workers + bench_filters._router_report_items([router], "r1", "http://r:8000", workers)


def test_side_by_side_per_level_workers_then_fleet_then_router() -> None:
    rows = _report.fleet_rows(fleet_items())
    assert [(r["concurrency"], r["view"], r["label"]) for r in rows] == [
        (1, "worker", "h1/gpu0"), (1, "worker", "h1/gpu1"), (1, "fleet", "fleet total (2 workers, merged)"),
        (1, "router", "router r1"),
        (2, "worker", "h1/gpu0"), (2, "worker", "h1/gpu1"), (2, "fleet", "fleet total (2 workers, merged)"),
        (2, "router", "router r1"),
        (4, "router", "router r1"),  # a level only the router swept: no fleet total to invent
    ]
    for level in (1, 2):
        at = [r for r in rows if r["concurrency"] == level]
        fleet = next(r for r in at if r["view"] == "fleet")
        workers = [r for r in at if r["view"] == "worker"]
        assert fleet["requests"] == sum(r["requests"] for r in workers)
        assert fleet["err"] == sum(r["err"] for r in workers)
        assert fleet["output_tokens"] == sum(r["output_tokens"] for r in workers)
    assert rows[2]["output_tok_s"] == 7.5  # 30 tokens over the longer level, gpu1's 4 s


def test_router_meta_takes_the_workers_profile_only_when_they_agree() -> None:
    workers = [item(sweep([])), item(sweep([]), instance="gpu1")]
    meta = _fleet.router_meta("r1", "http://r", workers)
    assert meta == {"host": "r1", "instance": "router", "role": "router", "profile": "baseline", "release": None,
                    "engine": "sglang-router", "gpus": [], "url": "http://r", "workers_down": []}
    workers[1]["meta"]["profile"] = "mtp"
    assert _fleet.router_meta("r1", "http://r", workers)["profile"] is None


def test_report_writes_the_fleet_section_csv_and_json(tmp_path: Path) -> None:
    items = fleet_items()
    result = _report.write_report(items, str(tmp_path / "run"), latest_link=False)
    out = tmp_path / "run"
    assert {str(out / "fleet.csv"), str(out / "fleet.json")} <= set(result["files"])
    assert set(_report.plan_files(items, str(out))) <= set(result["files"])
    summary = (out / "summary.md").read_text()
    assert "### Fleet: per worker, fleet total (merged), through the router" in summary
    assert "### Profiles" not in summary  # the router carries the workers' profile: no comparison
    fleet_part = summary.split("### Fleet", 1)[1]
    lines = [ln for ln in fleet_part.splitlines() if ln.startswith(("| 1 ", "| 1! "))]
    assert lines[2].startswith("| 1! | **fleet total (2 workers, merged) [aligned]** | 2 | 4 | 3 | 1 | 7.5 |")
    assert lines[3].startswith("| 1 | router r1 | 1 | 2 | 2 | 0 |")
    assert "[aligned]: the workers were swept one after another" in summary
    rows = list(csv.DictReader((out / "fleet.csv").open()))
    assert tuple(rows[0]) == _fleet.ROW_FIELDS and len(rows) == 9
    assert rows[2]["view"] == "fleet" and rows[2]["requests"] == "4" and rows[2]["alignment"] == "aligned"
    doc = json.loads((out / "fleet.json").read_text())
    assert doc["rows"][2]["output_tok_s"] == 7.5 and len(doc["sources"]) == 3
    # the router's sweep keeps its own JSON file beside the workers'
    assert json.loads((out / "r1_router_baseline.json").read_text())["meta"]["role"] == "router"


def test_not_measurable_cells_read_nm_and_are_empty_in_the_csv(tmp_path: Path) -> None:
    items = fleet_items()
    items[0]["sweep"]["points"][0]["latency_unmeasurable"] = {"ttft_ms": ["p50"]}
    _report.write_report(items, str(tmp_path), latest_link=False)
    row = next(r for r in csv.DictReader((tmp_path / "fleet.csv").open()) if r["view"] == "fleet" and r["concurrency"] == "1")
    assert row["ttft_p50_ms"] == "" and row["ttft_p99_ms"] != "" and row["not_measurable"] == "ttft_p50_ms"
    table = _report.render_fleet_table(_report.fleet_rows(items))
    assert "| 1! | **fleet total (2 workers, merged) [aligned]** | 2 | 4 | 3 | 1 | 7.5 | 0.75 | 4.0 | n/m | 100.0 |" in table


def test_without_a_router_the_report_has_no_fleet_section(tmp_path: Path) -> None:
    workers = fleet_items()[:2]
    result = _report.write_report(workers, str(tmp_path), latest_link=False)
    assert not (tmp_path / "fleet.csv").exists() and "Fleet" not in (tmp_path / "summary.md").read_text()
    assert all("fleet" not in f for f in result["files"])


def test_a_worker_down_is_a_down_row_and_the_fleet_total_is_the_workers_that_were_up(tmp_path: Path) -> None:
    # issue 16 (unclear case, decided): one worker dead before a bench through the router. It is
    # not swept; the report shows it as DOWN at each level, the fleet total is the healthy ones
    w0 = sweep([rec(1, 0.0, 1.0), rec(1, 1.0, 2.0), rec(2, 5.0, 6.0)], t0=1000.0)
    router = sweep([rec(1, 0.0, 1.5), rec(2, 4.0, 5.0)], t0=1200.0, url="http://r:8000")
    workers = [item(w0)]
    gone = [{"host": "h1", "name": "gpu1", "url": "http://h1:30001", "health": 0, "process": "dead", "up": False}]
    items = workers + bench_filters._router_report_items([router], "r1", "http://r:8000", workers, gone)
    rows = _report.fleet_rows(items)
    assert [(r["concurrency"], r["view"], r["label"]) for r in rows][:4] == [
        (1, "worker", "h1/gpu0"),
        (1, "down", "h1/gpu1 DOWN, not swept (/health no answer, process dead)"),
        (1, "fleet", "fleet total (1 of 2 workers, merged; down: h1/gpu1)"),
        (1, "router", "router r1")]
    down, fleet = rows[1], rows[2]
    assert down["requests"] is None and down["output_tok_s"] is None and down["sources"] == 0
    assert fleet["requests"] == rows[0]["requests"] == 2  # the healthy worker's own numbers
    result = _report.write_report(items, str(tmp_path), latest_link=False)
    assert str(tmp_path / "fleet.csv") in result["files"]
    summary = (tmp_path / "summary.md").read_text()
    assert "| 1 | h1/gpu1 DOWN, not swept (/health no answer, process dead) |" in summary
    assert "Time bases differ" not in summary and "(no records)" not in summary
    csv_rows = list(csv.DictReader((tmp_path / "fleet.csv").open()))
    assert [r["view"] for r in csv_rows if r["concurrency"] == "1"] == ["worker", "down", "fleet", "router"]
