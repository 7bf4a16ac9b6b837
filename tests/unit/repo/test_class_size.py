"""The code's shape (issue 29): no class of more than 300 lines counting the collection's classes it
inherits from, and no mixin that declares its subclass's attributes (a base class with bare
annotations, ``points: list``, that is not a dataclass, TypedDict, Protocol or NamedTuple: it
reads state some other class sets)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MAX_LINES = 300
DECLARATIVE = {"TypedDict", "Protocol", "NamedTuple", "Enum"}


def _classes() -> dict[str, tuple[str, ast.ClassDef]]:
    found: dict[str, tuple[str, ast.ClassDef]] = {}
    for path in sorted(ROOT.glob("plugins/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found[f"{path.relative_to(ROOT)}:{node.name}"] = (node.name, node)
    return found


def _base_names(node: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases]


def _lines(node: ast.ClassDef) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


def test_no_class_is_longer_than_300_lines_with_the_classes_it_inherits() -> None:
    classes = _classes()
    by_name: dict[str, list[ast.ClassDef]] = {}
    for name, node in classes.values():
        by_name.setdefault(name, []).append(node)

    def total(node: ast.ClassDef, seen: frozenset[str] = frozenset()) -> int:
        size = _lines(node)
        for base in _base_names(node):
            if base in by_name and base not in seen and len(by_name[base]) == 1:
                size += total(by_name[base][0], seen | {base})
        return size

    long = [f"{where}: {total(node)} lines" for where, (_, node) in classes.items() if total(node) > MAX_LINES]
    assert not long, "\n".join(long)


def test_no_base_class_declares_attributes_its_subclasses_set() -> None:
    classes = _classes()
    subclassed = {base for _, node in classes.values() for base in _base_names(node)}
    mixins = []
    for where, (name, node) in classes.items():
        declarative = set(_base_names(node)) & DECLARATIVE or any(
            (isinstance(d, ast.Name) and d.id == "dataclass") or (isinstance(d, ast.Call) and getattr(d.func, "id", "") == "dataclass")
            for d in node.decorator_list)
        bare = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and s.value is None
                and isinstance(s.target, ast.Name)]
        if name in subclassed and bare and not declarative:
            mixins.append(f"{where} declares {', '.join(bare)} for its subclasses")
    assert not mixins, "\n".join(mixins)
