# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Which levels a sweep measures beyond the closed-loop list, and what each adds to its point:
rate levels (``mode: rate``), the SLO search (``search: true``), repeats (``repeats: N``) and the
goodput of every level (``slo``). ``PlannedLevels`` is mixed into run.py's ``_SweepRun``, whose
``closed_level`` (one closed-loop level) and ``measure_level`` it calls.
"""
from __future__ import annotations

import math
import time
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._sweep.curve import plateau_reached
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.openloop import (
    MAX_SEARCH_PROBES,
    arrival_offsets,
    arrival_seed,
    level_seed,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.ratelevel import rate_fields
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.repeats import summarize_repeats
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.search import Bisection
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.slo import evaluate_slo
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.trace import trace_record

# Connections opened before a rate level (more open on demand).
RATE_WARM_CONNECTIONS = 16


class LevelPlan:
    """Rate levels, the SLO search and repeats, over a sweep's level primitives: ``sweep`` is the
    run in progress (run._SweepRun), whose options, probe, deadline and results it reads and adds
    to, and whose ``closed_level``, ``measure_level`` and ``timeout`` it calls."""

    def __init__(self, sweep: Any) -> None:
        self.sweep = sweep
        self.opts = sweep.opts

    def scale(self) -> float:
        """The time base's factor (model rate = wall rate x scale; 1 on a real server)."""
        scale = self.sweep.before.get("time_scale") or self.opts.time_scale
        return float(scale) if isinstance(scale, (int, float)) and scale > 0 else 1.0

    def cap(self) -> int:
        return int(self.opts.max_inflight or self.opts.max_concurrency)

    async def rate_level(self, level: int, rate: float) -> tuple[dict[str, Any], Any, float]:
        """One open-loop level at ``rate`` requests/s (in the sweep's time base)."""
        opts, scale = self.opts, self.scale()
        # every repeat of a level sends the same schedule: the runs differ by the server only
        offsets = arrival_offsets(rate / scale, opts.arrival, level_seed(arrival_seed(opts.seed), level),
                                  count=opts.requests,
                                  duration=None if opts.requests else float(opts.level_duration_s) * scale)
        clients = self.sweep.clients
        await self.sweep.probe.warm_connections(min(self.cap(), RATE_WARM_CONNECTIONS))
        clients.rate_plan = (rate, offsets)
        try:
            point, run, deadline = await self.sweep.measure_level(level, self.cap(), None)
        finally:
            clients.rate_plan = None
        point.update(rate_fields(clients.last_rate_run, scale))
        drift = point.get("drift")
        if isinstance(drift, dict) and drift.get("flagged"):
            # open loop: the tokens per second follow the random arrivals, not the server's speed
            point["drift"] = {**drift, "flagged": False, "not_judged": "open loop"}
        return point, run, deadline

    async def one_level(self, level: int, load: float, repeat: int) -> tuple[dict[str, Any], Any, float] | None:
        """One measured level (rate or closed loop), its SLO verdict added; None when the sweep
        ran out of time before it."""
        if self.opts.mode == "rate":
            measured = await self.rate_level(level, float(load))
        else:
            measured = await self.sweep.closed_level(level, int(load))
        if measured is None:
            return None
        point, run, _ = measured
        point["repeat"] = repeat
        if self.opts.slo:
            point.update(evaluate_slo(run.traces, self.opts.slo, float(point["duration_s"]), self.scale()))
        return measured

    async def measured_load(self, level: int, load: float) -> dict[str, Any] | None:
        """A load measured ``repeats`` times: the first run's point with the ``repeats`` block
        (mean and 95% interval over the runs); its SLO verdict: every run met it."""
        runs: list[dict[str, Any]] = []
        for repeat in range(self.opts.repeats):
            if time.perf_counter() >= self.sweep.deadline:
                self.sweep.timeout(f"before level {load:g}")
                break
            measured = await self.one_level(level, load, repeat)
            if measured is None:
                break
            point, run, deadline = measured
            runs.append(point)
            if self.opts.return_records:
                for trace in run.traces:
                    record = trace_record(trace, self.sweep.t0)
                    record["repeat"] = repeat
                    self.sweep.records.append(record)
            if run.timed_out and deadline >= self.sweep.deadline:
                self.sweep.timeout(f"during level {load:g}")
                break
        if not runs:
            return None
        point = runs[0]
        if self.opts.repeats > 1:
            point["repeats"] = summarize_repeats(runs, scale=self.scale())
            if self.opts.slo:
                point["slo_met"] = all(p.get("slo_met") for p in runs)
        self.sweep.points.append(point)
        if self.sweep.on_level is not None:
            self.sweep.on_level(point)
        return point

    async def run(self) -> None:
        """The levels of a rate sweep, a search, or repeated closed-loop levels, in order."""
        opts = self.opts
        if opts.search:
            await self.run_search()
            return
        loads = opts.rates if opts.mode == "rate" else opts.concurrency
        for level, load in enumerate(loads):
            if await self.measured_load(level, load) is None or self.sweep.stopped_on_timeout:
                break
            if opts.mode == "concurrency" and opts.stop_on_plateau and plateau_reached(self.sweep.points, opts.plateau_gain):
                self.sweep.stopped_on_plateau = True
                break

    async def run_search(self) -> None:
        """The SLO search (search.Bisection) from the first rate (or concurrency level)."""
        opts = self.opts
        integer = opts.mode != "rate"
        start = (opts.rates or [1.0])[0] if not integer else opts.concurrency[0]
        search = Bisection(start, opts.search_tolerance, MAX_SEARCH_PROBES, integer=integer,
                           upper=float(opts.max_concurrency) if integer else None)
        level = 0
        while True:
            load = search.next_probe()
            if load is None:
                break
            point = await self.measured_load(level, load)
            if point is None:
                break
            search.record(load, bool(point.get("slo_met")))
            level += 1
        self.sweep.search_result = search.result()


def search_fact(result: dict[str, Any] | None, mode: str) -> dict[str, Any] | None:
    """The ``slo_limit`` of the fact: the search's answer in the load's unit."""
    if result is None:
        return None
    unit = "req_s" if mode == "rate" else "concurrency"
    lo, hi = result["highest_pass"], result["lowest_fail"]
    return {
        "unit": unit,
        "highest_pass": None if lo is None else (round(lo, 4) if mode == "rate" else int(lo)),
        "lowest_fail": None if hi is None else (round(hi, 4) if mode == "rate" else int(hi)),
        "converged": result["converged"],
        "tolerance": result["tolerance"],
        "probes": [{"load": round(p["load"], 4) if mode == "rate" else int(p["load"]), "slo_met": p["slo_met"]}
                   for p in result["probes"]],
        "relative_gap": (round((hi - lo) / lo, 4) if lo and hi and math.isfinite(hi) else None),
    }
