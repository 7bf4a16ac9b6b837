"""Tests of the embedded engine's performance model (calibration against recorded runs)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._engine import perfmodel as pm

ROOT = Path(__file__).resolve().parents[6]
_spec = importlib.util.spec_from_file_location("calibration_table", ROOT / "tools" / "calibration_table.py")
assert _spec and _spec.loader
cal: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cal)

TOL = 0.15


def _close(pred: float, measured: float, tol: float = TOL) -> bool:
    return abs(pred / measured - 1.0) <= tol


# ---- GPUs and models ----

def test_find_gpu_aliases_and_case() -> None:
    assert pm.find_gpu("nvidia h200").memory_mib == 143771
    assert pm.find_gpu("H200").name == "NVIDIA H200"
    assert pm.find_gpu("RTX PRO 6000").memory_mib // 1024 == 95
    assert pm.find_gpu("NVIDIA RTX PRO 6000 Blackwell Workstation Edition").hbm_tb_s == pytest.approx(1.792)
    assert pm.find_gpu("NVIDIA H100 80GB HBM3").bf16_tflops > 900
    assert pm.find_gpu("NVIDIA B200").memory_mib > 180000


def test_unknown_gpu_lists_known() -> None:
    with pytest.raises(pm.UnknownGpuError, match="NVIDIA H200"):
        pm.find_gpu("Voodoo 5")


def test_recorded_nvidia_smi_name(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "h200x2" / "nvidia_smi.txt").read_text()
    name = re.search(r"GPU 0: (.+?) \(UUID", text)
    assert name
    assert pm.find_gpu(name.group(1)).memory_mib == 143771


def test_model_config_errors(tmp_path: Path) -> None:
    with pytest.raises(pm.ModelConfigError, match="config.json"):
        pm.load_model_config(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(pm.ModelConfigError):
        pm.load_model_config(str(tmp_path))


def test_shapes_of_recorded_models(fixtures_dir: Path) -> None:
    dense = pm.model_shape_from_config(pm.load_model_config(str(cal.MODELS / "qwen3-0.6b-dense")))
    assert not dense.is_hybrid and dense.mamba_state_bytes_per_slot == 0
    assert dense.kv_bytes_per_token == 28 * 2 * 8 * 128 * 2
    assert 0.9e9 < dense.weight_bytes < 1.1e9  # log: mem usage=0.95 GB
    hyb = pm.model_shape_from_config(pm.load_model_config(str(cal.MODELS / "qwen35-hybrid-small")))
    assert hyb.is_hybrid and hyb.has_mtp
    assert (hyb.full_attention_layers, hyb.linear_attention_layers) == (4, 12)
    assert hyb.kv_bytes_per_token == 16384
    assert _close(hyb.weight_bytes / 2**30, 2.36, 0.03)  # log: mem usage=2.36 GB
    assert _close(hyb.draft_weight_bytes / 2**30, 0.39, 0.05)  # log: MTP mem usage=0.39 GB


def test_qwen36_27b_shape() -> None:
    shape = pm.model_shape_from_config(pm.load_model_config(str(cal.MODELS / "qwen3.6-27b")))
    assert shape.is_hybrid and shape.has_mtp
    assert shape.num_layers == 64 and shape.full_attention_layers == 16
    assert 26e9 < shape.params < 28e9
    assert 53e9 < shape.weight_bytes < 56e9
    assert shape.context_len == 262144


# ---- plans ----

def test_seed_plans_match_reported_limits() -> None:
    nospec = cal.seed_plan("nospec")
    assert nospec.max_running_requests == 19
    assert abs(nospec.mamba_slots - 96) <= 3
    mtp = cal.seed_plan("mtp")
    assert mtp.max_running_requests == 4
    assert mtp.spec_algorithm == "EAGLE" and mtp.accept_length == pytest.approx(3.2)
    hic = cal.seed_plan("mtp_hicache")
    assert hic.max_running_requests == 9
    assert abs(hic.mamba_slots - 48) <= 3


def test_seed_hicache_per_pool_semantics() -> None:
    hic = cal.seed_plan("mtp_hicache")
    pools = {p.name: p for p in hic.hicache_pools}
    assert pools["kv"].bytes / 1e9 == pytest.approx(150.0, abs=0.01)
    assert pools["mamba"].bytes / 1e9 == pytest.approx(150.1, abs=0.01)
    assert "draft_kv" in pools
    assert hic.host_oversubscribed  # ~310 GB pinned on a ~200 GB host
    texts = [line for _, line in hic.log_lines]
    assert "Allocating 150.00 GB host memory for hierarchical KV cache." in texts
    assert any("150.10 GB host memory for hierarchical Mamba cache" in t for t in texts)


def test_h200_hybrid_matches_recording(fixtures_dir: Path) -> None:
    plan = cal.h200_plan("hybrid")
    pools = {p.name: p.bytes / 1e9 for p in plan.hicache_pools}
    assert _close(pools["kv"], 5.78, 0.10)
    assert _close(pools["mamba"], 2.24, 0.10)
    assert _close(pools["draft_kv"], 1.44, 0.10)
    assert _close(plan.mamba_slots, 1187, 0.05)
    assert _close(plan.max_total_num_tokens, 5136572, 0.05)
    assert plan.max_running_requests == 16
    assert _close(plan.ready_seconds, 193, 0.15)
    assert _close(plan.pin_seconds, 18, 0.25)
    log = (fixtures_dir / "sglang-0.5.17-h200" / "hybrid" / "server.log").read_text()
    ours = [line for _, line in plan.log_lines]
    # same kinds of lines, in the same order, as the real server
    keys = ["Load weight begin", "Mamba Cache is allocated", "KV Cache is allocated",
            "max_total_num_tokens=", "Allocating kv hierarchical KV host pool",
            "hierarchical Mamba cache (layout=page_first_direct)",
            "Allocating draft hierarchical KV host pool"]
    pos_real = [log.index(k) for k in keys]
    pos_ours = [next(i for i, t in enumerate(ours) if k in t) for k in keys]
    assert pos_real == sorted(pos_real) and pos_ours == sorted(pos_ours)
    summary = next(t for t in ours if t.startswith("max_total_num_tokens="))
    assert re.fullmatch(
        r"max_total_num_tokens=\d+, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        r"max_running_requests=16, context_len=32768, available_gpu_mem=\d+\.\d\d GB", summary)


def test_h200_dense_matches_recording() -> None:
    plan = cal.h200_plan("dense")
    assert _close(plan.max_total_num_tokens, 1032991, 0.02)
    assert plan.mamba_slots == 0 and plan.hicache_pools == []
    assert _close(plan.ready_seconds, 147, 0.15)
    times = [t for t, _ in plan.log_lines]
    assert times == sorted(times)


def test_max_running_default_reset_with_spec() -> None:
    cfg = pm.load_model_config(str(cal.MODELS / "qwen3-0.6b-dense"))
    gpu = pm.find_gpu("H200")
    plain = pm.plan_engine({}, cfg, gpu, "0.5.23", None)
    assert plain.max_running_requests >= 2048
    spec = pm.plan_engine({"speculative_algorithm": "EAGLE"}, cfg, gpu, "0.5.23", None)
    assert spec.max_running_requests == 48


# ---- errors ----

def test_hicache_pin_check_fails_like_the_release() -> None:
    cfg = pm.load_model_config(str(cal.MODELS / "qwen3.6-27b"))
    gpu = pm.find_gpu("RTX PRO 6000")
    args = dict(cal.SEED_RUNS["mtp_hicache"], hicache_size=195)
    with pytest.raises(pm.EngineStartError, match="Not enough host memory available"):
        pm.plan_engine(args, cfg, gpu, "0.5.10", 200 * 10**9)


def test_model_too_big_for_gpu() -> None:
    cfg = pm.load_model_config(str(cal.MODELS / "qwen3.6-27b"))
    cfg["text_config"] = dict(cfg["text_config"], num_hidden_layers=160,
                              layer_types=["linear_attention", "linear_attention",
                                           "linear_attention", "full_attention"] * 40)
    with pytest.raises(pm.EngineStartError, match="out of memory"):
        pm.plan_engine({}, cfg, pm.find_gpu("RTX PRO 6000"), "0.5.23", None)


def test_mem_fraction_too_low() -> None:
    cfg = pm.load_model_config(str(cal.MODELS / "qwen3.6-27b"))
    with pytest.raises(pm.EngineStartError, match="increase --mem-fraction-static"):
        pm.plan_engine({"mem_fraction_static": 0.5}, cfg, pm.find_gpu("RTX PRO 6000"), "0.5.23", None)


# ---- timing ----

@pytest.mark.parametrize("name,pred,measured", cal.rows(), ids=lambda v: v if isinstance(v, str) else "")
def test_calibration_table(name: str, pred: float, measured: float) -> None:
    if "RTX PRO 6000" in name and "tok/s" in name:
        assert _close(pred, measured, TOL), name
    elif "max_total_num_tokens" in name:
        assert _close(pred, measured, 0.30), name  # the seed only says "about 77K"
    elif "C=4" in name and "hybrid" in name:
        assert _close(pred, measured, 0.20), name
    elif "real run hybrid: C=16" in name:
        # today's C=16 ran faster per step (5.26 ms) than its own C=4 (6.01 ms) and than the
        # recording's C=16 (about 6.5 ms, 2328.6 tok/s, -5% here): the two measurements disagree
        assert _close(pred, measured, 0.25), name
    else:
        assert _close(pred, measured, TOL), name


def test_cuda_graph_slowdown() -> None:
    plan = cal.h200_plan("dense")
    inside = pm.decode_step_seconds(plan, 32, 32 * 200)
    outside = pm.decode_step_seconds(plan, 33, 33 * 200)
    assert outside > 3 * inside
    c16 = pm.simulate_level(plan, 16, 32, 256)["output_tok_s"]
    c64 = pm.simulate_level(plan, 64, 128, 256)["output_tok_s"]
    assert c64 < 0.6 * c16


def test_step_time_monotonic_and_spec_costlier() -> None:
    plan = cal.seed_plan("nospec")
    times = [pm.decode_step_seconds(plan, b, b * 500) for b in (1, 2, 4, 8, 16)]
    assert times == sorted(times)
    assert pm.prefill_seconds(plan, 8192) > pm.prefill_seconds(plan, 64) > 0
    mtp = cal.seed_plan("mtp")
    assert pm.decode_step_seconds(mtp, 1, 500) > pm.decode_step_seconds(plan, 1, 500)


# ---- scheduler ----

def test_accept_pattern_mean() -> None:
    seq = [pm.accepted_tokens(3.2, i) for i in range(10)]
    assert seq[:5] == [3, 3, 3, 3, 4]
    assert sum(seq) / len(seq) == pytest.approx(3.2)
    assert all(pm.accepted_tokens(1.0, i) == 1 for i in range(5))


def test_scheduler_deterministic() -> None:
    plan = cal.seed_plan("mtp_hicache")
    a = pm.simulate_level(plan, 16, 32, 300)
    b = pm.simulate_level(plan, 16, 32, 300)
    assert a == b
    assert a["output_tokens"] == 32 * 300
    assert a["max_running"] == 9


def test_scheduler_queue_and_cancel() -> None:
    plan = cal.seed_plan("mtp")  # max_running_requests 4
    sched = pm.Scheduler(plan)
    assert sched.step() is None
    for i in range(6):
        sched.submit(f"r{i}", 32, 20)
    # The front end hands a burst over one request at a time: the first is prefilled alone,
    # the rest (ready meanwhile) in the next prefill, up to max_running_requests.
    first = sched.step()
    assert first is not None and first.kind == "prefill"
    assert first.first_token == ["r0"]
    second = sched.step()
    assert second is not None and second.kind == "prefill"
    assert sorted(second.first_token) == ["r1", "r2", "r3"]
    assert sched.num_running == 4 and sched.num_queued == 2
    sched.cancel("r5")
    sched.cancel("r0")
    assert sched.num_queued == 1 and sched.num_running == 3
    got: dict[str, int] = {f"r{i}": 1 for i in range(1, 4)}  # r0 cancelled
    finished: list[str] = []
    while (res := sched.step()) is not None:
        assert res.dt > 0
        for rid, n in res.emitted:
            got[rid] = got.get(rid, 0) + n if rid not in res.first_token else 1
        finished += res.finished
    assert sorted(finished) == ["r1", "r2", "r3", "r4"]
    assert all(got[r] == 20 for r in finished)
    assert sched.clock > 0 and sched.num_running == 0 and sched.num_queued == 0


def test_max_new_tokens_one_finishes_at_prefill() -> None:
    sched = pm.Scheduler(cal.seed_plan("nospec"))
    sched.submit("x", 10, 1)
    res = sched.step()
    assert res is not None and res.finished == ["x"] and res.first_token == ["x"]
    assert sched.step() is None


def test_real_h200_run_shape() -> None:
    """The refinements from the real H200 run: TTFT, per-request step cost, pinning."""
    for name, _tok, _real, ttft, real_ttft, tpot, real_tpot in cal.real_rows():
        if "C=1 " in name:
            assert _close(ttft, real_ttft, 0.20), name  # front end + prefill of one request
        assert _close(tpot, real_tpot, 0.35), name
    dense = cal.h200_real_plan("dense")
    # the overlap scheduler hides the CPU work until it exceeds the GPU forward (C=32)
    assert pm.scheduler_cpu_seconds(dense, 1) < pm.decode_step_seconds(dense, 1, 100)
    assert pm.decode_step_seconds(dense, 32, 32 * 200) == pytest.approx(
        pm.scheduler_cpu_seconds(dense, 32))
    assert pm.prefill_seconds(dense, 64 * 16, 16) > pm.prefill_seconds(dense, 64, 1)


def test_pin_time_fixed_plus_rate() -> None:
    cfg = pm.load_model_config(str(cal.MODELS / "qwen35-hybrid-small"))
    args = dict(cal.H200_REAL_HYBRID, hicache_size=163)
    plan = pm.plan_engine(args, cfg, pm.find_gpu("H200"), "0.5.17", 269_600_000_000)
    assert _close(plan.hicache_total_bytes / 1e9, 191.87, 0.02)
    assert _close(plan.pin_seconds, 168, 0.10)  # run 1: 191.87 GB pinned in 168 s
    assert _close(cal.h200_real_plan("hybrid").pin_seconds, 20, 0.15)  # run 2: 9.43 GB in 20 s
