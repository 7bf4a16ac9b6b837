"""The rule that picks what `make test-newcore` runs on the newest ansible-core (issue 27):
`--ansible-facing` keeps the tests that depend on ansible-core and leaves out the pure-Python
rest, which `make unit` runs once. These tests hold the rule's premise: outside the files it
selects, nothing the tests exercise imports ansible-core."""
from __future__ import annotations

import ast
from pathlib import Path

from ...conftest import ROOT, ansible_facing

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
    assert not ansible_facing(UNIT / "plugins" / "module_utils" / "test_flags.py")
    assert not ansible_facing(UNIT / "plugins" / "plugin_utils" / "test_guard.py")
    assert ansible_facing(UNIT / "plugins" / "action" / "test_server_rollout.py")
    assert ansible_facing(UNIT / "plugins" / "module_utils" / "_sweep" / "test_module.py")
    assert ansible_facing(ROOT / "tests" / "integration" / "test_deploy.py")
