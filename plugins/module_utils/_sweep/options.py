# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""``SweepOptions``: every option of a sweep, checked at once, and the open-files limit a level
of C clients needs.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._stats import KNEE_SHARE
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import (
    APIS,
    CLIENT_CPU_LIMIT,
    CLIENT_LAG_LIMIT_MS,
    DEFAULT_PROMPTS,
    DRIFT_THRESHOLD,
    LATENCY_TOLERANCE,
    SPARE_FILES,
    SweepError,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.openloop import (
    check_open_loop,
    open_loop_effective,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.spec import ARGUMENT_SPEC
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.workloads import parse_workload


def _declared(name: str) -> Any:
    """The field of option ``name`` with its documented default (plugins/modules/throughput_sweep.py,
    through the generated ``spec.py``; None where the documentation gives none)."""
    if name not in ARGUMENT_SPEC:  # documented after spec.py was written
        raise KeyError(f"throughput_sweep's option {name} is not in _sweep/spec.py: run `make generated`")
    value = ARGUMENT_SPEC[name].get("default")
    if isinstance(value, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(value))
    return field(default=value)


# The most client processes accepted: more than the host's cores only adds switching.
MAX_CLIENT_PROCESSES = 256


def parse_client_processes(value: Any) -> int:
    """The ``client_processes`` option as an int: N >= 1 processes, or 0 for auto (``0``,
    ``"auto"``). Raises SweepError naming the value, the rule and the fix."""
    raw = value
    if value is None:
        return 1
    if isinstance(value, str):
        text = value.strip().lower()
        value = 0 if text == "auto" else (int(text) if text.isdigit() else None)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CLIENT_PROCESSES:
        raise SweepError(
            f"client_processes must be an integer from 1 to {MAX_CLIENT_PROCESSES}, or 0 or 'auto' (more "
            f"processes when a level is client-limited), got {raw!r}: set it to 1 (one process), 2 or more, or auto"
        )
    return value


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


def _with_workload(raw: SweepOptions, out: SweepOptions) -> SweepOptions:
    """``out`` (normalized) with the workload, seed and cache options of ``raw``, checked."""
    workload = parse_workload(raw.workload, raw.seed, list(out.prompts or DEFAULT_PROMPTS))
    if float(raw.flush_timeout) < 0:
        raise SweepError(f"flush_timeout must be >= 0 seconds, got {raw.flush_timeout!r}")
    out.workload, out.seed = dict(workload.spec), workload.seed
    out.flush_cache, out.flush_timeout, out.warm = bool(raw.flush_cache), float(raw.flush_timeout), bool(raw.warm)
    return out


@dataclass
class SweepOptions:
    """The sweep's options; each default is the option's documented one (``_declared``)."""

    url: str
    api: str = _declared("api")
    concurrency: list[int] = _declared("concurrency")
    requests: int | None = _declared("requests")  # per level; None: max(2*C, 8)
    duration: float | None = _declared("duration")  # seconds per level instead of a request count
    max_tokens: int = _declared("max_tokens")
    temperature: float = _declared("temperature")
    top_p: float = _declared("top_p")
    ignore_eos: bool = _declared("ignore_eos")
    prompts: list[str] | None = _declared("prompts")  # None: DEFAULT_PROMPTS
    warmup: int = _declared("warmup")
    level_warmup: bool = _declared("level_warmup")  # a discarded round of C short requests before each level
    level_warmup_tokens: int = _declared("level_warmup_tokens")
    timeout: float = _declared("timeout")  # per request, queueing at the server included
    level_timeout: float = _declared("level_timeout")
    sweep_timeout: float = _declared("sweep_timeout")
    stop_on_plateau: bool = _declared("stop_on_plateau")
    plateau_gain: float = _declared("plateau_gain")
    api_key: str | None = _declared("api_key")
    model: str | None = _declared("model")
    return_records: bool = _declared("return_records")
    validate_certs: bool = _declared("validate_certs")
    max_concurrency: int = _declared("max_concurrency")
    fail_on_errors: bool = _declared("fail_on_errors")  # acted on by the module (the sweep itself always returns)
    watch_pid: int | None = _declared("watch_pid")  # stop when this process is gone (the controller's ansible)
    # stop when nobody refreshed this file for heartbeat_timeout s (a controller on another host)
    heartbeat_file: str | None = _declared("heartbeat_file")
    heartbeat_timeout: float = _declared("heartbeat_timeout")
    # the embedded engine's time scale when the server does not report one (a router in front
    # of engines): the sweep is then converted to modelled time like theirs
    time_scale: float | None = _declared("time_scale")
    client_processes: Any = _declared("client_processes")  # client processes per level; 0 or "auto": more when client-limited
    # what each request asks (workloads.py) and the seed of every random choice in it
    workload: dict[str, Any] | None = _declared("workload")
    seed: int | None = _declared("seed")  # None: openloop.DEFAULT_SEED (42, as the workloads' default)
    flush_cache: bool = _declared("flush_cache")  # POST /flush_cache before each measured level
    flush_timeout: float = _declared("flush_timeout")  # the server waits this long for idle before it flushes
    warm: bool = _declared("warm")  # send each shared prefix once before each measured level
    # open loop, goodput, SLO search, repeats (openloop.check_open_loop; docs/sweep.md)
    mode: str = _declared("mode")
    rates: list[float] | None = _declared("rates")
    arrival: str = _declared("arrival")
    level_duration_s: float | None = _declared("level_duration_s")
    max_inflight: int | None = _declared("max_inflight")
    slo: dict[str, Any] | None = _declared("slo")
    search: bool = _declared("search")
    search_tolerance: float = _declared("search_tolerance")
    repeats: int = _declared("repeats")

    def normalized(self) -> SweepOptions:
        """A checked copy: base URL without a trailing / or /v1, levels sorted and deduplicated."""
        url = (self.url or "").strip().rstrip("/")
        if url.endswith("/v1"):
            url = url[: -len("/v1")]
        if not url.startswith(("http://", "https://")):
            raise SweepError(f"url must start with http:// or https://, got {self.url!r}")
        if self.api not in APIS:
            raise SweepError(f"api must be one of {', '.join(APIS)}, got {self.api!r}")
        open_loop = check_open_loop(self)
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
        return replace(_with_workload(self, SweepOptions(
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
        )), **open_loop)

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
            "workload": parse_workload(self.workload, self.seed, list(self.prompts or DEFAULT_PROMPTS)).describe(),
            "seed": self.seed,
            "flush_cache": self.flush_cache,
            "flush_timeout": self.flush_timeout if self.flush_cache else None,
            "warm": self.warm,
            "knee_share": KNEE_SHARE,
            "client_cpu_limit": CLIENT_CPU_LIMIT,
            "client_lag_limit_ms": CLIENT_LAG_LIMIT_MS,
            "drift_threshold": DRIFT_THRESHOLD,
            "latency_tolerance": LATENCY_TOLERANCE,
            **open_loop_effective(self),
        }
