# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The start-up log lines of the real server, in 0.5.17 wording and order, each at the modelled
second it appears (docs/engine.md "Start-up plan" 9): weight loading, the Mamba and KV pools, the
summary line, then one line per HiCache host pool spaced by its pinning time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.common import GB, GIB
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.defaults import PlanFlags
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.hostpools import HostPool
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.memory import (
    GpuBudget,
    draft_kv_gib,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.running import RunningLimit
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.shape import ModelShape
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.timings import StartupTimes

Lines = list[tuple[float, str]]


@dataclass(frozen=True)
class LogInputs:
    """What the start-up lines report: the plan's parts."""

    release: str
    args: dict[str, Any]
    flags: PlanFlags
    shape: ModelShape
    budget: GpuBudget
    mamba_slots: int
    running: RunningLimit
    pools: list[HostPool]
    semantics: str
    times: StartupTimes
    available_end: float


DIST_BEGIN = "Init torch distributed begin."
DIST_END_PREFIX = "Init torch distributed ends."


def dist_end_line(elapsed: float) -> str:
    """bootstrap.py ``init_torch_distributed``'s closing line; ``elapsed`` includes the wait for
    the other nodes of a multi-node group."""
    return f"{DIST_END_PREFIX} elapsed={elapsed:.2f} s, mem usage=0.09 GB"


def _fmt_gb(value_bytes: float) -> str:
    return f"{value_bytes / GIB:.2f}"


def _load_lines(s: LogInputs, t: float) -> tuple[Lines, float]:
    """torch distributed, then the target's (and the draft's) weights."""
    b, times = s.budget, s.times
    arch_type = s.shape.architecture.replace("ForConditionalGeneration", "ForCausalLM")
    lines: Lines = [(t, DIST_BEGIN), (t, dist_end_line(0.05))]
    t += 1.0
    lines.append((t, f"Load weight begin. avail mem={b.avail_start:.2f} GB"))
    t += times.weights_load
    lines.append((t, f"Load weight end. elapsed={times.weights_load:.2f} s, type={arch_type}, "
                     f"avail mem={b.avail_weights:.2f} GB, mem usage={b.weights:.2f} GB."))
    if s.flags.spec:
        lines.append((t, f"Load weight begin. avail mem={b.avail_weights:.2f} GB"))
        t += times.draft_load
        lines.append((t, f"Load weight end. elapsed={times.draft_load:.2f} s, type={arch_type}MTP, "
                         f"avail mem={b.avail_draft:.2f} GB, mem usage={b.draft_weights:.2f} GB."))
    return lines, t


def _mamba_line(s: LogInputs) -> str:
    tp, shape, running = s.flags.tp, s.shape, s.running
    conv_g = s.mamba_slots * shape.mamba_conv_bytes_per_slot / tp
    ssm_g = s.mamba_slots * shape.mamba_ssm_bytes_per_slot / tp
    msg = (f"Mamba Cache is allocated. max_mamba_cache_size: {s.mamba_slots}, "
           f"conv_state size: {_fmt_gb(conv_g)}GB, ssm_state size: {_fmt_gb(ssm_g)}GB ")
    if s.flags.spec:
        msg = msg.rstrip(" ") + (f" intermediate_ssm_state_cache size: {_fmt_gb(running.inter_ssm)}GB "
                                 f"intermediate_conv_window_cache size: {_fmt_gb(running.inter_conv)}GB ")
    return msg


def _kv_lines(s: LogInputs) -> list[str]:
    """The target's KV pool (and the draft's), each with its "Memory pool end" line."""
    tp, shape, kv_tokens = s.flags.tp, s.shape, s.running.kv_tokens
    half = kv_tokens * shape.kv_bytes_per_token / tp / 2
    after_target = s.budget.total * (1.0 - s.flags.mem_fraction) - s.running.intermediate_bytes / GIB
    lines = [f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {kv_tokens}, "
             f"K size: {_fmt_gb(half)} GB, V size: {_fmt_gb(half)} GB",
             f"Memory pool end. avail mem={after_target:.2f} GB"]
    if s.flags.spec and shape.draft_kv_bytes_per_token:
        dhalf = kv_tokens * shape.draft_kv_bytes_per_token / tp / 2
        lines.append(f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {kv_tokens}, "
                     f"K size: {_fmt_gb(dhalf)} GB, V size: {_fmt_gb(dhalf)} GB")
        lines.append(f"Memory pool end. avail mem={after_target - draft_kv_gib(s.flags, shape, kv_tokens):.2f} GB")
    return lines


def _summary_line(s: LogInputs) -> str:
    f = s.flags
    return (f"max_total_num_tokens={s.running.kv_tokens}, chunked_prefill_size={f.chunked}, "
            f"max_prefill_tokens={f.max_prefill}, max_running_requests={s.running.max_running}, "
            f"context_len={f.context_len}, available_gpu_mem={s.available_end:.2f} GB")


def _host_pool_line(s: LogInputs, pool: HostPool) -> str:
    if pool.name == "kv":
        if s.semantics == "per_pool" and s.release == "0.5.10":
            return f"Allocating {pool.bytes / GB:.2f} GB host memory for hierarchical KV cache."
        return (f"Allocating kv hierarchical KV host pool: {pool.tokens} tokens, "
                f"{pool.bytes / GB:.2f} GB host memory.")
    if pool.name == "mamba":
        layout = str(s.args.get("hicache_mem_layout") or "layer_first")
        return (f"Allocating {pool.bytes / GB:.2f} GB host memory for hierarchical "
                f"Mamba cache (layout={layout}).")
    return (f"Allocating draft hierarchical KV host pool: {pool.tokens} tokens, "
            f"{pool.bytes / GB:.2f} GB host memory.")


def startup_log_lines(s: LogInputs) -> Lines:
    """(modelled seconds since launch, message), sorted by time."""
    lines, t = _load_lines(s, s.times.process_start)
    t += 0.3
    if s.shape.is_hybrid:
        lines.append((t, _mamba_line(s)))
    t += 1.0
    lines += [(t, message) for message in _kv_lines(s)]
    t += s.times.graph_capture
    lines.append((t, _summary_line(s)))
    for index, pool in enumerate(s.pools):
        lines.append((t, _host_pool_line(s, pool)))
        t += s.times.pool_seconds(pool, first=index == 0)
    lines.sort(key=lambda item: item[0])
    return lines
