# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Throughput sweep engine for SGLang servers (and anything speaking their streaming APIs).

Used by the ``llmops.sglang.throughput_sweep`` module; plain Python, no Ansible import, aiohttp
only where requests are sent (the statistics, stream parsers, knee and plateau rules below import
and run without it). See docs/sweep.md for every definition.

What it gets right that common clients get wrong:

- output tokens come from the server (``usage.completion_tokens`` in OpenAI streams with
  ``stream_options.include_usage``, cumulative ``meta_info.completion_tokens`` in native
  ``/generate`` streams), never from the number of chunks;
- TTFT is stamped at the first chunk that carries a token, whatever its text (real SGLang sends
  ``"text": ""`` token chunks); the role-only chat chunk and the usage-only chunk are not tokens;
- ITL is per token: a chunk's gap is spread over the tokens it added;
- HTTP errors, in-stream errors, timeouts, connection errors and short outputs are counted by kind
  and stay in the denominators;
- one shared connector without the 100-connection cap, connections opened before each level,
  warm-up excluded (one request at the start, and a short discarded round at each level's own
  concurrency, so that kernels compiled at the first batch of a new shape are not measured),
  a full-run and a steady-window throughput per level, and a drift check between the two
  halves of the level's window;
- the server's own latency histograms (``/metrics``) are read before and after each level;
  on the time-scaled embedded engine they are the model's latencies, against which the
  client's converted TTFT/ITL are checked (a level where the client cannot time them at that
  scale says so instead of showing wrong numbers);
- the client itself is measured (event-loop lag, CPU) and a level it limited is flagged;
- every stage is bounded: per request, per level, per sweep.
"""
from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils import _serverinfo, _servermetrics
from ansible_collections.llmops.sglang.plugins.module_utils._interrupt import Heartbeat, Interrupts
from ansible_collections.llmops.sglang.plugins.module_utils._sweepworkers import (
    ClientPool,
    ClientProcessError,
    auto_limit,
    escalation_entry,
    parse_client_processes,
)

try:
    import aiohttp

    HAS_AIOHTTP = True
    AIOHTTP_IMPORT_ERROR: str | None = None
except ImportError as _exc:  # pragma: no cover - depends on the interpreter
    aiohttp = None  # type: ignore[assignment]
    HAS_AIOHTTP = False
    AIOHTTP_IMPORT_ERROR = str(_exc)

SCHEMA_VERSION = 1
APIS = ("openai", "native")
ERROR_KINDS = ("http", "stream", "timeout", "connection", "short")
DEFAULT_CONCURRENCY: tuple[int, ...] = (1, 4, 8, 16, 32, 48)
# A level whose full-run throughput reaches this share of the peak is at (or past) the knee.
KNEE_SHARE = 0.9
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
LEVEL_WARMUP_TOKENS = 16
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
MAX_CONCURRENCY = 4096
# A level above this many times the server's effective max_running_requests mostly waits in
# its queue: warned about.
OVERSUBSCRIPTION = 8
# Open files the client needs besides one connection per client (probes, the loop, the module).
SPARE_FILES = 64
# Python < 3.11 (engine venvs) has a separate asyncio.TimeoutError.
_TIMEOUTS: tuple[type[BaseException], ...] = (TimeoutError, asyncio.TimeoutError)

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


def missing_aiohttp_message(python: str) -> str:
    """The message a module fails with when its interpreter lacks aiohttp."""
    return (
        f"the Python running this module ({python}) cannot import aiohttp ({AIOHTTP_IMPORT_ERROR}). "
        "Run the sweep with the SGLang engine venv's Python (set ansible_python_interpreter to it), "
        "or on the controller (delegate_to: localhost), or install aiohttp for this interpreter."
    )


def open_files_limit(concurrency: int, soft: int, hard: int, infinity: int) -> int | None:
    """The soft RLIMIT_NOFILE to set for a level of ``concurrency`` clients (a connection each and
    SPARE_FILES more): None when ``soft`` already allows it, else the files needed when the hard
    limit allows them. Raises SweepError when it does not."""
    needed = concurrency + SPARE_FILES
    if soft == infinity or soft >= needed:
        return None
    if hard == infinity or hard >= needed:
        return needed
    raise SweepError(
        f"concurrency {concurrency} needs about {needed} open files (a connection per client and {SPARE_FILES} "
        f"more), and this process may open at most {hard} (the hard limit of ulimit -n): lower the level, or "
        "raise the open-files limit of the user that runs the sweep (limits.conf, systemd LimitNOFILE). "
        "Nothing was sent."
    )


def raise_open_files(concurrency: int) -> None:
    """Raise this process's soft open-files limit when it is too low for ``concurrency``
    connections (the hard limit allowing), so that a level does not fail half way through with
    'Too many open files'."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not a Unix host
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    new = open_files_limit(concurrency, soft, hard, resource.RLIM_INFINITY)
    if new is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")  # noqa: UP017


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------


@dataclass
class SweepOptions:
    url: str
    api: str = "openai"
    concurrency: list[int] = field(default_factory=lambda: list(DEFAULT_CONCURRENCY))
    requests: int | None = None  # per level; None: max(2*C, 8)
    duration: float | None = None  # seconds per level instead of a request count
    max_tokens: int = 1024
    temperature: float = 0.6
    top_p: float = 0.95
    ignore_eos: bool = True
    prompts: list[str] | None = None  # None: DEFAULT_PROMPTS
    warmup: int = 1
    level_warmup: bool = True  # a discarded round of C short requests before each level
    level_warmup_tokens: int = LEVEL_WARMUP_TOKENS
    timeout: float = 900.0  # per request, queueing at the server included
    level_timeout: float = 1800.0
    sweep_timeout: float = 7200.0
    stop_on_plateau: bool = False
    plateau_gain: float = 0.05
    api_key: str | None = None
    model: str | None = None
    return_records: bool = True
    validate_certs: bool = True
    max_concurrency: int = MAX_CONCURRENCY
    fail_on_errors: bool = False  # acted on by the module (the sweep itself always returns)
    watch_pid: int | None = None  # stop when this process is gone (the controller's ansible)
    # stop when nobody refreshed this file for heartbeat_timeout s (a controller on another host)
    heartbeat_file: str | None = None
    heartbeat_timeout: float = 60.0
    # the embedded engine's time scale when the server does not report one (a router in front
    # of engines): the sweep is then converted to modelled time like theirs
    time_scale: float | None = None
    client_processes: Any = 1  # client processes per level; 0 or "auto": more when client-limited

    def normalized(self) -> SweepOptions:
        """A checked copy: base URL without a trailing / or /v1, levels sorted and deduplicated."""
        url = (self.url or "").strip().rstrip("/")
        if url.endswith("/v1"):
            url = url[: -len("/v1")]
        if not url.startswith(("http://", "https://")):
            raise SweepError(f"url must start with http:// or https://, got {self.url!r}")
        if self.api not in APIS:
            raise SweepError(f"api must be one of {', '.join(APIS)}, got {self.api!r}")
        levels = sorted({int(c) for c in (self.concurrency or [])})
        if not levels or levels[0] < 1:
            raise SweepError(f"concurrency must be a non-empty list of integers >= 1, got {self.concurrency!r}")
        if int(self.max_concurrency) < 1:
            raise SweepError("max_concurrency must be >= 1")
        too_high = [c for c in levels if c > int(self.max_concurrency)]
        if too_high:
            raise SweepError(
                f"concurrency {', '.join(map(str, too_high))} is above max_concurrency={int(self.max_concurrency)}: "
                "a level opens that many connections and client tasks at once, and the requests beyond the "
                "server's max_running_requests only wait in its queue. Lower the level, or raise max_concurrency "
                "(the bench role's sglang_bench_max_concurrency) if you mean it. Nothing was sent."
            )
        if self.watch_pid is not None and int(self.watch_pid) < 1:
            raise SweepError(f"watch_pid must be a process id >= 1, got {self.watch_pid!r}")
        if not float(self.heartbeat_timeout) > 0:
            raise SweepError(f"heartbeat_timeout must be > 0 seconds, got {self.heartbeat_timeout!r}")
        if self.requests is not None and self.duration is not None:
            raise SweepError("requests and duration are mutually exclusive")
        if self.requests is not None and int(self.requests) < 1:
            raise SweepError("requests must be >= 1")
        if self.duration is not None and float(self.duration) <= 0:
            raise SweepError("duration must be > 0")
        if int(self.max_tokens) < 1:
            raise SweepError("max_tokens must be >= 1")
        if int(self.warmup) < 0:
            raise SweepError("warmup must be >= 0")
        if int(self.level_warmup_tokens) < 1:
            raise SweepError("level_warmup_tokens must be >= 1")
        for name in ("timeout", "level_timeout", "sweep_timeout"):
            if float(getattr(self, name)) <= 0:
                raise SweepError(f"{name} must be > 0")
        if float(self.plateau_gain) < 0:
            raise SweepError("plateau_gain must be >= 0")
        if self.time_scale is not None and not float(self.time_scale) > 0:
            raise SweepError(f"time_scale must be > 0, got {self.time_scale!r}")
        prompts = list(self.prompts) if self.prompts else list(DEFAULT_PROMPTS)
        if not all(isinstance(p, str) and p for p in prompts):
            raise SweepError("prompts must be non-empty strings")
        return SweepOptions(
            url=url,
            api=self.api,
            concurrency=levels,
            requests=None if self.requests is None else int(self.requests),
            duration=None if self.duration is None else float(self.duration),
            max_tokens=int(self.max_tokens),
            temperature=float(self.temperature),
            top_p=float(self.top_p),
            ignore_eos=bool(self.ignore_eos),
            prompts=prompts,
            warmup=int(self.warmup),
            level_warmup=bool(self.level_warmup),
            level_warmup_tokens=int(self.level_warmup_tokens),
            timeout=float(self.timeout),
            level_timeout=float(self.level_timeout),
            sweep_timeout=float(self.sweep_timeout),
            stop_on_plateau=bool(self.stop_on_plateau),
            plateau_gain=float(self.plateau_gain),
            api_key=self.api_key or None,
            model=self.model or None,
            return_records=bool(self.return_records),
            validate_certs=bool(self.validate_certs),
            max_concurrency=int(self.max_concurrency),
            fail_on_errors=bool(self.fail_on_errors),
            watch_pid=None if self.watch_pid is None else int(self.watch_pid),
            heartbeat_file=self.heartbeat_file or None,
            heartbeat_timeout=float(self.heartbeat_timeout),
            time_scale=None if self.time_scale is None else float(self.time_scale),
            client_processes=parse_client_processes(self.client_processes),
        )

    def requests_for(self, concurrency: int) -> int | None:
        """Requests per level (None in duration mode): the option, or max(2*C, 8)."""
        if self.duration is not None:
            return None
        if self.requests is not None:
            return self.requests
        return max(2 * concurrency, 8)

    def effective(self, model: str | None) -> dict[str, Any]:
        """The options as run, for the facts (the API key left out)."""
        return {
            "url": self.url,
            "api": self.api,
            "concurrency": list(self.concurrency),
            "requests": self.requests,
            "requests_rule": "max(2*C, 8)" if self.requests is None and self.duration is None else None,
            "duration": self.duration,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "ignore_eos": self.ignore_eos,
            "prompts": list(self.prompts or DEFAULT_PROMPTS),
            "warmup": self.warmup,
            "level_warmup": self.level_warmup,
            "level_warmup_tokens": self.level_warmup_tokens,
            "timeout": self.timeout,
            "level_timeout": self.level_timeout,
            "sweep_timeout": self.sweep_timeout,
            "stop_on_plateau": self.stop_on_plateau,
            "plateau_gain": self.plateau_gain,
            "model": model,
            "return_records": self.return_records,
            "validate_certs": self.validate_certs,
            "max_concurrency": self.max_concurrency,
            "fail_on_errors": self.fail_on_errors,
            "watch_pid": self.watch_pid,
            "heartbeat_file": self.heartbeat_file,
            "heartbeat_timeout": self.heartbeat_timeout if self.heartbeat_file else None,
            "time_scale": self.time_scale,
            "client_processes": "auto" if self.client_processes == 0 else self.client_processes,
            "api_key_set": bool(self.api_key),
            "knee_share": KNEE_SHARE,
            "client_cpu_limit": CLIENT_CPU_LIMIT,
            "client_lag_limit_ms": CLIENT_LAG_LIMIT_MS,
            "drift_threshold": DRIFT_THRESHOLD,
            "latency_tolerance": LATENCY_TOLERANCE,
        }


# ---------------------------------------------------------------------------------------------
# Statistics (pure)
# ---------------------------------------------------------------------------------------------


def percentile(samples: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0..100) by linear interpolation between closest ranks of the sorted
    raw samples (rank = p/100 * (n-1), numpy's default); None for no samples."""
    if not samples:
        return None
    data = sorted(samples)
    if len(data) == 1:
        return float(data[0])
    rank = min(max(p, 0.0), 100.0) / 100.0 * (len(data) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(data) - 1)
    frac = rank - lo
    return float(data[lo] + (data[hi] - data[lo]) * frac)


def summarize(samples: Sequence[float], scale: float = 1.0, digits: int = 3) -> dict[str, float | None]:
    """{mean, p50, p90, p99} of the raw samples times ``scale``; all None without samples."""
    if not samples:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    data = sorted(float(s) * scale for s in samples)

    def rnd(value: float | None) -> float | None:
        return None if value is None else round(value, digits)

    return {
        "mean": rnd(math.fsum(data) / len(data)),
        "p50": rnd(percentile(data, 50)),
        "p90": rnd(percentile(data, 90)),
        "p99": rnd(percentile(data, 99)),
    }


def itl_samples(events: Sequence[tuple[float, float]]) -> list[float]:
    """Per-token inter-token latencies (seconds) from token events ``(arrival time, tokens added)``.

    The first event is the first token (TTFT) and yields no sample. Each later event's gap from
    the previous event is spread over the tokens it added: an event adding m tokens after a gap g
    contributes round(m) samples of g/m (at least one), so a chunk of 3 speculative tokens counts
    as three tokens of g/3, not one of g.
    """
    out: list[float] = []
    for i in range(1, len(events)):
        t_prev = events[i - 1][0]
        t_cur, tokens = events[i]
        if tokens <= 0:
            continue
        value = (t_cur - t_prev) / tokens
        out.extend([value] * max(1, int(round(tokens))))
    return out


def steady_window(spans_by_worker: dict[int, list[tuple[float, float]]], concurrency: int) -> tuple[float, float] | None:
    """The window in which every one of the C closed-loop clients had a request in flight.

    From the moment the last client sent its first request to the moment the first client
    finished its last one (a client re-sends as soon as a response ends, so in between the number
    in flight equals C, up to the microseconds between one end and the next send). None when
    fewer than C clients ran or the window is empty.
    """
    if len(spans_by_worker) < concurrency or not spans_by_worker:
        return None
    start = max(min(s for s, _ in spans) for spans in spans_by_worker.values() if spans)
    end = min(max(e for _, e in spans) for spans in spans_by_worker.values() if spans)
    if end <= start:
        return None
    return start, end


def tokens_in_window(event_lists: Iterable[Sequence[tuple[float, float]]], start: float, end: float) -> float:
    """Tokens whose arrival time falls inside [start, end]."""
    return math.fsum(tokens for events in event_lists for t, tokens in events if start <= t <= end)


def drift_check(
    event_lists: Iterable[Sequence[tuple[float, float]]],
    start: float,
    end: float,
    window: str,
    threshold: float = DRIFT_THRESHOLD,
    min_tokens: float = DRIFT_MIN_TOKENS,
    min_chunks: int = DRIFT_MIN_CHUNKS,
) -> dict[str, Any]:
    """Throughput in the first and second halves of a level's window ``[start, end]``.

    Tokens are counted at their arrival (first half: ``[start, mid)``, second: ``[mid, end]``).
    ``ratio`` = second / first; ``flagged`` when it is off 1 by more than ``threshold`` (the
    server's speed changed during the level: compilation, caches, throttling, other load).
    A half with fewer than ``min_tokens`` tokens or ``min_chunks`` token chunks is too short to
    tell: ``checked`` is false and ``reason`` says so (never flagged).
    """
    out: dict[str, Any] = {
        "window": window, "first_half_tok_s": None, "second_half_tok_s": None, "ratio": None,
        "flagged": False, "checked": False, "threshold": threshold, "reason": None,
    }
    span = end - start
    if span <= 0:
        out["reason"] = "empty window"
        return out
    mid = start + span / 2.0
    tokens = [0.0, 0.0]
    chunks = [0, 0]
    for events in event_lists:
        for t, n in events:
            if start <= t < mid:
                tokens[0] += n
                chunks[0] += 1
            elif mid <= t <= end:
                tokens[1] += n
                chunks[1] += 1
    half = span / 2.0
    out["first_half_tok_s"] = round(tokens[0] / half, 3)
    out["second_half_tok_s"] = round(tokens[1] / half, 3)
    if min(tokens) < min_tokens or min(chunks) < min_chunks:
        out["reason"] = (
            f"too short to split: {tokens[0]:.0f} + {tokens[1]:.0f} tokens in {chunks[0]} + {chunks[1]} "
            f"chunks (each half needs {min_tokens:g} tokens and {min_chunks} chunks)"
        )
        return out
    ratio = tokens[1] / tokens[0]
    out["ratio"] = round(ratio, 4)
    out["checked"] = True
    out["flagged"] = abs(ratio - 1.0) > threshold
    return out


def gain_per_doubling(c_prev: float, x_prev: float, c_cur: float, x_cur: float) -> float | None:
    """Relative throughput gain per doubling of concurrency between two levels:
    (x_cur / x_prev - 1) / log2(c_cur / c_prev). Equals the plain relative gain for levels that
    double (8 -> 16) and stays comparable for others (32 -> 48, 1 -> 4). None when undefined."""
    if x_prev is None or x_cur is None or x_prev <= 0 or c_cur <= c_prev:
        return None
    return (x_cur / x_prev - 1.0) / math.log2(c_cur / c_prev)


def client_limited(loop_lag_ms_p99: float | None, cpu_util: float | None) -> bool:
    """The client limited the level when its event loop used >= CLIENT_CPU_LIMIT of a core or
    ran its 10 ms ticks >= CLIENT_LAG_LIMIT_MS late at p99."""
    return bool(
        (cpu_util is not None and cpu_util >= CLIENT_CPU_LIMIT)
        or (loop_lag_ms_p99 is not None and loop_lag_ms_p99 >= CLIENT_LAG_LIMIT_MS)
    )


def clean(point: dict[str, Any]) -> bool:
    """Every request of the level succeeded (``status`` ok; a point without a status, from an
    older sweep, by its error count)."""
    status = point.get("status")
    if status is not None:
        return status == "ok"
    return not ((point.get("errors") or {}).get("total") or 0)


def _usable(points: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """Points that can speak for the server: every request succeeded, throughput > 0, and not
    client-limited; when none qualifies, all clean points with throughput (flagged). A level
    with failed requests never qualifies: its rate mixes the server's work with failures."""
    measured = [p for p in points if (p.get("ok") or 0) > 0 and (p.get("output_tok_s") or 0) > 0 and clean(p)]
    good = [p for p in measured if not p.get("client_limited")]
    if good:
        return sorted(good, key=lambda p: p["concurrency"]), False
    return sorted(measured, key=lambda p: p["concurrency"]), bool(measured)


def find_peak(points: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The level with the highest full-run output tok/s (the lowest concurrency on a tie) among
    the levels whose requests all succeeded."""
    usable, limited = _usable(points)
    if not usable:
        return None
    best = max(usable, key=lambda p: (p["output_tok_s"], -p["concurrency"]))
    return {"concurrency": best["concurrency"], "output_tok_s": best["output_tok_s"], "client_limited": limited}


def find_knee(
    points: Sequence[dict[str, Any]], plateau_gain: float, share: float = KNEE_SHARE
) -> dict[str, Any] | None:
    """The knee: the lowest concurrency level that either

    - reaches ``share`` (0.9) of the peak full-run throughput (rule ``share_of_peak``), or
    - is followed by a level that adds less than ``plateau_gain`` per doubling of concurrency
      (rule ``plateau``): going further buys (almost) nothing.

    Levels with a failed request and client-limited levels are left out (the latter unless every
    clean level is client-limited). None when no clean level has throughput.
    """
    usable, _ = _usable(points)
    peak = find_peak(points)
    if not usable or peak is None:
        return None
    top = float(peak["output_tok_s"])
    for i, point in enumerate(usable):
        x = float(point["output_tok_s"])
        rule = None
        if x >= share * top:
            rule = "share_of_peak"
        elif i + 1 < len(usable):
            nxt = usable[i + 1]
            gain = gain_per_doubling(point["concurrency"], x, nxt["concurrency"], nxt["output_tok_s"])
            if gain is not None and gain < plateau_gain:
                rule = "plateau"
        if rule:
            return {
                "concurrency": point["concurrency"],
                "output_tok_s": point["output_tok_s"],
                "share_of_peak": round(x / top, 4) if top > 0 else None,
                "rule": rule,
            }
    return None  # pragma: no cover - the peak itself always meets the share rule


def oversubscription_warning(levels: Sequence[int], max_running: Any) -> str | None:
    """A warning naming the levels above OVERSUBSCRIPTION x the server's effective
    max_running_requests (from /server_info), or None: their requests mostly queue."""
    if not isinstance(max_running, int) or isinstance(max_running, bool) or max_running < 1:
        return None
    over = [c for c in levels if c > OVERSUBSCRIPTION * max_running]
    if not over:
        return None
    return (
        f"C={', '.join(map(str, over))} is more than {OVERSUBSCRIPTION}x the server's max_running_requests "
        f"({max_running}): it runs {max_running} requests at a time and the others wait in its queue, so these "
        "levels measure queueing (TTFT grows with C), not more throughput"
    )


def error_summary(point: dict[str, Any]) -> str:
    """``4 of 8 requests failed (50%: stream 3, connection 1)`` for one point."""
    errors = point.get("errors") or {}
    kinds = ", ".join(f"{kind} {errors[kind]}" for kind in ERROR_KINDS if errors.get(kind))
    rate = point.get("error_rate")
    share = f"{rate:.0%}: " if isinstance(rate, (int, float)) else ""
    return f"{errors.get('total', 0)} of {point.get('requests', 0)} requests failed ({share}{kinds})"


def error_warning(points: Sequence[dict[str, Any]]) -> str | None:
    """One warning naming every level with failed requests and their kinds, or None."""
    bad = [p for p in points if not clean(p)]
    if not bad:
        return None
    first = next((p["error_messages"][0] for p in bad if p.get("error_messages")), None)
    return (
        "requests failed at " + "; ".join(f"C={p['concurrency']}: {error_summary(p)}" for p in bad)
        + ". These levels are marked (status errors, or no_requests_ok when nothing succeeded) and left "
        "out of peak, knee and plateau" + (f". First error: {first}" if first else "")
    )


def plateau_reached(points: Sequence[dict[str, Any]], plateau_gain: float) -> bool:
    """After the last point: did it gain less than ``plateau_gain`` per doubling over the previous
    usable point? A client-limited level, or one with failed requests, never counts as a
    plateau, nor as the level it is compared with."""
    if len(points) < 2:
        return False
    last = points[-1]
    if last.get("client_limited") or not (last.get("ok") or 0) > 0 or not clean(last):
        return False
    prev = [p for p in points[:-1] if (p.get("ok") or 0) > 0 and not p.get("client_limited") and clean(p)]
    if not prev:
        return False
    gain = gain_per_doubling(
        prev[-1]["concurrency"], prev[-1]["output_tok_s"], last["concurrency"], last["output_tok_s"]
    )
    return gain is not None and gain < plateau_gain


# ---------------------------------------------------------------------------------------------
# Server-side latency from the server's Prometheus histograms (pure)
# ---------------------------------------------------------------------------------------------

_PROM_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LE_RE = re.compile(r'le="([^"]*)"')


def parse_histograms(text: str) -> dict[str, dict[str, Any]]:
    """The SERVER_HISTOGRAMS found in a Prometheus text exposition, summed over their series
    (label sets, e.g. ``is_streaming`` true and false): ``{key: {"sum", "count", "buckets":
    {upper bound: cumulative count}}}`` with keys ``ttft``, ``itl``, ``e2e``. A family without
    samples yet (no request served) is absent."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        match = _PROM_LINE.match(line)
        if match is None:
            continue
        metric, labels, raw = match.groups()
        base, _, suffix = metric.rpartition("_")
        if suffix not in ("sum", "count", "bucket"):
            continue
        if base.startswith(("sglang:", "sglang_")):
            base = base[len("sglang:"):]
        key = SERVER_HISTOGRAMS.get(base)
        if key is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        hist = out.setdefault(key, {"sum": 0.0, "count": 0.0, "buckets": {}})
        if suffix == "bucket":
            le = _LE_RE.search(labels or "")
            if le is None:
                continue
            try:
                bound = float(le.group(1))
            except ValueError:
                continue
            hist["buckets"][bound] = hist["buckets"].get(bound, 0.0) + value
        else:
            hist[suffix] += value
    return out


def histogram_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """after - before of one parsed histogram (a family absent before counts as zero); None when
    absent after or when a count went down (the server restarted in between)."""
    if after is None:
        return None
    before = before or {"sum": 0.0, "count": 0.0, "buckets": {}}
    count = after["count"] - before["count"]
    buckets = {b: after["buckets"][b] - before["buckets"].get(b, 0.0) for b in after["buckets"]}
    if count < 0 or any(v < 0 for v in buckets.values()):
        return None
    return {"sum": after["sum"] - before["sum"], "count": count, "buckets": buckets}


def histogram_rank_range(hist: dict[str, Any], p: float) -> tuple[float, float] | None:
    """Where the p-th percentile of the observations lies, to the histogram's resolution.

    With the sweep's own rule (rank = p/100 * (n-1) between the closest ranks), the percentile
    lies between the observation of rank floor(rank) and the one of rank ceil(rank); each lies
    in the bucket whose cumulative count first exceeds its rank. Returns (lower bound of the
    first bucket, upper bound of the second) (``inf`` for the +Inf bucket); None when empty.
    """
    count = hist.get("count") or 0.0
    if count < 1:
        return None
    bounds = sorted(hist["buckets"])
    rank = min(max(p, 0.0), 100.0) / 100.0 * (count - 1)

    def bucket(i: float) -> tuple[float, float]:
        prev = 0.0
        for bound in bounds:
            if hist["buckets"][bound] > i + 1e-9:
                return prev, bound
            prev = bound
        return prev, math.inf

    return bucket(math.floor(rank))[0], bucket(math.ceil(rank))[1]


def server_latency(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The server-side latency of one level from its histograms before and after it.

    Means are ``_sum`` / ``_count`` deltas; ``*_range`` give, per percentile, the bucket
    bounds the server's own p50/p90/p99 lie in (``null`` upper bound: the +Inf bucket). On a
    real server these are wall-clock seconds as the server timed them (no network, no client);
    on the time-scaled embedded engine, the modelled GPU time (docs/engine-api.md). None when
    no histogram moved (no metrics, or a restart)."""
    deltas = {key: histogram_delta(before.get(key), after.get(key)) for key in SERVER_HISTOGRAMS.values()}
    if not any(d and d["count"] > 0 for d in deltas.values()):
        return None

    def mean(key: str, unit: float, digits: int) -> float | None:
        d = deltas[key]
        return round(d["sum"] / d["count"] * unit, digits) if d and d["count"] > 0 else None

    def ranges(key: str, unit: float, digits: int) -> dict[str, list[float | None]] | None:
        d = deltas[key]
        if not d or d["count"] < 1:
            return None
        out: dict[str, list[float | None]] = {}
        for p in (50, 90, 99):
            rng = histogram_rank_range(d, p)
            if rng is not None:
                out[f"p{p}"] = [round(rng[0] * unit, digits), None if math.isinf(rng[1]) else round(rng[1] * unit, digits)]
        return out

    e2e, ttft, itl = deltas["e2e"], deltas["ttft"], deltas["itl"]
    return {
        "requests": int(e2e["count"]) if e2e else None,
        "first_tokens": int(ttft["count"]) if ttft else None,
        "itl_tokens": int(itl["count"]) if itl else None,
        "ttft_ms_mean": mean("ttft", 1000.0, 3),
        "itl_ms_mean": mean("itl", 1000.0, 4),
        "e2e_s_mean": mean("e2e", 1.0, 4),
        "ttft_ms_range": ranges("ttft", 1000.0, 3),
        "itl_ms_range": ranges("itl", 1000.0, 4),
        "e2e_s_range": ranges("e2e", 1.0, 4),
    }


# Client latencies checked against the server: point key -> (server mean key, server range key,
# factor to ms of both). TPOT has no histogram: its mean is checked against the mean ITL (equal
# for requests of equal length), and its percentiles follow that verdict.
_CHECKS: dict[str, tuple[str, str | None, float]] = {
    "ttft_ms": ("ttft_ms_mean", "ttft_ms_range", 1.0),
    "itl_ms": ("itl_ms_mean", "itl_ms_range", 1.0),
    "tpot_ms": ("itl_ms_mean", None, 1.0),
    "e2e_s": ("e2e_s_mean", "e2e_s_range", 1000.0),
}
_STATS = ("mean", "p50", "p90", "p99")


def _g(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.3g}"


def check_latency(point: dict[str, Any], scale: float, tolerance: float = LATENCY_TOLERANCE) -> None:
    """Mark the client latencies of a time-scaled level that cannot be trusted, in place.

    The client's TTFT, ITL, TPOT and e2e (already converted to modelled time) are compared with
    the server's modelled ones (``point["server"]``, from /metrics):

    - the mean must be within ``tolerance`` of the server's mean; when it is not, every
      statistic of that quantity is unmeasurable (the disagreement is systematic);
    - each percentile must lie in the server's bucket range for that percentile
      (``histogram_rank_range``) widened by ``tolerance`` on both sides.

    Without server histograms for a quantity, all its statistics are unmeasurable unless its
    wall-clock p50 (for TPOT and e2e: the e2e p50, the span they are measured over) is at least
    LATENCY_JITTER_FACTOR times the client's timing jitter (event-loop lag p99, at least
    JITTER_FLOOR_MS).

    Sets ``latency_unmeasurable`` ({point key: [statistics]}, only failing quantities),
    ``latency_measurable`` (true when nothing failed) and ``latency_check`` ({method per
    quantity, tolerance, reasons per quantity}).
    """
    server = point.get("server") if isinstance(point.get("server"), dict) else None
    lag = (point.get("client") or {}).get("loop_lag_ms_p99")
    lag_text = _g(float(lag)) if isinstance(lag, (int, float)) else "?"
    jitter = max(float(lag) if isinstance(lag, (int, float)) else 0.0, JITTER_FLOOR_MS)
    bad: dict[str, list[str]] = {}
    methods: dict[str, str] = {}
    reasons: dict[str, str] = {}
    for key, (mean_key, range_key, to_ms) in _CHECKS.items():
        dist = point.get(key) if isinstance(point.get(key), dict) else {}
        present = [stat for stat in _STATS if dist.get(stat) is not None]
        if "mean" not in present:
            continue
        failed: list[str] = []
        why: list[str] = []
        if server is not None and server.get(mean_key) is not None:
            methods[key] = "server_metrics"
            ref = float(server[mean_key]) * to_ms
            mine = float(dist["mean"]) * to_ms
            if ref > 0 and abs(mine / ref - 1.0) > tolerance:
                failed = list(present)
                why.append(
                    f"mean {_g(mine)} ms vs the model's {_g(ref)} ms ({mine - ref:+.3g} ms, "
                    f"{(mine - ref) * scale:+.3g} ms of wall time: loopback, HTTP and both event loops)"
                )
            ranges = (server.get(range_key) if range_key else None) or {}
            for stat in present:
                bounds = ranges.get(stat)
                if stat == "mean" or not bounds:
                    continue
                lo = float(bounds[0]) * to_ms
                hi = math.inf if bounds[1] is None else float(bounds[1]) * to_ms
                value = float(dist[stat]) * to_ms
                if not lo * (1.0 - tolerance) <= value <= hi * (1.0 + tolerance):
                    if stat not in failed:
                        failed.append(stat)
                    why.append(f"{stat} {_g(value)} ms outside the model's {_g(lo)}-{_g(hi)} ms")
        else:
            methods[key] = "client_jitter"
            ref = float(dist.get("p50") or dist["mean"]) * to_ms
            span_key, span_ms = ("e2e_s", 1000.0) if key in ("tpot_ms", "e2e_s") else (key, to_ms)
            span_p50 = (point.get(span_key) or {}).get("p50")
            wall_ms = None if span_p50 is None else float(span_p50) * span_ms * scale
            if wall_ms is not None and wall_ms < LATENCY_JITTER_FACTOR * jitter:
                failed = list(present)
                why.append(
                    f"no server histogram to check it against, and its wall-clock p50 of {_g(wall_ms)} ms is "
                    f"under {LATENCY_JITTER_FACTOR:g}x the client's timing jitter ({_g(jitter)} ms)"
                )
        if failed:
            bad[key] = [stat for stat in _STATS if stat in failed]
            label = {"ttft_ms": "TTFT", "itl_ms": "ITL", "tpot_ms": "TPOT", "e2e_s": "e2e"}[key]
            ref_ms = float(server[mean_key]) * to_ms if methods[key] == "server_metrics" and server else ref
            reasons[key] = (
                f"{label} {', '.join(bad[key])}: " + "; ".join(why)
                + f". At time scale {scale:g}, {_g(ref_ms)} ms of modelled time is {_g(ref_ms * scale)} ms of "
                f"wall time, against the client's event-loop lag p99 of {lag_text} ms plus the engine's own "
                "scheduling jitter: too short for the client to time at this scale"
            )
    point["latency_unmeasurable"] = bad
    point["latency_measurable"] = not bad
    point["latency_check"] = {"method": methods, "tolerance": tolerance, "reasons": reasons}


# ---------------------------------------------------------------------------------------------
# Stream parsers (pure: fed the arrival time and the payload of each SSE ``data:`` line)
# ---------------------------------------------------------------------------------------------


def _error_text(err: Any) -> str:
    if isinstance(err, dict):
        msg = err.get("message") or err.get("msg") or json.dumps(err)[:300]
        code = err.get("code")
        return f"{msg} (code {code})" if code is not None else str(msg)
    return str(err)[:300]


class StreamParser:
    """Common state of one streamed response."""

    def __init__(self) -> None:
        self.first_token_t: float | None = None
        self.events: list[tuple[float, float]] = []  # (arrival time, tokens added)
        self.output_tokens: int | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.done = False  # data: [DONE] seen
        self.chunks = 0

    def feed(self, t: float, data: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Called once the body ended."""

    @property
    def complete(self) -> bool:
        return self.done or self.finish_reason is not None


class OpenAIStreamParser(StreamParser):
    """``/v1/completions`` and ``/v1/chat/completions`` streams.

    A chunk carries a token when it has a ``choices`` entry, unless it is the role-only chat chunk
    (``delta`` with a ``role`` and no content). The usage chunk (``choices: []``) is not a token.
    The stream has no per-chunk counts, so ``close`` spreads ``usage.completion_tokens`` evenly
    over the token chunks.
    """

    def __init__(self) -> None:
        super().__init__()
        self.token_chunk_times: list[float] = []
        self.usage_tokens: int | None = None

    def feed(self, t: float, data: str) -> None:
        if data == "[DONE]":
            self.done = True
            return
        if self.error is not None:
            return
        obj = json.loads(data)
        if not isinstance(obj, dict):
            return
        self.chunks += 1
        if obj.get("error") is not None:
            self.error = _error_text(obj["error"])
            return
        if obj.get("object") == "error":
            self.error = _error_text(obj)
            return
        usage = obj.get("usage")
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            self.usage_tokens = int(usage["completion_tokens"])
        choices = obj.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        delta = choice.get("delta")
        if isinstance(delta, dict) and delta.get("role") and not delta.get("content") and not delta.get(
            "reasoning_content"
        ):
            return  # role-only chat chunk: no token
        self.token_chunk_times.append(t)
        if self.first_token_t is None:
            self.first_token_t = t

    def close(self) -> None:
        self.output_tokens = self.usage_tokens
        if self.usage_tokens is None or not self.token_chunk_times:
            self.events = []
            return
        per_chunk = self.usage_tokens / len(self.token_chunk_times)
        self.events = [(t, per_chunk) for t in self.token_chunk_times]


_CT_RE = re.compile(r'"completion_tokens":\s*(\d+)')


class NativeStreamParser(StreamParser):
    """``/generate`` streams: ``meta_info.completion_tokens`` is cumulative, so each chunk's token
    count is exact; a chunk carries tokens when the count grows.

    Chunks repeat the whole output so far (text and output_ids); to keep the client cheap, a chunk
    that is not finished is read with a scan for its count instead of a full JSON parse.
    """

    def __init__(self) -> None:
        super().__init__()
        self._count = 0

    def feed(self, t: float, data: str) -> None:
        if data == "[DONE]":
            self.done = True
            return
        if self.error is not None:
            return
        self.chunks += 1
        count: int | None = None
        finish: Any = None
        fast = data.startswith('{"text"') and data.rfind('"finish_reason":null') >= 0
        if fast:
            pos = data.rfind('"completion_tokens":')
            match = _CT_RE.match(data, pos) if pos >= 0 else None
            if match is not None:
                count = int(match.group(1))
        if count is None:
            obj = json.loads(data)
            if not isinstance(obj, dict):
                return
            if obj.get("error") is not None:
                self.error = _error_text(obj["error"])
                return
            meta = obj.get("meta_info") or {}
            if meta.get("completion_tokens") is None:
                return
            count = int(meta["completion_tokens"])
            finish = meta.get("finish_reason")
        added = count - self._count
        if added > 0:
            self.events.append((t, float(added)))
            if self.first_token_t is None:
                self.first_token_t = t
            self._count = count
        self.output_tokens = self._count
        if finish:
            kind = finish.get("type") if isinstance(finish, dict) else str(finish)
            self.finish_reason = str(kind)
            if kind == "abort":
                message = finish.get("message") if isinstance(finish, dict) else None
                self.error = f"request aborted by the server: {message or finish}"

    def close(self) -> None:
        if self.output_tokens is None and self._count:
            self.output_tokens = self._count


def make_parser(api: str) -> StreamParser:
    return OpenAIStreamParser() if api == "openai" else NativeStreamParser()


# ---------------------------------------------------------------------------------------------
# One request
# ---------------------------------------------------------------------------------------------


@dataclass
class Trace:
    """One measured request (times from time.perf_counter())."""

    level: int
    concurrency: int
    index: int
    worker: int
    start: float = 0.0
    end: float = 0.0
    first_token_t: float | None = None
    ok: bool = False
    error_kind: str | None = None
    error: str | None = None
    http_status: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    events: list[tuple[float, float]] = field(default_factory=list)

    def fail(self, kind: str, message: str) -> None:
        if self.error_kind is None:
            self.error_kind = kind
            self.error = message[:300]
        self.ok = False

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_t is None else self.first_token_t - self.start

    @property
    def e2e(self) -> float:
        return self.end - self.start

    def itl(self) -> list[float]:
        return itl_samples(self.events)

    @property
    def tpot(self) -> float | None:
        """(e2e - TTFT) / (output tokens - 1)."""
        if self.ttft is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    @property
    def counted_tokens(self) -> int:
        """Tokens this request adds to the level's output: server-counted tokens of a response
        that completed (ok or short); 0 for a failed one."""
        if self.error_kind in (None, "short") and self.output_tokens:
            return int(self.output_tokens)
        return 0


def finalize_trace(trace: Trace, parser: StreamParser, max_tokens: int) -> None:
    """Classify a request whose body ended (or that failed) from its parser's state."""
    parser.close()
    trace.first_token_t = parser.first_token_t
    trace.output_tokens = parser.output_tokens
    trace.finish_reason = parser.finish_reason
    trace.events = parser.events
    if trace.error_kind is not None:
        return
    if parser.error is not None:
        trace.fail("stream", f"error in stream: {parser.error}")
    elif not parser.complete:
        trace.fail("stream", "stream ended before a finish_reason or [DONE]")
    elif parser.output_tokens is None:
        trace.fail("stream", "no token count in the stream (usage missing: include_usage ignored?)")
    elif parser.finish_reason != "length" and parser.output_tokens < max_tokens:
        trace.fail(
            "short",
            f"{parser.output_tokens} of {max_tokens} tokens, finish_reason {parser.finish_reason!r}",
        )
    else:
        trace.ok = True


def build_payload(
    opts: SweepOptions, model: str | None, prompt: str, max_tokens: int | None = None
) -> tuple[str, dict[str, Any]]:
    """Path and JSON body of one streamed generation request (``max_tokens``: the option's
    unless given, as for the level warm-up)."""
    tokens = opts.max_tokens if max_tokens is None else int(max_tokens)
    if opts.api == "openai":
        body: dict[str, Any] = {
            "model": model,
            "prompt": prompt,
            "max_tokens": tokens,
            "temperature": opts.temperature,
            "top_p": opts.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if opts.ignore_eos:
            body["ignore_eos"] = True
        return "/v1/completions", body
    sampling: dict[str, Any] = {
        "max_new_tokens": tokens,
        "temperature": opts.temperature,
        "top_p": opts.top_p,
        "ignore_eos": opts.ignore_eos,
    }
    body = {"text": prompt, "sampling_params": sampling, "stream": True}
    if model:
        body["model"] = model
    return "/generate", body


class _Client:
    """The shared session and what every request needs."""

    def __init__(self, opts: SweepOptions, session: Any, model: str | None) -> None:
        self.opts = opts
        self.session = session
        self.model = model
        self.timeout = aiohttp.ClientTimeout(total=opts.timeout)
        self.path, _ = build_payload(opts, model, "")

    async def send(self, trace: Trace, prompt: str, max_tokens: int | None = None) -> None:
        """Send one request and fill ``trace``; never raises except CancelledError."""
        opts = self.opts
        _, body = build_payload(opts, self.model, prompt, max_tokens)
        want = opts.max_tokens if max_tokens is None else int(max_tokens)
        parser = make_parser(opts.api)
        headers_seen = False
        trace.start = time.perf_counter()
        try:
            async with self.session.post(opts.url + self.path, json=body, timeout=self.timeout) as resp:
                trace.http_status = resp.status
                if resp.status != 200:
                    raw = await resp.content.read(2048)
                    message = f"HTTP {resp.status}: {_http_error_message(raw)}"
                    if resp.status in AUTH_STATUSES:
                        message = auth_message(opts.url, resp.status, bool(opts.api_key))
                    trace.fail("http", message)
                    return
                headers_seen = True
                async for line in resp.content:
                    now = time.perf_counter()
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    parser.feed(now, line[5:].strip().decode("utf-8"))
        except asyncio.CancelledError:
            trace.end = time.perf_counter()
            trace.fail("timeout", "level or sweep time limit reached while the request was in flight")
            finalize_trace(trace, parser, want)
            raise
        except _TIMEOUTS:
            if not parser.done:
                trace.fail("timeout", f"no complete response within timeout={opts.timeout:g}s")
        except (ValueError, UnicodeDecodeError) as exc:
            trace.fail("stream", f"unreadable stream data: {exc}")
        except aiohttp.ClientError as exc:
            if headers_seen:
                trace.fail("stream", f"stream broken: {type(exc).__name__}: {exc}")
            else:
                trace.fail("connection", f"{type(exc).__name__}: {exc}")
        except OSError as exc:
            trace.fail("connection", f"{type(exc).__name__}: {exc}")
        finally:
            if not trace.end:
                trace.end = time.perf_counter()
        finalize_trace(trace, parser, want)


def _http_error_message(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return text[:200] or "(empty body)"
    if isinstance(obj, dict):
        if isinstance(obj.get("error"), (dict, str)):
            return _error_text(obj["error"])[:200]
        if obj.get("message"):
            return str(obj["message"]).splitlines()[0][:200]
    return text[:200]


# ---------------------------------------------------------------------------------------------
# Server probes
# ---------------------------------------------------------------------------------------------


def server_summary(info: dict[str, Any]) -> dict[str, Any]:
    """What a snapshot keeps from /server_info (``_serverinfo.summarize``, shared with status)."""
    return _serverinfo.summarize(info)


_RATE_KEYS = ("output_tok_s", "steady_output_tok_s", "req_s")
_SPAN_KEYS = ("duration_s", "steady_window_s")
_DIST_KEYS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_s")
_RECORD_SPAN_KEYS = ("ttft_ms", "e2e_s", "itl_ms_mean", "start_s", "end_s")


def to_model_time(points: list[dict[str, Any]], records: list[dict[str, Any]], scale: float) -> None:
    """Convert a sweep of the time-scaled embedded engine to the GPU time it models, in place.

    The engine runs `scale` wall seconds per modelled second, so rates are multiplied by
    `scale` and times divided by it. The wall-clock figures stay under each point's `wall`.
    The client's own overheads are divided too: on a strongly scaled run, small TTFT/ITL
    values are mostly client and loopback time, magnified (``check_latency`` then says so).
    A point's ``server`` block is left alone: the engine's histograms are in modelled time.
    """
    if not scale or scale <= 0 or scale == 1:
        return
    for point in points:
        point["wall"] = {k: point.get(k) for k in _RATE_KEYS + _SPAN_KEYS}
        drift = point.get("drift")
        if isinstance(drift, dict):
            point["wall"]["drift"] = {k: drift.get(k) for k in ("first_half_tok_s", "second_half_tok_s")}
            for key in ("first_half_tok_s", "second_half_tok_s"):
                if isinstance(drift.get(key), (int, float)):
                    drift[key] = round(drift[key] * scale, 3)
        warm = point.get("level_warmup")
        if isinstance(warm, dict) and isinstance(warm.get("seconds"), (int, float)):
            point["wall"]["level_warmup_seconds"] = warm["seconds"]
            warm["seconds"] = round(warm["seconds"] / scale, 4)
        for key in _RATE_KEYS:
            if isinstance(point.get(key), (int, float)):
                point[key] = round(point[key] * scale, 3)
        for key in _SPAN_KEYS:
            if isinstance(point.get(key), (int, float)):
                point[key] = round(point[key] / scale, 4)
        for key in _DIST_KEYS:
            dist = point.get(key)
            if isinstance(dist, dict):
                point[key] = {k: (round(v / scale, 4) if isinstance(v, (int, float)) else v) for k, v in dist.items()}
    for rec in records:
        for key in _RECORD_SPAN_KEYS:
            if isinstance(rec.get(key), (int, float)):
                rec[key] = round(rec[key] / scale, 4)


class _Probe:
    def __init__(self, opts: SweepOptions, session: Any) -> None:
        self.opts = opts
        self.session = session
        self.path: str | None = None
        self.timeout = aiohttp.ClientTimeout(total=min(PROBE_TIMEOUT_S, opts.timeout))
        self.denied: int | None = None  # the 401/403 status of a probe the server refused

    async def get_json(self, path: str) -> tuple[int | None, Any, str | None]:
        try:
            async with self.session.get(self.opts.url + path, timeout=self.timeout) as resp:
                if resp.status in AUTH_STATUSES:
                    self.denied = resp.status
                if resp.status != 200:
                    return resp.status, None, f"HTTP {resp.status}"
                return resp.status, await resp.json(content_type=None), None
        except (*_TIMEOUTS, aiohttp.ClientError, OSError, ValueError) as exc:
            return None, None, f"{type(exc).__name__}: {exc}"

    async def server_info(self) -> dict[str, Any]:
        """A snapshot from /server_info, falling back to /get_server_info (SGLang < 0.5.x names)."""
        paths = [self.path] if self.path else list(SERVER_INFO_PATHS)
        error = None
        for path in paths:
            status, obj, error = await self.get_json(path)
            if isinstance(obj, dict):
                self.path = path
                return {**server_summary(obj), "ok": True, "path": path, "at": utc_now_iso()}
            if status is None:
                break  # unreachable: no point trying the other name
        return {**server_summary({}), "ok": False, "path": None, "error": error, "at": utc_now_iso()}

    async def metrics_text(self) -> tuple[str | None, str | None]:
        """The /metrics text, or (None, why)."""
        try:
            async with self.session.get(self.opts.url + METRICS_PATH, timeout=self.timeout) as resp:
                if resp.status != 200:
                    return None, f"HTTP {resp.status}"
                return await resp.text(), None
        except (*_TIMEOUTS, aiohttp.ClientError, OSError, ValueError) as exc:
            return None, f"{type(exc).__name__}: {exc}"

    async def metrics(self) -> tuple[dict[str, dict[str, Any]] | None, str | None]:
        """The server's latency histograms from /metrics (parse_histograms), or (None, why)."""
        text, error = await self.metrics_text()
        return (None, error) if text is None else (parse_histograms(text), None)

    async def model(self) -> tuple[str | None, str | None]:
        status, obj, error = await self.get_json("/v1/models")
        if isinstance(obj, dict) and isinstance(obj.get("data"), list) and obj["data"]:
            first = obj["data"][0]
            if isinstance(first, dict) and first.get("id"):
                return str(first["id"]), None
        return None, error or "no model listed"

    async def warm_connections(self, count: int) -> None:
        """Open ``count`` keep-alive connections (concurrent cheap GETs) before a level."""

        async def one() -> None:
            await self.get_json("/v1/models")

        await asyncio.gather(*(one() for _ in range(count)), return_exceptions=True)


# ---------------------------------------------------------------------------------------------
# Levels and the sweep
# ---------------------------------------------------------------------------------------------


class _Health:
    """Event-loop lag (a 10 ms ticker) and process CPU time over a level."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = 0.0
        self._wall0 = 0.0
        self.cpu_util: float | None = None

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + TICK_S
        while True:
            await asyncio.sleep(max(0.0, due - loop.time()))
            now = loop.time()
            self.lags.append(max(0.0, now - due))
            due = now + TICK_S

    def start(self) -> None:
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        wall = time.perf_counter() - self._wall0
        cpu = time.process_time() - self._cpu0
        self.cpu_util = round(cpu / wall, 3) if wall > 0 else None
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    @property
    def lag_ms_p99(self) -> float | None:
        value = percentile(self.lags, 99)
        return None if value is None else round(value * 1000.0, 3)


@dataclass
class LevelShare:
    """The part of a level one client process runs (_sweepworkers.split_level): ``workers``
    closed-loop clients with ids from ``worker_offset``, ``requests`` of them (None: duration
    mode) with request indices ``first_index``, ``first_index + step``, ..."""

    workers: int
    requests: int | None
    first_index: int = 0
    step: int = 1
    worker_offset: int = 0


@dataclass
class LevelRun:
    level: int
    concurrency: int
    traces: list[Trace]
    timed_out: bool
    health: _Health
    t_start: float
    t_end: float


async def run_level(
    client: _Client,
    level: int,
    concurrency: int,
    deadline: float,
    prompts: Sequence[str],
    warmup_tokens: int | None = None,
    share: LevelShare | None = None,
) -> LevelRun:
    """C closed-loop clients: each sends, waits for the end of the response, sends again, until
    the level's request count is used up (or ``duration`` passed); cut at ``deadline``.

    With ``warmup_tokens``: the level's warm-up round instead, never part of the level's
    numbers: max(C, number of prompts) requests at concurrency C (every prompt's shape goes
    through the server once), with staggered lengths (``warmup_level_tokens``) so that the C
    requests in flight finish one by one and the server runs every batch size from C down
    to 1, as the level's own draining tail will. A real server compiles kernels at the first
    batch of each new shape (seen on an H200: a sweep on a fresh server was 40% slower).

    With ``share``: this process's part of a level spread over several client processes.
    """
    opts = client.opts
    if warmup_tokens is not None:
        total: int | None = max(concurrency, len(prompts))
    else:
        total = opts.requests_for(concurrency)
    if share is None:
        share = LevelShare(concurrency, total)
    total = share.requests
    traces: list[Trace] = []
    counter = {"next": 0}
    t_start = time.perf_counter()
    stop_sending_at = (
        t_start + opts.duration if opts.duration is not None and warmup_tokens is None else None
    )

    def claim() -> int | None:
        idx = counter["next"]
        if total is not None and idx >= total:
            return None
        if stop_sending_at is not None and time.perf_counter() >= stop_sending_at:
            return None
        counter["next"] = idx + 1
        return share.first_index + idx * share.step

    async def worker(wid: int) -> None:
        while True:
            idx = claim()
            if idx is None:
                return
            trace = Trace(level=level, concurrency=concurrency, index=idx, worker=wid)
            traces.append(trace)
            tokens = warmup_level_tokens(warmup_tokens, concurrency, idx) if warmup_tokens is not None else None
            await client.send(trace, prompts[idx % len(prompts)], tokens)

    health = _Health()
    health.start()
    tasks = [asyncio.ensure_future(worker(share.worker_offset + w)) for w in range(share.workers)]
    remaining = max(0.0, deadline - time.perf_counter())
    try:
        _, pending = await asyncio.wait(tasks, timeout=remaining)
    finally:  # cut by the deadline, or the sweep itself cancelled (interrupted): no client goes on
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await health.stop()
    return LevelRun(level, concurrency, traces, bool(pending), health, t_start, time.perf_counter())


def warmup_level_tokens(base: int, concurrency: int, index: int) -> int:
    """max_tokens of warm-up request ``index`` at concurrency C: base, base + step, ... base +
    (C-1) x step (step = base / 4): the requests in flight end one after another."""
    return base + (index % max(concurrency, 1)) * max(1, base // 4)


def count_errors(traces: Iterable[Trace]) -> tuple[dict[str, int], list[str]]:
    """Failed requests by kind (with ``total``) and up to MAX_ERROR_MESSAGES distinct messages."""
    errors = {kind: 0 for kind in ERROR_KINDS}
    messages: list[str] = []
    for trace in traces:
        if trace.error_kind:
            errors[trace.error_kind] = errors.get(trace.error_kind, 0) + 1
            if trace.error and trace.error not in messages and len(messages) < MAX_ERROR_MESSAGES:
                messages.append(trace.error)
    errors["total"] = sum(errors[k] for k in ERROR_KINDS)
    return errors, messages


def level_status(requests: int, errors: dict[str, int], short_is_error: bool = True) -> str:
    """``ok`` when every request of the level succeeded, ``no_requests_ok`` when none did (or
    none was sent), ``errors`` in between. Every error kind counts (HTTP, stream, timeout,
    connection, short), ``short`` only when ``short_is_error``."""
    failed = int(errors.get("total") or 0) - (0 if short_is_error else int(errors.get("short") or 0))
    if requests <= 0 or failed >= requests:
        return "no_requests_ok"
    return "errors" if failed > 0 else "ok"


def summarize_warmup(run: LevelRun, max_tokens: int) -> dict[str, Any]:
    """What a level's warm-up round did: requests, ok, errors by kind (counted here, never in
    the level's errors), tokens asked and received, and how long it took."""
    errors, messages = count_errors(run.traces)
    return {
        "requests": len(run.traces),
        "ok": sum(1 for t in run.traces if t.ok),
        "errors": errors,
        "error_messages": messages,
        "max_tokens": max_tokens,
        "max_tokens_longest": max((warmup_level_tokens(max_tokens, run.concurrency, t.index) for t in run.traces),
                                  default=max_tokens),
        "output_tokens": sum(t.counted_tokens for t in run.traces),
        "seconds": round(max(run.t_end - run.t_start, 0.0), 4),
        "timed_out": run.timed_out,
    }


def summarize_level(run: LevelRun, short_is_error: bool = True) -> dict[str, Any]:
    """One point of the sweep from its raw traces (see docs/sweep.md for each field).

    ``short_is_error``: whether a ``short`` response makes the level's ``status`` "errors"
    (false with ``ignore_eos: false``, where a model stopping early is what was asked for).
    """
    traces = run.traces
    errors, messages = count_errors(traces)
    ok = [t for t in traces if t.ok]
    status = level_status(len(traces), errors, short_is_error)
    completed = [t for t in traces if t.error_kind in (None, "short")]
    output_tokens = sum(t.counted_tokens for t in traces)
    if traces:
        first = min(t.start for t in traces)
        last = max(t.end for t in traces)
        duration = max(last - first, 0.0)
    else:
        duration = 0.0
    busy = math.fsum(t.e2e for t in traces)
    spans: dict[int, list[tuple[float, float]]] = {}
    for trace in traces:
        spans.setdefault(trace.worker, []).append((trace.start, trace.end))
    window = steady_window(spans, run.concurrency)
    steady = None
    window_s = None
    counted = [t.events for t in traces if t.counted_tokens]
    if window is not None:
        window_s = window[1] - window[0]
        steady = tokens_in_window(counted, window[0], window[1]) / window_s
        drift = drift_check(counted, window[0], window[1], "steady")
    elif traces:
        drift = drift_check(counted, min(t.start for t in traces), max(t.end for t in traces), "level")
    else:
        drift = drift_check([], 0.0, 0.0, "level")
    lag = run.health.lag_ms_p99
    cpu = run.health.cpu_util
    itl: list[float] = []
    for trace in ok:
        itl.extend(trace.itl())
    return {
        "concurrency": run.concurrency,
        "requests": len(traces),
        "ok": len(ok),
        "errors": errors,
        "error_rate": round(errors["total"] / len(traces), 4) if traces else None,
        "status": status,
        "errors_present": status != "ok",
        "error_messages": messages,
        "output_tokens": output_tokens,
        "avg_output_tokens": round(output_tokens / len(completed), 2) if completed else None,
        "duration_s": round(duration, 4),
        "output_tok_s": round(output_tokens / duration, 3) if duration > 0 else 0.0,
        "steady_output_tok_s": None if steady is None else round(steady, 3),
        "steady_window_s": None if window_s is None else round(window_s, 4),
        "req_s": round(len(ok) / duration, 4) if duration > 0 else 0.0,
        "ttft_ms": summarize([t.ttft for t in ok if t.ttft is not None], 1000.0),
        "itl_ms": summarize(itl, 1000.0),
        "tpot_ms": summarize([t.tpot for t in ok if t.tpot is not None], 1000.0),
        "e2e_s": summarize([t.e2e for t in ok], 1.0, 4),
        "achieved_concurrency": round(busy / duration, 3) if duration > 0 else 0.0,
        "level_timed_out": run.timed_out,
        # judged on clean levels only: failed requests end at once and make a busy, short level
        # (a dead server is not a saturated client); the health numbers stay in "client"
        "client_limited": status == "ok" and client_limited(lag, cpu),
        "client": {"loop_lag_ms_p99": lag, "cpu_util": cpu},
        "gain_per_doubling": None,
        "drift": drift,
        "level_warmup": None,
        "server": None,
        "latency_measurable": None,
        "latency_unmeasurable": None,
        "latency_check": None,
    }


def trace_record(trace: Trace, t0: float) -> dict[str, Any]:
    """The raw per-request record kept in the facts (times in seconds since the sweep started)."""
    itl = trace.itl()
    return {
        "level": trace.level,
        "concurrency": trace.concurrency,
        "index": trace.index,
        "ok": trace.ok,
        "error_kind": trace.error_kind,
        "http_status": trace.http_status,
        "output_tokens": trace.output_tokens,
        "finish_reason": trace.finish_reason,
        "ttft_ms": None if trace.ttft is None else round(trace.ttft * 1000.0, 3),
        "e2e_s": round(trace.e2e, 4),
        "itl_ms_mean": round(math.fsum(itl) / len(itl) * 1000.0, 4) if itl else None,
        "start_s": round(trace.start - t0, 4),
        "end_s": round(trace.end - t0, 4),
    }


_NO_INFO: dict[str, Any] = {**server_summary({}), "ok": False, "path": None, "error": "sweep_timeout", "at": None}


async def _within(awaitable: Any, deadline: float, default: Any) -> Any:
    """Await a probe, giving up (with ``default``) at the sweep deadline."""
    try:
        return await asyncio.wait_for(awaitable, max(deadline - time.perf_counter(), 0.001))
    except _TIMEOUTS:
        return default


class _SweepRun:
    """One sweep in progress: its options, session, client and what it has found so far."""

    def __init__(self, opts: SweepOptions, session: Any) -> None:
        self.opts = opts
        self.t0 = time.perf_counter()
        self.t0_unix = time.time()  # records' start_s/end_s on a clock other sweeps share
        self.deadline = self.t0 + opts.sweep_timeout
        self.warnings: list[str] = []
        self.points: list[dict[str, Any]] = []
        self.records: list[dict[str, Any]] = []
        self.stopped_on_plateau = False
        self.stopped_on_timeout = False
        self.probe = _Probe(opts, session)
        self.session = session
        self.prompts = list(opts.prompts or DEFAULT_PROMPTS)
        self.metrics_ok: bool | None = None  # None: /metrics not asked yet
        self.model: str | None = opts.model
        self.client: _Client | None = None
        self.before: dict[str, Any] = {}
        self.after: dict[str, Any] = {}
        self.warm_ok = 0
        self.current: int | None = None  # the level in progress
        self.scrape: dict[str, Any] | None = None  # the last /metrics read (_servermetrics.parse)
        self.on_level: Callable[[dict[str, Any]], None] | None = None  # told of each finished level
        # client processes per level (docs/sweep.md "Several client processes"); auto starts at 1
        self.processes = max(opts.client_processes, 1)
        self.pool: ClientPool | None = None  # started at the first level that needs it

    def timeout(self, where: str) -> None:
        self.stopped_on_timeout = True
        self.warnings.append(f"sweep_timeout={self.opts.sweep_timeout:g}s reached {where}")

    def check_auth(self, statuses: Iterable[int | None] = ()) -> None:
        """Stop with what to set when the server refused a probe or a request for its API key."""
        status = self.probe.denied or next((s for s in statuses if s in AUTH_STATUSES), None)
        if status is not None:
            raise SweepError(auth_message(self.opts.url, status, bool(self.opts.api_key)))

    async def resolve_model(self) -> None:
        if self.model is not None:
            return
        self.model, error = await self.probe.model()
        self.check_auth()
        if self.model is None and self.opts.api == "openai":
            raise SweepError(
                f"cannot learn the model name from {self.opts.url}/v1/models ({error}); "
                "is the server up? Set the model option to skip this lookup."
            )
        if self.model is None:
            self.warnings.append(f"no model from /v1/models ({error}); native requests sent without one")

    async def metrics_snapshot(self, when: str) -> dict[str, dict[str, Any]] | None:
        """/metrics histograms; a server without /metrics is asked once."""
        if self.metrics_ok is False:
            return None
        text, error = await self.probe.metrics_text()
        if text is None:
            if self.metrics_ok is None:
                self.metrics_ok = False
                self.warnings.append(
                    f"no server-side latency: {self.opts.url}{METRICS_PATH} answered {error} "
                    "(SGLang serves it with --enable-metrics; the profiles turn it on)"
                )
            else:
                self.warnings.append(f"{METRICS_PATH} unreadable {when} ({error}): no server-side latency there")
            return None
        self.metrics_ok = True
        self.scrape = _servermetrics.parse(text)
        return parse_histograms(text)

    async def sample_metrics(self, samples: _servermetrics.GaugeSamples) -> None:
        """Read /metrics every sample interval while a level runs (cancelled when it ends; one
        read at a time, each bounded by the probe timeout), for its gauges' mean and max."""
        interval = _servermetrics.sample_interval(self.before.get("time_scale"))
        while True:
            await asyncio.sleep(interval)
            text, _ = await self.probe.metrics_text()
            if text is not None:
                samples.add(_servermetrics.parse(text))

    async def sampled_level(self, level: int, concurrency: int, deadline: float,
                            samples: _servermetrics.GaugeSamples | None) -> LevelRun:
        """``run_clients`` with /metrics sampled beside it (when the server serves /metrics)."""
        sampler = asyncio.ensure_future(self.sample_metrics(samples)) if samples is not None else None
        try:
            return await self.run_clients(level, concurrency, deadline)
        finally:
            if sampler is not None:
                sampler.cancel()
                await asyncio.gather(sampler, return_exceptions=True)

    async def initial_warmup(self) -> None:
        """``warmup`` requests one after the other before the first level, not measured."""
        client = self.client
        if client is None:
            raise AssertionError("the client is made before the warm-up")
        for i in range(self.opts.warmup):
            trace = Trace(level=-1, concurrency=1, index=i, worker=0)
            remaining = self.deadline - time.perf_counter()
            try:
                await asyncio.wait_for(client.send(trace, self.prompts[i % len(self.prompts)]),
                                       max(remaining, 0.001))
            except _TIMEOUTS:
                trace.fail("timeout", "sweep_timeout reached during warm-up")
            self.check_auth([trace.http_status])
            if trace.ok:
                self.warm_ok += 1
            else:
                self.warnings.append(f"warm-up request {i} failed ({trace.error_kind}): {trace.error}")

    async def level_warmup(self, level: int, concurrency: int) -> dict[str, Any] | None:
        """The level's discarded warm-up round (``run_level`` with warmup_tokens), summarized."""
        if not self.opts.level_warmup or self.client is None:
            return None
        deadline = min(time.perf_counter() + self.opts.level_timeout, self.deadline)
        warm_run = await run_level(self.client, level, concurrency, deadline, self.prompts,
                                   warmup_tokens=self.opts.level_warmup_tokens)
        if not self.points:  # a key problem shows at the first level; later 401s are level errors
            self.check_auth(t.http_status for t in warm_run.traces)
        warm = summarize_warmup(warm_run, self.opts.level_warmup_tokens)
        if warm["errors"]["total"]:
            kinds = ", ".join(f"{k} {warm['errors'][k]}" for k in ERROR_KINDS if warm["errors"][k])
            self.warnings.append(
                f"C={concurrency}: {warm['errors']['total']} of {warm['requests']} level warm-up requests "
                f"failed ({kinds}): {'; '.join(warm['error_messages'][:2])}"
            )
        return warm

    async def measure_level(self, level: int, concurrency: int,
                            warm: dict[str, Any] | None) -> tuple[dict[str, Any], LevelRun, float]:
        """One measured level with its /metrics and /server_info snapshots around it."""
        if self.client is None:
            raise AssertionError("the client is made before the levels")
        metrics_before = await _within(self.metrics_snapshot(f"before C={concurrency}"), self.deadline, None)
        scrape_before = self.scrape if metrics_before is not None else None
        samples = _servermetrics.GaugeSamples() if metrics_before is not None else None
        deadline = min(time.perf_counter() + self.opts.level_timeout, self.deadline)
        run = await self.sampled_level(level, concurrency, deadline, samples)
        metrics_after = (
            await _within(self.metrics_snapshot(f"after C={concurrency}"), self.deadline, None)
            if metrics_before is not None else None
        )
        self.after = await _within(self.probe.server_info(), self.deadline, _NO_INFO)
        point = summarize_level(run, short_is_error=self.opts.ignore_eos)
        point["client_processes"] = min(self.processes, concurrency)
        point["client_escalation"] = None
        point["level_warmup"] = warm
        if metrics_before is not None and metrics_after is not None:
            point["server"] = server_latency(metrics_before, metrics_after)
        point["server_metrics"] = (_servermetrics.level_metrics(scrape_before, self.scrape, samples)
                                   if samples is not None and metrics_after is not None else None)
        point["server_after"] = {k: self.after.get(k) for k in (
            "ok", "version", "max_running_requests", "avg_spec_accept_length", "last_gen_throughput", "at"
        )}
        prev = [p for p in self.points if p["ok"] > 0 and clean(p)]
        if prev and point["ok"] > 0 and clean(point):
            gain = gain_per_doubling(prev[-1]["concurrency"], prev[-1]["output_tok_s"], concurrency,
                                     point["output_tok_s"])
            point["gain_per_doubling"] = None if gain is None else round(gain, 4)
        return point, run, deadline

    async def run_levels(self) -> None:
        for level, concurrency in enumerate(self.opts.concurrency):
            self.current = concurrency
            if time.perf_counter() >= self.deadline:
                self.timeout(f"before C={concurrency}")
                break
            await _within(self.warm_clients(concurrency), self.deadline, None)
            warm = await self.level_warmup(level, concurrency)
            if warm is not None and time.perf_counter() >= self.deadline:
                self.timeout(f"during the warm-up of C={concurrency}")
                break
            point, run, deadline = await self.measure_level(level, concurrency, warm)
            if self.opts.client_processes == 0:
                point, run, deadline = await self.escalate(level, concurrency, warm, point, run, deadline)
            self.points.append(point)
            if self.on_level is not None:
                self.on_level(point)
            if self.opts.return_records:
                self.records.extend(trace_record(t, self.t0) for t in run.traces)
            if run.timed_out and deadline >= self.deadline:
                self.timeout(f"during C={concurrency}")
                break
            if self.opts.stop_on_plateau and plateau_reached(self.points, self.opts.plateau_gain):
                self.stopped_on_plateau = True
                break

    async def warm_clients(self, concurrency: int) -> None:
        """Open the level's connections: this process's (for the level warm-up) and, when the
        level runs in several client processes, each one's share of them."""
        await self.probe.warm_connections(concurrency)
        if min(self.processes, concurrency) > 1:
            try:
                await self._pool().warm(concurrency, self.processes)
            except ClientProcessError as exc:
                raise SweepError(f"{exc}; the sweep stopped (client_processes={self.processes})") from None

    async def run_clients(self, level: int, concurrency: int, deadline: float) -> LevelRun:
        """The level's C clients: in this process, or spread over ``self.processes``."""
        if self.client is None:
            raise AssertionError("the client is made before the levels")
        if min(self.processes, concurrency) <= 1:
            return await run_level(self.client, level, concurrency, deadline, self.prompts)
        try:
            return await self._pool().run_level(level, concurrency, deadline, self.processes)
        except ClientProcessError as exc:
            raise SweepError(f"{exc}; the sweep stopped (client_processes={self.processes})") from None

    def _pool(self) -> ClientPool:
        if self.pool is None:
            self.pool = ClientPool(self.opts, self.model)
        return self.pool

    async def escalate(self, level: int, concurrency: int, warm: dict[str, Any] | None, point: dict[str, Any],
                       run: LevelRun, deadline: float) -> tuple[dict[str, Any], LevelRun, float]:
        """Auto mode: measure a client-limited level again with twice the processes (up to the
        CPUs, and C), until it is not client-limited; the discarded tries stay in the point."""
        tries: list[dict[str, Any]] = []
        while point["client_limited"] and self.processes < auto_limit(concurrency):
            if time.perf_counter() >= self.deadline:
                break
            tries.append(escalation_entry(point))
            self.processes = min(self.processes * 2, auto_limit(concurrency))
            await _within(self.warm_clients(concurrency), self.deadline, None)
            point, run, deadline = await self.measure_level(level, concurrency, warm)
        if tries:
            point["client_escalation"] = tries
            self.warnings.append(
                f"C={concurrency}: client-limited with {tries[0]['processes']} client process(es); measured again "
                f"with {point['client_processes']} (client_processes: auto)"
            )
        return point, run, deadline

    def close_clients(self) -> None:
        """End the client processes (at once when they are in the middle of a level)."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    async def run(self) -> None:
        await self.resolve_model()
        self.before = await self.probe.server_info()
        self.after = self.before
        self.check_auth()
        if not self.before["ok"]:
            self.warnings.append(f"server info unavailable ({self.before.get('error')}); server fields are null")
        queued = oversubscription_warning(self.opts.concurrency, self.before.get("max_running_requests"))
        if queued:
            self.warnings.append(queued)
        self.client = _Client(self.opts, self.session, self.model)
        await self.initial_warmup()
        await self.run_levels()
        self.current = None


def _convert_time_base(points: list[dict[str, Any]], records: list[dict[str, Any]], scale: Any,
                       warnings: list[str]) -> str:
    """A run against the time-scaled embedded engine in the GPU time it models, its client
    latencies checked against the engine's own; returns the time base ("wall" or "model")."""
    if not (isinstance(scale, (int, float)) and scale > 0 and scale != 1):
        return "wall"
    to_model_time(points, records, float(scale))
    warnings.append(
        f"the server is the embedded engine at time scale {scale:g}: rates and latencies are "
        "converted to the GPU time it models (wall-clock figures under each point's 'wall')"
    )
    not_measured = []
    for point in points:
        check_latency(point, float(scale))
        names = [f"{key} {'/'.join(stats)}" for key, stats in point["latency_unmeasurable"].items()]
        if names:
            not_measured.append(f"C={point['concurrency']} ({', '.join(names)})")
    if not_measured:
        warnings.append(
            f"time scale {scale:g}: client latencies that disagree with the engine's model by more than "
            f"{LATENCY_TOLERANCE:.0%} (not measurable at this scale, reported as n/m; the modelled values "
            f"are under each point's 'server', the reasons under 'latency_check'): " + "; ".join(not_measured)
        )
    return "model"


def _drift_warnings(points: list[dict[str, Any]]) -> list[str]:
    warnings = []
    for point in points:
        drift = point.get("drift") or {}
        if drift.get("flagged"):
            warnings.append(
                f"C={point['concurrency']}: throughput changed within the level: {drift['first_half_tok_s']} tok/s "
                f"in the first half of its {drift['window']} window, {drift['second_half_tok_s']} in the second "
                f"(x{drift['ratio']:.2f}, threshold {DRIFT_THRESHOLD:.0%}): the server's speed was not steady "
                "(compilation, caches, throttling or other load)"
            )
    return warnings


def _result(sweep: _SweepRun, started: str, finished: str, scale: Any, time_base: str) -> dict[str, Any]:
    """The ``sglang_sweep`` fact."""
    opts, points, before, after = sweep.opts, sweep.points, sweep.before, sweep.after
    srv_info = after if after.get("ok") else before
    return {
        "schema_version": SCHEMA_VERSION,
        "url": opts.url,
        "api": opts.api,
        "model": sweep.model,
        "server": {
            "version": srv_info.get("version"),
            "max_running_requests": srv_info.get("max_running_requests"),
            "avg_spec_accept_length_before": before.get("avg_spec_accept_length"),
            "avg_spec_accept_length_after": after.get("avg_spec_accept_length"),
            "server_info_path": sweep.probe.path,
            "time_scale": scale,
            "metrics": bool(sweep.metrics_ok),
        },
        "time_base": time_base,
        "started": started,
        "finished": finished,
        "duration_s": round(time.perf_counter() - sweep.t0, 3),
        "options": opts.effective(sweep.model),
        "warmup": {"requests": opts.warmup, "ok": sweep.warm_ok},
        "level_warmup": {
            "enabled": opts.level_warmup,
            "max_tokens": opts.level_warmup_tokens,
            "requests": sum((p.get("level_warmup") or {}).get("requests", 0) for p in points),
            "errors": sum(((p.get("level_warmup") or {}).get("errors") or {}).get("total", 0) for p in points),
        },
        "points": points,
        "peak": find_peak(points),
        "knee": find_knee(points, opts.plateau_gain),
        "levels_with_errors": [p["concurrency"] for p in points if not clean(p)],
        "stopped_on_plateau": sweep.stopped_on_plateau,
        "stopped_on_timeout": sweep.stopped_on_timeout,
        "warnings": sweep.warnings,
        "records": sweep.records if opts.return_records else [],
        "records_t0_unix": round(sweep.t0_unix, 6),
    }


def open_session(opts: SweepOptions) -> Any:
    """The sweep's one session: no connection cap, keep-alive, a large read buffer, the key."""
    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ssl=True if opts.validate_certs else False)
    return aiohttp.ClientSession(connector=connector, headers=headers, read_bufsize=READ_BUFSIZE)


async def arun_sweep(options: SweepOptions, signals: Sequence[int] = (), output_fd: int | None = None,
                     on_level: Callable[[dict[str, Any], Any], None] | None = None) -> dict[str, Any]:
    """Run the sweep; returns the ``sglang_sweep`` fact (schema_version 1).

    ``on_level(point, time_scale)`` is called with each level as it finishes (the point as
    measured, in wall-clock time; ``time_scale`` from /server_info, else ``options.time_scale``,
    None on a real server):
    the module's progress lines. An exception there stops the sweep.

    It stops at once, raising SweepInterrupted, on one of ``signals``, when the reader of
    ``output_fd`` is gone, when ``options.watch_pid`` is gone or when nobody refreshed
    ``options.heartbeat_file`` for ``heartbeat_timeout`` seconds (``_interrupt.Interrupts``).
    """
    if not HAS_AIOHTTP:
        raise SweepError(f"aiohttp is not importable: {AIOHTTP_IMPORT_ERROR}")
    opts = options.normalized()
    raise_open_files(max(opts.concurrency))
    started = utc_now_iso()
    heartbeat = _begin_heartbeat(opts)
    guard = Interrupts(signals, output_fd, opts.watch_pid, heartbeat=heartbeat)
    task = asyncio.current_task()
    if task is not None:
        guard.start(task)
    sweep: _SweepRun | None = None
    try:
        async with open_session(opts) as session:
            sweep = _SweepRun(opts, session)
            if on_level is not None:
                run = sweep
                # the same scale the result is converted with (a router reports none: the option's)
                sweep.on_level = lambda point: on_level(point, run.before.get("time_scale") or run.opts.time_scale)
            try:
                await sweep.run()
            finally:
                sweep.close_clients()
    except asyncio.CancelledError:
        if guard.reason is None:
            raise
        current = sweep.current if sweep is not None else None
        done = [p["concurrency"] for p in sweep.points] if sweep is not None else []
        raise SweepInterrupted(guard.reason, current, done) from None
    finally:
        guard.close()
        if heartbeat is not None:
            heartbeat.end()
    finished = utc_now_iso()
    srv_info = sweep.after if sweep.after.get("ok") else sweep.before
    scale = srv_info.get("time_scale") or sweep.before.get("time_scale") or sweep.opts.time_scale
    time_base = _convert_time_base(sweep.points, sweep.records, scale, sweep.warnings)
    sweep.warnings.extend(_drift_warnings(sweep.points))
    failed = error_warning(sweep.points)
    if failed:
        sweep.warnings.append(failed)
    return _result(sweep, started, finished, scale, time_base)


def _begin_heartbeat(opts: SweepOptions) -> Heartbeat | None:
    """The sweep's heartbeat file, created now (its clock starts with the sweep), or None."""
    if not opts.heartbeat_file:
        return None
    heartbeat = Heartbeat(opts.heartbeat_file, opts.heartbeat_timeout)
    try:
        heartbeat.begin()
    except OSError as exc:
        raise SweepError(f"cannot create heartbeat_file {opts.heartbeat_file}: {exc} (a writable path on the "
                         "machine running the sweep, not a symbolic link)") from None
    return heartbeat


def run_sweep(options: SweepOptions, signals: Sequence[int] = (), output_fd: int | None = None,
              on_level: Callable[[dict[str, Any], Any], None] | None = None) -> dict[str, Any]:
    """Synchronous entry: run the sweep in a fresh event loop (``arun_sweep``)."""
    return asyncio.run(arun_sweep(options, signals, output_fd, on_level))
