# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What the embedded engine's root on a host should hold, and its digest (controller side).

The files are those of the ``llmops.sglang.engine_files`` lookup for the release, plus the
``sglang.launch_server`` shim of the server role (``roles/server/files/sglang``). The digest
covers every destination and every file's bytes: the stamp written beside the engine root after
a copy holds it, and a host whose stamp says the same is not copied to again.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ansible_collections.llmops.sglang.plugins.lookup.engine_files import collection_root, engine_files

SHIM = ("__init__.py", "launch_server.py")


def engine_bundle(release: str, engine_root: str) -> dict[str, Any]:
    """{files: [{src, dest}], shim: [{src, dest}], dirs, digest, stamp: {path, digest, shim}}."""
    files = engine_files([release])
    shim_dir = collection_root() / "roles" / "server" / "files" / "sglang"
    shim = [{"src": str(shim_dir / name), "dest": f"sglang/{name}"} for name in SHIM]
    digest = hashlib.sha256()
    for item in files + shim:
        digest.update(item["dest"].encode() + b"\0")
        digest.update(Path(item["src"]).read_bytes() + b"\0")
    dirs = sorted({str(Path(item["dest"]).parent) for item in files} | {"sglang"})
    value = digest.hexdigest()
    return {
        "files": files, "shim": shim, "dirs": dirs, "digest": value,
        "stamp": {"path": f"{engine_root}.files.sha256", "digest": value,
                  "shim": [f"{engine_root}/{item['dest']}" for item in shim]},
    }
