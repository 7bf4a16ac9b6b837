"""The sweep_wait action (plugins/action/sweep_wait.py): its progress lines when the report folder
fails mid-sweep (issue 16 #9; the folder itself: tests/unit/plugins/module_utils/_bench/test_reportsdir.py)."""
from __future__ import annotations

from pathlib import Path

from ansible_collections.llmops.sglang.plugins.action.sweep_wait import _append_controller


def test_progress_lines_that_cannot_be_written_never_end_the_sweeps(tmp_path: Path) -> None:
    """sweep_wait appended the lines with a bare os.makedirs: a bad folder raised out of the
    action after the first level, the heartbeats stopped and the sweeps' results were lost."""
    problem = _append_controller("/proc/x/run/progress.jsonl", ['{"concurrency": 1}'])
    assert problem is not None and problem.startswith("cannot write the progress lines to /proc/x/run/progress.jsonl")
    dest = tmp_path / "run" / "progress.jsonl"
    assert _append_controller(str(dest), ['{"a": 1}', '{"a": 2}']) is None
    assert dest.read_text() == '{"a": 1}\n{"a": 2}\n'
