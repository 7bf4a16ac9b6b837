# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Throughput sweep engine for SGLang servers (and anything speaking their streaming APIs), a package.

Used by the ``llmops.sglang.throughput_sweep`` module; plain Python, no Ansible import, aiohttp
only where requests are sent (``client``: the statistics, stream parsers, knee and plateau rules import
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

One job per file (after kubernetes.core's ``module_utils/k8s/``); each imports only the files
before it in this list, never this ``__init__``, so the package has no import cycle:

- ``common``: constants, ``SweepError``/``SweepInterrupted``, the API-key message;
- ``workloads``: what each request asks (random, shared_prefix, multi_turn, file), seeded;
- ``options``: ``SweepOptions`` (every option checked at once), ``client_processes``, open files;
- ``streams``: the OpenAI and native stream parsers; ``trace``: one request's ``Trace``, its record;
- ``client``: the aiohttp session and ``Client`` (one streamed request; the only aiohttp user);
- ``probe``: /server_info, /metrics, /v1/models and connection warm-up around the levels;
- ``level``: one level's closed-loop clients (``run_level``), the client's health, ``LevelRun``;
- ``cachestate``: the server's prefix cache around a level (flush, warm, the client's hits);
- ``drift``: the steady window and the drift check; ``histograms``: the server's latency
  histograms; ``timebase``: the time-scaled engine's model time and the latency check;
- ``summary``: a level's point; ``curve``: plateau and warnings over the levels;
- ``openloop``: the open-loop options (mode, rates, arrival, slo, search, repeats) and the seeded
  arrival schedule; ``ratelevel``: one open-loop level with its in-flight cap; ``slo``: goodput and
  the SLO verdict; ``search``: the SLO search's bisection; ``repeats``: intervals over repeated levels;
- ``workers``: several client processes for one level; ``plan``: rate levels, the search and
  repeats over run's level primitives; ``run``: the sweep (``run_sweep``);
- ``module``: the ``throughput_sweep`` module's argument spec and main, over ``run_sweep``.

Statistics the controller also needs (percentiles, summaries, clean levels, peak, knee) are in
``module_utils/_bench/stats.py``, which both sides import. The names below are re-exported, so
``from ..._sweep import run_sweep, SweepOptions`` keeps working.
"""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils._bench.stats import (  # noqa: F401
    KNEE_SHARE,
    clean,
    find_knee,
    find_peak,
    gain_per_doubling,
    percentile,
    summarize,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.client import (  # noqa: F401
    AIOHTTP_IMPORT_ERROR,
    HAS_AIOHTTP,
    Client,
    build_payload,
    missing_aiohttp_message,
    open_session,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import (  # noqa: F401
    APIS,
    AUTH_STATUSES,
    CLIENT_CPU_LIMIT,
    CLIENT_LAG_LIMIT_MS,
    DEFAULT_CONCURRENCY,
    DEFAULT_PROMPTS,
    DRIFT_MIN_CHUNKS,
    DRIFT_MIN_TOKENS,
    DRIFT_THRESHOLD,
    ERROR_KINDS,
    JITTER_FLOOR_MS,
    LATENCY_JITTER_FACTOR,
    LATENCY_TOLERANCE,
    LEVEL_WARMUP_TOKENS,
    MAX_CONCURRENCY,
    MAX_ERROR_MESSAGES,
    METRICS_PATH,
    OVERSUBSCRIPTION,
    PROBE_TIMEOUT_S,
    READ_BUFSIZE,
    SCHEMA_VERSION,
    SERVER_HISTOGRAMS,
    SERVER_INFO_PATHS,
    SPARE_FILES,
    TICK_S,
    TIMEOUTS,
    SweepError,
    SweepInterrupted,
    auth_message,
    utc_now_iso,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.curve import (  # noqa: F401
    error_summary,
    error_warning,
    oversubscription_warning,
    plateau_reached,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.drift import (  # noqa: F401
    drift_check,
    steady_window,
    tokens_in_window,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.histograms import (  # noqa: F401
    histogram_delta,
    histogram_rank_range,
    parse_histograms,
    server_latency,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.level import (  # noqa: F401
    Health,
    LevelRun,
    LevelShare,
    run_delay_s,
    run_level,
    warmup_level_tokens,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.options import (  # noqa: F401
    MAX_CLIENT_PROCESSES,
    SweepOptions,
    open_files_limit,
    parse_client_processes,
    raise_open_files,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.probe import (  # noqa: F401
    Probe,
    server_summary,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.run import (  # noqa: F401
    arun_sweep,
    run_sweep,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.streams import (  # noqa: F401
    NativeStreamParser,
    OpenAIStreamParser,
    StreamParser,
    http_error_message,
    make_parser,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.summary import (  # noqa: F401
    client_limited,
    count_errors,
    judged_lag,
    level_status,
    summarize_level,
    summarize_warmup,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.timebase import (  # noqa: F401
    check_latency,
    to_model_time,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.trace import (  # noqa: F401
    Trace,
    finalize_trace,
    itl_samples,
    trace_record,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.workers import (  # noqa: F401
    ClientPool,
    ClientProcessError,
)
