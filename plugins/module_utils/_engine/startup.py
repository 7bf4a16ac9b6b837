# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What the engine logs before it serves: the parser's deprecation warnings, the
``server_args=ServerArgs(...)`` line, and the plan's start-up lines with their modelled times,
up to the uvicorn start (docs/engine-api.md "Start-up"); with several nodes, the lines wait for
the nodes to meet after ``Init torch distributed begin.`` (docs/engine-api.md "Multi-node")."""
from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel import EnginePlan
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.loglines import (
    DIST_BEGIN,
    DIST_END_PREFIX,
    dist_end_line,
)

WARMUP_SECONDS = 6.0  # recorded: 6 s (hybrid) to 9 s (dense) from "Uvicorn running" to ready


@dataclass(frozen=True)
class Schedule:
    """The start-up lines at their modelled seconds, when uvicorn starts and when the schedulers
    are ready (load + HiCache pinning)."""

    lines: list[tuple[float, str]]
    uvicorn_at: float
    ready_at: float


class _InfoLog(Protocol):
    def info(self, msg: str) -> None: ...


# sleep until a loop time; True when a stop came first
SleepUntil = Callable[[float], Awaitable[bool]]
# the nodes meeting: wall seconds waited, or None when the start-up is over (stop or failure)
Meet = Callable[[], Awaitable["float | None"]]

_DEPRECATED = (("cuda_graph_bs_deprecated_aliases", "cuda_graph_bs_flag"),
               ("mamba_strategy_deprecated_aliases", "mamba_strategy_flag"))


def server_args_line(args: dict[str, Any]) -> str:
    inner = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return f"server_args=ServerArgs({inner})"


def warn_deprecated_flags(argv: list[str], traits: dict[str, Any]) -> None:
    """The parser's warning for a deprecated alias (recorded: bold yellow, no timestamp)."""
    given = {token.split("=", 1)[0] for token in argv if token.startswith("--")}
    for aliases_key, flag_key in _DEPRECATED:
        for alias in traits.get(aliases_key) or []:
            if alias in given and traits.get(flag_key):
                sys.stderr.write(f"\x1b[1;33m'{alias}' is deprecated and will be removed in a "
                                 f"future release. Use '{traits[flag_key]}' instead.\x1b[0m\n")
    sys.stderr.flush()


def startup_schedule(args: dict[str, Any], plan: EnginePlan, traits: dict[str, Any]) -> Schedule:
    """Start-up log lines with their modelled times, and when uvicorn starts: at readiness
    (load + HiCache pinning; the plan's lines already carry the pinning times) less the
    warm-up (WARMUP_SECONDS), which runs after the uvicorn start, as recorded."""
    lines: list[tuple[float, str]] = []
    if os.environ.get("SGLANG_ENABLE_SPEC_V2") is not None and traits.get("spec_v2_env") == "removed":
        lines.append((0.0, "SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always "
                           "runs the V2 worker. Use --disable-overlap-schedule to select the "
                           "non-overlap (synchronous) path."))
    lines.append((0.0, server_args_line(args)))
    lines += sorted(((float(t), str(m)) for t, m in plan.log_lines), key=lambda item: item[0])
    last = lines[-1][0]
    ready = plan.load_seconds + plan.pin_seconds
    return Schedule(lines, max(last, ready - WARMUP_SECONDS), max(last, ready))


async def play_lines(schedule: Schedule, log: _InfoLog, start: float, scale: float,
                     sleep_until: SleepUntil, meet: Meet | None = None) -> float | None:
    """Log each start-up line at ``start`` + its modelled second x ``scale`` (loop time). With
    ``meet`` (several nodes) the nodes meet right after ``Init torch distributed begin.``, as
    torch's rendezvous does there: the later lines move by the wall time waited, which
    ``Init torch distributed ends. elapsed=...`` reports. Returns the (moved) start, or None
    when a stop came first or the nodes did not meet."""
    waited: float | None = None
    for at, message in schedule.lines:
        if await sleep_until(start + at * scale):
            return None
        if waited is not None and message.startswith(DIST_END_PREFIX):
            message = dist_end_line(0.05 + waited)
        log.info(message)
        if meet is not None and waited is None and message == DIST_BEGIN:
            waited = await meet()
            if waited is None:
                return None
            start += waited
    return start
