from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils._generate import report

PROGRESS = {
    "state": "running", "labels": {"job": "p"}, "total": 902087, "done": 12345, "ok": 12342, "errors": 3,
    "in_flight": 40, "retries": 2, "pending": 889742, "prompt_tokens": 1000, "completion_tokens": 2000,
    "recent": {"window_s": 60, "lines_s": 21.3, "input_tok_s": 9800, "output_tok_s": 4120.4},
    "this_run": {"lines": 345, "wall_s": 3725, "lines_s": 0.09, "input_tok_s": 5, "output_tok_s": 9},
    "eta_s": 15120, "recovery": "cut a torn line off results-00000.jsonl (12 bytes)",
    "targets": {"a/gpu0": {"share": 0.5, "up": True, "concurrency": 48, "lines": 6000, "errors": 1, "retries": 1,
                           "completion_tokens": 1000, "times_down": 0},
                "b/gpu0": {"share": 0.5, "up": False, "concurrency": 48, "lines": 6342, "errors": 2, "retries": 1,
                           "completion_tokens": 1000, "times_down": 1}},
    "files": {"results": ["results-00000.jsonl"], "errors": ["errors.jsonl"]},
}


def test_the_progress_line_has_counts_rates_eta_shares_and_who_is_down() -> None:
    assert report.line(PROGRESS) == (
        "job p: 12,345/902,087 (1.4%) done, 3 failed, 40 in flight, 2 retries, 21.3 lines/s, in 9,800 / out 4,120 tok/s "
        "(last 60 s), ETA 4h12m; a/gpu0 50% b/gpu0 50% (down: b/gpu0)")
    assert "ETA" not in report.line({**PROGRESS, "state": "finished"})


def test_durations_read_as_people_write_them() -> None:
    assert [report.duration(s) for s in (None, 42, 185, 15120)] == ["?", "42s", "3m05s", "4h12m"]


def test_the_summary_names_the_counts_the_targets_the_recovery_and_the_files() -> None:
    text = report.markdown({**PROGRESS, "state": "finished", "message": ""}, {"host": "gpu-1", "folder": "/g/p"})
    assert text.startswith("# Generation job p\n\nState: **finished**\n")
    assert "| done | 12,345 (12,342 results, 3 in errors.jsonl) |" in text
    assert "| this run | 345 lines in 1h02m: 0.09 lines/s, in 5 / out 9 tok/s |" in text
    assert "| b/gpu0 | 48 | 6,342 | 50.0% | 2 | 1 | 1,000 | 1 |" in text
    assert "Recovered at start: cut a torn line off results-00000.jsonl (12 bytes)." in text
    assert "Files on gpu-1 in `/g/p`: `results-00000.jsonl`, `errors.jsonl`" in text
