from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._generate import inputs

CHAT = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9}}


def test_a_batch_line_keeps_its_body_and_the_defaults_fill_only_what_it_lacks() -> None:
    req = inputs.parse_line(json.dumps(CHAT), 1, {"max_tokens": 100, "temperature": 0.6})
    assert req.custom_id == "a" and req.url == inputs.CHAT
    assert req.body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9, "temperature": 0.6}


def test_plain_lines_pick_their_endpoint_and_carry_their_parameters() -> None:
    p = inputs.parse_line('{"id": 7, "prompt": "x", "temperature": 0}', 3, {"temperature": 1, "max_tokens": 5})
    assert (p.custom_id, p.url, p.body, p.line) == ("7", inputs.COMPLETIONS, {"temperature": 0, "max_tokens": 5, "prompt": "x"}, 3)
    m = inputs.parse_line('{"custom_id": "m1", "messages": [{"role": "user", "content": "x"}]}', 1)
    assert m.url == inputs.CHAT and "custom_id" not in m.body


@pytest.mark.parametrize(("line", "reason"), [
    ("{not json", "not JSON"),
    ("[1, 2]", "a JSON object is expected, got list"),
    ('{"prompt": "x"}', "no id or custom_id"),
    ('{"id": "", "prompt": "x"}', "id is empty"),
    ('{"id": {"a": 1}, "prompt": "x"}', "id must be a string"),
    ('{"id": "a", "prompt": "x", "messages": []}', "either prompt or messages, not both"),
    ('{"id": "a"}', "either prompt or messages"),
    ('{"id": "a", "prompt": "x", "stream": true}', "stream is true"),
    ('{"custom_id": "a", "url": "/v1/embeddings", "body": {"input": "x"}}', "url '/v1/embeddings': one of"),
    ('{"custom_id": "a", "method": "GET", "url": "/v1/completions", "body": {"prompt": "x"}}', "method 'GET': only POST"),
    ('{"custom_id": "a", "url": "/v1/completions", "body": "x"}', "body must be an object"),
    ('{"custom_id": "a", "url": "/v1/completions", "body": {"prompt": "x"}, "extra": 1}', "unknown: extra"),
    ('{"custom_id": "a", "url": "/v1/chat/completions", "body": {"messages": []}}', "needs messages"),
    ('{"custom_id": "a", "url": "/v1/completions", "body": {"max_tokens": 3}}', "needs a prompt"),
])
def test_a_line_that_cannot_be_sent_says_why(line: str, reason: str) -> None:
    with pytest.raises(inputs.InputError) as err:
        inputs.parse_line(line, 1)
    assert reason in str(err.value)


def test_scan_lists_each_bad_line_with_its_number_and_counts_the_good_ones(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    lines = [json.dumps(CHAT), "", '{"id": "b", "prompt": "x"}', "{oops", '{"id": "a", "prompt": "dup"}',
             '{"id": "c", "prompt": "y"}']
    path.write_text("\n".join(lines))  # no newline at the end: the last line counts
    ids: set[str] = set()
    scan = inputs.scan(str(path), ids=ids)
    assert not scan.ok and scan.lines == 6 and scan.requests == 3 and ids == {"a", "b", "c"}
    assert [n for n, _ in scan.problems] == [4, 5]
    assert "is on line 1 too" in scan.problems[1][1]
    message = scan.message()
    assert "2 of 6 line(s) cannot be sent, nothing was sent" in message and "line 4: not JSON" in message
    assert scan.digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert scan.endpoints == {inputs.CHAT: 1, inputs.COMPLETIONS: 2}


def test_scan_lists_the_first_problems_and_counts_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("".join("{bad\n" for _ in range(inputs.MAX_LISTED + 5)))
    scan = inputs.scan(str(path))
    assert scan.problem_count == inputs.MAX_LISTED + 5 and len(scan.problems) == inputs.MAX_LISTED
    assert "(and 5 more)" in scan.message()


def test_a_line_that_is_not_utf8_is_refused_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "\xff"}\n')
    scan = inputs.scan(str(path))
    assert scan.problems[0][0] == 2 and "not UTF-8" in scan.problems[0][1]


def test_requests_skips_the_done_ids_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "prompt": "x"}) + "\n" for i in range(5)))
    assert [r.custom_id for r in inputs.requests(str(path), skip={"r1", "r3"})] == ["r0", "r2", "r4"]
    path.write_text(path.read_text() + "{broken\n")
    with pytest.raises(inputs.InputError, match=r"line 6: not JSON .*\(the file changed after it was checked\)"):
        list(inputs.requests(str(path)))
