# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What ``/get_load`` and ``/v1/loads`` answer: the scheduler's load, in each release's shape.

A router's ``power_of_two`` policy polls ``/get_load`` (sglang-router 0.3.2: every 30 s). The
release traits (``data/releases.json``: ``get_load``, ``v1_loads``) say whether a release has
the route and which keys, in which order, its documents carry; the values come from here:

- ``source: scheduler`` (0.5.10): the scheduler's own reply dataclasses (``io_struct.py``
  ``GetLoadReqOutput``, ``GetLoadsReqOutput``), so ``dp_rank`` is the scheduler's (None without
  data parallelism), ``/get_load`` shows BaseReq's ``rid`` and ``http_worker_ipc`` (null), and
  ``/v1/loads`` drops None values and ``timestamp`` (``_loads_dict_factory``), adds
  ``num_total_reqs`` and an ``aggregate`` block;
- ``source: snapshot`` (0.5.17, 0.5.23): the ``LoadSnapshot`` the schedulers publish
  (``managers/load_snapshot.py``): ``dp_rank`` 0, ``/get_load`` a projection of it with
  ``num_pending_tokens`` (0.5.17 only; 0.5.23 has no ``/get_load``), ``/v1/loads`` with
  ``accelerator`` and ``num_accelerators``.

One DP rank is modelled (one entry in each list). Framework-free: ``server`` serves them.
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine import info
from ansible_collections.llmops.sglang.plugins.module_utils._engine.replies import Reply, bad_request
from ansible_collections.llmops.sglang.plugins.module_utils._engine.requests import (
    ApiRequest,
    ValidationError,
    err,
)

if TYPE_CHECKING:
    from ansible_collections.llmops.sglang.plugins.module_utils._engine.engine import Engine

PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# LoadSnapshot / GetLoadsReqOutput section -> its name in ?include= and in the Prometheus names
SECTION_NAMES = {"memory": "memory", "speculative": "spec", "lora": "lora",
                 "disaggregation": "disagg", "queues": "queues"}
VALID_SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})
DEPRECATION = ("Endpoint '/get_load' is deprecated and will be removed in a future version. "
               "Please use '/v1/loads' instead.")


def _dp_rank(engine: Engine) -> int | None:
    """The scheduler's dp_rank: None without data parallelism unless ``SGLANG_DP_RANK`` is set
    (run_scheduler_process); the snapshot makes that 0."""
    env = os.environ.get("SGLANG_DP_RANK")
    if env is not None and env.strip().lstrip("-").isdigit():
        return int(env)
    return None


def _values(engine: Engine, source: str) -> dict[str, Any]:
    """Every per-rank value any release reports, by its name."""
    config, sched, metrics = engine.config, engine.scheduler, engine.metrics
    running, waiting = sched.num_running(), sched.num_queued()
    used = int(sched.sched.tokens_in_use)
    total = max(int(sched.used_tokens()), used)  # + the prompts waiting in the queue
    prompts = metrics.prompt_tokens()
    dp_rank = _dp_rank(engine)
    return {
        "rid": None, "http_worker_ipc": None, "timestamp": time.time(),
        "dp_rank": dp_rank if source == "scheduler" else (dp_rank or 0),
        "num_running_reqs": running, "num_waiting_reqs": waiting, "num_reqs": running + waiting,
        "num_waiting_uncached_tokens": total - used, "num_used_tokens": used,
        "num_total_tokens": total, "num_active_tokens": total, "num_prealloc_ready_tokens": 0,
        "num_tokens": total, "num_pending_tokens": total - used,
        "max_total_num_tokens": config.max_total_tokens, "max_running_requests": config.max_running,
        "token_usage": round(used / config.max_total_tokens if config.max_total_tokens else 0.0, 4),
        "gen_throughput": round(sched.stats.last_gen_throughput if running else 0.0, 2),
        "cache_hit_rate": round(metrics.cached_total / prompts if prompts else 0.0, 4),
        "utilization": round(min(1.0, running / config.max_running) if config.max_running else 0.0, 4),
        "total_prefill_uncached_tokens": int(metrics.realtime["prefill_compute"]),
        "total_prefill_busy_us": int(metrics.hist_stage["prefill_forward"].sum * 1e6),
        "decode_moments": list(sched.stats.decode_moments) if sched.stats.decode_moments[0] else None,
        "ts_tic": time.perf_counter(),
    }


def _sections(engine: Engine) -> dict[str, dict[str, Any] | None]:
    """The optional sections (None: the release leaves it out), every key any release has."""
    config, sched = engine.config, engine.scheduler
    memory = info.memory_usage(engine)
    zero_queues = {key: 0 for key in ("prefill_bootstrap_queue_reqs", "prefill_prealloc_queue_reqs",
                                      "prefill_inflight_queue_reqs", "decode_prealloc_queue_reqs",
                                      "decode_transfer_queue_reqs", "decode_retracted_queue_reqs")}
    return {
        "memory": {"weight_gb": round(memory["weight"], 3), "kv_cache_gb": round(memory["kvcache"], 3),
                   "graph_gb": round(sum(memory["graph"].values()), 3),
                   "token_capacity": config.max_total_tokens},
        "speculative": ({"accept_length": sched.avg_accept_length(), "accept_rate": sched.accept_rate()}
                        if config.spec and sched.stats.verify_steps else None),
        "lora": None,  # LoRA adapters are not modelled
        "disaggregation": {"mode": str(config.args.get("disaggregation_mode") or "null"),
                           **zero_queues, "kv_transfer_speed_gb_s": 0.0, "kv_transfer_latency_ms": 0.0},
        "queues": {"waiting": sched.num_queued(), "grammar": 0, "paused": 0, "retracted": 0,
                   "prealloc_ready": 0},
    }


def get_load(engine: Engine) -> list[dict[str, Any]]:
    """``/get_load``: one object per DP rank with the release's keys."""
    spec = engine.config.traits["get_load"]
    values = _values(engine, str(spec["source"]))
    return [{key: values[key] for key in spec["keys"]}]


def _include(query: Mapping[str, str]) -> set[str] | None:
    """``?include=a,b`` as a set (None: all); ValueError with the releases' message."""
    raw = query.get("include")
    if not raw:
        return None
    include = {part.strip() for part in raw.split(",")}
    if not include <= VALID_SECTIONS:
        raise ValueError(f"Invalid include sections: {include - VALID_SECTIONS}. "
                         f"Valid options: {sorted(VALID_SECTIONS)}")
    return include


def _load(engine: Engine, spec: Mapping[str, Any], include: set[str] | None) -> dict[str, Any]:
    """One DP rank's entry: the core keys, then the included sections that exist."""
    source = str(spec["source"])
    values = _values(engine, source)
    load = {key: values[key] for key in spec["core"]}
    everything = include is None or "all" in include
    for name, section in _sections(engine).items():
        if section is None or not (everything or SECTION_NAMES[name] in include):
            continue
        load[name] = {key: section[key] for key in spec["sections"][name]}
    if source == "scheduler":  # _loads_dict_factory, then num_total_reqs
        load = {k: v for k, v in load.items() if v is not None and k != "timestamp"}
        load["num_total_reqs"] = load["num_running_reqs"] + load["num_waiting_reqs"]
    return load


def _aggregate(loads: list[dict[str, Any]]) -> dict[str, Any]:
    """0.5.10's ``_compute_aggregate``."""
    n = len(loads)
    if not n:
        return {"total_running_reqs": 0, "total_waiting_reqs": 0, "total_reqs": 0,
                "avg_token_usage": 0.0, "avg_throughput": 0.0, "avg_utilization": 0.0}
    return {"total_running_reqs": sum(d["num_running_reqs"] for d in loads),
            "total_waiting_reqs": sum(d["num_waiting_reqs"] for d in loads),
            "total_reqs": sum(d["num_running_reqs"] + d["num_waiting_reqs"] for d in loads),
            "avg_token_usage": round(sum(d["token_usage"] for d in loads) / n, 4),
            "avg_throughput": round(sum(d["gen_throughput"] for d in loads) / n, 2),
            "avg_utilization": round(sum(d["utilization"] for d in loads) / n, 4)}


def _document(engine: Engine, spec: Mapping[str, Any], loads: list[dict[str, Any]]) -> dict[str, Any]:
    stamp = datetime.now(timezone.utc).isoformat()
    release = engine.config.release
    if spec["source"] == "scheduler":
        return {"timestamp": stamp, "version": release, "dp_rank_count": len(loads),
                "loads": loads, "aggregate": _aggregate(loads)}
    args = engine.config.args
    accelerators = int(args.get("tp_size") or 1) * int(args.get("pp_size") or 1)
    if args.get("enable_dp_attention"):
        accelerators //= max(int(args.get("dp_size") or 1), 1)
    return {"timestamp": stamp, "version": release, "accelerator": engine.config.gpu_name,
            "num_accelerators": accelerators, "loads": loads}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and value is not None


def _prometheus_snapshot(loads: list[dict[str, Any]]) -> str:
    """0.5.17+ ``_format_loads_prometheus``: every number as a gauge, sections prefixed."""
    samples: dict[str, list[tuple[Any, Any]]] = {}
    for load in loads:
        rest = dict(load)
        dp_rank = rest.pop("dp_rank", None)
        for key, value in rest.items():
            if isinstance(value, dict):
                prefix = {"speculative": "spec", "disaggregation": "disagg"}.get(key, key)
                for sub, sub_value in value.items():
                    if _number(sub_value):
                        samples.setdefault(f"sglang_{prefix}_{sub}", []).append((dp_rank, sub_value))
            elif _number(value):
                samples.setdefault(f"sglang_{key}", []).append((dp_rank, value))
    lines: list[str] = []
    for name, pairs in samples.items():
        lines.append(f"# TYPE {name} gauge")
        lines += [f'{name}{{dp_rank="{rank}"}} {value}' for rank, value in pairs]
    return "\n".join(lines) + "\n"


def _prometheus_scheduler(spec: Mapping[str, Any], loads: list[dict[str, Any]],
                          values: dict[str, Any]) -> str:
    """0.5.10 ``_format_loads_prometheus``: the fields with metric metadata (HELP texts in
    data/releases.json), then each section some DP rank has."""
    helps = spec["prometheus_help"]
    lines: list[str] = []

    def family(name: str, text: str, found: list[Any]) -> None:
        lines.extend((f"# HELP {name} {text}", f"# TYPE {name} gauge"))
        lines.extend(f'{name}{{dp_rank="{values["dp_rank"]}"}} {v}' for v in found if v is not None)

    for key, text in helps["core"].items():
        family(f"sglang_{key}", text, [values[key]] if loads else [])
    for section, prefix in SECTION_NAMES.items():
        present = [load[section] for load in loads if load.get(section)]
        if not present:
            continue
        for key, text in helps[section].items():
            family(f"sglang_{prefix}_{key}", text, [p.get(key) for p in present])
    return "\n".join(lines) + "\n"


def v1_loads(engine: Engine, query: Mapping[str, str]) -> Reply | str:
    """``/v1/loads?dp_rank=&include=&format=``: the JSON document (or a 400), or the Prometheus
    text (a str) with ``format=prometheus``."""
    spec = engine.config.traits["v1_loads"]
    dp_rank: int | None = None
    if query.get("dp_rank") is not None:
        raw = query["dp_rank"]
        try:
            dp_rank = int(raw)
        except ValueError:
            error = err("int_parsing", "dp_rank", "Input should be a valid integer, unable to "
                        "parse string as an integer", raw)
            error["loc"] = ("query", "dp_rank")
            return bad_request(ApiRequest("GET", "/v1/loads", b""), ValidationError([error]))
    try:
        include = _include(query)
    except ValueError as exc:
        return Reply({"detail": str(exc)}, 400)
    load = _load(engine, spec, include)
    rank = _values(engine, str(spec["source"]))["dp_rank"]
    loads = [load] if dp_rank is None or dp_rank == rank else []
    if query.get("format") == "prometheus":
        if spec["source"] == "scheduler":
            return _prometheus_scheduler(spec, loads, _values(engine, "scheduler"))
        return _prometheus_snapshot(loads)
    return Reply(_document(engine, spec, loads))
