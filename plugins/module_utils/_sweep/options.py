# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""``SweepOptions``: every option of a sweep, checked at once, and the open-files limit a level
of C clients needs.
"""
from __future__ import annotations

import copy
from dataclasses import fields, replace
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench.stats import KNEE_SHARE
from ansible_collections.llmops.sglang.plugins.module_utils._sweep import pair
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
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.spec import DeclaredOptions
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.workloads import parse_workload

# Not in the facts' options: the key (``api_key_set`` says whether one was sent), and where this
# run's progress lines went (the play's files, not a setting of the measurement).
_NOT_RECORDED = ("api_key", "progress_file", "progress_labels")

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


def _check_counts_and_times(opts: DeclaredOptions) -> None:
    if int(opts.max_tokens) < 1:
        raise SweepError("max_tokens must be >= 1")
    if int(opts.warmup) < 0:
        raise SweepError("warmup must be >= 0")
    if int(opts.level_warmup_tokens) < 1:
        raise SweepError("level_warmup_tokens must be >= 1")
    for name in ("timeout", "level_timeout", "sweep_timeout"):
        if float(getattr(opts, name)) <= 0:
            raise SweepError(f"{name} must be > 0")
    if float(opts.plateau_gain) < 0:
        raise SweepError("plateau_gain must be >= 0")
    if opts.time_scale is not None and not float(opts.time_scale) > 0:
        raise SweepError(f"time_scale must be > 0, got {opts.time_scale!r}")


def _check_worker_metrics(workers: Any) -> None:
    """Each of ``worker_metrics`` is {name, url, side}: an http(s) URL, a side of PD or none."""
    for worker in workers or []:
        url = worker.get("url") if isinstance(worker, dict) else None
        side = worker.get("side") or "" if isinstance(worker, dict) else ""
        if not (isinstance(url, str) and url.startswith(("http://", "https://"))) or side not in (
                "", "prefill", "decode", "unified"):
            raise SweepError(f"worker_metrics: {worker!r} is not {{name, url, side}} with an http(s) url and a side "
                             "of prefill, decode or unified (empty: unified)")


class SweepOptions(DeclaredOptions):
    """The sweep's options: the fields and their defaults are the documented ones (``DeclaredOptions``,
    generated from plugins/modules/throughput_sweep.py); this adds the rules between them, the
    normal form (``normalized``) and the form the facts record (``effective``). An option with no
    rule of its own is carried as the module validated it, and recorded as it is."""

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
        _check_counts_and_times(self)
        _check_worker_metrics(self.worker_metrics)
        pd = pair.normalized(self.pd, url)
        prompts = list(self.prompts) if self.prompts else list(DEFAULT_PROMPTS)
        if not all(isinstance(p, str) and p for p in prompts):
            raise SweepError("prompts must be non-empty strings")
        return replace(_with_workload(self, replace(
            self,
            url=url,
            pd=pd,
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
        """The options as run, for the facts: every option as carried (the API key as
        ``api_key_set``, the model as the sweep found it, a setting that took no effect as None),
        then the sweep's own limits."""
        return {
            **{item.name: copy.deepcopy(getattr(self, item.name)) for item in fields(self) if item.name not in _NOT_RECORDED},
            "requests_rule": "max(2*C, 8)" if self.requests is None and self.duration is None else None,
            "prompts": list(self.prompts or DEFAULT_PROMPTS),
            "model": model,
            "heartbeat_timeout": self.heartbeat_timeout if self.heartbeat_file else None,
            "client_processes": "auto" if self.client_processes == 0 else self.client_processes,
            "api_key_set": bool(self.api_key),
            "workload": parse_workload(self.workload, self.seed, list(self.prompts or DEFAULT_PROMPTS)).describe(),
            "flush_timeout": self.flush_timeout if self.flush_cache else None,
            "knee_share": KNEE_SHARE,
            "client_cpu_limit": CLIENT_CPU_LIMIT,
            "client_lag_limit_ms": CLIENT_LAG_LIMIT_MS,
            "drift_threshold": DRIFT_THRESHOLD,
            "latency_tolerance": LATENCY_TOLERANCE,
            **open_loop_effective(self),
        }
