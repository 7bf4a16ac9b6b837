# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The profile settings that become SGLang flags, one row each (``PROFILE_FLAGS``): the key a
profile sets, what it means (docs/planning.md's table is generated from it), and how it is
rendered for the host's settings. The rows' order is the argv's. A setting that is a flag's value
as written (per model kind where a mapping) is one row with ``value_flag``; a setting the plan
derives (limits, speculative decoding, HiCache) renders what ``settings.HostSettings`` decided.
The profile keys (``profiles.PROFILE_KEYS``) are these rows' keys, with ``description`` and
``extends``."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import by_arch, render
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.request import PlanRequest
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.settings import HostSettings

Argv = list[tuple[str, list[str]]]
# (the profile's value for the row's key, the host's settings, the request) -> flags
Render = Callable[[Any, HostSettings, PlanRequest], Argv]


@dataclass(frozen=True)
class ProfileFlag:
    """One profile setting: its key, its meaning (one line of docs), how it becomes flags."""

    key: str
    doc: str
    render: Render


def value_flag(flag: str) -> Render:
    """The setting's value (per model kind where a mapping) as ``flag``'s value; null: not rendered
    (SGLang decides)."""
    def flags(value: Any, st: HostSettings, req: PlanRequest) -> Argv:
        value = by_arch(value, st.arch)
        return [] if value is None else [(flag, [render(value)])]
    return flags


def switch_flag(flag: str) -> Render:
    """``flag`` without a value when the setting is true (per model kind where a mapping)."""
    def flags(value: Any, st: HostSettings, req: PlanRequest) -> Argv:
        return [(flag, [])] if by_arch(value, st.arch) else []
    return flags


def _running_limit(value: Any, st: HostSettings, req: PlanRequest) -> Argv:
    return [] if st.max_running_requests is None else [("--max-running-requests", [str(st.max_running_requests)])]


def _cuda_graph(value: Any, st: HostSettings, req: PlanRequest) -> Argv:
    return [] if st.cuda_graph_max_bs is None else [(st.cuda_graph_flag, [str(st.cuda_graph_max_bs)])]


def _speculative(value: Any, st: HostSettings, req: PlanRequest) -> Argv:
    if not st.spec:
        return []
    argv: Argv = [
        ("--speculative-algorithm", [st.spec["algorithm"]]),
        ("--speculative-num-steps", [str(st.spec["steps"])]),
        ("--speculative-eagle-topk", [str(st.spec["topk"])]),
        ("--speculative-num-draft-tokens", [str(st.spec["draft_tokens"])]),
    ]
    if req.draft_model_path:
        argv.append(("--speculative-draft-model-path", [req.draft_model_path]))
    return argv


def _mamba(value: Any, st: HostSettings, req: PlanRequest) -> Argv:
    return [] if st.mamba_strategy is None else [(st.mamba_flag, [st.mamba_strategy])]


HICACHE_FLAGS = (("write_policy", "--hicache-write-policy"), ("io_backend", "--hicache-io-backend"),
                 ("mem_layout", "--hicache-mem-layout"))


def _hicache(value: Any, st: HostSettings, req: PlanRequest) -> Argv:
    if not st.hicache_flags.get("enabled"):
        return []
    argv: Argv = [("--enable-hierarchical-cache", [])]
    if st.hicache is not None:
        argv.append(("--hicache-size", [str(st.hicache["size_gb"])]))
    else:
        argv.append(("--hicache-ratio", [render(st.hicache_flags["ratio"])]))
    argv += [(flag, [str(st.hicache_flags[key])]) for key, flag in HICACHE_FLAGS if st.hicache_flags.get(key) is not None]
    return argv


PROFILE_FLAGS: tuple[ProfileFlag, ...] = (
    ProfileFlag("mem_fraction_static", "`--mem-fraction-static` (null: SGLang decides)",
                value_flag("--mem-fraction-static")),
    ProfileFlag("max_running_requests", "`--max-running-requests` (null: SGLang decides; the speculative "
                "profiles set it, as SGLang resets it to 48 under speculative decoding)", _running_limit),
    ProfileFlag("cuda_graph_max_bs", "the CUDA-graph maximum batch, with the release's flag (null: equal to max "
                "running requests when that is set); always raised to max running requests", _cuda_graph),
    ProfileFlag("metrics", "`--enable-metrics` (Prometheus /metrics)", switch_flag("--enable-metrics")),
    ProfileFlag("speculative", "null (off) or {algorithm, steps, topk, draft_tokens}: the `--speculative-*` flags; "
                "algorithm auto is NEXTN for a built-in MTP head, EAGLE with a draft model", _speculative),
    ProfileFlag("mamba_strategy", "the radix-cache strategy of hybrid models, with the release's flag (null: "
                "SGLang's); not rendered for dense models", _mamba),
    ProfileFlag("hicache", "{enabled, size, ratio, write_policy, io_backend, mem_layout}: "
                "`--enable-hierarchical-cache` and the `--hicache-*` flags, the size from the host's facts", _hicache),
    ProfileFlag("chunked_prefill_size", "`--chunked-prefill-size`, tokens per prefill chunk (null: SGLang decides; "
                "smaller chunks cut the decode stalls a long prompt causes, larger ones raise prefill throughput)",
                value_flag("--chunked-prefill-size")),
)


def profile_argv(prof: Mapping[str, Any], st: HostSettings, req: PlanRequest) -> Argv:
    """The flags of the profile's settings, in the table's order."""
    return [pair for row in PROFILE_FLAGS for pair in row.render(prof.get(row.key), st, req)]
