# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What the engine logs before it serves: the parser's deprecation warnings, the
``server_args=ServerArgs(...)`` line, and the plan's start-up lines with their modelled times,
up to the uvicorn start (docs/engine-api.md "Start-up")."""
from __future__ import annotations

import os
import sys
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel import EnginePlan

WARMUP_SECONDS = 6.0  # recorded: 6 s (hybrid) to 9 s (dense) from "Uvicorn running" to ready

Schedule = tuple[list[tuple[float, str]], float]  # (modelled second, line)..., uvicorn start

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
    return lines, max(last, ready - WARMUP_SECONDS)
