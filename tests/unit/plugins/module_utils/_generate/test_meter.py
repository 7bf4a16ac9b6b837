from __future__ import annotations

from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils._generate.meter import Meter


def text(prompt: float, out: float) -> str:
    return (f'sglang:prompt_tokens_total{{is_streaming="false"}} {prompt}\n'
            f'sglang:generation_tokens_total{{is_streaming="false"}} {out}\n'
            f'sglang:generation_tokens_total{{is_streaming="true"}} 1.0\n')


def test_tokens_since_the_first_reading_and_a_restart_keeps_what_was_counted() -> None:
    meter = Meter([{"name": "a", "url": "http://a/"}, {"name": "b", "url": "http://b"}])
    meter.add("a", text(10, 100))
    meter.add("b", text(0, 0))
    meter.add("a", text(30, 400))
    meter.add("b", text(5, 100))
    meter.add("a", text(2, 50))  # restarted: its counters began again (51 out: the streamed series too)
    meter.add("b", None)  # not answering: keeps what it had
    shares = meter.shares()
    assert shares["a"] == {"prompt_tokens": 22, "completion_tokens": 351, "share": 0.7783, "up": True, "restarts": 1}
    assert shares["b"] == {"prompt_tokens": 5, "completion_tokens": 100, "share": 0.2217, "up": False, "restarts": 0}
    assert meter.instances == [("a", "http://a"), ("b", "http://b")]


def test_a_real_servers_metrics_are_read_by_the_names_it_uses(fixtures_dir: Path) -> None:
    real = (fixtures_dir / "metrics" / "sglang-0.5.17-h200-dense.txt").read_text()
    meter = Meter([{"name": "dense", "url": "http://x"}])
    meter.add("dense", real)
    meter.add("dense", real.replace("sglang:generation_tokens_total{engine_type=\"unified\",is_streaming=\"false\","
                                    "model_name=\"/models/qwen3-dense\"} 56.0",
                                    "sglang:generation_tokens_total{engine_type=\"unified\",is_streaming=\"false\","
                                    "model_name=\"/models/qwen3-dense\"} 156.0"))
    assert meter.shares()["dense"]["completion_tokens"] == 100 and meter.shares()["dense"]["share"] == 1.0
    assert Meter([{"name": "x", "url": "u"}]).shares()["x"]["up"] is False
