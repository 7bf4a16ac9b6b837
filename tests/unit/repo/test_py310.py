"""Host-side code parses as Python 3.10 (the list is tests/host_side_files.txt).

`make lint` runs vermin over the same files for 3.11+ library names (datetime.UTC,
asyncio.TaskGroup, typing.Self, tomllib, ...). This test covers the grammar, which
vermin on the venv's Python skips when a file does not parse there:
``ast.parse(..., feature_version=(3, 10))`` rejects ``except*`` and, on Python >= 3.12,
PEP 695 type parameters and ``type`` statements; on 3.11 it also rejects PEP 701
f-strings, which vermin flags on >= 3.12. Warnings are errors, as under ``python -W error``
(an invalid escape sequence is a SyntaxWarning from 3.12 on).
"""
from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LIST = ROOT / "tests" / "host_side_files.txt"
FLOOR = (3, 10)


def host_side_globs() -> list[str]:
    lines = (line.strip() for line in LIST.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def host_side_files() -> list[Path]:
    return sorted({path for pattern in host_side_globs() for path in ROOT.glob(pattern)})


def parse_as_floor(src: str, filename: str = "<src>") -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return ast.parse(src, filename=filename, feature_version=FLOOR)


def starred_subscripts(tree: ast.AST) -> list[int]:
    """Lines with ``x[*a]`` (PEP 646, 3.11+), which feature_version does not reject."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if any(isinstance(part, ast.Starred) for part in parts):
                lines.append(node.lineno)
    return lines


def test_the_list_covers_the_engine_the_sweep_and_every_module() -> None:
    globs = host_side_globs()
    assert globs
    for pattern in globs:
        assert list(ROOT.glob(pattern)), f"{pattern} in {LIST.name} matches nothing"
    names = {path.relative_to(ROOT).as_posix() for path in host_side_files()}
    utils = "plugins/module_utils/"
    for stem in ("_shared/flags", "_shared/paths", "_sweep/run", "_sweep/__init__", "_bench/stats", "_detached/__init__"):
        assert f"{utils}{stem}.py" in names
    every = {p.relative_to(ROOT).as_posix() for p in (ROOT / utils).rglob("*.py")}
    assert every <= names, f"add a glob for each to {LIST.name}: {sorted(every - names)}"
    engine = {p.relative_to(ROOT).as_posix() for p in (ROOT / utils / "_engine").rglob("*.py")}
    assert {f"{utils}_engine/cli.py", f"{utils}_engine/perfmodel/plan.py"} <= engine <= names
    assert {p.relative_to(ROOT).as_posix() for p in (ROOT / "plugins" / "modules").glob("*.py")} <= names


@pytest.mark.parametrize("path", host_side_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_host_side_file_parses_as_python_3_10(path: Path) -> None:
    tree = parse_as_floor(path.read_text(encoding="utf-8"), filename=str(path))
    assert starred_subscripts(tree) == [], f"{path}: x[*a] needs Python 3.11"


@pytest.mark.parametrize("src", [
    "try:\n    pass\nexcept* ValueError:\n    pass\n",
    'x = "\\d"\n',
])
def test_the_check_rejects_newer_syntax(src: str) -> None:
    with pytest.raises((SyntaxError, Warning)):
        parse_as_floor(src)


def test_the_check_finds_starred_subscripts() -> None:
    assert starred_subscripts(parse_as_floor("a = b[*c]\nd = e[f, *g]\nh = i[j]\n")) == [1, 2]
