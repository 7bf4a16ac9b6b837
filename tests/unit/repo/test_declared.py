"""Every option declared once (issue 29): the files derived from the declarations are current, and
each default of the table below is written in exactly one place in plugins/ and roles/ (files and
lines that tools/gen_declared.py writes aside).

The search reads defaults where they are written: ``default:`` in YAML documentation (role argument
specs, module DOCUMENTATION and doc fragments, filter docs), and in Python a keyword's default, a
class field's default, a ``"default":`` entry of an argument spec and a ``default=`` keyword.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.plugin_utils._roleoptions import same_default

ROOT = Path(__file__).resolve().parents[3]
GENERATED = {ROOT / "plugins" / "module_utils" / "_sweep" / "spec.py", *ROOT.glob("roles/*/defaults/main.yml")}
DERIVED_LINE = re.compile(r"#\s*derived: default of ")  # the next line is derived; so is a BEGIN/END derived block

# (what, the option's names in every layer, its default)
TABLE: list[tuple[str, set[str], Any]] = [
    ("base dir", {"base_dir", "sglang_base_dir", "BASE_DIR"}, "/opt/sglang"),
    ("HiCache fraction", {"fraction", "hicache_fraction", "sglang_hicache_fraction"}, 0.75),
    ("HiCache reserve", {"reserve_gib", "hicache_reserve_gib", "sglang_hicache_reserve_gib"}, 10),
    ("request timeout", {"timeout", "sglang_bench_timeout", "REQUEST_TIMEOUT"}, 900),
    ("server ready timeout", {"ready_timeout", "sglang_ready_timeout"}, 0),
    ("bench levels", {"concurrency", "sglang_bench_concurrency", "sglang_tune_concurrency_levels",
                      "DEFAULT_CONCURRENCY"}, [1, 4, 8, 16, 32, 48]),
]


def _yaml_defaults(text: str, where: str) -> Iterator[tuple[str, str, Any]]:
    """(where, option, default) for each ``default:`` of YAML text that no derived comment heads."""
    lines = text.splitlines()
    in_block = False
    for i, line in enumerate(lines):
        if re.match(r"^\s*# (BEGIN|END) derived", line):
            in_block = "BEGIN" in line
            continue
        m = re.match(r"^(\s*)default:\s*(.*)$", line)
        if not m or in_block or (i and DERIVED_LINE.search(lines[i - 1])):
            continue
        indent = len(m.group(1))
        name = next((re.match(r"^\s*([\w-]+):", lines[j]).group(1) for j in range(i - 1, -1, -1)
                     if re.match(r"^\s*[\w-]+:", lines[j]) and len(lines[j]) - len(lines[j].lstrip()) < indent), "")
        try:
            value = yaml.safe_load(m.group(2)) if m.group(2) else None
        except yaml.YAMLError:
            continue
        yield f"{where}:{i + 1}", name, value


def _python_defaults(path: Path) -> Iterator[tuple[str, str, Any]]:
    tree = ast.parse(path.read_text())
    where = str(path.relative_to(ROOT))

    def literal(node: ast.AST) -> Any:
        try:
            return ast.literal_eval(node)
        except ValueError:
            return None

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            positional = a.posonlyargs + a.args
            for arg, default in zip(positional[len(positional) - len(a.defaults):], a.defaults, strict=True):
                yield f"{where}:{default.lineno}", arg.arg, literal(default)
            for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
                if default is not None:
                    yield f"{where}:{default.lineno}", arg.arg, literal(default)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            yield f"{where}:{node.lineno}", node.target.id, literal(node.value)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            yield f"{where}:{node.lineno}", node.targets[0].id, literal(node.value)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Dict):
                    for k, v in zip(value.keys, value.values, strict=True):
                        if isinstance(k, ast.Constant) and k.value == "default":
                            yield f"{where}:{v.lineno}", str(key.value), literal(v)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            for kw in node.keywords:
                if kw.arg == "default":
                    yield f"{where}:{kw.value.lineno}", str(node.args[0].value), literal(kw.value)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "options:" in node.value:
            yield from _yaml_defaults(node.value, f"{where} (documentation, from line {node.lineno})")


def written_defaults() -> list[tuple[str, str, Any]]:
    """Every default written by hand in plugins/ and roles/: (where, option, value)."""
    out: list[tuple[str, str, Any]] = []
    for path in sorted(ROOT.glob("plugins/**/*.py")):
        if path not in GENERATED:
            out.extend(_python_defaults(path))
    for path in sorted([*ROOT.glob("roles/*/meta/argument_specs.yml"), *ROOT.glob("plugins/*/*.yml")]):
        out.extend(_yaml_defaults(path.read_text(), str(path.relative_to(ROOT))))
    for path in sorted(ROOT.glob("roles/*/tasks/*.yml")):
        for i, line in enumerate(path.read_text().splitlines()):
            for m in re.finditer(r"(\w+) \| default\(([^()]*)\)", line):
                out.append((f"{path.relative_to(ROOT)}:{i + 1}", m.group(1), yaml.safe_load(m.group(2) or "null")))
    return out


@pytest.mark.parametrize(("what", "names", "value"), TABLE, ids=[row[0] for row in TABLE])
def test_each_default_of_the_table_is_written_once(what: str, names: set[str], value: Any) -> None:
    places = [where for where, name, got in written_defaults() if name in names and same_default(got, value)]
    assert len(places) == 1, f"{what} ({value!r}) is written in {len(places)} places: {places}"


def test_the_yaml_search_finds_a_copy_and_skips_a_derived_line() -> None:
    spec = "options:\n  sglang_base_dir:\n    type: path\n    default: /opt/sglang\n"
    assert list(_yaml_defaults(spec, "x")) == [("x:4", "sglang_base_dir", "/opt/sglang")]
    derived = "options:\n  sglang_base_dir:\n    # derived: default of role server sglang_base_dir\n    default: /opt/sglang\n"
    assert list(_yaml_defaults(derived, "x")) == []
    block = ("options:\n  # BEGIN derived: the options of module m with a default, as sglang_bench_<option> (except x)\n"
             "  sglang_bench_timeout:\n    default: 900\n  # END derived\n  other:\n    default: 900\n")
    assert list(_yaml_defaults(block, "x")) == [("x:7", "other", 900)]
    assert not same_default(True, 1) and not same_default("10", 10) and same_default(900, 900.0) and same_default((1, 4), [1, 4])


def test_the_python_search_finds_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    path = ROOT / "plugins" / "x.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (
        "from dataclasses import dataclass\n\n@dataclass\nclass R:\n    base_dir: str = '/opt/sglang'\n\n"
        "def f(*, reserve_gib=10):\n    return c.number('hicache_fraction', default=0.75)\n"))
    found = {(name, repr(value)) for _, name, value in _python_defaults(path)}
    assert {("base_dir", "'/opt/sglang'"), ("reserve_gib", "10"), ("hicache_fraction", "0.75")} <= found


def test_derived_files_are_current() -> None:
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_declared.py"), "--check"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
