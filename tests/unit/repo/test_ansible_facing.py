"""The rule that picks what `make test-newcore` runs on the newest ansible-core (issue 27):
`--ansible-facing` keeps the tests that depend on ansible-core and leaves out the pure-Python
rest, which `make unit` runs once. These tests hold the rule's premise: outside the files it
selects, nothing the tests exercise imports ansible-core."""
from __future__ import annotations

import ast
from pathlib import Path

from ...conftest import ROOT, ansible_facing, ansible_facing_tests

PLUGINS = ROOT / "plugins"
UNIT = ROOT / "tests" / "unit"


def _imports_ansible(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "ansible" or node.module.startswith("ansible."):
                return True
        elif isinstance(node, ast.Import):
            if any(a.name == "ansible" or a.name.startswith("ansible.") for a in node.names):
                return True
    return False


def test_only_the_step_action_base_imports_ansible_core_below_module_and_plugin_utils() -> None:
    """module_utils and plugin_utils are plain Python: a test of them that the rule leaves out
    cannot reach ansible-core, except through `_stepaction` (the action plugins' base, whose
    tests the rule keeps)."""
    importers = sorted(str(p.relative_to(PLUGINS)) for folder in ("module_utils", "plugin_utils")
                       for p in (PLUGINS / folder).rglob("*.py") if _imports_ansible(p))
    assert importers == ["plugin_utils/_stepaction.py"], importers


def test_tests_that_reach_ansible_core_are_selected() -> None:
    """Every unit test file that imports ansible, imports `_stepaction`, or runs an Ansible
    program is selected, and so is every test of the plugins Ansible loads."""
    missed = []
    for path in sorted(UNIT.rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        reaches = (_imports_ansible(path) or "_stepaction" in text or "ansible-playbook" in text
                   or "ansible-doc" in text or '"ansible"' in text)
        loaded = path.relative_to(UNIT).parts[:2] in {("plugins", d) for d in ("action", "filter", "lookup")}
        if (reaches or loaded) and not ansible_facing(path):
            missed.append(str(path.relative_to(ROOT)))
    assert not missed, missed


def test_pure_python_tests_are_left_out_and_integration_is_kept() -> None:
    assert not ansible_facing(UNIT / "plugins" / "module_utils" / "_shared" / "test_flags.py")
    assert not ansible_facing(UNIT / "plugins" / "plugin_utils" / "test_guard.py")
    assert ansible_facing(UNIT / "plugins" / "action" / "test_server_rollout.py")
    assert ansible_facing(UNIT / "plugins" / "module_utils" / "_sweep" / "test_module.py")
    assert ansible_facing(ROOT / "tests" / "integration" / "test_deploy.py")


def test_in_a_file_that_runs_ansible_in_some_tests_only_those_are_selected() -> None:
    """A file of plain-Python tests with a few that run a module through `ansible` keeps only
    those few: by their own source, through a function of the file, or through a helper they
    import from the tests (the sweep's `_ansible` in _sweep/helpers.py)."""
    sweep = UNIT / "plugins" / "module_utils" / "_sweep"
    selected = ansible_facing_tests(sweep / "test_module.py")
    assert selected is not None and "test_module_through_ansible" in selected  # through helpers._ansible
    assert "test_ansible_doc" in selected  # its own source runs ansible-doc
    run = ansible_facing_tests(sweep / "test_run.py")
    assert run is not None and "test_module_warns_about_failed_levels_and_fails_with_fail_on_errors" in run
    assert not any(name.startswith("test_throughput_matches_the_analytic_rate") for name in run)
    detached = ansible_facing_tests(UNIT / "plugins" / "module_utils" / "_detached" / "test_detached.py")
    assert detached is not None and "test_end_to_end_through_ansible" in detached and len(detached) < 10
    # whole files: a plugin Ansible loads, a file that imports ansible, every integration test
    assert ansible_facing_tests(UNIT / "plugins" / "action" / "test_server_rollout.py") is None
    assert ansible_facing_tests(ROOT / "tests" / "integration" / "test_deploy.py") is None
    assert ansible_facing_tests(UNIT / "plugins" / "module_utils" / "_shared" / "test_flags.py") == set()


def test_every_unit_test_that_runs_an_ansible_program_is_selected() -> None:
    """Each test function whose own source runs an Ansible program is in its file's selection."""
    import ast
    import re

    program = re.compile(r"ansible-playbook|ansible-doc|ansible-galaxy|\"ansible\"|/ \"ansible")
    missed = []
    for path in sorted(UNIT.rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        selected = ansible_facing_tests(path)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") \
                    and program.search(ast.get_source_segment(text, node) or "") \
                    and selected is not None and node.name not in selected:
                missed.append(f"{path.relative_to(ROOT)}::{node.name}")
    assert not missed, missed
