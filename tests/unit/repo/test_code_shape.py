"""The code's shape in plugins/ (issue 15): no file over 800 lines, no class over 300, no
function over 80, and no import cycle among the files of module_utils and plugin_utils.

Measured with ``ast``: a class or function spans from its first decorator (or ``def``/``class``)
line to its last line, nested functions counted in the function that holds them. Imports are
every ``import``/``from ... import`` of ``ansible_collections.llmops.sglang.plugins...`` anywhere
in a file (top level or inside a function: a deferred import still ties the two files), and
a package's ``__init__.py`` is the node of the package itself. Each test prints its offenders.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PLUGINS = ROOT / "plugins"
PREFIX = "ansible_collections.llmops.sglang."
MAX_FILE_LINES = 800
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 80


def plugin_files() -> list[Path]:
    return sorted(PLUGINS.rglob("*.py"))


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def span(node: ast.AST) -> int:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return node.end_lineno - first + 1


def too_long(kinds: tuple[type, ...], limit: int) -> list[str]:
    found = []
    for path in plugin_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, kinds) and span(node) > limit:
                found.append(f"{rel(path)}:{node.lineno} {node.name}: {span(node)} lines (limit {limit})")
    return found


def module_name(path: Path) -> str:
    """The dotted name of a file under plugins/, a package by its folder."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return PREFIX + ".".join(parts)


def imported(tree: ast.AST, known: set[str]) -> set[str]:
    """The known modules a file imports: ``from pkg import mod`` names the submodule where
    ``pkg.mod`` is a file, else ``pkg``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            names = [name for name in names if name in known][:1] or [node.module]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    files = [p for d in ("module_utils", "plugin_utils") for p in sorted((PLUGINS / d).rglob("*.py"))]
    known = {module_name(p) for p in files}
    graph = {}
    for path in files:
        name = module_name(path)
        graph[name] = imported(ast.parse(path.read_text(encoding="utf-8")), known) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def report(offenders: list[str]) -> str:
    print("\n".join(offenders))
    return "\n" + "\n".join(offenders)


def test_no_file_in_plugins_over_800_lines() -> None:
    offenders = [f"{rel(p)}: {n} lines (limit {MAX_FILE_LINES})" for p in plugin_files()
                 if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES]
    assert not offenders, report(offenders)


def test_no_class_in_plugins_over_300_lines() -> None:
    offenders = too_long((ast.ClassDef,), MAX_CLASS_LINES)
    assert not offenders, report(offenders)


def test_no_function_in_plugins_over_80_lines() -> None:
    offenders = too_long((ast.FunctionDef, ast.AsyncFunctionDef), MAX_FUNCTION_LINES)
    assert not offenders, report(offenders)


def test_no_import_cycle_among_module_utils_and_plugin_utils() -> None:
    offenders = [" -> ".join(c) for c in cycles(import_graph())]
    assert not offenders, report(offenders)


def private_uses(path: Path, known: set[str]) -> list[str]:
    """``from <collection module> import _name`` where ``_name`` is not a module (a file or
    package), and ``mod._name`` where ``mod`` names a collection module this file imported."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX):
            for alias in node.names:
                if f"{node.module}.{alias.name}" in known:
                    modules.add(alias.asname or alias.name)
                elif alias.name.startswith("_"):
                    found.append(f"{rel(path)}:{node.lineno} from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{rel(path)}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def test_no_private_name_used_across_files() -> None:
    """A file uses only the public names of another file of the collection (a private
    module, ``_sweep``, is fine: its public names are the API)."""
    files = [p for d in ("module_utils", "plugin_utils") for p in sorted((PLUGINS / d).rglob("*.py"))]
    known = {module_name(p) for p in files}
    offenders = [line for path in plugin_files() for line in private_uses(path, known)]
    assert not offenders, report(offenders)


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}, [["a", "b", "c"]]),
])
def test_the_cycle_finder_finds_cycles(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles(graph) == expected


def test_the_checks_see_the_files_they_measure() -> None:
    graph = import_graph()
    sweep = PREFIX + "plugins.module_utils._sweep."
    assert sweep + "workers" in graph[sweep + "run"] and len(graph) > 40
    assert any(PREFIX + "plugins.module_utils._shared.flags" in deps for deps in graph.values())
    src = "def f():\n    x = 1\n" + "    x += 1\n" * 100 + "    return x\n"
    assert span(ast.parse(src).body[0]) == 103


def test_the_private_name_check_finds_them(tmp_path: Path) -> None:
    mu = PREFIX + "plugins.module_utils"
    src = tmp_path / "x.py"
    src.write_text(f"from {mu} import _sweep\nfrom {mu}._sweep.client import _Hidden, Client\n"
                   "_sweep._Client(1)\n_sweep.Client(1)\n")
    assert private_uses(src, {mu + "._sweep", mu + "._sweep.client"}) == [
        f"x.py:2 from {mu}._sweep.client import _Hidden", "x.py:3 _sweep._Client"]


def test_module_utils_is_grouped_by_what_it_serves() -> None:
    """plugins/module_utils holds packages only (issue 29: 23 files at its top level were grouped
    into _server, _router, _bench, _rollout and _shared beside the packages there were)."""
    utils = ROOT / "plugins" / "module_utils"
    loose = sorted(p.name for p in utils.glob("*.py"))
    assert not loose, f"put each of these in the package of what it serves (docs/DEVELOPING.md): {loose}"
    packages = sorted(p.name for p in utils.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert {"_server", "_router", "_bench", "_rollout", "_shared", "_sweep", "_engine"} <= set(packages)
    assert all((utils / name / "__init__.py").is_file() for name in packages), packages
