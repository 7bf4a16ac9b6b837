"""report.html as a reader sees it: opened in a real headless Chromium (Debian's) at 1,300 px
wide, measured in the page (issue 28 item 11). What a reader saw wrong: the TTFT chart's axis
labels in scientific notation and clipped at the chart's left edge ("8.881e+05" read
"881e+05"), `**no**` with its asterisks in the SLO table, the settings table running past the
page's width, the title as a second <h1>. `make browser-test` (in .ci/run) installs Chromium."""
from __future__ import annotations

import re
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._report import write_report

from .cdp import Browser, chromium

pytestmark = pytest.mark.skipif(chromium() is None, reason="no chromium (make browser-test installs it)")

# What the page looks like to a reader, measured by the browser's layout.
MEASURE = r"""(() => {
  const texts = [];
  for (const svg of document.querySelectorAll('svg')) {
    const box = svg.getBoundingClientRect();
    for (const t of svg.querySelectorAll('text')) {
      const r = t.getBoundingClientRect();
      texts.push({text: t.textContent, inside: r.left >= box.left - 0.5 && r.right <= box.right + 0.5
                  && r.top >= box.top - 0.5 && r.bottom <= box.bottom + 0.5});
    }
  }
  const wide = [...document.querySelectorAll('.wide')].map(d => ({
    scroll: d.scrollWidth, client: d.clientWidth, right: d.getBoundingClientRect().right}));
  const bold = [...document.querySelectorAll('td strong, td b')].map(e => ({
    text: e.textContent, weight: parseInt(getComputedStyle(e).fontWeight)}));
  return {h1: [...document.querySelectorAll('h1')].map(e => e.innerText), text: document.body.innerText,
          page: document.documentElement.scrollWidth, viewport: window.innerWidth,
          texts: texts, wide: wide, bold: bold};
})()"""


def _point(level: float, ttft_ms: float, met: bool, **extra: Any) -> dict[str, Any]:
    return {"concurrency": 4096, "offered_rate": level, "requests": 120, "ok": 120, "errors": {"total": 0},
            "status": "ok", "output_tokens": 30_000, "output_tok_s": 40.0 * level, "duration_s": 30.0,
            "req_s": level, "achieved_rate": level, "goodput_req_s": level if met else 0.5 * level,
            "slo_attainment": 1.0 if met else 0.5, "slo_met": met,
            "ttft_ms": {"p50": ttft_ms, "p99": 2 * ttft_ms}, "itl_ms": {"p50": 9.5, "p99": 30.0}, **extra}


def _result(profile: str, scale: float) -> dict[str, Any]:
    """An open-loop rate sweep like the H200's (TTFTs of minutes at the top rate: the values
    whose labels were printed as 8.881e+05 and clipped), with a long settings list."""
    points = [_point(rate, ttft * scale, met) for rate, ttft, met in
              ((1.0, 180.0, True), (4.0, 950.0, True), (16.0, 88_810.0, False), (64.0, 888_100.0, False))]
    options = {"mode": "rate", "rates": [1.0, 4.0, 16.0, 64.0], "arrival": "poisson", "concurrency": [1, 4, 16, 32],
               "seed": 7, "duration_s": 30, "max_in_flight": 4096, "api": "openai", "flush_cache": True,
               "warm": True, "slo": {"ttft_ms": 2000, "itl_ms": 50},
               "workload": {"kind": "sharegpt", "seed": 7, "chars_per_token": 4,
                            "dataset": "/srv/datasets/ShareGPT_V3_unfiltered_cleaned_split.json" * 2,
                            "input_len": 1024, "output_len": 256, "range_ratio": 0.5}}
    sweep = {"schema_version": 1, "points": points, "options": options}
    return {"meta": {"host": "gpu-node-01.example.internal", "instance": "gpu0", "profile": profile, "gpus": [0]},
            "sweep": sweep}


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("report")
    write_report([_result("mtp", 1.0), _result("mtp_hicache", 1.4)], str(out / "run"),
                 title="<b>mtp vs mtp_hicache</b>", latest_link=False)
    with Browser(1300, 900) as browser:
        browser.open(out / "run" / "report.html")
        measured = browser.evaluate(MEASURE)
        browser.screenshot(out / "run" / "report.png")  # kept for a reader of a failure
    measured["dir"] = str(out / "run")
    return measured


def test_one_title_shown_as_text(page: dict[str, Any]) -> None:
    assert page["h1"] == ["<b>mtp vs mtp_hicache</b>"], page["h1"]


def test_axis_labels_are_short_and_inside_their_chart(page: dict[str, Any]) -> None:
    labels = [t["text"] for t in page["texts"]]
    assert labels and not [t for t in labels if re.search(r"\de[+-]\d", t)], labels
    clipped = [t["text"] for t in page["texts"] if not t["inside"]]
    assert clipped == [], (clipped, page["dir"])
    assert "888k" in labels or "1M" in labels or any(t.endswith("M") for t in labels), labels


def test_bold_cells_are_bold_without_asterisks(page: dict[str, Any]) -> None:
    assert "**" not in page["text"], [line for line in page["text"].splitlines() if "**" in line][:5]
    assert page["bold"] and all(b["weight"] >= 600 for b in page["bold"]), page["bold"]
    assert {"no"} <= {b["text"] for b in page["bold"]}, page["bold"]


def test_the_page_fits_its_width_and_the_settings_table_scrolls_inside_it(page: dict[str, Any]) -> None:
    assert page["page"] <= page["viewport"], (page["page"], page["viewport"], page["dir"])
    assert page["wide"] and all(w["right"] <= page["viewport"] for w in page["wide"]), page["wide"]
    assert any(w["scroll"] > w["client"] for w in page["wide"]), page["wide"]  # the long settings row scrolls
