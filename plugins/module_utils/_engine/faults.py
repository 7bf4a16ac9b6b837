# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Faults a test can inject into the engine through its environment (never SGLang flags), so
that a configuration change can be "bad" the way a real one can (docs/engine-api.md
"Environment"): ``LLMOPS_SIM_FAIL_SHARE`` answers that share of generation requests with HTTP
500 before any token is generated, ``LLMOPS_SIM_DECODE_SLOWDOWN`` multiplies the modelled time
of every decode step. Values that are no valid share / factor refuse the start
(``host.StartupError``)."""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from ansible_collections.llmops.sglang.plugins.module_utils._engine.host import StartupError
from ansible_collections.llmops.sglang.plugins.module_utils._engine.log import Log

FAIL_SHARE_ENV = "LLMOPS_SIM_FAIL_SHARE"
DECODE_SLOWDOWN_ENV = "LLMOPS_SIM_DECODE_SLOWDOWN"


@dataclass(frozen=True)
class Faults:
    """The injected faults; the defaults inject none."""

    fail_share: Fraction = Fraction(0)  # exact, so that the k-th request's fate is exact
    decode_slowdown: float = 1.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Faults:
        """The faults the environment asks for; StartupError naming the variable, the value and
        the rule when one is invalid. Unset or empty: no fault."""
        env = os.environ if environ is None else environ
        return cls(fail_share=_fail_share(env.get(FAIL_SHARE_ENV, "").strip()),
                   decode_slowdown=_decode_slowdown(env.get(DECODE_SLOWDOWN_ENV, "").strip()))

    def as_dict(self) -> dict[str, float]:
        return {"fail_share": float(self.fail_share), "decode_slowdown": self.decode_slowdown}


def _fail_share(raw: str) -> Fraction:
    if not raw:
        return Fraction(0)
    try:
        share = Fraction(Decimal(raw))  # "0.3" is exactly 3/10
    except (ArithmeticError, ValueError):  # not a number, nan, inf
        share = None
    if share is None or not 0 <= share <= 1:
        raise StartupError(f"invalid {FAIL_SHARE_ENV}={raw!r}: the share of generation requests "
                           f"to fail must be a number from 0 to 1 (e.g. 0.3; 0 or unset: none)")
    return share


def _decode_slowdown(raw: str) -> float:
    if not raw:
        return 1.0
    try:
        factor = float(raw)
    except ValueError:
        factor = math.nan
    if not (math.isfinite(factor) and factor >= 1.0):
        raise StartupError(f"invalid {DECODE_SLOWDOWN_ENV}={raw!r}: the factor on every decode "
                           f"step's modelled time must be a finite number >= 1 (e.g. 3; 1 or "
                           f"unset: none)")
    return factor


class FailureGate:
    """Which generation requests fail: request k (counted from 1) fails when
    floor(k x share) > floor((k - 1) x share), so any N consecutive requests hold
    floor or ceil of N x share failures, spread evenly, with no randomness."""

    def __init__(self, share: Fraction) -> None:
        self.share = share
        self.seen = 0
        self.failed = 0

    def next_fails(self) -> bool:
        """Count one more generation request; True when it is to fail."""
        if not self.share:
            return False
        self.seen += 1
        fails = math.floor(self.seen * self.share) > math.floor((self.seen - 1) * self.share)
        self.failed += int(fails)
        return fails

    def fail_next(self, log: Log) -> str | None:
        """Count one more generation request: the error message (logged as SGLang logs a
        request that raised) when it is to fail, else None."""
        if not self.next_fails():
            return None
        message = (f"injected fault: {FAIL_SHARE_ENV}={float(self.share):g} fails this request "
                   f"({self.failed} of {self.seen} generation requests so far)")
        log.error(f"Error in request: {message}")
        return message
