"""No coverage lost silently (issue 27): every test that docs/RELIABILITY.md (the fault suite)
and docs/DEVELOPING.md (the mapping of behaviours to tests) name by its function name exists, so
a test that is moved or merged has to take its row along."""
from __future__ import annotations

import ast
import re

import pytest

from ...conftest import ROOT

NAMED = re.compile(r"`(test_[a-z0-9_]+)")


def _test_functions() -> set[str]:
    """Every test function's name, and every test file's (a row may name the file)."""
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names.add(path.stem)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                names.add(node.name)
    return names


@pytest.mark.parametrize("doc", ["RELIABILITY.md", "DEVELOPING.md"])
def test_every_test_a_document_names_exists(doc: str) -> None:
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    named = set(NAMED.findall(text))
    assert named, f"docs/{doc} names no test"
    known = _test_functions()
    # a long name may be cut short in a table (`test_tune_on_seed_...`): a prefix of one is named
    missing = sorted(name for name in named if name not in known and not any(k.startswith(name) for k in known))
    assert not missing, f"docs/{doc} names tests that do not exist (moved or merged? update the row): {missing}"
