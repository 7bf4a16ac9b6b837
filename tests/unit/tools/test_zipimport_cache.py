"""tools/zipimport_cache.py: the test venvs' bytecode cache for modules imported out of zips
(AnsiballZ payloads). The code it gives is compile's of the same source, under the path the run
imports from; a changed source is compiled again; it can be turned off."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from ...conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import zipimport_cache  # noqa: E402

SOURCE = "def outer():\n    def inner():\n        raise ValueError('from inner')\n    return inner\nVALUE = 42\n"


def _counting():
    calls: list[str] = []

    def compile_source(pathname, source):
        calls.append(pathname)
        return compile(source, pathname, "exec", dont_inherit=True)

    return compile_source, calls


def _names(code) -> set[str]:
    names = {code.co_filename}
    for const in code.co_consts:
        if isinstance(const, type(code)):
            names |= _names(const)
    return names


def test_a_later_process_loads_the_code_under_its_own_path_and_a_changed_source_compiles_again(tmp_path: Path) -> None:
    folder = str(tmp_path / "cache")
    first_compile, first_calls = _counting()
    first = zipimport_cache.cached_compiler(first_compile, folder)
    path_a = f"/tmp/ansible_a_payload_1/ansible_a_payload.zip{os.sep}pkg{os.sep}mod.py"
    code_a = first(path_a, SOURCE)
    assert first(path_a, SOURCE) is code_a and first_calls == [path_a]  # asked twice: compiled once
    assert len(os.listdir(folder)) == 1

    # a later module run: another payload folder, the same source
    later_compile, later_calls = _counting()
    later = zipimport_cache.cached_compiler(later_compile, folder)
    path_b = f"/tmp/ansible_b_payload_2/ansible_b_payload.zip{os.sep}pkg{os.sep}mod.py"
    code_b = later(path_b, SOURCE.encode())
    assert later_calls == [] and _names(code_b) == {path_b}  # every nested code object too
    namespace: dict = {}
    exec(code_b, namespace)  # noqa: S102 - the code under test
    assert namespace["VALUE"] == 42 and namespace["outer"]().__code__.co_filename == path_b
    assert code_b.co_code == compile(SOURCE, path_b, "exec", dont_inherit=True).co_code

    changed = SOURCE.replace("42", "43")
    namespace = {}
    exec(later(path_b, changed), namespace)  # noqa: S102
    assert later_calls == [path_b] and namespace["VALUE"] == 43 and len(os.listdir(folder)) == 2


def test_through_zipimport_in_a_fresh_interpreter_tracebacks_name_the_zip_it_ran(tmp_path: Path) -> None:
    script = (
        "import sys, zipimport_cache\n"
        "assert zipimport_cache.install(sys.argv[1])\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "import mod\n"
        "print(mod.VALUE)\n"
        "mod.outer()()\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))  # -S: not the venv's own hook (its .pth)
    env.pop("LLMOPS_ZIPIMPORT_CACHE", None)
    runs = []
    for name in ("one", "two"):
        archive = tmp_path / name / "payload.zip"
        archive.parent.mkdir()
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("mod.py", SOURCE)
        runs.append(subprocess.run([sys.executable, "-S", "-c", script, str(tmp_path / "cache"), str(archive)],
                                   capture_output=True, text=True, timeout=60, env=env, check=False))
        assert runs[-1].stdout == "42\n" and "ValueError: from inner" in runs[-1].stderr
        assert f'File "{archive}{os.sep}mod.py", line 3, in inner' in runs[-1].stderr
    assert len(os.listdir(tmp_path / "cache")) == 1  # the second run compiled nothing


def test_turned_off_by_its_variable(monkeypatch) -> None:
    import zipimport

    monkeypatch.setenv("LLMOPS_ZIPIMPORT_CACHE", "0")
    before = zipimport._compile_source
    assert zipimport_cache.install("/nonexistent") is False and zipimport._compile_source is before
