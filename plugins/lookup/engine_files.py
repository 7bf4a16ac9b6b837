# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Lookup ``llmops.sglang.engine_files``: the files the embedded engine needs on a host."""
from __future__ import annotations

DOCUMENTATION = r"""
name: engine_files
author:
  - llmops.sglang contributors (@llmops)
version_added: "0.1.0"
short_description: The files the embedded engine needs on a host, for one SGLang release
description:
  - Lists every file the embedded engine (C(sglang_engine=sim) of the server role) needs on a
    host to emulate the given SGLang release, each as its path on the controller and its path
    relative to the engine root (the folder that goes first on the engine's C(PYTHONPATH)).
  - "The files are: the engine package itself (every C(.py) file under
    C(plugins/module_utils/_engine), found by walking the package); the collection's module_utils
    it imports from outside the package; the data files it reads (the release's flag schema,
    C(releases.json), C(gpus.json), C(perfmodel.json)). The last two lists are declared once, in
    C(plugins/module_utils/_engine/__init__.py) (C(MODULE_UTILS), C(DATA_FILES))."
  - The collection root is found from this plugin's own location, so the lookup works in a
    checkout and in an installed collection alike.
  - Every destination is under C(ansible_collections/llmops/sglang/), so the engine imports
    the shipped files by their collection path, exactly as on the controller.
  - Fails when a listed file is missing, for instance the flag schema of a release this
    collection does not support.
options:
  _terms:
    description: The SGLang release(s) to emulate (C(sglang_version)); each adds its flag schema.
    type: list
    elements: str
    required: true
notes:
  - The server role copies the list with M(ansible.builtin.copy); see docs/DEVELOPING.md
    "How the engine ships".
seealso:
  - name: The embedded engine
    description: Its command line, environment, processes and HTTP surface.
    link: https://github.com/llmops/llmops.sglang/tree/main/docs/engine-api.md
"""

EXAMPLES = r"""
- name: Copy the embedded engine for SGLang 0.5.23 under /srv/sglang/engine
  ansible.builtin.copy:
    src: "{{ item.src }}"
    dest: "/srv/sglang/engine/{{ item.dest }}"
    mode: "0644"
  loop: "{{ query('llmops.sglang.engine_files', '0.5.23') }}"
  loop_control:
    label: "{{ item.dest }}"

- name: The folders those files need
  ansible.builtin.debug:
    msg: "{{ query('llmops.sglang.engine_files', sglang_version) | map(attribute='dest') | map('dirname') | unique }}"
"""

RETURN = r"""
_raw:
  description:
    - One entry per file; the package's files first (sorted), then the declared module_utils,
      then the data files, each file once.
  type: list
  elements: dict
  contains:
    src:
      description: Absolute path of the file on the controller.
      type: str
      sample: /home/me/.ansible/collections/ansible_collections/llmops/sglang/plugins/module_utils/_engine/cli.py
    dest:
      description: Path of the file relative to the engine root.
      type: str
      sample: ansible_collections/llmops/sglang/plugins/module_utils/_engine/cli.py
"""

from pathlib import Path, PurePosixPath
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.llmops.sglang.plugins.module_utils import _engine

COLLECTION_DIR = PurePosixPath("ansible_collections", "llmops", "sglang")
PACKAGE = PurePosixPath("plugins", "module_utils", "_engine")


def collection_root() -> Path:
    """The collection's root folder: two levels above plugins/lookup/."""
    return Path(__file__).resolve().parents[2]


def _package_files(root: Path) -> list[PurePosixPath]:
    """Every .py file of the engine package, relative to the collection root."""
    files = (p for p in (root / PACKAGE).rglob("*.py") if "__pycache__" not in p.parts)
    return sorted(PurePosixPath(p.relative_to(root).as_posix()) for p in files)


def _missing_message(root: Path, missing: list[PurePosixPath]) -> str:
    schemas = sorted(p.name for p in (root / "data" / "flag_schemas").glob("sglang-*.json"))
    return (f"llmops.sglang.engine_files: missing under {root}: {', '.join(map(str, missing))} "
            f"(flag schemas present: {', '.join(schemas) or 'none'})")


def engine_files(releases: list[str], root: Path | None = None) -> list[dict[str, str]]:
    """{src, dest} of every file the engine needs to emulate ``releases``."""
    root = collection_root() if root is None else root
    wanted = _package_files(root)
    wanted += [PurePosixPath("plugins", "module_utils", name) for name in _engine.MODULE_UTILS]
    for release in releases:
        wanted += [PurePosixPath("data", name) for name in _engine.data_files(release)]
    unique = list(dict.fromkeys(wanted))
    missing = [path for path in unique if not (root / path).is_file()]
    if missing:
        raise AnsibleLookupError(_missing_message(root, missing))
    return [{"src": str(root / path), "dest": str(COLLECTION_DIR / path)} for path in unique]


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, str]]:
        self.set_options(var_options=variables, direct=kwargs)
        releases = [str(term) for term in terms]
        if not releases:
            raise AnsibleLookupError("llmops.sglang.engine_files: give the SGLang release to emulate, "
                                     "e.g. query('llmops.sglang.engine_files', sglang_version)")
        return engine_files(releases)
