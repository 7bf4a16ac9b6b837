"""The stream parsers (module_utils/_sweep/streams.py) and the server summary (probe.py) on the
real SGLang 0.5.17 recordings, without network."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw

REC = "sglang-0.5.17-h200"


def _data_lines(path: Path) -> list[str]:
    return [line[5:].strip() for line in path.read_text().splitlines() if line.startswith("data:")]


# ------------------------------------------------------------------------------------------------
# Stream parsers on the real recordings
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_openai_completions_recording(fixtures_dir: Path, kind: str) -> None:
    lines = _data_lines(fixtures_dir / REC / kind / "stream_completions.txt")
    parser = sw.OpenAIStreamParser()
    for i, data in enumerate(lines):
        parser.feed(i * 0.01, data)
    parser.close()
    first = json.loads(lines[0])
    assert first["choices"][0]["text"] == ""  # the recording's first token chunk has empty text
    assert parser.first_token_t == 0.0  # TTFT stamped there, not at the first non-empty text
    assert parser.output_tokens == 24 and parser.finish_reason == "length" and parser.done
    assert len(parser.events) == 24  # 24 token chunks (the usage chunk is not one)
    assert sw.itl_samples(parser.events) == pytest.approx([0.01] * 23)


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_openai_chat_recording_skips_the_role_chunk(fixtures_dir: Path, kind: str) -> None:
    lines = _data_lines(fixtures_dir / REC / kind / "stream_chat.txt")
    parser = sw.OpenAIStreamParser()
    for i, data in enumerate(lines):
        parser.feed(float(i), data)
    parser.close()
    assert parser.first_token_t == 1.0  # chunk 0 is role-only
    assert parser.output_tokens == 16
    token_chunks = len(lines) - 3  # role chunk, usage chunk, [DONE]
    assert len(parser.events) == token_chunks
    assert sum(t for _, t in parser.events) == pytest.approx(16.0)  # usage spread over the chunks


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_native_generate_recording(fixtures_dir: Path, kind: str) -> None:
    lines = _data_lines(fixtures_dir / REC / kind / "stream_generate.txt")
    parser = sw.NativeStreamParser()
    for i, data in enumerate(lines):
        parser.feed(i * 0.01, data)
    parser.close()
    assert parser.first_token_t == 0.0
    assert parser.output_tokens == 24 and parser.finish_reason == "length" and parser.done
    assert sw.itl_samples(parser.events) == pytest.approx([0.01] * 23)
    # the fast count scan agrees with a full JSON parse on every recorded chunk
    for data in lines[:-1]:
        fast = sw.NativeStreamParser()
        fast.feed(0.0, data)
        assert fast.output_tokens == json.loads(data)["meta_info"]["completion_tokens"]


def test_native_multi_token_chunks_and_errors() -> None:
    def chunk(count: int, finish: Any = None) -> str:
        return json.dumps({"text": "", "output_ids": list(range(count)),
                           "meta_info": {"finish_reason": finish, "completion_tokens": count}},
                          separators=(",", ":"))

    parser = sw.NativeStreamParser()
    parser.feed(0.0, chunk(2))
    parser.feed(0.03, chunk(5))
    parser.feed(0.03, chunk(5))  # repeated count: not a token chunk
    parser.feed(0.06, chunk(8, {"type": "length", "length": 8}))
    parser.feed(0.07, "[DONE]")
    parser.close()
    assert parser.events == [(0.0, 2.0), (0.03, 3.0), (0.06, 3.0)]
    assert sw.itl_samples(parser.events) == pytest.approx([0.01] * 6)
    trace = sw.Trace(level=0, concurrency=1, index=0, worker=0, start=0.0, end=0.07)
    sw.finalize_trace(trace, parser, 8)
    assert trace.ok and trace.output_tokens == 8 and trace.tpot == pytest.approx(0.07 / 7)

    bad = sw.NativeStreamParser()
    bad.feed(0.0, chunk(1))
    bad.feed(0.1, '{"error":{"message":"boom"}}')
    bad.feed(0.2, "[DONE]")
    trace = sw.Trace(level=0, concurrency=1, index=0, worker=0)
    sw.finalize_trace(trace, bad, 8)
    assert trace.error_kind == "stream" and "boom" in (trace.error or "")
    assert trace.counted_tokens == 0


def test_openai_outcomes() -> None:
    def run(lines: list[str], max_tokens: int = 4) -> sw.Trace:
        parser = sw.OpenAIStreamParser()
        for i, data in enumerate(lines):
            parser.feed(float(i), data)
        trace = sw.Trace(level=0, concurrency=1, index=0, worker=0)
        sw.finalize_trace(trace, parser, max_tokens)
        return trace

    tok = '{"choices":[{"index":0,"text":"a","finish_reason":%s}],"usage":null}'
    usage = '{"choices":[],"usage":{"completion_tokens":%d}}'
    ok = run([tok % "null", tok % '"length"', usage % 4, "[DONE]"])
    assert ok.ok and ok.output_tokens == 4
    short = run([tok % '"stop"', usage % 2, "[DONE]"])
    assert short.error_kind == "short" and short.counted_tokens == 2
    no_usage = run([tok % '"length"', "[DONE]"])
    assert no_usage.error_kind == "stream" and "usage" in (no_usage.error or "")
    cut = run([tok % "null"])
    assert cut.error_kind == "stream"
    err = run([tok % "null", '{"error":{"message":"oops","code":500}}', "[DONE]"])
    assert err.error_kind == "stream" and "oops" in (err.error or "")


def test_server_summary_on_the_recording(fixtures_dir: Path) -> None:
    text = (fixtures_dir / REC / "hybrid" / "ep_server_info.txt").read_text()
    info = json.loads(text[text.index("{"):])
    summary = sw.server_summary(info)
    assert summary["version"] == "0.5.17" and summary["max_running_requests"] == 16
    after = json.loads((fixtures_dir / REC / "hybrid" / "server_info_after.json").read_text())
    assert sw.server_summary(after)["avg_spec_accept_length"] == pytest.approx(1.00008, abs=1e-4)
