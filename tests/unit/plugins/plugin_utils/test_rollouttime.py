"""The rollout time model (plugin_utils/_rollouttime.py): the formulas on hand-computed cases,
the --check text, and the fit to measured times."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils import _rollouttime as t


def test_hosts_one_at_a_time_instances_one_at_a_time() -> None:
    # 50 hosts x 4 GPUs, L = 3 min, F = 1 min: a host takes 1 + 4 x 3 = 13 min, 50 batches
    r = t.estimate(t.RolloutShape(hosts=50, per_host=4, load_s=180, host_fixed_s=60))
    assert r["host_s"] == 780 and r["batches"] == 50 and r["total_s"] == 50 * 780
    assert r["min_in_routers"] == 199 and r["instances"] == 200


def test_batches_canary_guard_and_run_cost_add_up() -> None:
    shape = t.RolloutShape(hosts=10, per_host=4, load_s=100, host_fixed_s=20, step_s=5, batch_hosts=3, at_once=2,
                           run_fixed_s=30, canary=2, canary_window_s=300, guard_s=60)
    r = t.estimate(shape)
    assert r["steps_per_host"] == 2 and r["host_s"] == 20 + 2 * 105
    assert r["batches"] == 4 and r["batch_s"] == 230 + 60
    assert r["canary_s"] == 20 + 1 * 105 + 300
    assert r["total_s"] == 30 + 425 + 4 * 290
    assert r["min_in_routers"] == 40 - 6


def test_at_once_capped_below_the_host_and_forks_make_waves() -> None:
    r = t.estimate(t.RolloutShape(hosts=8, per_host=4, load_s=60, host_fixed_s=0, batch_hosts=8, at_once=9, forks=3))
    assert r["out_per_host"] == 3 and r["steps_per_host"] == 2
    assert r["batch_s"] == 3 * 120 and r["min_in_routers"] == 32 - 24


def test_bad_shape_refused() -> None:
    with pytest.raises(ValueError, match="hosts=0 must be at least 1"):
        t.RolloutShape(hosts=0, per_host=4, load_s=1, host_fixed_s=1)
    with pytest.raises(ValueError, match="load_s=-1"):
        t.RolloutShape(hosts=1, per_host=4, load_s=-1, host_fixed_s=1)


def test_check_mode_text() -> None:
    lines = t.format_estimate(t.estimate(t.RolloutShape(hosts=50, per_host=4, load_s=180, host_fixed_s=60,
                                                        batch_hosts=10, canary=1, canary_window_s=600, forks=5)))
    text = "\n".join(lines)
    assert "50 hosts x 4 instances, 10 host(s) per batch (5 batches)" in text
    assert "per host: 13 min = fixed 1 min + 4 x (load 3 min + step 0 s)" in text
    assert "2 waves" in text
    assert "total: 2 h 24 min; at least 190 of 200 instances (95 %)" in text


def test_duration() -> None:
    assert t.duration(45) == "45 s" and t.duration(750) == "12 min 30 s" and t.duration(3900) == "1 h 05 min"


def test_fit_to_exact_model_times_is_exact() -> None:
    fit = t.fit_fixed({1: 30 + 3 * 40, 2: 30 + 2 * 40, 3: 30 + 40}, hosts=3)
    assert fit["run_fixed_s"] == pytest.approx(30) and fit["host_s"] == pytest.approx(40)
    assert all(abs(e) < 1e-9 for e in fit["relative_errors"].values())


def test_docs_worked_examples_are_the_model() -> None:
    """docs/fleet.md "Rollout time model": each row of the worked-example table is what the
    model computes for it (F = 1 min, S = 15 s, P = 2 min, L = 3 min, canary 1 x 10 min)."""
    doc = (Path(__file__).resolve().parents[4] / "docs" / "fleet.md").read_text()
    section = doc[doc.index("### Rollout time model"):]
    rows = re.findall(r"^\| (\d+) \| (\d+)[^|]*\| (\d) \| ([^|]+) \| (\d+) \| ([^|]+) \| (\d+) of", section, re.M)
    assert len(rows) == 8
    for hosts, batch, at_once, host_time, batches, total, kept in rows:
        r = t.estimate(t.RolloutShape(hosts=int(hosts), per_host=4, load_s=180, host_fixed_s=60, step_s=15,
                                      batch_hosts=int(batch), at_once=int(at_once), run_fixed_s=120, canary=1,
                                      canary_window_s=600))
        assert (t.duration(r["host_s"]), r["batches"], t.duration(r["total_s"]), r["min_in_routers"]) == (
            host_time.strip(), int(batches), total.strip(), int(kept))
