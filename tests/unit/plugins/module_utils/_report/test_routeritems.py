"""The fleet section of a bench report through the router: the router's sweeps in the form the
bench role passes them to sweep_report ({host, router: {url, workers_down}, sweeps}), made items
by ``_report.normalize`` beside the workers' and rendered by module_utils/_report; the fleet views
themselves are tested in tests/unit/plugins/module_utils/_bench/test_fleet.py."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _report
from ansible_collections.llmops.sglang.plugins.module_utils._bench import fleet as _fleet

from .._bench.test_fleet import item, rec, sweep


def fleet_items() -> list[dict[str, Any]]:
    w0 = sweep([rec(1, 0.0, 1.0), rec(1, 1.0, 2.0), rec(2, 5.0, 6.0), rec(2, 5.0, 6.5)], t0=1000.0)
    w1 = sweep([rec(1, 0.0, 2.0), rec(1, 2.0, 4.0, ok=False, kind="timeout"), rec(2, 7.0, 8.0)], t0=1100.0)
    router = sweep([rec(1, 0.0, 1.5), rec(1, 1.5, 3.0), rec(2, 4.0, 5.0), rec(2, 4.0, 5.0), rec(4, 6.0, 7.0)],
                   t0=1200.0, url="http://r:8000")
    workers = [item(w0), item(w1, instance="gpu1")]
    return _report.normalize(workers + [{"host": "r1", "router": {"url": "http://r:8000"}, "sweeps": [router]}])


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
    items = _report.normalize(workers + [{"host": "r1", "router": {"url": "http://r:8000", "workers_down": gone},
                                          "sweeps": [router]}])
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


def test_a_host_entry_is_one_item_per_instance_with_the_manifest_meta() -> None:
    manifest = {"profile": "mtp", "release": "0.5.17", "engine": "sim",
                "instances": [{"name": "gpu0", "gpus": [0], "connect_url": "http://127.0.0.1:30000"},
                              {"name": "gpu1", "gpus": [1], "url": "http://h1:30001"}]}
    s0, s1 = sweep([rec(1, 0.0, 1.0)]), sweep([rec(1, 0.0, 2.0)])
    items = _report.normalize([{"host": "h1", "manifest": manifest, "sweeps": {"gpu0": s0, "gpu1": s1}}])
    assert [i["meta"] for i in items] == [
        {"host": "h1", "instance": "gpu0", "profile": "mtp", "release": "0.5.17", "engine": "sim", "gpus": [0],
         "url": "http://127.0.0.1:30000"},
        {"host": "h1", "instance": "gpu1", "profile": "mtp", "release": "0.5.17", "engine": "sim", "gpus": [1],
         "url": "http://h1:30001"}]
    assert items[0]["sweep"] is s0 and items[1]["sweep"] is s1
    # normalizing again changes nothing (the module normalizes what the role passes once)
    assert _report.normalize(items) == items
    # the router's meta takes the profile the workers of the same results agree on, wherever it stands
    routed = _report.normalize([{"host": "r1", "router": {"url": "http://r"}, "sweeps": [s0]},
                                {"host": "h1", "manifest": manifest, "sweeps": {"gpu0": s0}}])
    assert [(i["meta"]["instance"], i["meta"]["profile"]) for i in routed] == [("router", "mtp"), ("gpu0", "mtp")]
    with pytest.raises(ValueError, match=r"results\[0\].sweeps\['gpu0'\] is a str"):
        _report.normalize([{"host": "h1", "manifest": manifest, "sweeps": {"gpu0": "x"}}])
