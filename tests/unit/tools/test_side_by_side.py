"""tools/side_by_side.py (make test's and .ci/run's stages side by side) and the step table
tools/ci_timed.py makes from their lines."""
from __future__ import annotations

import subprocess
import sys

from ...conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import ci_timed  # noqa: E402

SCRIPT = ROOT / "tools" / "side_by_side.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_every_line_is_prefixed_each_end_is_reported_and_the_first_failure_is_the_status() -> None:
    run = _run("a", "echo one; echo two", "b", "echo x >&2; exit 3", "c", "exit 4", "d", "printf no-newline")
    lines = run.stdout.splitlines()
    assert run.returncode == 3  # b failed first in the order given (c failed too)
    assert lines.index("[a] one") < lines.index("[a] two") and "[b] x" in lines and "[d] no-newline" in lines
    for name, status in (("a", 0), ("b", 3), ("c", 4), ("d", 0)):
        assert any(line.startswith(f"[{name}] done after ") and line.endswith(f"(exit status {status})")
                   for line in lines), lines
    assert lines[-1].startswith("side by side (a, b, c, d): ")
    assert _run("a", "true", "b", "true").returncode == 0
    assert _run("a").returncode == 2  # a name without its command: the usage


def test_the_lines_make_a_step_table_with_each_stage_and_the_group() -> None:
    out = "\n".join(line for line in _run("lint", "exit 0", "sanity", "exit 0").stdout.splitlines())
    side = [(m[1], float(m[2])) for m in map(ci_timed.SIDE_BY_SIDE.match, out.splitlines()) if m]
    groups = [(m[1], float(m[2]), 9.0) for m in map(ci_timed.GROUP.match, out.splitlines()) if m]
    assert sorted(name for name, _ in side) == ["lint", "sanity"] and groups[0][0] == "lint, sanity"
    marks = [("setup", 0.0), ("lint", 5.0), ("build", 6.0), ("sanity", 7.0), ("integration", 10.0)]
    table = ci_timed._table(marks, side, groups, 20.0)
    names = [name for name, _ in table]
    assert names[0] == "setup" and names[-1] == "integration"
    assert "lint (side by side)" in names and "sanity (side by side)" in names and "build" not in names
    assert "lint + sanity (together)" in names
    assert dict(table)["integration"] == 10.0


def test_each_durations_row_goes_to_the_stage_its_prefix_names(tmp_path) -> None:
    log = tmp_path / "run-1.log"
    log.write_text("\n".join([
        "[   0.5] .venv/bin/python -m venv .venv",
        "[   1.0] [unit] 1.50s call     tests/unit/x.py::test_a",
        "[   2.0] [integration] LLMOPS_TEST_PORT_SHARE=0/3 pytest -q -n 3 -m \"not e2e\" tests/integration",
        "[   3.0] [e2e] 4.00s call     tests/integration/test_tune.py::test_b",
        "[   4.0] [integration] 2.00s setup    tests/integration/test_deploy.py::test_c",
        "[   5.0] [fleet] 3.00s call     tests/fleet/test_fleet_rollout.py::test_d",
        "[   6.0] [newcore] 0.50s call     tests/unit/y.py::test_e",
        "[   7.0] [sanity] 0.25s call     not/a/test.py::test_f",
    ]) + "\n")
    rows = {(step, test) for step, test, _, _ in ci_timed.durations(str(log))}
    assert rows == {("unit", "tests/unit/x.py::test_a"), ("e2e", "tests/integration/test_tune.py::test_b"),
                    ("integration", "tests/integration/test_deploy.py::test_c"),
                    ("fleet-test", "tests/fleet/test_fleet_rollout.py::test_d"),
                    ("test-newcore", "tests/unit/y.py::test_e"), ("sanity", "not/a/test.py::test_f")}
