"""meta/execution-environment.yml and meta/ee-definition.yml: ansible-builder (pinned in
requirements.txt) makes a build context from the definition without edits, and its
introspection of the collection lists the Python and system requirements."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
BUILDER = Path(sys.executable).parent / "ansible-builder"
PYTHON = {"aiohttp==3.14.5", "huggingface_hub==2.4.0"}
SYSTEM = {"rsync [platform:rpm platform:dpkg]", "openssh-clients [platform:rpm]", "openssh-client [platform:dpkg]"}


def _lines(path: Path) -> set[str]:
    return {line.split("#")[0].strip() for line in path.read_text().splitlines() if line.split("#")[0].strip()}


def test_the_pins_match_the_toolchain_and_the_role():
    pins = _lines(ROOT / "meta" / "ee-requirements.txt")
    assert PYTHON <= pins
    assert "huggingface_hub==2.4.0" in _lines(ROOT / "requirements.txt")
    defaults = yaml.safe_load((ROOT / "roles" / "model" / "defaults" / "main.yml").read_text())
    assert f"huggingface_hub=={defaults['sglang_hf_hub_version']}" in pins


def test_ansible_builder_create_makes_the_build_context(tmp_path):
    proc = subprocess.run([str(BUILDER), "create", "-f", str(ROOT / "meta" / "ee-definition.yml"),
                           "--context", str(tmp_path / "ctx")], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    build = tmp_path / "ctx" / "_build"
    assert PYTHON <= _lines(build / "requirements.txt")
    assert SYSTEM <= _lines(build / "bindep.txt")
    assert yaml.safe_load((build / "requirements.yml").read_text())["collections"][0]["name"] == "llmops.sglang"
    recipe = next(p for p in (tmp_path / "ctx").iterdir() if p.name in ("Containerfile", "Dockerfile")).read_text()
    assert "ansible-core==2.19.14" in recipe


def test_ansible_builder_introspection_of_the_collection_lists_them():
    proc = subprocess.run([str(BUILDER), "introspect", str(ROOT / "collections")], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = yaml.safe_load(proc.stdout.split("\n", 1)[1])
    assert PYTHON <= {line.split("#")[0].strip() for line in doc["python"]}
    assert SYSTEM <= {line.split("#")[0].strip() for line in doc["system"]}
