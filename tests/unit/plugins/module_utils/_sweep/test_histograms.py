"""Server-side latency (module_utils/_sweep/histograms.py): histogram deltas on the recorded
/metrics of real SGLang 0.5.17."""
from __future__ import annotations

import math
import re

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw

from .helpers import (
    ROOT,
)

# ------------------------------------------------------------------------------------------------
# Server-side latency: histogram deltas on the recorded /metrics of real SGLang 0.5.17
# ------------------------------------------------------------------------------------------------

METRICS = ROOT / "tests" / "fixtures" / "metrics"


def _metrics_text(kind: str) -> str:
    return (METRICS / f"sglang-0.5.17-h200-{kind}.txt").read_text()


def _observe(text: str, family: str, values: list[float]) -> str:
    """The exposition text after ``values`` more observations of ``family`` (in its streaming
    series, or its only series), as the server would render them."""
    out = []
    for line in text.splitlines():
        if line.startswith(f"sglang:{family}_") and ('is_streaming="true"' in line or "is_streaming" not in line):
            head, _, raw = line.rpartition(" ")
            value = float(raw)
            if head.startswith(f"sglang:{family}_sum"):
                value += math.fsum(values)
            elif head.startswith(f"sglang:{family}_count"):
                value += len(values)
            else:
                bound = float(re.search(r'le="([^"]+)"', head).group(1))
                value += sum(1 for v in values if v <= bound)
            line = f"{head} {value!r}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_parse_histograms_of_the_recordings() -> None:
    dense = sw.parse_histograms(_metrics_text("dense"))
    assert set(dense) == {"ttft", "itl", "e2e"}
    # TTFT and e2e have an is_streaming="false" (3 requests) and a "true" (180) series: summed
    assert dense["ttft"]["count"] == 183
    assert dense["ttft"]["sum"] == pytest.approx(8.186050262000037 + 6.625999023999782)
    assert dense["ttft"]["buckets"][0.1] == 2 + 179 and dense["ttft"]["buckets"][math.inf] == 183
    assert dense["itl"]["count"] == 44972 and dense["itl"]["sum"] == pytest.approx(631.9315783480008)
    assert dense["itl"]["buckets"][0.02] == 41404 and len(dense["itl"]["buckets"]) == 24
    hybrid = sw.parse_histograms(_metrics_text("hybrid"))
    assert hybrid["e2e"]["count"] == 55
    assert hybrid["e2e"]["sum"] == pytest.approx(4.961665680999971 + 185.83196994600019)
    assert hybrid["itl"]["count"] == 12332 and hybrid["itl"]["buckets"][0.006] == 11695
    # other histograms (queue time, token counts) are not taken; nor a server without them
    assert sw.parse_histograms("sglang:queue_time_seconds_sum 3.0\nsglang:queue_time_seconds_count 2.0\n") == {}
    assert sw.parse_histograms("") == {}
    # the older "sglang_" prefix is read as well
    assert sw.parse_histograms("sglang_inter_token_latency_seconds_count 4.0\n")["itl"]["count"] == 4


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_server_latency_from_histogram_deltas(kind: str) -> None:
    before_text = _metrics_text(kind)
    ttfts = [0.05, 0.07, 0.09, 0.15]
    itls = [0.0045] * 90 + [0.03] * 10  # p50 in (4, 6] ms, p99 in (25, 30] ms
    e2es = [1.2, 1.3, 1.4, 9.0]
    after_text = _observe(before_text, "time_to_first_token_seconds", ttfts)
    after_text = _observe(after_text, "inter_token_latency_seconds", itls)
    after_text = _observe(after_text, "e2e_request_latency_seconds", e2es)
    before, after = sw.parse_histograms(before_text), sw.parse_histograms(after_text)
    level = sw.server_latency(before, after)
    assert level is not None
    assert (level["requests"], level["first_tokens"], level["itl_tokens"]) == (4, 4, 100)
    assert level["ttft_ms_mean"] == pytest.approx(90.0, abs=1e-3)
    assert level["itl_ms_mean"] == pytest.approx((90 * 4.5 + 10 * 30.0) / 100, abs=1e-3)
    assert level["e2e_s_mean"] == pytest.approx(3.225, abs=1e-4)
    assert level["itl_ms_range"] == {"p50": [4.0, 6.0], "p90": [4.0, 30.0], "p99": [25.0, 30.0]}
    # 4 TTFTs: p99 lies between the 3rd (90 ms) and the 4th (150 ms), in (0, 0.1] and (0.1, 0.2]
    assert level["ttft_ms_range"]["p50"] == [0.0, 100.0] and level["ttft_ms_range"]["p99"] == [0.0, 200.0]
    assert level["e2e_s_range"]["p50"] == [1.0, 2.0] and level["e2e_s_range"]["p99"] == [1.0, 10.0]
    # the client's own percentiles (same rule) of the same samples lie in those ranges
    for p in (50, 90, 99):
        lo, hi = level["itl_ms_range"][f"p{p}"]
        assert lo <= sw.percentile(itls, p) * 1000.0 <= hi
    # nothing moved, a restart (counts went down), or no histograms at all: no server latency
    assert sw.server_latency(before, before) is None
    assert sw.server_latency(after, before) is None
    assert sw.server_latency({}, {}) is None
    # a fresh server (families absent before the first request) counts from zero
    fresh = sw.server_latency({}, before)
    assert fresh is not None and fresh["itl_tokens"] == before["itl"]["count"]


def test_histogram_rank_range_matches_the_client_percentile_rule() -> None:
    import random

    rng = random.Random(7)
    bounds = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.04, 0.08, math.inf)
    for n in (1, 2, 7, 50, 333):
        samples = [rng.lognormvariate(-4.6, 0.6) for _ in range(n)]
        hist = {"sum": sum(samples), "count": float(n),
                "buckets": {b: float(sum(1 for s in samples if s <= b)) for b in bounds}}
        for p in (0, 50, 90, 99, 100):
            lo, hi = sw.histogram_rank_range(hist, p)
            assert lo <= sw.percentile(samples, p) <= hi, (n, p)
    assert sw.histogram_rank_range({"sum": 0.0, "count": 0.0, "buckets": {}}, 50) is None
