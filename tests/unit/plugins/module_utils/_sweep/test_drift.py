"""Drift within a level (module_utils/_sweep/drift.py)."""
from __future__ import annotations

import re

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _report
from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw

from .helpers import (
    configure,
)

# ------------------------------------------------------------------------------------------------
# Drift within a level
# ------------------------------------------------------------------------------------------------


def test_drift_compares_the_two_halves_of_the_window() -> None:
    steady = [[(i * 0.01, 1.0) for i in range(1000)]]  # 100 tok/s for 10 s
    drift = sw.drift_check(steady, 0.0, 10.0, "steady")
    assert drift["checked"] and not drift["flagged"] and drift["window"] == "steady"
    assert drift["first_half_tok_s"] == pytest.approx(100.0) and drift["ratio"] == pytest.approx(1.0)
    # second half 30% slower (70 tok/s): flagged
    slowing = [[(i * 0.01, 1.0) for i in range(500)] + [(5.0 + i / 70.0, 1.0) for i in range(350)]]
    drift = sw.drift_check(slowing, 0.0, 10.0, "steady")
    assert drift["flagged"] and drift["ratio"] == pytest.approx(0.7, abs=0.005)
    assert drift["second_half_tok_s"] == pytest.approx(70.0, abs=0.5)
    # 10% slower, split over two requests with 3-token chunks: inside the 15% threshold
    mild = [[(i * 0.03, 3.0) for i in range(167)], [(5.0 + i * 0.0333, 3.0) for i in range(150)]]
    drift = sw.drift_check(mild, 0.0, 10.0, "level")
    assert drift["checked"] and not drift["flagged"] and 0.85 < drift["ratio"] < 0.95
    # a short level says so instead of flagging, even with a large difference
    short = [[(i * 0.1, 1.0) for i in range(40)] + [(4.0 + i * 0.5, 1.0) for i in range(4)]]
    drift = sw.drift_check(short, 0.0, 6.0, "level")
    assert not drift["checked"] and not drift["flagged"] and drift["ratio"] is None
    assert "too short" in drift["reason"]


def test_a_level_whose_server_slows_down_is_flagged(server: str) -> None:
    # requests 1-4 at 1000 tok/s, 5-8 at 250 tok/s: the second half of the level is ~4x slower
    # (0.11 s against 0.41 s a request), so that the client's own delays on a loaded machine,
    # added to both halves, cannot lift the ratio above the 0.85 asserted (at 2x they did)
    configure(server, rate=1000.0, prefill_s=0.01, slots=4, slow_after=4, slow_factor=0.25)
    facts = sw.run_sweep(
        sw.SweepOptions(url=server, concurrency=[1], requests=8, warmup=0, level_warmup=False, max_tokens=100)
    )
    drift = facts["points"][0]["drift"]
    assert drift["window"] == "steady" and drift["checked"] and drift["flagged"], drift
    assert drift["ratio"] < 0.85 and drift["second_half_tok_s"] < drift["first_half_tok_s"]
    assert any("throughput changed within the level" in w for w in facts["warnings"])
    table = _report.render_table(facts)
    # the drift mark (~); on a loaded machine the level may also be marked client-limited (*),
    # which is the client's own verdict on itself, not the drift under test (run G2 of .ci/run)
    assert re.search(r"\| 1\*?~ \| 8 \| 8 \| 0 \|", table), table
