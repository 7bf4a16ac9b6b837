# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The SLO search (pure): the highest load (request rate, or concurrency) whose level meets the
SLO, found by bracketing and bisection instead of a sweep of every level.

From ``start``: while the probe passes, double it; when the very first probe fails, halve it
until one passes. Once a passing load ``lo`` and a failing load ``hi`` bracket the limit, probe
their midpoint (geometric for rates, arithmetic for integer concurrency) until
``(hi - lo) / lo <= tolerance`` (for concurrency: also until hi - lo <= 1). The answer is
``highest_pass`` (lo) and ``lowest_fail`` (hi); the true limit of a load whose SLO verdict is
monotonic lies between them. ``max_probes`` bounds the levels measured; the search says whether
it converged.
"""
from __future__ import annotations

import math
from typing import Any

# The lowest rate (requests/s) the downward bracket tries before giving up.
MIN_RATE = 1e-3


class Bisection:
    """Which load to measure next (``next_probe``) and the verdicts so far (``record``)."""

    def __init__(self, start: float, tolerance: float, max_probes: int, integer: bool = False,
                 upper: float | None = None) -> None:
        self.start = max(1, round(start)) if integer else float(start)
        self.tolerance = float(tolerance)
        self.max_probes = int(max_probes)
        self.integer = integer
        self.upper = upper  # the largest load allowed (max_concurrency), None for none
        self.probes: list[dict[str, Any]] = []
        self.lo: float | None = None
        self.hi: float | None = None

    def record(self, load: float, passed: bool) -> None:
        self.probes.append({"load": load, "slo_met": bool(passed)})
        if passed and (self.lo is None or load > self.lo):
            self.lo = load
        if not passed and (self.hi is None or load < self.hi):
            self.hi = load

    def converged(self) -> bool:
        if self.lo is None or self.hi is None:
            return False
        if self.integer and self.hi - self.lo <= 1:
            return True
        return (self.hi - self.lo) / self.lo <= self.tolerance

    def next_probe(self) -> float | None:
        """The next load to measure, or None when the search is over."""
        if len(self.probes) >= self.max_probes or self.converged():
            return None
        if not self.probes:
            return self.start
        if self.hi is None:  # every probe passed: go up
            load = self.lo * 2 if self.lo is not None else self.start
            if self.upper is not None:
                if self.lo is not None and self.lo >= self.upper:
                    return None
                load = min(load, self.upper)
            return load
        if self.lo is None:  # every probe failed: go down
            load = max(1, self.hi // 2) if self.integer else self.hi / 2
            if (self.integer and self.hi <= 1) or (not self.integer and load < MIN_RATE):
                return None
            return load
        if self.integer:
            return (int(self.lo) + int(self.hi)) // 2
        return math.sqrt(self.lo * self.hi)

    def result(self) -> dict[str, Any]:
        return {
            "highest_pass": self.lo,
            "lowest_fail": self.hi,
            "converged": self.converged(),
            "tolerance": self.tolerance,
            "probes": list(self.probes),
        }
