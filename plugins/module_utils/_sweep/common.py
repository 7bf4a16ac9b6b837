# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The sweep's constants, its errors and the small helpers every part of it shares (part of the
``_sweep`` package: see its ``__init__``).
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timezone

from ansible_collections.llmops.sglang.plugins.module_utils._server import info as _serverinfo
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.spec import ARGUMENT_SPEC

SCHEMA_VERSION = 1
APIS = tuple(ARGUMENT_SPEC["api"]["choices"])
ERROR_KINDS = ("http", "stream", "timeout", "connection", "short")
DEFAULT_CONCURRENCY: tuple[int, ...] = tuple(ARGUMENT_SPEC["concurrency"]["default"])
# Client health: a level is client-limited when the event loop used this share of one CPU core
# (a Python client cannot use more than one) or ran this late (p99) on its 10 ms ticks.
CLIENT_CPU_LIMIT = 0.85
CLIENT_LAG_LIMIT_MS = 20.0
TICK_S = 0.01
READ_BUFSIZE = 1 << 22  # native streams repeat the cumulative output: long lines
SERVER_INFO_PATHS = _serverinfo.SERVER_INFO_PATHS
PROBE_TIMEOUT_S = 10.0
MAX_ERROR_MESSAGES = 5
# Level warm-up: max(C, prompts) requests of this many tokens and more (staggered) at the level's
# own concurrency, discarded.
LEVEL_WARMUP_TOKENS: int = ARGUMENT_SPEC["level_warmup_tokens"]["default"]
# Drift: throughput of the second half of a level's window against the first; flagged when
# the ratio is off 1 by more than this. A half needs this many tokens and token chunks to count.
DRIFT_THRESHOLD = 0.15
DRIFT_MIN_TOKENS = 100
DRIFT_MIN_CHUNKS = 50
# Server-side latency: the server's histograms (real SGLang names, 'sglang:' or 'sglang_').
SERVER_HISTOGRAMS = {
    "time_to_first_token_seconds": "ttft",
    "inter_token_latency_seconds": "itl",
    "e2e_request_latency_seconds": "e2e",
}
METRICS_PATH = "/metrics"
# A time-scaled level's client latency is kept when it agrees with the engine's model within
# this share (mean within it; each percentile within the model's histogram bucket widened by it).
LATENCY_TOLERANCE = 0.25
# Without server histograms: a time-scaled latency is measurable only when its wall-clock p50 is
# at least this many times the client's timing jitter (loop lag p99, at least JITTER_FLOOR_MS).
LATENCY_JITTER_FACTOR = 10.0
JITTER_FLOOR_MS = 0.5
# The highest concurrency level accepted unless max_concurrency says otherwise: every level opens
# that many connections and client tasks at once, far more than any one server runs.
MAX_CONCURRENCY: int = ARGUMENT_SPEC["max_concurrency"]["default"]
# A level above this many times the server's effective max_running_requests mostly waits in
# its queue: warned about.
OVERSUBSCRIPTION = 8
# Open files the client needs besides one connection per client (probes, the loop, the module).
SPARE_FILES = 64
# Python < 3.11 (engine venvs) has a separate asyncio.TimeoutError.
TIMEOUTS: tuple[type[BaseException], ...] = (TimeoutError, asyncio.TimeoutError)

DEFAULT_PROMPTS: tuple[str, ...] = (
    "Write a Python function that parses a CSV file without the csv module, handles quoted fields "
    "with embedded commas and newlines, and returns a list of dictionaries. Explain each step.",
    "Explain how TCP congestion control works, comparing Reno, CUBIC and BBR, and describe what "
    "happens to throughput and latency when a link starts dropping packets.",
    "Build a React component for a searchable, paginated table of users fetched from a REST API. "
    "Use hooks, debounce the search input and handle loading and error states.",
    "Analyse the time and space complexity of quicksort, mergesort and heapsort in the best, "
    "average and worst cases, and explain when each is the right choice in practice.",
    "Write a bash script that rotates log files in a directory: compress files older than a day, "
    "delete archives older than thirty days, and print a summary. Make it safe with set -euo.",
    "Compare hash tables, balanced binary search trees, skip lists and B-trees: operations, "
    "complexity, memory layout and cache behaviour, with an example use for each.",
    "Describe how garbage collection works in the JVM, Go and CPython: tracing versus reference "
    "counting, generations, pauses, and how to tune each for a latency-sensitive service.",
    "Write a multi-stage Dockerfile for a Python web service with a slim runtime image, a non-root "
    "user and a health check, then explain layer caching and how to keep the image small.",
)


class SweepError(Exception):
    """A sweep that cannot start (bad options, no model and no /v1/models, missing aiohttp)."""


class SweepInterrupted(SweepError):
    """A sweep stopped before its end (a signal, its controller gone): nothing is sent any more."""

    def __init__(self, reason: str, current: int | None, done: Sequence[int]) -> None:
        during = f"during C={current}" if current is not None else "before the first level"
        finished = ", ".join(map(str, done)) or "none"
        super().__init__(
            f"sweep stopped: {reason} ({during}; levels finished: {finished}); its requests were cancelled "
            "and nothing more is sent"
        )
        self.reason = reason


# HTTP statuses of a server that wants an API key (SGLang's --api-key answers 401).
AUTH_STATUSES = (401, 403)


def level_label(point: dict) -> str:
    """A level in words: ``4 req/s`` for an open-loop (rate mode) level, whose ``concurrency`` is
    only its in-flight cap (the same for every level), ``C=4`` otherwise (issue 28 item 3)."""
    rate = point.get("offered_rate")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        return f"{rate:g} req/s"
    return f"C={point.get('concurrency')}"


def auth_message(url: str, status: int, key_sent: bool) -> str:
    """What to do when the server refuses the request for want of the right API key."""
    if key_sent:
        what = "refused the API key that was sent: the server expects another one"
    else:
        what = "requires an API key (it was started with --api-key) and none was sent"
    return (
        f"{url} answered HTTP {status}: the server {what}. Set the api_key option to the server's key "
        "(bench role: sglang_bench_api_key, which defaults to the deployment's sglang_api_key, so "
        "setting sglang_api_key as for deploy.yml is enough)."
    )


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")  # noqa: UP017
