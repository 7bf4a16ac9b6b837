from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._generate import store as st


def result(cid: str, ok: bool = True, out: int = 3) -> st.Result:
    body = {"id": f"cmpl-{cid}", "usage": {"prompt_tokens": 2, "completion_tokens": out}}
    line = st.output_line(cid, 200 if ok else 400, body, None if ok else {"code": "http_error", "message": "no"})
    return st.Result(cid, ok, line, *st.usage_of(line))


def ids_in(folder: Path) -> list[str]:
    return [json.loads(raw)["custom_id"] for f in sorted(folder.glob("*.jsonl")) if f.name != st.JOURNAL
            for raw in f.read_text().splitlines()]


def test_results_roll_over_shards_errors_go_apart_and_a_done_id_is_never_written_again(tmp_path: Path) -> None:
    store = st.Store(str(tmp_path), shard_lines=2).open()
    written = store.write([result("a"), result("b"), result("c"), result("x", ok=False), result("a")])
    assert [r.custom_id for r in written] == ["a", "b", "c", "x"]
    assert store.write([result("b")]) == []
    assert store.files() == {"results": ["results-00000.jsonl", "results-00001.jsonl"], "errors": ["errors.jsonl"]}
    assert sorted(ids_in(tmp_path)) == ["a", "b", "c", "x"]
    line = json.loads((tmp_path / "errors.jsonl").read_text())
    assert line["error"] == {"code": "http_error", "message": "no"} and line["response"]["status_code"] == 400
    again = st.Store(str(tmp_path), shard_lines=2).open()
    assert again.done == {"a", "b", "c", "x"} and again.failed == {"x"}
    assert (again.totals.done, again.totals.errors, again.totals.completion_tokens) == (4, 1, 12)
    again.write([result("d")])  # the second shard had one line: d is its second
    assert (tmp_path / "results-00001.jsonl").read_text().count("\n") == 2 and not (tmp_path / "results-00002.jsonl").exists()


def test_a_torn_last_output_line_is_cut_and_its_request_is_not_done(tmp_path: Path) -> None:
    store = st.Store(str(tmp_path), shard_lines=10).open()
    store.write([result("a"), result("b")])
    shard = tmp_path / "results-00000.jsonl"
    with shard.open("ab") as fh:
        fh.write(b'{"id":"batch_req_1","custom_id":"c","resp')  # killed mid-write, never journaled
    size = shard.stat().st_size
    again = st.Store(str(tmp_path), shard_lines=10).open()
    assert again.done == {"a", "b"} and again.recovery.output_cut == {shard.name: size - len(shard.read_bytes())}
    assert shard.read_bytes().endswith(b"\n") and "torn line" in again.recovery.describe()
    again.write([result("c")])
    assert ids_in(tmp_path) == ["a", "b", "c"]


def test_results_written_but_not_journaled_are_journaled_not_sent_again(tmp_path: Path) -> None:
    store = st.Store(str(tmp_path), shard_lines=10).open()
    store.write([result("a")])
    journal = (tmp_path / st.JOURNAL).read_bytes()
    store.write([result("b"), result("x", ok=False)])
    (tmp_path / st.JOURNAL).write_bytes(journal)  # killed after the files' fsync, before the journal's
    again = st.Store(str(tmp_path), shard_lines=10).open()
    assert again.done == {"a", "b", "x"} and again.failed == {"x"} and again.recovery.rejournaled == 2
    assert again.totals.completion_tokens == 9
    assert st.Store(str(tmp_path), shard_lines=10).open().recovery.describe() == ""  # level now


def test_a_torn_journal_line_is_cut_and_the_output_tells_what_was_done(tmp_path: Path) -> None:
    store = st.Store(str(tmp_path), shard_lines=10).open()
    store.write([result("a"), result("b")])
    journal = tmp_path / st.JOURNAL
    journal.write_bytes(journal.read_bytes()[:-7])  # the last journal line torn
    again = st.Store(str(tmp_path), shard_lines=10).open()
    assert again.done == {"a", "b"} and again.recovery.journal_cut > 0 and again.recovery.rejournaled == 1
    assert [json.loads(x)["c"] for x in journal.read_text().splitlines()] == ["a", "b"]


def test_zeros_a_crash_left_at_the_end_of_a_shard_are_cut(tmp_path: Path) -> None:
    store = st.Store(str(tmp_path), shard_lines=10).open()
    store.write([result("a")])
    shard = tmp_path / "results-00000.jsonl"
    with shard.open("ab") as fh:
        fh.write(b"\0" * 100 + b"\n")
    again = st.Store(str(tmp_path), shard_lines=10).open()
    assert again.done == {"a"} and again.recovery.output_cut == {shard.name: 101}


def test_journal_lines_past_their_files_end_are_dropped_so_their_requests_are_sent_again(tmp_path: Path) -> None:
    store = st.Store(str(tmp_path), shard_lines=10).open()
    store.write([result("a")])
    store.write([result("b")])
    shard = tmp_path / "results-00000.jsonl"
    first = shard.read_bytes().split(b"\n")[0] + b"\n"
    shard.write_bytes(first)  # the filesystem lost b's line, the journal kept it
    again = st.Store(str(tmp_path), shard_lines=10).open()
    assert again.done == {"a"} and again.recovery.dropped == 1


def test_shard_lines_below_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="shard_lines must be >= 1"):
        st.Store(str(tmp_path), shard_lines=0)


def test_retry_errors_keeps_the_errors_file_aside_and_makes_its_requests_not_done(tmp_path: Path) -> None:
    store = st.Store(str(tmp_path), shard_lines=10).open()
    store.write([result("a"), result("x", ok=False), result("y", ok=False)])
    assert st.retry_errors(str(tmp_path)) == 2 and st.retry_errors(str(tmp_path)) == 0
    assert (tmp_path / "errors-retried-1.jsonl").read_text().count("\n") == 2
    again = st.Store(str(tmp_path), shard_lines=10).open()
    assert again.done == {"a"} and again.failed == set() and again.files()["errors"] == []


def test_a_crash_between_moving_the_errors_file_and_rewriting_the_journal_sends_them_again(tmp_path: Path) -> None:
    store = st.Store(str(tmp_path), shard_lines=10).open()
    store.write([result("a"), result("x", ok=False)])
    (tmp_path / st.ERRORS).rename(tmp_path / "errors-retried-1.jsonl")  # the journal not rewritten yet
    again = st.Store(str(tmp_path), shard_lines=10).open()
    assert again.done == {"a"} and again.recovery.dropped == 1
