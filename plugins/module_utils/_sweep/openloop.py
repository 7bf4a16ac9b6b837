# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The open-loop options of a sweep (``mode``, ``rates``, ``arrival``, ``level_duration_s``,
``seed``, ``max_inflight``, ``slo``, ``search``, ``search_tolerance``, ``repeats``), checked at
once (``check_open_loop``), and the seeded arrival schedule of a rate level (``arrival_offsets``,
pure). See docs/sweep.md "Open-loop rate mode".
"""
from __future__ import annotations

import math
import random
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import SweepError
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.spec import ARGUMENT_SPEC

MODES = tuple(ARGUMENT_SPEC["mode"]["choices"])
ARRIVALS = tuple(ARGUMENT_SPEC["arrival"]["choices"])
# Seconds of arrivals per rate level when neither requests nor level_duration_s is given.
DEFAULT_LEVEL_DURATION_S = 60.0
MAX_REPEATS = 100
# Relative step at which the SLO search stops bisecting, unless search_tolerance says otherwise.
DEFAULT_SEARCH_TOLERANCE: float = ARGUMENT_SPEC["search_tolerance"]["default"]
# The most levels one SLO search measures (bracketing and bisection together).
MAX_SEARCH_PROBES = 24
# The seed when none is given (the workloads' default too).
DEFAULT_SEED = 42


def arrival_offsets(rate: float, arrival: str, seed: int, count: int | None = None,
                    duration: float | None = None) -> list[float]:
    """Send times of a rate level, in seconds from its start: the first request at 0, then gaps
    drawn from ``random.Random(seed)`` (``poisson``: exponential gaps of mean 1/rate;
    ``constant``: 1/rate each). ``count`` requests, or every arrival before ``duration``.
    Absolute offsets, so a late send never delays the ones after it (as vLLM's bench)."""
    if not rate > 0 or not math.isfinite(rate):
        raise SweepError(f"a rate must be a finite number of requests/s > 0, got {rate!r}")
    if (count is None) == (duration is None):
        raise SweepError("a rate level needs either a request count or a duration")
    rng = random.Random(seed)
    offsets: list[float] = []
    t = 0.0
    while True:
        if count is not None and len(offsets) >= count:
            return offsets
        if duration is not None and t >= duration:
            return offsets
        offsets.append(t)
        t += rng.expovariate(rate) if arrival == "poisson" else 1.0 / rate


def arrival_seed(seed: int | None) -> int:
    """The seed the arrival schedules derive from: the ``seed`` option, DEFAULT_SEED without one."""
    return DEFAULT_SEED if seed is None else int(seed)


def level_seed(seed: int, level: int, repeat: int = 0) -> int:
    """The seed of one level's schedule: distinct per level and repeat, the same on every run."""
    return seed * 1_000_003 + level * 1009 + repeat


def _positive_number(name: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not number > 0 or not math.isfinite(number):
        raise SweepError(f"{name} must be a finite number > 0, got {value!r}")
    return number


def _check_rates(rates: Any, mode: str, search: bool) -> list[float]:
    values = sorted({_positive_number("each of rates", r) for r in (rates or [])})
    if mode == "rate" and not values:
        raise SweepError(
            "mode rate needs rates: a list of request rates in requests/s, e.g. [1, 2, 4] "
            "(with search: true, its first value is where the search starts)")
    if mode == "concurrency" and values and not search:
        raise SweepError(f"rates {values} is set but mode is concurrency: set mode: rate to send at those rates")
    return values


def check_open_loop(opts: Any) -> dict[str, Any]:
    """The open-loop fields of ``opts`` (a SweepOptions) checked and normalized; raises
    SweepError naming the value, the rule and the fix. Nothing was sent when it does."""
    from ansible_collections.llmops.sglang.plugins.module_utils._sweep.slo import parse_slo

    mode = opts.mode or "concurrency"
    if mode not in MODES:
        raise SweepError(f"mode must be one of {', '.join(MODES)}, got {opts.mode!r}")
    if opts.arrival not in ARRIVALS:
        raise SweepError(f"arrival must be one of {', '.join(ARRIVALS)}, got {opts.arrival!r}")
    search = bool(opts.search)
    rates = _check_rates(opts.rates, mode, search)
    level_duration = None
    if opts.level_duration_s is not None:
        level_duration = _positive_number("level_duration_s", opts.level_duration_s)
        if opts.requests is not None:
            raise SweepError("requests and level_duration_s are mutually exclusive: a rate level runs for a "
                             "request count or a duration")
        if mode != "rate":
            raise SweepError("level_duration_s is for mode rate; in mode concurrency use duration")
    if mode == "rate" and opts.duration is not None:
        raise SweepError("in mode rate, give the time per level as level_duration_s (duration is the closed-loop "
                         "option)")
    if opts.seed is not None and (isinstance(opts.seed, bool) or not isinstance(opts.seed, int)):
        raise SweepError(f"seed must be an integer, got {opts.seed!r}")
    repeats = opts.repeats
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        raise SweepError(f"repeats must be an integer from 1 to {MAX_REPEATS}, got {repeats!r}")
    slo = parse_slo(opts.slo)
    if search and not slo:
        raise SweepError("search: true needs an slo (e.g. {ttft_p99_ms: 500}): the search looks for the "
                         "highest load that meets it")
    tolerance = _positive_number("search_tolerance", opts.search_tolerance)
    if tolerance >= 1:
        raise SweepError(f"search_tolerance is relative and must be below 1 (0.05 = 5%), got {tolerance!r}")
    inflight = opts.max_inflight
    if inflight is not None and (isinstance(inflight, bool) or not isinstance(inflight, int) or inflight < 1):
        raise SweepError(f"max_inflight must be an integer >= 1, got {inflight!r}")
    if inflight is not None and inflight > int(opts.max_concurrency):
        raise SweepError(f"max_inflight {inflight} is above max_concurrency={int(opts.max_concurrency)}: lower it, "
                         "or raise max_concurrency if you mean it. Nothing was sent.")
    if mode == "rate" and opts.requests is None and level_duration is None:
        level_duration = DEFAULT_LEVEL_DURATION_S
    return {
        "mode": mode, "rates": rates, "arrival": opts.arrival, "level_duration_s": level_duration,
        "repeats": repeats, "slo": slo, "search": search,
        "search_tolerance": tolerance, "max_inflight": inflight,
    }


def open_loop_effective(opts: Any) -> dict[str, Any]:
    """The open-loop options as run, for the facts."""
    return {
        "mode": opts.mode, "rates": list(opts.rates or []), "arrival": opts.arrival,
        "level_duration_s": opts.level_duration_s, "arrival_seed": arrival_seed(opts.seed),
        "max_inflight": opts.max_inflight if opts.max_inflight is not None else opts.max_concurrency,
        "slo": dict(opts.slo or {}), "search": opts.search, "search_tolerance": opts.search_tolerance,
        "repeats": opts.repeats,
    }
