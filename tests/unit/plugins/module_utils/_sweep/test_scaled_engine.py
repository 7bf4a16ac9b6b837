"""End to end: a sweep of the time-scaled embedded engine (the demo's 27B MTP + HiCache on an H200)."""
from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _report
from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw
from ansible_collections.llmops.sglang.plugins.module_utils._bench import progress as _progress

from .helpers import (
    ENGINE_ARGV,
    ENGINE_SCALE,
    configure,
    engine_process,
    parse_cells,
)

# ------------------------------------------------------------------------------------------------
# End to end: the time-scaled embedded engine (the demo's 27B MTP + HiCache on an H200)
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scaled_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with engine_process(tmp_path_factory.mktemp("engine") / "engine.log") as base:
        yield base


def test_a_server_with_an_api_key_says_so(tmp_path: Path) -> None:
    """The embedded engine started with --api-key (as SGLang: 401 without the bearer token)."""
    with engine_process(tmp_path / "engine.log", "--api-key", "s3cret", scale=0.001) as base:
        quick = {"concurrency": [1], "requests": 2, "max_tokens": 8, "warmup": 0, "level_warmup": False}
        for given in ({}, {"model": "qwen3.6-27b"}):  # with a model, /v1/models is skipped
            with pytest.raises(sw.SweepError) as info:
                sw.run_sweep(sw.SweepOptions(url=base, **quick, **given))
            message = str(info.value)
            assert "HTTP 401" in message and "requires an API key" in message and "none was sent" in message
            assert "api_key" in message and "sglang_bench_api_key" in message and "sglang_api_key" in message
            assert "is the server up" not in message
        with pytest.raises(sw.SweepError, match="refused the API key that was sent") as info:
            sw.run_sweep(sw.SweepOptions(url=base, api_key="wrong", **quick))
        assert "sglang_bench_api_key" in str(info.value)
        facts = sw.run_sweep(sw.SweepOptions(url=base, api_key="s3cret", **quick))
        assert facts["points"][0]["ok"] == 2 and facts["options"]["api_key_set"] is True


def _modelled_level(concurrency: int, max_tokens: int) -> dict[str, Any]:
    """What the performance model alone says of a closed-loop level (no HTTP, no clock)."""
    from ansible_collections.llmops.sglang.plugins.module_utils._engine import host, perfmodel, tokens
    from ansible_collections.llmops.sglang.plugins.module_utils._shared import flags as _flags

    args = vars(_flags.build_parser("0.5.23").parse_args([*ENGINE_ARGV, "--port", "1"]))
    plan = perfmodel.plan_engine(args, perfmodel.load_model_config(args["model_path"]),
                                 perfmodel.find_gpu("NVIDIA H200"), "0.5.23", int(200e9))
    prompt = round(sum(tokens.estimate_tokens(p) for p in sw.DEFAULT_PROMPTS) / len(sw.DEFAULT_PROMPTS))
    return perfmodel.simulate_level(host.apply_accept_length(plan), concurrency, max(2 * concurrency, 8),
                                    max_tokens, prompt_tokens=prompt)


def test_time_scaled_latencies_agree_with_the_model_or_say_not_measurable(scaled_engine: str) -> None:
    facts = sw.run_sweep(sw.SweepOptions(url=scaled_engine, concurrency=[1, 4, 8], max_tokens=256))
    assert facts["time_base"] == "model" and facts["server"]["time_scale"] == ENGINE_SCALE
    assert facts["server"]["metrics"] is True
    table = _report.render_table(facts).splitlines()[2:]
    for point, row in zip(facts["points"], table, strict=True):
        server = point["server"]
        c = point["concurrency"]
        assert server["requests"] == server["first_tokens"] == point["requests"] == point["ok"], point
        # the engine's histograms hold modelled time: a 27B decode step on an H200 takes milliseconds
        # (the wall-clock gaps at this scale are 50x shorter)
        assert 3.0 < server["itl_ms_mean"] < 30.0, server
        assert point["level_warmup"]["ok"] == max(c, 8)
        marks = point["latency_unmeasurable"]
        for key in ("ttft_ms", "itl_ms"):
            for stat in ("mean", "p50", "p99"):
                value = point[key][stat]
                if stat in marks.get(key, []):
                    assert point["latency_measurable"] is False and point["latency_check"]["reasons"][key]
                    continue
                # never silently off: an unmarked value agrees with the engine's own model
                if stat == "mean":
                    assert value == pytest.approx(server[f"{key}_mean"], rel=0.25), (c, key, point)
                else:
                    lo, hi = server[f"{key}_range"][stat]
                    assert lo * 0.75 <= value <= (math.inf if hi is None else hi * 1.25), (c, key, stat, point)
        cells = parse_cells(row)
        for column, path in ((7, ("ttft_ms", "p50")), (8, ("ttft_ms", "p99")), (9, ("itl_ms", "p50")),
                             (10, ("itl_ms", "p99"))):
            assert (cells[column] == "n/m") == (path[1] in marks.get(path[0], [])), (c, row, marks)
    # and the engine's modelled histograms are the performance model's numbers (C=1: nothing to share)
    model = _modelled_level(1, 256)
    server = facts["points"][0]["server"]
    assert server["e2e_s_mean"] == pytest.approx(model["mean_latency_s"], rel=0.05)
    assert server["ttft_ms_mean"] == pytest.approx(model["mean_ttft_s"] * 1000.0, rel=0.10)
    if any(p["latency_unmeasurable"] for p in facts["points"]):
        assert any("not measurable at this scale" in w for w in facts["warnings"])


def test_time_scale_for_a_server_that_reports_none_and_the_records_origin(server: str) -> None:
    """A router in front of embedded engines reports no time scale: the option gives it, and the
    sweep is converted to modelled time as the engines' own sweeps are. records_t0_unix is the
    wall-clock origin of the records, which the report's fleet total merges on."""
    configure(server, rate=2000.0, prefill_s=0.01, slots=8)
    opts = {"url": server, "concurrency": [2], "requests": 4, "warmup": 0, "level_warmup": False, "max_tokens": 40}
    before = time.time()
    wall = sw.run_sweep(sw.SweepOptions(**opts))
    scaled = sw.run_sweep(sw.SweepOptions(**opts, time_scale=0.5))
    assert wall["time_base"] == "wall" and wall["server"]["time_scale"] is None
    assert before <= wall["records_t0_unix"] <= scaled["records_t0_unix"] <= time.time()
    assert scaled["time_base"] == "model" and scaled["server"]["time_scale"] == 0.5
    assert scaled["options"]["time_scale"] == 0.5
    point = scaled["points"][0]
    assert point["output_tok_s"] == pytest.approx(point["wall"]["output_tok_s"] * 0.5, rel=1e-3)
    # the records in modelled seconds: their busy time x the scale is the level's wall busy time
    # (achieved concurrency x wall duration), within one run, so load cannot move it
    busy = sum(r["e2e_s"] for r in scaled["records"])
    assert busy * 0.5 == pytest.approx(point["achieved_concurrency"] * point["wall"]["duration_s"], rel=0.01)


def test_progress_lines_of_a_router_are_in_the_time_base_of_its_result(server: str) -> None:
    """Issue 16 #8: a router reports no time scale, so its progress lines stayed in wall time
    while its result (time_scale from the workers) and the workers' lines were in modelled time,
    10x apart at the demo's scale and unlabelled. Each line now has the result's time base, and
    says which it is."""
    configure(server, rate=2000.0, prefill_s=0.01, slots=8)
    lines: list[dict[str, Any]] = []
    facts = sw.run_sweep(sw.SweepOptions(url=server, concurrency=[2], requests=4, warmup=0, level_warmup=False,
                                         max_tokens=40, time_scale=0.1),
                         on_level=lambda point, scale: lines.append(_progress.record(point, {"instance": "router"},
                                                                                     scale)))
    assert facts["time_base"] == "model" and [line["time_base"] for line in lines] == ["model"]
    assert lines[0]["output_tok_s"] == pytest.approx(facts["points"][0]["output_tok_s"], rel=1e-3)
    assert _progress.describe(lines[0]).startswith("router [modelled time] C=2: ")
