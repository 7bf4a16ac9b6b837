"""Tests of module_utils/_bench/reportsdir.py (the bench's report folder, checked before anything is
measured, and the fallback of a report whose folder fails after all): issue 16 #9. sweep_wait's
progress lines when that folder fails mid-sweep: tests/unit/plugins/action/test_sweep_wait.py."""
from __future__ import annotations

import os
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils._bench import reportsdir as _reportsdir

FIX = "set sglang_bench_reports_dir to a folder this user can create and write on the controller"


def test_a_folder_that_cannot_be_created_is_named_with_the_reason_and_the_fix(tmp_path: Path) -> None:
    assert _reportsdir.problem("/proc/x") == (
        f"sglang_bench_reports_dir='/proc/x': cannot create and write a report there: No such file or directory: {FIX}")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    message = _reportsdir.problem(str(blocker / "reports"))
    assert message is not None and message.startswith(f"sglang_bench_reports_dir='{blocker}/reports': cannot create")
    assert "Not a directory" in message and message.endswith(FIX)
    assert _reportsdir.problem("  ") == f"sglang_bench_reports_dir is empty: {FIX}"
    assert _reportsdir.problem(str(blocker), "sglang_tune_reports_dir", create=False) == (
        f"sglang_tune_reports_dir='{blocker}': {blocker} is not a folder: "
        "set sglang_tune_reports_dir to a folder this user can create and write on the controller")


def test_a_good_folder_is_created_and_left_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "r" / "s"
    assert _reportsdir.problem(str(target), create=False) is None and not target.exists()  # check mode
    assert _reportsdir.problem(str(target)) is None
    assert target.is_dir() and list(target.iterdir()) == []  # the probe file is gone


def test_the_fallback_is_under_home_else_a_new_temporary_folder(tmp_path: Path) -> None:
    assert _reportsdir.fallback_root(str(tmp_path)) == str(tmp_path / ".ansible" / "llmops.sglang" / "reports")
    elsewhere = _reportsdir.fallback_root("/proc/no-home")
    try:
        assert os.path.isdir(elsewhere) and os.path.basename(elsewhere).startswith("llmops-sglang-reports-")
    finally:
        os.rmdir(elsewhere)
