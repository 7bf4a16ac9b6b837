"""``report.html`` (``_report/html.py``): one self-contained file with the tables, the settings
(workload, seed), charts of every candidate on the same axes, goodput and capacity when present;
and the prefix-cache table of summary.md (``_report/cache.py``)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._report import write_report
from ansible_collections.llmops.sglang.plugins.module_utils._report.html import markdown_to_html, svg_chart


def _point(c: int, tok_s: float, **extra: Any) -> dict[str, Any]:
    return {"concurrency": c, "requests": 2 * c, "ok": 2 * c, "errors": {"total": 0}, "status": "ok",
            "output_tokens": 1000, "output_tok_s": tok_s, "duration_s": 10.0, "req_s": 1.0,
            "ttft_ms": {"p50": 10.0 * c, "p99": 20.0 * c}, **extra}


def _result(profile: str, scale: float, **extra: Any) -> dict[str, Any]:
    cache = {"cache_state": {"flush": {"ok": True, "status": 200}, "warm": {"ok": 256, "requests": 256}},
             "client_cache": {"requests": 16, "prompt_tokens": 1000, "cached_tokens": 700, "cache_hit_rate": 0.7},
             "server_metrics": {"cache_hit_rate": 0.7, "cache_hit_rate_device": 0.2, "cache_hit_rate_host": 0.5}}
    points = [_point(c, c * 100.0 * scale, **cache, **extra) for c in (1, 4, 16)]
    sweep = {"schema_version": 1, "points": points,
             "options": {"api": "native", "concurrency": [1, 4, 16], "seed": 7, "flush_cache": True, "warm": True,
                         "workload": {"kind": "shared_prefix", "seed": 7, "chars_per_token": 4, "groups": 256,
                                      "prefix_len": 2048}}}
    return {"meta": {"host": "node1", "instance": "gpu0", "profile": profile}, "sweep": sweep}


def test_report_html_is_self_contained_with_tables_settings_and_shared_axes(tmp_path: Path) -> None:
    results = [_result("mtp", 1.0), _result("mtp_hicache", 1.5)]  # compare mode: two candidates
    report = write_report(results, str(tmp_path / "run"), title="cache <run>", latest_link=False)
    page = Path(tmp_path / "run" / "report.html").read_text(encoding="utf-8")
    assert str(tmp_path / "run" / "report.html") in report["files"]
    assert not re.search(r"https?://", page)  # opens from disk, nothing fetched
    assert not re.search(r"<(script|link|iframe)|(src|href)=\"(?!data:)|url\(", page)
    assert "<title>cache &lt;run&gt;</title>" in page
    assert page.count("<table>") >= 3  # settings, instance tables, prefix cache
    assert "<th>host hit</th>" in page and "<td>50.0%</td>" in page and "<td>70.0%</td>" in page
    assert "kind=shared_prefix" in page and "seed=7" in page
    throughput = page.split("Output throughput", 1)[1].split("</svg>", 1)[0]
    assert throughput.count("<polyline") == 2  # both candidates on the same axes
    assert "Goodput" not in page and "Capacity" not in page  # not carried: not drawn
    md = Path(tmp_path / "run" / "summary.md").read_text(encoding="utf-8")
    assert "Workload: shared_prefix (groups 256, prefix_len 2048), seed 7; flush_cache and warm before each level." in md
    assert "| 4 | yes | 256/256 | 70.0% | 20.0% | 50.0% | 70.0% | 700 |" in md


def test_report_html_goodput_curve_and_capacity_when_carried(tmp_path: Path) -> None:
    result = _result("mtp", 1.0, goodput_req_s=1.5, goodput_tok_s=300.0)
    for i, point in enumerate(result["sweep"]["points"]):
        point["offered_rate"] = 2.0 * (i + 1)
    result["sweep"]["capacity"] = [{"host_class": "h200", "instances_needed": 3, "hosts_needed": 1}]
    write_report([result], str(tmp_path / "run"), latest_link=False)
    page = Path(tmp_path / "run" / "report.html").read_text(encoding="utf-8")
    assert "Goodput (requests meeting the SLO)" in page and "offered rate (req/s)" in page
    assert "<h2>Capacity</h2>" in page and "<td>h200</td>" in page and "<th>hosts_needed</th>" in page
    assert not re.search(r"https?://", page)


def test_markdown_to_html_and_empty_chart() -> None:
    text = "### a <b>\n\nline `code`\n\n| C | x |\n| --- | --- |\n| 1 | 2 |\n"
    assert markdown_to_html(text) == ("<h3>a &lt;b&gt;</h3>\n<p>line <code>code</code></p>\n"
                                      "<table><tr><th>C</th><th>x</th></tr><tr><td>1</td><td>2</td></tr></table>")
    assert svg_chart("t", "x", "y", [("a", [(1.0, None)])]) == ""  # type: ignore[list-item]


def test_what_a_reader_saw_wrong_in_the_report(tmp_path: Path) -> None:
    """Issue 28 item 11, as report.html and summary.md read in a browser: one <h1>; `**no**` as
    bold, not asterisks; axis labels without scientific notation (8.881e+05 was cut to
    "881e+05" by the chart's margin); a TTFT the tables mark n/m not plotted; a concurrency
    sweep's settings without the rate mode's arrival; the settings table scrolls within the page;
    "GPU 0" for the instance's GPU index; the level's seconds headed "model s" on a time-scaled
    engine; summary.md's heading with the title as text."""
    result = _result("mtp", 1000.0)
    sweep = result["sweep"]
    sweep["options"].update(mode="concurrency", arrival="poisson", rates=[4.0])
    sweep["time_base"] = "model"
    sweep["points"][0]["latency_unmeasurable"] = {"ttft_ms": ["p50", "p99"]}
    sweep["points"][1]["slo_met"] = False
    sweep["points"][1]["offered_rate"] = None
    result["meta"]["gpus"] = [0]
    write_report([result], str(tmp_path / "run"), title="<b>run</b>", latest_link=False)
    page = Path(tmp_path / "run" / "report.html").read_text(encoding="utf-8")
    md = Path(tmp_path / "run" / "summary.md").read_text(encoding="utf-8")
    assert page.count("<h1>") == 1
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)
    assert not re.search(r"\de[+-]\d", text), re.findall(r"[\d.]+e[+-]\d+", text)
    assert ">1.6M<" in page  # the throughput axis' top: 16 x 100,000 tok/s
    ttft = page.split("Time to first token (p50)", 1)[1].split("</svg>", 1)[0]
    assert ttft.count("<circle") == 2  # C=4 and C=16; C=1's TTFT is n/m
    settings = page.split("<h2>Settings</h2>", 1)[1].split("</table>", 1)[0]
    assert '<div class="wide">' in settings and "poisson" not in settings
    assert "GPU 0" in md and "gpus 0" not in md
    assert "| model s |" in md and "| wall s |" not in md
    assert md.startswith("# &lt;b&gt;run&lt;/b&gt;\n")


def test_bold_cells_and_ticks() -> None:
    from ansible_collections.llmops.sglang.plugins.module_utils._report.html import tick

    assert markdown_to_html("| a | b |\n| --- | --- |\n| **no** | 2 ** 3 |") == (
        "<table><tr><th>a</th><th>b</th></tr><tr><td><strong>no</strong></td><td>2 ** 3</td></tr></table>")
    assert [tick(v) for v in (0.0, 0.25, 12.5, 512.0, 888100.0, 8881000.0, 45000.0)] == [
        "0", "0.25", "12.5", "512", "888k", "8.88M", "45k"]
