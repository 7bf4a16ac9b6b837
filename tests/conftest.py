"""Test configuration: make the collection importable by its FQCN and locate tests/fixtures."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from . import phases

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
# plugins Ansible loads (tests/unit/plugins/{action,filter,lookup,modules}), every test file that
# imports `ansible`, and, in a file that only runs Ansible programs (ansible, ansible-playbook,
# ansible-doc) in some of its tests, those tests: each test function whose body, or a function of
# the file it calls (followed through the file's own functions and fixtures), runs one. The rest
# is plain Python that imports no ansible-core (plugin_utils and module_utils import it only
# through `_stepaction`, which the action plugins' tests cover), so running it on the newest core
# a second time proves nothing new (issue 27). tests/unit/repo/test_ansible_facing.py holds the rule.
ANSIBLE_FACING_DIRS = ("action", "filter", "lookup", "modules")
ANSIBLE_IMPORT = re.compile(r"^\s*(?:from|import) ansible(?:\.|\s)", re.M)
ANSIBLE_PROGRAM = re.compile(r"ansible-playbook|ansible-doc|ansible-galaxy|\"ansible\"|/ \"ansible")
ANSIBLE_FACING_SOURCE = re.compile(ANSIBLE_IMPORT.pattern + "|" + ANSIBLE_PROGRAM.pattern, re.M)


def ansible_facing(path: Path) -> bool:
    """Whether the test file at `path` has tests that depend on ansible-core (see above)."""
    rel = path.resolve().relative_to(ROOT / "tests")
    if rel.parts[:2] == ("unit", "plugins") and len(rel.parts) > 3 and rel.parts[2] in ANSIBLE_FACING_DIRS:
        return True
    if rel.parts[0] == "integration":
        return True  # every playbook test runs ansible-playbook
    return bool(ANSIBLE_FACING_SOURCE.search(path.read_text(encoding="utf-8")))


def ansible_facing_tests(path: Path) -> set[str] | None:
    """The names of the functions of the test file at `path` that run an Ansible program, or
    None when the whole file depends on ansible-core (a plugin Ansible loads, an integration
    test, a file that imports ansible). A function runs one when its own source names an Ansible
    program or it calls (or takes as a fixture) a function of the file that does."""
    if not ansible_facing(path):
        return set()
    text = path.read_text(encoding="utf-8")
    rel = path.resolve().relative_to(ROOT / "tests")
    if rel.parts[0] == "integration" or (rel.parts[:2] == ("unit", "plugins") and len(rel.parts) > 3
                                         and rel.parts[2] in ANSIBLE_FACING_DIRS) or ANSIBLE_IMPORT.search(text):
        return None
    return _program_functions(path)


def _program_functions(path: Path) -> set[str]:
    """The functions of the Python file at `path` that run an Ansible program: by their own
    source, or by calling (or taking as a fixture) one of the file's functions that does, or a
    function it imports from a file of the tests that does."""
    import ast

    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    uses = {name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {a.arg for a in node.args.args}
            for name, node in functions.items()}
    runs = {name for name, node in functions.items() if ANSIBLE_PROGRAM.search(ast.get_source_segment(text, node) or "")}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level and node.module:
            source = path.parent.joinpath(*[".."] * (node.level - 1), *node.module.split(".")).with_suffix(".py")
            if source.resolve().is_relative_to(ROOT / "tests") and source.exists():
                imported = _program_functions(source)
                runs |= {alias.asname or alias.name for alias in node.names if alias.name in imported}
    while True:
        more = {name for name in functions if name not in runs and uses[name] & runs}
        if not more:
            return runs
        runs |= more


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--ansible-facing", action="store_true", default=False,
                     help="run only the tests that depend on ansible-core (make test-newcore)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--ansible-facing"):
        return
    facing: dict[Path, set[str] | None] = {}
    keep, drop = [], []
    for item in items:
        path = Path(str(item.path))
        if path not in facing:
            facing[path] = ansible_facing_tests(path)
        names = facing[path]
        function = getattr(item, "originalname", None) or item.name
        (keep if names is None or function in names else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# Each playbook-level test's time by phase (issue 27; tests/phases.py): the harnesses add their
# playbook runs' seconds, taken here per test and carried in the report's user_properties (so
# that pytest-xdist's workers hand them to the controller), printed after the run.
_PHASES: dict[str, dict[str, float]] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    phases.take()
    try:
        return (yield)
    finally:
        plays = phases.take()
        if plays:
            item.user_properties.append(("plays", plays))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _PHASES.setdefault(report.nodeid, {})
    entry[report.when] = entry.get(report.when, 0.0) + report.duration
    for key, value in report.user_properties:
        if key == "plays":
            entry.update({f"play:{name}": seconds for name, seconds in value.items()})


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    rows = [(nodeid, e) for nodeid, e in _PHASES.items() if any(k.startswith("play:") for k in e)]
    if not rows:
        return
    write = terminalreporter.write_line
    write("")
    write("phases (seconds): test | playbook runs | rest of the call (load, waits, assertions) | setup | teardown")
    for nodeid, e in sorted(rows, key=lambda r: -sum(v for k, v in r[1].items() if ":" not in k)):
        plays = {k[5:]: v for k, v in e.items() if k.startswith("play:")}
        rest = max(e.get("call", 0.0) - sum(plays.values()), 0.0)
        named = ", ".join(f"{name} {seconds:.1f}" for name, seconds in sorted(plays.items(), key=lambda p: -p[1]))
        write(f"phases: {nodeid} | {named} | {rest:.1f} | {e.get('setup', 0.0):.1f} | {e.get('teardown', 0.0):.1f}")
