"""The "Prefix cache" table (_report/cache.py): the storage tier's columns appear when a level has
the tier, and say what each level found and whether the sweep cleared it first."""
from __future__ import annotations

from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._report.cache import (
    render_cache_table,
    workload_line,
)


def _point(c: int, storage: float | None, cleared: bool | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"flush": {"ok": True, "status": 200}, "warm": None}
    if cleared is not None:
        state["clear_storage"] = {"ok": cleared, "status": 200 if cleared else 400}
    return {"concurrency": c, "cache_state": state,
            "server_metrics": {"cache_hit_rate": 0.9, "cache_hit_rate_device": 0.0, "cache_hit_rate_host": 0.0,
                               "cache_hit_rate_storage": storage},
            "client_cache": {"requests": 4, "cache_hit_rate": 0.9, "cached_tokens": 3712}}


def _rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines()]


def test_a_warm_restart_shows_its_storage_hits_and_a_cleared_level_none() -> None:
    warm = _rows(render_cache_table({"points": [_point(2, 0.906)]}) or "")
    assert warm[0] == ["C", "flushed", "warmed", "server hit", "device hit", "host hit", "storage hit", "client hit",
                       "cached tok (client)"]
    assert warm[2] == ["2", "yes", "-", "90.0%", "0.0%", "0.0%", "90.6%", "90.0%", "3712"]
    cleared = _rows(render_cache_table({"points": [_point(2, 0.0, cleared=True), _point(4, 0.0, cleared=False)]}) or "")
    assert cleared[0][:3] == ["C", "flushed", "storage cleared"] and "storage hit" in cleared[0]
    assert cleared[2][2] == "yes" and cleared[3][2] == "failed (400)"
    line = workload_line({"options": {"workload": {"kind": "shared_prefix", "groups": 4, "seed": 5},
                                      "flush_cache": True, "clear_storage": True}})
    assert line == "Workload: shared_prefix (groups 4), seed 5; flush_cache and clear_storage before each level."


def test_without_a_storage_tier_the_table_is_as_before() -> None:
    point = _point(2, None)
    rows = _rows(render_cache_table({"points": [point]}) or "")
    assert rows[0] == ["C", "flushed", "warmed", "server hit", "device hit", "host hit", "client hit",
                       "cached tok (client)"]
