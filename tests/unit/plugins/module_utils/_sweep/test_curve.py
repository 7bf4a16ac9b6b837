"""The curve of a sweep (module_utils/_sweep: statistics, knee, peak and plateau, a level's status
and error warnings), on the seed's table."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw

# The seed sweep (MTP + HiCache, one GPU): C -> output tok/s.
SEED = {1: 61.2, 4: 207.2, 8: 369.7, 16: 384.5, 32: 392.7, 48: 409.0}


def _point(c: int, x: float, **extra: Any) -> dict[str, Any]:
    return {"concurrency": c, "output_tok_s": x, "ok": 8, "client_limited": False, **extra}


def _data_lines(path: Path) -> list[str]:
    return [line[5:].strip() for line in path.read_text().splitlines() if line.startswith("data:")]


# ------------------------------------------------------------------------------------------------
# Statistics
# ------------------------------------------------------------------------------------------------


def test_percentile_linear_interpolation() -> None:
    data = [4.0, 1.0, 3.0, 2.0]
    assert sw.percentile(data, 50) == pytest.approx(2.5)
    assert sw.percentile(data, 90) == pytest.approx(3.7)  # rank 2.7 between 3 and 4
    assert sw.percentile(data, 99) == pytest.approx(3.97)
    assert sw.percentile(data, 0) == 1.0 and sw.percentile(data, 100) == 4.0
    assert sw.percentile([7.0], 99) == 7.0
    assert sw.percentile([], 50) is None
    assert sw.summarize([]) == {"mean": None, "p50": None, "p90": None, "p99": None}
    s = sw.summarize([0.001, 0.002, 0.003], scale=1000.0)
    assert s == {"mean": 2.0, "p50": 2.0, "p90": 2.8, "p99": 2.98}


def test_itl_spreads_a_chunk_gap_over_its_tokens() -> None:
    # first token at 0 (TTFT, no ITL sample), then 3 tokens after 30 ms, then 1 after 10 ms
    samples = sw.itl_samples([(0.0, 1.0), (0.03, 3.0), (0.04, 1.0)])
    assert samples == pytest.approx([0.01, 0.01, 0.01, 0.01])
    # per-chunk counting would have said 2 samples of 30 ms and 10 ms
    assert sw.itl_samples([(0.0, 2.0)]) == []


def test_steady_window_and_tokens_in_it() -> None:
    spans = {0: [(0.0, 1.0), (1.0, 2.0)], 1: [(0.1, 1.1), (1.1, 2.5)]}
    assert sw.steady_window(spans, 2) == (0.1, 2.0)
    assert sw.steady_window(spans, 3) is None  # a client never ran
    assert sw.steady_window({0: [(0.0, 1.0)], 1: [(2.0, 3.0)]}, 2) is None  # empty window
    events = [[(0.05, 1.0), (0.5, 2.0), (2.2, 1.0)], [(1.0, 3.0)]]
    assert sw.tokens_in_window(events, 0.1, 2.0) == 5.0


def test_gain_per_doubling_and_client_rule() -> None:
    assert sw.gain_per_doubling(8, 100.0, 16, 110.0) == pytest.approx(0.10)
    assert sw.gain_per_doubling(1, 100.0, 4, 300.0) == pytest.approx(1.0)  # 200% over 2 doublings
    assert sw.gain_per_doubling(32, 392.7, 48, 409.0) == pytest.approx((409.0 / 392.7 - 1) / math.log2(1.5))
    assert sw.gain_per_doubling(8, 0.0, 16, 10.0) is None
    assert sw.client_limited(1.0, 0.2) is False
    assert sw.client_limited(sw.CLIENT_LAG_LIMIT_MS, 0.2) is True
    assert sw.client_limited(1.0, sw.CLIENT_CPU_LIMIT) is True
    assert sw.client_limited(None, None) is False


def test_knee_and_peak_on_the_seed_table() -> None:
    points = [_point(c, x) for c, x in SEED.items()]
    assert sw.find_peak(points) == {"concurrency": 48, "output_tok_s": 409.0, "client_limited": False}
    knee = sw.find_knee(points, plateau_gain=0.05)
    assert knee is not None
    assert knee["concurrency"] == 8 and knee["rule"] == "share_of_peak"
    assert knee["share_of_peak"] == pytest.approx(369.7 / 409.0, abs=1e-4)
    # the plateau rule alone (an unreachable share) also puts it at 8: 8 -> 16 adds 4% < 5%
    knee = sw.find_knee(points, plateau_gain=0.05, share=1.01)
    assert knee is not None and knee["concurrency"] == 8 and knee["rule"] == "plateau"


def test_knee_plateau_rule_before_the_share_rule() -> None:
    # flat from 2 to 4, then a late jump: the knee is where doubling first stopped paying
    points = [_point(1, 100.0), _point(2, 200.0), _point(4, 205.0), _point(8, 400.0)]
    knee = sw.find_knee(points, plateau_gain=0.05)
    assert knee == {"concurrency": 2, "output_tok_s": 200.0, "share_of_peak": 0.5, "rule": "plateau"}


def test_knee_ignores_client_limited_and_failed_levels() -> None:
    points = [
        _point(1, 100.0),
        _point(2, 190.0),
        _point(4, 900.0, client_limited=True),
        _point(8, 0.0, ok=0),
    ]
    assert sw.find_peak(points) == {"concurrency": 2, "output_tok_s": 190.0, "client_limited": False}
    knee = sw.find_knee(points, 0.05)
    assert knee is not None and knee["concurrency"] == 2
    assert sw.find_knee([_point(1, 0.0, ok=0)], 0.05) is None
    assert sw.find_peak([]) is None
    # every level client-limited: still a peak, flagged
    peak = sw.find_peak([_point(1, 50.0, client_limited=True)])
    assert peak is not None and peak["client_limited"] is True


def test_plateau_reached() -> None:
    pts = [_point(c, x) for c, x in SEED.items()]
    assert not sw.plateau_reached(pts[:1], 0.05)
    assert not sw.plateau_reached(pts[:3], 0.05)  # 4 -> 8 gained 78%
    assert sw.plateau_reached(pts[:4], 0.05)  # 8 -> 16 gained 4%
    limited = pts[:3] + [_point(16, 384.5, client_limited=True)]
    assert not sw.plateau_reached(limited, 0.05)


def test_level_status_counts_every_error_kind() -> None:
    errors = {"http": 0, "stream": 0, "timeout": 0, "connection": 0, "short": 0, "total": 0}
    assert sw.level_status(8, errors) == "ok"
    for kind in sw.ERROR_KINDS:
        assert sw.level_status(8, {**errors, kind: 1, "total": 1}) == "errors", kind
    assert sw.level_status(8, {**errors, "connection": 8, "total": 8}) == "no_requests_ok"
    assert sw.level_status(0, errors) == "no_requests_ok"  # nothing sent (a duration level cut at once)
    # with ignore_eos false a model that stops early is what was asked for, not a failure
    short = {**errors, "short": 3, "total": 3}
    assert sw.level_status(8, short, short_is_error=False) == "ok"
    assert sw.level_status(8, short) == "errors"


def test_levels_with_errors_are_left_out_of_peak_knee_and_plateau() -> None:
    # a broken level with a higher rate (its failed requests ended early): never the peak
    points = [
        _point(1, 100.0, status="ok"),
        _point(2, 190.0, status="ok"),
        _point(4, 900.0, status="errors", errors={"total": 3}),
        _point(8, 0.0, ok=0, status="no_requests_ok"),
    ]
    assert sw.find_peak(points) == {"concurrency": 2, "output_tok_s": 190.0, "client_limited": False}
    knee = sw.find_knee(points, 0.05)
    assert knee is not None and knee["concurrency"] == 2
    # every level broken: no peak, no knee (never one taken from a broken level)
    assert sw.find_peak([_point(1, 50.0, status="errors")]) is None
    assert sw.find_knee([_point(1, 50.0, status="errors")], 0.05) is None
    # a point of an older sweep (no status) counts by its error total
    assert sw.find_peak([_point(1, 50.0, errors={"total": 1})]) is None
    # plateau: a level with errors neither stops the sweep nor serves as the level compared with
    flat = [_point(8, 369.7), _point(16, 370.0, status="errors")]
    assert not sw.plateau_reached(flat, 0.05)
    assert not sw.plateau_reached([_point(8, 369.7, status="errors"), _point(16, 370.0)], 0.05)
    assert sw.plateau_reached([_point(8, 369.7), _point(16, 370.0)], 0.05)


def test_error_warning_names_levels_and_kinds() -> None:
    ok = _point(1, 100.0, status="ok", requests=8, errors={"total": 0})
    broken = _point(4, 300.0, status="errors", requests=8, error_rate=0.5,
                    errors={"http": 0, "stream": 3, "timeout": 0, "connection": 1, "short": 0, "total": 4},
                    error_messages=["stream broken: ServerDisconnectedError: Server disconnected"])
    dead = _point(8, 0.0, ok=0, status="no_requests_ok", requests=16, error_rate=1.0,
                  errors={"http": 0, "stream": 0, "timeout": 0, "connection": 16, "short": 0, "total": 16})
    assert sw.error_warning([ok]) is None
    text = sw.error_warning([ok, broken, dead])
    assert text is not None
    assert "C=4: 4 of 8 requests failed (50%: stream 3, connection 1)" in text
    assert "C=8: 16 of 16 requests failed (100%: connection 16)" in text
    assert "C=1" not in text and "left out of peak, knee and plateau" in text
    assert "First error: stream broken" in text


def test_a_rate_sweeps_peak_and_knee_carry_the_levels_rate() -> None:
    """Issue 28 item 3: every open-loop level has the same concurrency (the in-flight cap), so
    the peak and the knee name their level by its offered rate; on a tie the lower rate wins."""
    points = [{**_point(4096, tok), "offered_rate": rate} for rate, tok in ((2.0, 400.0), (4.0, 1000.0),
                                                                            (8.0, 1480.0), (16.0, 1480.0))]
    assert sw.find_peak(points) == {"concurrency": 4096, "output_tok_s": 1480.0, "client_limited": False,
                                    "offered_rate": 8.0}
    knee = sw.find_knee(points, 0.05)
    assert knee is not None and knee["offered_rate"] == 8.0 and knee["concurrency"] == 4096
