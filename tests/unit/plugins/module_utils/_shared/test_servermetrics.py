"""Tests of module_utils/_shared/servermetrics.py (the server's /metrics per level) and _bench/progress.py,
against the recordings of real SGLang 0.5.17 (tests/fixtures/metrics/) and, end to end, the
time-scaled embedded engine."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw
from ansible_collections.llmops.sglang.plugins.module_utils._bench import progress as _progress
from ansible_collections.llmops.sglang.plugins.module_utils._shared import servermetrics as sm

from .....pdmetrics import pd_metrics

ROOT = Path(__file__).resolve().parents[5]
METRICS = ROOT / "tests" / "fixtures" / "metrics"


def _text(kind: str) -> str:
    return (METRICS / f"sglang-0.5.17-h200-{kind}.txt").read_text()


def _with(text: str, metric: str, value: float) -> str:
    """The recording with one unlabelled-by-stream gauge set to ``value`` (a busy instant)."""
    return re.sub(rf"^(sglang:{metric}\{{[^}}]*\}}) \S+$", rf"\g<1> {value}", text, flags=re.M)


def _without(text: str, *metrics: str) -> str:
    """The recording as a release that does not serve ``metrics`` would answer."""
    def name(line: str) -> str:
        if line.startswith("# "):
            parts = line.split(" ")
            return parts[2] if len(parts) > 2 else ""
        return re.split(r"[{ ]", line, maxsplit=1)[0]

    drop = {f"sglang:{m}" for m in metrics}
    return "\n".join(line for line in text.splitlines() if name(line) not in drop)


def test_parse_keeps_labels_and_strips_the_prefix() -> None:
    scrape = sm.parse(_text("dense"))
    assert sm.total(scrape, "cached_tokens_total", cache_source="device") == 1960.0
    assert sm.total(scrape, "cached_tokens_total", cache_source="host") is None
    assert sm.total(scrape, "prompt_tokens_total") == 29.0 + 2153.0  # both is_streaming series
    assert sm.total(scrape, "fwd_occupancy") is None  # NaN in the recording: no value
    assert "cached_tokens_total" in scrape["declared"]
    assert "cached_tokens_total" not in sm.parse(_text("hybrid"))["declared"]


def test_speculative_decoding_is_told_from_the_release_metrics() -> None:
    assert sm.spec_enabled(sm.parse(_text("hybrid"))) is True  # NEXTN MTP: verify calls counted
    assert sm.spec_enabled(sm.parse(_text("dense"))) is False  # spec gauges at 0, no verify counter


def test_a_fresh_server_to_the_dense_recording() -> None:
    """From nothing served to the recording: the counters' full values are the level's."""
    after = sm.parse(_text("dense"))
    samples = sm.GaugeSamples()
    samples.add(sm.parse(_with(_with(_text("dense"), "num_running_reqs", 16), "num_queue_reqs", 5)))
    samples.add(sm.parse(_with(_with(_text("dense"), "num_running_reqs", 8), "token_usage", 0.25)))
    out = sm.level_metrics(sm.parse(""), after, samples)
    assert out is not None
    assert (out["samples"], out["running_mean"], out["running_max"]) == (2, 12.0, 16.0)
    assert (out["queued_mean"], out["queued_max"]) == (2.5, 5.0)
    assert (out["token_usage_mean"], out["token_usage_max"]) == (0.125, 0.25)
    # 2182 prompt tokens, 222 uncached, 1960 cached on the device (the recording's own sums)
    assert out["cache_hit_rate"] == out["cache_hit_rate_device"] == round(1960 / 2182, 4)
    assert out["cache_hit_rate_host"] == 0.0  # the release counts by source: none from the host
    assert out["spec_accept_length"] is None and out["notes"]["spec_accept_length"] == sm.SPEC_OFF
    assert out["hicache_host_usage_max"] is None and "HiCache off" in out["notes"]["hicache_host_usage_max"]
    assert out["retracted_max"] == 0.0


def test_the_hybrid_recording_mtp_and_hicache() -> None:
    text = _text("hybrid")
    busy = sm.parse(_with(_with(text, "num_running_reqs", 4), "spec_accept_rate", 0.5))
    samples = sm.GaugeSamples()
    samples.add(busy)
    samples.add(sm.parse(text))  # idle: its spec gauges are not averaged in
    out = sm.level_metrics(sm.parse(""), sm.parse(text), samples)
    assert out is not None
    # 12440 generated tokens over 12384 verify calls (random dummy weights: ~nothing accepted)
    assert out["spec_accept_length"] == round(12440 / 12384, 3)
    assert out["spec_accept_rate"] == 0.5
    assert out["running_max"] == 4.0 and out["running_mean"] == 2.0
    assert out["hicache_host_usage_max"] == round(7820 / 352706, 4)
    # no hit at all (uncached == prompt), and cached_tokens_total never declared: both tiers 0
    assert out["cache_hit_rate"] == out["cache_hit_rate_device"] == out["cache_hit_rate_host"] == 0.0
    assert "cache_hit_rate_host" not in out["notes"]


def test_a_release_without_a_metric_says_so_and_never_guesses() -> None:
    text = _without(_text("dense"), "num_queue_reqs", "num_retracted_reqs", "cached_tokens_total")
    assert "num_queue_reqs" not in text and "prompt_tokens_histogram_sum" in text
    samples = sm.GaugeSamples()
    samples.add(sm.parse(_with(text, "num_running_reqs", 3)))
    out = sm.level_metrics(sm.parse(""), sm.parse(text), samples)
    assert out is not None
    assert out["running_max"] == 3.0
    for key in ("queued_mean", "queued_max", "retracted_max", "cache_hit_rate_device", "cache_hit_rate_host"):
        assert out[key] is None and out["notes"][key] == sm.NOT_REPORTED, key
    assert out["cache_hit_rate"] == round(1960 / 2182, 4)  # the histograms still tell the total


def test_no_samples_and_restarts() -> None:
    out = sm.level_metrics(sm.parse(_text("dense")), sm.parse(_text("dense")), sm.GaugeSamples())
    assert out is not None and out["samples"] == 0
    assert out["running_mean"] is None and out["notes"]["running_mean"] == sm.NO_SAMPLES
    assert out["cache_hit_rate"] is None and out["notes"]["cache_hit_rate"] == sm.NO_PROMPTS
    # counters that went down: the server restarted in between, no level figure
    out = sm.level_metrics(sm.parse(_text("dense")), sm.parse(_text("hybrid")), sm.GaugeSamples())
    assert out is not None and out["cache_hit_rate"] is None and "restarted" in out["notes"]["cache_hit_rate"]
    assert sm.level_metrics(None, sm.parse(_text("dense")), sm.GaugeSamples()) is None


def test_sample_interval_follows_the_time_scale() -> None:
    assert sm.sample_interval(None) == 0.5
    assert sm.sample_interval(1.0) == 0.5
    assert sm.sample_interval(0.2) == pytest.approx(0.1)
    assert sm.sample_interval(0.005) == 0.05  # the floor: never more than 20 reads a second


def test_progress_record_append_and_describe(tmp_path: Path) -> None:
    point = {"concurrency": 8, "output_tok_s": 100000.0,  # wall-clock: 100x the model at scale 0.01
             "ttft_ms": {"p50": 2.0}, "requests": 16,
             "errors": {"total": 1}, "status": "errors",
             "server_metrics": {"running_max": 4.0, "queued_max": 4.0, "spec_accept_length": 2.9}}
    rec = _progress.record(point, {"host": "n1", "instance": "gpu0", "profile": "mtp"}, 0.01)
    assert (rec["output_tok_s"], rec["ttft_ms_p50"], rec["time_base"]) == (1000.0, 200.0, "model")
    path = tmp_path / "p.jsonl"
    _progress.append(str(path), rec)
    _progress.append(str(path), _progress.record(point, {}, None))
    lines = _progress.complete_lines(path.read_text() + '{"partial": ')
    assert [json.loads(line)["output_tok_s"] for line in lines] == [1000.0, 100000.0]
    assert path.stat().st_mode & 0o777 == 0o600
    text = _progress.describe(rec)
    assert text.startswith("n1 gpu0 (mtp) [modelled time] C=8: 1000 tok/s, TTFT p50 200 ms, 1 errors, errors")
    wall = _progress.record(point, {"host": "n1", "instance": "router"}, None)
    assert _progress.describe(wall).startswith("n1 router [wall time] C=8: 100000 tok/s, TTFT p50 2 ms")
    assert "running max 4, queued max 4, accept length 2.9" in text
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        _progress.append(str(link), rec)


# ------------------------------------------------------------------------------------------------
# End to end: the embedded engine serves the names the sweep reads, with its model's values
# ------------------------------------------------------------------------------------------------


def test_engine_mtp_running_capped_queue_growing_accept_length(tmp_path: Path) -> None:
    """MTP capped at 4 running requests (the seed's first finding): at C=8 running stays at 4
    while 4 queue, and the accept length is the engine's modelled one."""
    from .._sweep.helpers import engine_process

    seen: list[tuple[int, object]] = []
    # scale 0.05: a level of ~16 modelled s is ~0.8 wall s, several scrapes (every 0.25 s) even
    # when a loaded machine delays some (at 0.01 a level was 0.16 s: one late scrape missed it)
    with engine_process(tmp_path / "engine.log", "--max-running-requests", "4", scale=0.05) as base:
        facts = sw.run_sweep(sw.SweepOptions(url=base, concurrency=[2, 8], max_tokens=512, warmup=0),
                             on_level=lambda point, scale: seen.append((point["concurrency"], scale)))
    assert seen == [(2, 0.05), (8, 0.05)]
    low, high = (p["server_metrics"] for p in facts["points"])
    assert low["samples"] >= 2 and high["samples"] >= 2  # a level of ~16 modelled s, read every 5
    # C=2 never queues at steady state; a scrape between two arrivals and the scheduler's next
    # step (late on a loaded machine) may catch both waiting, never more than are in flight
    assert low["running_max"] == 2.0 and low["queued_max"] <= 2.0 and low["queued_mean"] < 1.0
    # C=8 behind 4 slots: 4 wait at steady state; a scrape before the scheduler's next step (late on a
    # loaded machine: 7 seen once beside make test's other stages) may catch more, never more than 8
    assert high["running_max"] == 4.0 and 4.0 <= high["queued_max"] <= 8.0 and high["queued_mean"] >= 2.0, high
    assert 3.0 < high["running_mean"] <= 4.0
    assert 0 < high["token_usage_max"] < 1
    # the demo model's MTP accept length (engine host.py default for NEXTN 3/1/4)
    info = facts["points"][-1]["server_after"]["avg_spec_accept_length"]
    assert high["spec_accept_length"] == pytest.approx(info, rel=0.05)
    assert 0 < high["spec_accept_rate"] < 1
    assert high["hicache_host_usage_max"] > 0
    assert high["retracted_max"] == 0.0


def test_engine_counts_the_retractions_its_scheduler_makes() -> None:
    """A KV pool too small for the requests admitted: the modelled scheduler retracts (SGLang's
    retraction) and counts it; the engine's num_retracted_reqs gauge reports the count per decode
    log interval (scheduler.py)."""
    import dataclasses

    from ansible_collections.llmops.sglang.plugins.module_utils._engine import perfmodel
    from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.batching import Scheduler
    from ansible_collections.llmops.sglang.plugins.module_utils._shared import flags as _flags

    from .._sweep.helpers import ENGINE_ARGV

    args = vars(_flags.build_parser("0.5.23").parse_args([*ENGINE_ARGV, "--port", "1"]))
    plan = perfmodel.plan_engine(args, perfmodel.load_model_config(args["model_path"]),
                                 perfmodel.find_gpu("NVIDIA H200"), "0.5.23", int(200e9))
    sched = Scheduler(dataclasses.replace(plan, max_total_num_tokens=1200))
    for i in range(4):
        sched.submit(f"r{i}", 64, 400)
    for _ in range(5000):
        if sched.step() is None:
            break
    assert sched.retracted > 0 and sched.num_running == 0


def test_report_shows_the_server_during_each_level_beside_the_client() -> None:
    """The "why did C=16 not scale" table: running capped, queue growing, from the points."""
    from ansible_collections.llmops.sglang.plugins.module_utils import _report

    def point(c: int, tok_s: float, running: float, queued: float) -> dict:
        text = _with(_with(_text("hybrid"), "num_running_reqs", running), "num_queue_reqs", queued)
        samples = sm.GaugeSamples()
        samples.add(sm.parse(text))
        return {"concurrency": c, "output_tok_s": tok_s, "ok": c, "requests": c, "status": "ok",
                "errors": {"total": 0}, "server_metrics": sm.level_metrics(sm.parse(""), sm.parse(text), samples)}

    sweep = {"points": [point(4, 234.0, 4, 0), point(16, 236.0, 4, 12)]}
    table, notes = _report.render_server_metrics_table(sweep)
    rows = table.splitlines()
    assert rows[0].startswith("| C | output tok/s | running mean/max | queued mean/max |")
    assert rows[3].startswith("| 16 | 236.0 | 4.0 / 4 | 12.0 / 12 |"), rows[3]
    assert "| 1.00 |" in rows[3]  # the recording's accept length (12440 / 12384)
    assert notes == []  # the hybrid recording reports every field (HiCache on, MTP on)
    dense = {"points": [{"concurrency": 1, "output_tok_s": 1.0, "ok": 1, "requests": 1, "status": "ok",
                         "errors": {"total": 0},
                         "server_metrics": sm.level_metrics(sm.parse(""), sm.parse(_text("dense")), sm.GaugeSamples())}]}
    _, notes = _report.render_server_metrics_table(dense)
    assert "spec_accept_length, spec_accept_rate: speculative decoding off." in notes
    assert _report.render_server_metrics_table({"points": [{"concurrency": 1}]}) is None


def test_a_whole_sweep_on_real_0_5_17_between_two_recorded_scrapes() -> None:
    """Device run 5: the scrapes after the cold and after the warm sweep of one real server
    (NEXTN MTP, random weights: drafts are rejected, accept length just above 1)."""
    before = sm.parse((METRICS / "sglang-0.5.17-h200-hybrid-after-sweep-real.txt").read_text())
    after = sm.parse((METRICS / "sglang-0.5.17-h200-hybrid-after-sweep-warm.txt").read_text())
    assert sm.spec_enabled(after)
    samples = sm.GaugeSamples()
    samples.add(after)
    out = sm.level_metrics(before, after, samples)
    assert out is not None
    assert sm.total(after, "num_requests_total") - sm.total(before, "num_requests_total") == 483
    assert out["spec_accept_length"] == round((228776 - 117976) / (227778 - 117463), 3) == 1.004
    assert out["running_max"] == 0.0 and out["queued_max"] == 0.0  # idle when scraped
    assert out["hicache_host_usage_max"] == round(19488 / 345798, 4)
    assert out["cache_hit_rate_device"] == out["cache_hit_rate_host"] == 0.0  # no prefix hit (hybrid)
    assert out["spec_accept_rate"] is None and "spec_accept_rate" in out["notes"]  # gauge idle: not averaged


def test_the_storage_tiers_hits_of_a_level_from_real_0_5_17_scrapes() -> None:
    """Device run 12 (an H100, the file tier at page size 64): the level after a flush read its
    prefixes back from storage. The real server declares cached_tokens_total{cache_source=
    "storage_HiCacheFile"} only once a storage hit happened (absent before the level: counted
    from 0), and the tier's own counters carry storage_backend="file"."""
    before = sm.parse((METRICS / "sglang-0.5.17-h100-file-tier-before.txt").read_text())
    after = sm.parse((METRICS / "sglang-0.5.17-h100-file-tier-after.txt").read_text())
    assert sm.storage_source(before) is None and sm.storage_source(after) == "storage_HiCacheFile"
    samples = sm.GaugeSamples()
    samples.add(after)
    out = sm.level_metrics(before, after, samples)
    assert out is not None
    prompt = sm.total(after, "prompt_tokens_total") - sm.total(before, "prompt_tokens_total")
    assert prompt == 192619
    assert out["cache_hit_rate_storage"] == round(18880 / prompt, 4) == 0.098  # the report's 9.8 %
    assert out["cache_hit_rate_device"] == round((327296 - 163648) / prompt, 4) == 0.8496
    assert out["cache_hit_rate_host"] == 0.0
    assert out["storage_prefetched_tokens"] == 18880 and out["storage_backuped_tokens"] == 66432 - 43648


def test_a_storage_counter_the_server_never_declared_is_zero_not_a_restart() -> None:
    """Device run 12, best_effort prefetch: the tier wrote pages (backuped_tokens_total) and never
    prefetched, so the real server never declared prefetched_tokens_total: 0 prefetched and 0 %
    from storage, with no 'restarted' note (the first report said so, wrongly)."""
    before = sm.parse((METRICS / "sglang-0.5.17-h100-file-tier-best-effort-before.txt").read_text())
    after = sm.parse((METRICS / "sglang-0.5.17-h100-file-tier-best-effort-after.txt").read_text())
    assert not sm.present(after, "prefetched_tokens_total") and sm.present(after, "backuped_tokens_total")
    samples = sm.GaugeSamples()
    samples.add(after)
    out = sm.level_metrics(before, after, samples)
    assert out is not None
    assert out["storage_prefetched_tokens"] == 0 and out["cache_hit_rate_storage"] == 0.0
    assert out["storage_backuped_tokens"] == 85184 - 43520
    assert not any(key.startswith("storage") or key == "cache_hit_rate_storage" for key in out["notes"])


def test_a_pd_instances_side_of_the_level_and_none_on_a_unified_server() -> None:
    """Prefill/decode disaggregation: the decode's requests waiting for their KV (sampled max) and
    the failures over the level (counters); a unified server serves the PD queue gauges at 0 and no
    failure counter: null, no note."""
    def scrape(failed: int, waiting: int) -> str:
        return pd_metrics(bootstrap_failed=failed, decode_waiting=waiting)
    samples = sm.GaugeSamples()
    for waiting in (0, 3, 1):
        samples.add(sm.parse(scrape(2, waiting)))
    out = sm.level_metrics(sm.parse(scrape(2, 0)), sm.parse(scrape(5, 0)), samples)
    assert out is not None
    assert (out["pd_decode_transfer_max"], out["pd_bootstrap_failed"], out["pd_transfer_failed"]) == (3, 3, 0)
    assert out["pd_prefill_inflight_max"] is None  # a decode instance does not serve the prefill's gauge
    unified = sm.parse(_text("dense"))
    plain = sm.level_metrics(unified, unified, sm.GaugeSamples())
    fields = ("pd_prefill_inflight_max", "pd_decode_transfer_max", "pd_bootstrap_failed", "pd_transfer_failed")
    assert plain is not None and all(plain[k] is None for k in fields)
    assert not any(k.startswith("pd_") for k in plain["notes"])


def _prefill(requests: int, latencies_ms: list[float], inflight: int = 0, running: int = 0) -> str:
    return pd_metrics(latencies_ms=latencies_ms, prefill_inflight=inflight, running=running)


def test_a_prefills_kv_hand_overs_and_each_side_summed_over_its_instances() -> None:
    """The level's KV transfers and their mean latency (histogram deltas) on a prefill; a side of
    several instances: means and counts summed, maxima the busiest instance's, the latency mean
    weighted by each instance's transfers; an instance not read counts in ``instances`` only."""
    samples = sm.GaugeSamples()
    samples.add(sm.parse(_prefill(0, [], inflight=2, running=3)))
    one = sm.level_metrics(sm.parse(_prefill(0, [5.0])), sm.parse(_prefill(0, [5.0, 10.0, 20.0])), samples)
    assert one is not None and (one["pd_kv_transfers"], one["pd_kv_transfer_ms_mean"]) == (2, 15.0)
    assert (one["pd_prefill_inflight_max"], one["running_mean"]) == (2, 3.0)
    other = {**one, "pd_kv_transfers": 6, "pd_kv_transfer_ms_mean": 5.0, "running_mean": 1.5,
             "pd_prefill_inflight_max": 7, "pd_bootstrap_failed": 1}
    side = sm.side_metrics([one, other, None])
    assert (side["instances"], side["read"]) == (3, 2)
    assert (side["running_mean"], side["pd_kv_transfers"], side["pd_bootstrap_failed"]) == (4.5, 8, 1)
    assert side["pd_prefill_inflight_max"] == 7 and side["pd_kv_transfer_ms_mean"] == 7.5  # (2x15 + 6x5) / 8
    decode = sm.level_metrics(sm.parse(_prefill(0, [])), sm.parse(_prefill(0, [])), sm.GaugeSamples())
    assert decode is not None and (decode["pd_kv_transfers"], decode["pd_kv_transfer_ms_mean"]) == (0, None)
