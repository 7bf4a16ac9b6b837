"""A level's warm-up (module_utils/_sweep/level.py), against tests/unit/knownrate_server.py."""
from __future__ import annotations

import time

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw

from .helpers import (
    _stats,
    configure,
)

# ------------------------------------------------------------------------------------------------
# Level warm-up
# ------------------------------------------------------------------------------------------------


def test_level_warmup_runs_at_the_level_concurrency_and_is_not_counted(server: str) -> None:
    configure(server, rate=2000.0, prefill_s=0.01, slots=8)
    facts = sw.run_sweep(sw.SweepOptions(url=server, concurrency=[2, 4], requests=4, warmup=1, max_tokens=40))
    # the start's warm-up (40 tokens); per level max(C, 8 prompts) warm-up requests at
    # concurrency C, staggered 16, 20, ... up to 16 + 4 (C - 1) tokens; 4 measured of 40
    assert _stats(server)["max_tokens_seen"] == {"16": 4 + 2, "20": 4 + 2, "24": 2, "28": 2, "40": 1 + 4 + 4}
    for point in facts["points"]:
        c = point["concurrency"]
        assert point["requests"] == 4 and point["ok"] == 4 and point["output_tokens"] == 4 * 40
        assert point["errors"]["total"] == 0
        warm = point["level_warmup"]
        assert (warm["requests"], warm["ok"], warm["errors"]["total"]) == (8, 8, 0)
        lengths = [16 + 4 * (i % c) for i in range(8)]
        assert warm["max_tokens"] == 16 and warm["max_tokens_longest"] == max(lengths)
        assert warm["output_tokens"] == sum(lengths) and warm["seconds"] > 0
        # a real (wall-clock) server: nothing to check the latencies against, no /metrics here
        assert point["latency_measurable"] is None and point["server"] is None
    assert len(facts["records"]) == 8 and all(r["output_tokens"] == 40 for r in facts["records"])
    assert facts["level_warmup"] == {"enabled": True, "max_tokens": 16, "requests": 16, "errors": 0}
    assert facts["server"]["metrics"] is False
    assert any("no server-side latency" in w for w in facts["warnings"])
    # the warm-up round has all C requests in flight at once (the level itself only 1 here)
    configure(server, rate=2000.0, prefill_s=0.05, slots=8)
    facts = sw.run_sweep(sw.SweepOptions(url=server, concurrency=[3], requests=1, warmup=0, max_tokens=40))
    assert _stats(server)["max_in_flight"] == 3 and facts["points"][0]["level_warmup"]["requests"] == 8
    # off: nothing but the measured requests
    configure(server, rate=2000.0, prefill_s=0.01, slots=8)
    facts = sw.run_sweep(
        sw.SweepOptions(url=server, concurrency=[2], requests=4, warmup=0, level_warmup=False, max_tokens=40)
    )
    assert _stats(server)["max_tokens_seen"] == {"40": 4} and facts["points"][0]["level_warmup"] is None
    with pytest.raises(sw.SweepError, match="level_warmup_tokens"):
        sw.SweepOptions(url=server, level_warmup_tokens=0).normalized()


def test_failed_level_warmup_is_reported_not_counted(server: str) -> None:
    configure(server, rate=2000.0, prefill_s=0.01, slots=8, fail_http_below_tokens=20)
    facts = sw.run_sweep(sw.SweepOptions(url=server, concurrency=[2], requests=4, warmup=0, max_tokens=40))
    point = facts["points"][0]
    assert point["ok"] == 4 and point["errors"]["total"] == 0 and point["error_rate"] == 0
    warm = point["level_warmup"]  # 8 requests of 16 and 20 tokens: the four of 16 fail
    assert warm["ok"] == 4 and warm["errors"]["http"] == 4 and warm["errors"]["total"] == 4
    assert any("injected" in m for m in warm["error_messages"])
    assert facts["level_warmup"]["errors"] == 4
    assert any("4 of 8 level warm-up requests failed (http 4)" in w for w in facts["warnings"])


def test_level_warmup_on_a_hung_server_ends_at_level_timeout(server: str) -> None:
    configure(server, hang=True, hang_s=30.0)
    began = time.monotonic()
    facts = sw.run_sweep(
        sw.SweepOptions(url=server, concurrency=[2], requests=2, warmup=0, max_tokens=10,
                        timeout=30.0, level_timeout=0.5, sweep_timeout=5.0)
    )
    assert time.monotonic() - began < 25.0  # the level limits, not the 30 s requests
    point = facts["points"][0]
    assert point["level_warmup"]["timed_out"] and point["level_warmup"]["errors"]["timeout"] == 2
    assert point["level_timed_out"] and point["errors"]["timeout"] == 2


# ------------------------------------------------------------------------------------------------
# The client's health: its own lag, apart from the waits for a CPU other processes held
# ------------------------------------------------------------------------------------------------

def _late_ticks(run_delay, blocks: int = 3) -> sw.Health:
    """A Health over a loop whose callbacks block it for 60 ms three times (a late tick each)."""
    import asyncio

    async def main() -> sw.Health:
        health = sw.Health(run_delay=run_delay)
        health.start()
        for _ in range(blocks):
            await asyncio.sleep(0.03)
            time.sleep(0.06)  # the loop is held: the next tick is late by about this
        await asyncio.sleep(0.03)
        await health.stop()
        return health

    return asyncio.run(main())


def test_a_tick_late_because_the_cpu_was_taken_is_not_the_clients_own_lag() -> None:
    # a run-queue clock that says the thread waited as long as the loop was held: the machine's
    # load, not the client's work (the lag, by wall clock, still shows it)
    waited = {"s": 0.0, "last": time.perf_counter()}

    def busy_machine() -> float:
        now = time.perf_counter()
        waited["s"] += now - waited["last"] if now - waited["last"] > 0.02 else 0.0
        waited["last"] = now
        return waited["s"]

    health = _late_ticks(busy_machine)
    assert health.lag_ms_p99 >= 40.0
    assert health.own_lag_ms_p99 is not None and health.own_lag_ms_p99 < 20.0
    assert sw.judged_lag(health) == health.own_lag_ms_p99


def test_a_tick_late_because_the_loop_was_busy_is_the_clients_own_lag() -> None:
    health = _late_ticks(lambda: 0.0)  # never waited for a CPU: the client's own work was late
    assert health.own_lag_ms_p99 >= 40.0 and sw.judged_lag(health) >= 40.0
    assert sw.client_limited(sw.judged_lag(health), 0.1)


def test_without_run_queue_figures_the_wall_lag_judges() -> None:
    health = _late_ticks(lambda: None)
    assert health.own_lag_ms_p99 is None and sw.judged_lag(health) == health.lag_ms_p99 >= 40.0


def test_run_delay_reads_the_second_schedstat_field(tmp_path) -> None:
    stat = tmp_path / "schedstat"
    stat.write_text("355499136 606621000 25\n")
    assert sw.run_delay_s(str(stat)) == pytest.approx(0.606621)
    assert sw.run_delay_s(str(tmp_path / "none")) is None
    stat.write_text("garbage\n")
    assert sw.run_delay_s(str(stat)) is None
