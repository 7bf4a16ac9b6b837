"""Repository-level checks: collection metadata, generated docs up to date, a checkout that stands
alone."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml


def test_galaxy_and_runtime(repo_root) -> None:
    galaxy = yaml.safe_load((repo_root / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"], galaxy["version"]) == ("llmops", "sglang", "0.1.0")
    assert galaxy["license"] == ["Apache-2.0"]
    for local in (".venv", ".run", "reports", ".cache"):
        assert local in galaxy["build_ignore"]
    # the license the file headers cite ("Apache-2.0 (see LICENSE)") ships with the collection
    license_text = (repo_root / "LICENSE").read_text()
    assert license_text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in license_text
    assert not {"LICENSE", "tests", "tests/fixtures"} & set(galaxy["build_ignore"])
    runtime = yaml.safe_load((repo_root / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == ">=2.18.0"


def test_checkout_resolves_the_collection(repo_root) -> None:
    link = repo_root / "collections" / "ansible_collections" / "llmops" / "sglang"
    assert link.is_symlink() and link.resolve() == repo_root.resolve()


def test_every_template_carries_ansible_managed(repo_root) -> None:
    for tmpl in repo_root.glob("roles/*/templates/*.j2"):
        assert "{{ ansible_managed | comment }}" in tmpl.read_text(), tmpl


def test_changelog_fragments_are_valid(repo_root) -> None:
    sections = {s[0] for s in yaml.safe_load((repo_root / "changelogs" / "config.yaml").read_text())["sections"]}
    frags = list((repo_root / "changelogs" / "fragments").glob("*.yml"))
    assert frags
    for frag in frags:
        data = yaml.safe_load(frag.read_text())
        assert set(data) <= sections | {"trivial"}, frag
        assert all(isinstance(v, list) and v for v in data.values()), frag


def test_every_plugin_documents_itself(repo_root) -> None:
    import os

    env = dict(os.environ, ANSIBLE_CONFIG=str(repo_root / "ansible.cfg"))
    bindir = os.path.dirname(sys.executable)
    modules = sorted(p.stem for p in (repo_root / "plugins" / "modules").glob("*.py"))
    # every filter the collection's FilterModules offer, not only those that happen to have docs
    import importlib

    filters = []
    for path in sorted((repo_root / "plugins" / "filter").glob("*.py")):
        module = importlib.import_module(f"ansible_collections.llmops.sglang.plugins.filter.{path.stem}")
        filters.extend(module.FilterModule().filters())
    filters.sort()
    assert sorted(p.stem for p in (repo_root / "plugins" / "filter").glob("*.yml")) == filters
    res = subprocess.run([os.path.join(bindir, "ansible-doc"), "--json", *[f"llmops.sglang.{m}" for m in modules]],
                         cwd=repo_root, env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    import json

    docs = json.loads(res.stdout)
    assert sorted(docs) == [f"llmops.sglang.{m}" for m in modules]
    for name, doc in docs.items():
        assert doc["doc"]["short_description"] and doc["return"] and doc["examples"], name
    res = subprocess.run([os.path.join(bindir, "ansible-doc"), "-t", "filter", "--json",
                          *[f"llmops.sglang.{f}" for f in filters]],
                         cwd=repo_root, env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    filter_docs = json.loads(res.stdout)
    assert sorted(filter_docs) == [f"llmops.sglang.{f}" for f in filters]
    for name, doc in filter_docs.items():
        assert doc["doc"]["short_description"] and doc["doc"]["description"] and doc["examples"], name
    lookups = sorted(p.stem for p in (repo_root / "plugins" / "lookup").glob("*.py"))
    res = subprocess.run([os.path.join(bindir, "ansible-doc"), "-t", "lookup", "--json",
                          *[f"llmops.sglang.{name}" for name in lookups]],
                         cwd=repo_root, env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    lookup_docs = json.loads(res.stdout)
    assert sorted(lookup_docs) == [f"llmops.sglang.{name}" for name in lookups]
    for name, doc in lookup_docs.items():
        assert doc["doc"]["short_description"] and doc["doc"]["description"] and doc["examples"], name
        assert doc["return"], name


# The checkout stands alone: no test, CI step or shipped file reads the shared folder that sits
# beside the maintainers' checkouts (a clone from GitHub has none), neither by its path nor by a
# path joined in code (the parent folder joined with that name). The patterns are written so
# that this file does not match itself.
_OUTSIDE = re.compile("|".join((re.escape("../" + "shared"), "SHARED" + "_DIR", re.escape("/work/" + "shared"),
                                r"""/\s*["']shared["']""")))
_SCANNED = ("tests", "Makefile", ".ci", "plugins", "roles", "playbooks", "molecule")
_SKIPPED_DIRS = {"__pycache__", ".pytest_cache"}


def references_outside_the_repo(root: Path) -> list[str]:
    """`path:line: text` for each line under _SCANNED that names the shared folder."""
    recordings = root / "tests" / "fixtures"  # byte-for-byte copies of recordings: data
    found = []
    for top in _SCANNED:
        base = root / top
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in files:
            if recordings in path.parents or _SKIPPED_DIRS & set(path.relative_to(root).parts):
                continue
            text = path.read_bytes().decode("utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), 1):
                if _OUTSIDE.search(line):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_nothing_reads_the_shared_folder_beside_the_checkout(repo_root: Path) -> None:
    assert (repo_root / "tests" / "fixtures" / "README.md").is_file()
    for top in _SCANNED:
        assert (repo_root / top).exists(), top  # a renamed folder must not pass unscanned
    found = references_outside_the_repo(repo_root)
    assert not found, "\n".join(found)


def _make_target(makefile: str, target: str) -> str:
    """A Makefile target's recipe (its tab-indented lines)."""
    match = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.M)
    assert match, target
    return match.group(1)


def test_the_readmes_two_commands_say_what_they_run_and_how_long_they_took(repo_root) -> None:
    """Issue 28 items 6 and 13: the README said `make test` takes under 20 minutes (measured
    runs took 28-31) and `make demo` deploys and shows the status (it also sweeps). Each
    command's comment names every step its Makefile target runs, and the time in the comment
    is the measured one the README gives with its date."""
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    makefile = (repo_root / "Makefile").read_text(encoding="utf-8")
    demo_line = re.search(r"^\s+make demo\s+# (.*)$", readme, re.M)
    test_line = re.search(r"^\s+make test\s+# (.*)$", readme, re.M)
    assert demo_line and test_line
    words = {"deploy.yml": "deploy", "status.yml": "status", "bench.yml": "sweep", "generate.yml": "generation job"}
    for playbook in re.findall(r"playbooks/(\w+\.yml)", _make_target(makefile, "demo")):
        assert words[playbook] in demo_line.group(1), (playbook, demo_line.group(1))
    stages = {"lint": "lint", "unit": "unit tests", "integration": "integration tests", "molecule": "molecule",
              "build": "collection build", "sanity": "sanity", "unit-newcore": "newest ansible-core",
              "integration-newcore": "newest ansible-core", "sanity-newcore": "newest ansible-core"}
    recipe = _make_target(makefile, "test")
    for target, said in stages.items():
        assert re.search(rf"\b{re.escape(target)}\b", recipe), target
        assert said in test_line.group(1), (target, test_line.group(1))
    claimed = re.search(r"\((\d+) min\)$", test_line.group(1))
    measured = re.search(r"`make test` took (\d+) min (\d+) s from a fresh clone", readme)
    assert claimed and measured, "the make test line gives its time, and the README the run it comes from"
    assert int(claimed.group(1)) == round(int(measured.group(1)) + int(measured.group(2)) / 60)
