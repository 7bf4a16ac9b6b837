"""Test configuration: make the collection importable by its FQCN and locate tests/fixtures."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

# Recordings of real hosts and real SGLang servers, copied byte for byte (tests/fixtures/README.md).
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


# `--ansible-facing` (make test-newcore): only the tests that depend on ansible-core, those of the
# plugins Ansible loads (tests/unit/plugins/{action,filter,lookup,modules}) and every test file
# that imports `ansible` or runs an Ansible program (ansible, ansible-playbook, ansible-doc). The
# rest is plain Python that imports no ansible-core (plugin_utils and module_utils import it only
# through `_stepaction`, which the action plugins' tests cover), so running it on the newest core
# a second time proves nothing new (issue 27). tests/unit/repo/test_ansible_facing.py holds the rule.
ANSIBLE_FACING_DIRS = ("action", "filter", "lookup", "modules")
ANSIBLE_FACING_SOURCE = re.compile(
    r"^\s*(?:from|import) ansible(?:\.|\s)|ansible-playbook|ansible-doc|ansible-galaxy|\"ansible\"|BIN / \"ansible",
    re.M)


def ansible_facing(path: Path) -> bool:
    """Whether the test file at `path` depends on ansible-core (see ANSIBLE_FACING_SOURCE)."""
    rel = path.resolve().relative_to(ROOT / "tests")
    if rel.parts[:2] == ("unit", "plugins") and len(rel.parts) > 3 and rel.parts[2] in ANSIBLE_FACING_DIRS:
        return True
    if rel.parts[0] == "integration":
        return True  # every playbook test runs ansible-playbook
    return bool(ANSIBLE_FACING_SOURCE.search(path.read_text(encoding="utf-8")))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--ansible-facing", action="store_true", default=False,
                     help="run only the tests that depend on ansible-core (make test-newcore)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--ansible-facing"):
        return
    facing: dict[Path, bool] = {}
    keep, drop = [], []
    for item in items:
        path = Path(str(item.path))
        if path not in facing:
            facing[path] = ansible_facing(path)
        (keep if facing[path] else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
