#!/usr/bin/env python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Print the embedded engine's calibration table (predicted vs measured) as Markdown.

Usage: .venv/bin/python tools/calibration_table.py
The same scenarios are asserted by tests/unit/plugins/module_utils/_engine/perfmodel/test_perfmodel.py.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.llmops.sglang.plugins.module_utils._engine import (  # noqa: E402
    perfmodel as pm,
)

MODELS = ROOT / "data" / "models"
GB200 = 200 * 10**9  # the seed host: about 200 GB of host RAM free

MTP = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
    "mamba_scheduler_strategy": "extra_buffer",
}
# Seed runs on one RTX PRO 6000 Blackwell 96 GB, release 0.5.10, Qwen3.6-27B.
SEED_RUNS: dict[str, dict[str, Any]] = {
    "mtp": dict(MTP),
    "nospec": {"mem_fraction_static": 0.85, "mamba_scheduler_strategy": "extra_buffer"},
    "mtp_hicache": dict(
        MTP, mem_fraction_static=0.85, enable_hierarchical_cache=True, hicache_size=150
    ),
}
# (run, concurrency, n, max_tokens, measured tok/s)
SEED_POINTS: list[tuple[str, int, int, int, float]] = [
    ("nospec", 1, 8, 1024, 26.7),
    ("mtp", 4, 8, 1024, 234.0),
    ("mtp_hicache", 1, 8, 1024, 61.2),
    ("mtp_hicache", 4, 8, 1024, 207.2),
    ("mtp_hicache", 8, 16, 1024, 369.7),
    ("mtp_hicache", 16, 32, 1024, 384.5),
    ("mtp_hicache", 32, 64, 1024, 392.7),
    ("mtp_hicache", 48, 96, 1024, 409.0),
]
# (run, field, measured)
SEED_SHAPES: list[tuple[str, str, float]] = [
    ("nospec", "max_running_requests", 19),
    ("nospec", "mamba_slots", 96),
    ("mtp", "max_running_requests", 4),
    ("mtp", "max_total_num_tokens", 77000),
    ("mtp_hicache", "max_running_requests", 9),
    ("mtp_hicache", "mamba_slots", 48),
]

# 0.5.17 on one H200 (random weights: accept length 1.0), tests/fixtures/sglang-0.5.17-h200.
H200_DENSE = {
    "load_format": "dummy", "cuda_graph_max_bs": 32, "mem_fraction_static": 0.8,
    "max_running_requests": 64,
}
H200_HYBRID = {
    "load_format": "dummy", "cuda_graph_max_bs": 32, "mem_fraction_static": 0.8,
    "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4, "mamba_radix_cache_strategy": "extra_buffer",
    "enable_hierarchical_cache": True, "hicache_size": 8, "hicache_io_backend": "direct",
    "hicache_mem_layout": "page_first_direct", "max_running_requests": 16,
}
# (kind, C, n, measured tok/s, prompt tokens): the recording's own sweep (one 10-token prompt).
H200_POINTS: list[tuple[str, int, int, float, int]] = [
    ("dense", 1, 8, 550.5, 10), ("dense", 4, 8, 2002.4, 10), ("dense", 16, 32, 7626.0, 10),
    ("dense", 64, 128, 3389.0, 10),
    ("hybrid", 1, 8, 189.0, 10), ("hybrid", 4, 8, 592.5, 10), ("hybrid", 16, 32, 2328.6, 10),
]

# The collection's own run on the H200 (docs/PERFORMANCE.md "Real GPU", run 2): the argv of its
# deployment manifests, 256 output tokens, the 8 built-in chat prompts (about 50 tokens each).
H200_REAL_DENSE = {
    "load_format": "dummy", "cuda_graph_max_bs_decode": 32, "mem_fraction_static": 0.85,
    "max_running_requests": 32,
}
H200_REAL_HYBRID = dict(H200_HYBRID, mem_fraction_static=0.8, max_running_requests=32,
                        cuda_graph_max_bs_decode=32, hicache_write_policy="write_through")
# (kind, C, n, measured tok/s, measured mean TTFT ms, measured mean TPOT ms)
H200_REAL_POINTS: list[tuple[str, int, int, float, float, float]] = [
    ("dense", 1, 8, 496.5, 17.7, 1.95), ("dense", 4, 8, 1735.9, 52.7, 2.11),
    ("dense", 16, 32, 6345.1, 58.3, 2.30), ("dense", 32, 64, 9400.5, 66.9, 3.14),
    ("hybrid", 1, 8, 185.5, 36.9, 5.27), ("hybrid", 4, 8, 591.4, 197.9, 6.01),
    ("hybrid", 16, 32, 2811.0, 115.0, 5.26), ("hybrid", 32, 64, 3561.7, 154.3, 8.39),
]
REAL_PROMPT_TOKENS = 50


def seed_plan(run: str) -> pm.EnginePlan:
    cfg = pm.load_model_config(str(MODELS / "qwen3.6-27b"))
    gpu = pm.find_gpu("RTX PRO 6000")
    return pm.plan_engine(dict(SEED_RUNS[run], model_path="qwen3.6-27b"), cfg, gpu, "0.5.10", GB200)


def h200_plan(kind: str) -> pm.EnginePlan:
    gpu = pm.find_gpu("NVIDIA H200")
    if kind == "dense":
        cfg = pm.load_model_config(str(MODELS / "qwen3-0.6b-dense"))
        return pm.plan_engine(dict(H200_DENSE), cfg, gpu, "0.5.17", 263 * 10**9)
    cfg = pm.load_model_config(str(MODELS / "qwen35-hybrid-small"))
    plan = pm.plan_engine(dict(H200_HYBRID), cfg, gpu, "0.5.17", 263 * 10**9)
    plan.accept_length = 1.0  # random weights
    return plan


def h200_real_plan(kind: str) -> pm.EnginePlan:
    """The plan of the collection's real H200 run (host MemAvailable 269.6 GB)."""
    gpu = pm.find_gpu("NVIDIA H200")
    if kind == "dense":
        cfg = pm.load_model_config(str(MODELS / "qwen3-0.6b-dense"))
        return pm.plan_engine(dict(H200_REAL_DENSE), cfg, gpu, "0.5.17", 269_600_000_000)
    cfg = pm.load_model_config(str(MODELS / "qwen35-hybrid-small"))
    plan = pm.plan_engine(dict(H200_REAL_HYBRID), cfg, gpu, "0.5.17", 269_600_000_000)
    plan.accept_length = 1.0  # random weights
    return plan


def real_rows() -> list[tuple[str, float, float, float, float, float, float]]:
    """(name, predicted tok/s, real tok/s, predicted TTFT ms, real TTFT ms, predicted ms per
    token after the first, real TPOT ms) for the collection's real H200 run."""
    out = []
    plans = {k: h200_real_plan(k) for k in ("dense", "hybrid")}
    for kind, c, n, tok_s, ttft, tpot in H200_REAL_POINTS:
        res = pm.simulate_level(plans[kind], c, n, 256, REAL_PROMPT_TOKENS)
        p_tpot = 1000.0 * (res["mean_latency_s"] - res["mean_ttft_s"]) / 255
        out.append((f"H200 0.5.17 real run {kind}: C={c} n={n}", res["output_tok_s"], tok_s,
                    1000.0 * res["mean_ttft_s"], ttft, p_tpot, tpot))
    return out


def rows() -> list[tuple[str, float, float]]:
    out: list[tuple[str, float, float]] = []
    plans = {run: seed_plan(run) for run in SEED_RUNS}
    for run, key, measured in SEED_SHAPES:
        out.append((f"RTX PRO 6000 0.5.10 {run}: {key}", float(getattr(plans[run], key)), measured))
    for run, c, n, tokens, measured in SEED_POINTS:
        res = pm.simulate_level(plans[run], c, n, tokens)
        out.append((f"RTX PRO 6000 0.5.10 {run}: C={c} n={n} tok/s", res["output_tok_s"], measured))
    h = {k: h200_plan(k) for k in ("dense", "hybrid")}
    for kind, c, n, measured, prompt in H200_POINTS:
        res = pm.simulate_level(h[kind], c, n, 256, prompt)
        out.append((f"H200 0.5.17 {kind}: C={c} n={n} tok/s", res["output_tok_s"], measured))
    for name, tok_s, real_tok_s, *_ in real_rows():
        out.append((f"{name} tok/s", tok_s, real_tok_s))
    hp = {p.name: p.bytes / 1e9 for p in h["hybrid"].hicache_pools}
    for name, measured in (("kv", 5.78), ("mamba", 2.24), ("draft_kv", 1.44)):
        out.append((f"H200 0.5.17 hybrid: host {name} pool GB", hp[name], measured))
    out.append(("H200 0.5.17 hybrid: mamba slots", float(h["hybrid"].mamba_slots), 1187))
    out.append(("H200 0.5.17 hybrid: KV tokens", float(h["hybrid"].max_total_num_tokens), 5136572))
    out.append(("H200 0.5.17 dense: KV tokens", float(h["dense"].max_total_num_tokens), 1032991))
    out.append(("H200 0.5.17 dense: ready s", h["dense"].ready_seconds, 147))
    out.append(("H200 0.5.17 hybrid: ready s", h["hybrid"].ready_seconds, 193))
    out.append(("H200 0.5.17 hybrid: pin s (9.46 GB)", h["hybrid"].pin_seconds, 18))
    return out


def main() -> None:
    print("| point | predicted | measured | error |")
    print("|---|---|---|---|")
    for name, pred, meas in rows():
        err = 100.0 * (pred / meas - 1.0) if meas else 0.0
        shown = f"{pred:.2f}" if abs(pred) < 100 else f"{pred:.1f}"
        print(f"| {name} | {shown} | {meas:g} | {err:+.1f}% |")
    print()
    print("| real run point | predicted tok/s | real tok/s | error | predicted TTFT ms | "
          "real TTFT mean ms | predicted TPOT ms | real TPOT mean ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name, tok_s, real, ttft, real_ttft, tpot, real_tpot in real_rows():
        print(f"| {name} | {tok_s:.1f} | {real:g} | {100.0 * (tok_s / real - 1.0):+.1f}% "
              f"| {ttft:.1f} | {real_ttft:g} | {tpot:.2f} | {real_tpot:g} |")


if __name__ == "__main__":
    main()
