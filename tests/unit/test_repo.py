"""Repository-level checks: collection metadata, generated docs up to date."""
from __future__ import annotations

import subprocess
import sys

import yaml


def test_galaxy_and_runtime(repo_root) -> None:
    galaxy = yaml.safe_load((repo_root / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"], galaxy["version"]) == ("llmops", "sglang", "0.1.0")
    assert galaxy["license"] == ["Apache-2.0"]
    for local in (".venv", ".run", "reports", ".cache"):
        assert local in galaxy["build_ignore"]
    runtime = yaml.safe_load((repo_root / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == ">=2.18.0"


def test_checkout_resolves_the_collection(repo_root) -> None:
    link = repo_root / "collections" / "ansible_collections" / "llmops" / "sglang"
    assert link.is_symlink() and link.resolve() == repo_root.resolve()


def test_role_readmes_are_generated_from_argument_specs(repo_root) -> None:
    res = subprocess.run([sys.executable, str(repo_root / "tools" / "gen_role_readme.py"), "--check"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


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
    filters = sorted(p.stem for p in (repo_root / "plugins" / "filter").glob("*.yml"))
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
    assert len(json.loads(res.stdout)) == len(filters)
