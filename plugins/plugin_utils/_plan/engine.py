# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What the embedded engine's root on a host should hold, and its digest (controller side).

The files are those of the ``llmops.sglang.engine_files`` lookup for the release, plus the
``sglang.launch_server`` shim of the server role (``roles/server/files/sglang``). The digest
covers every destination and every file's bytes: the stamp written beside the engine root after
a copy holds it, and a host whose stamp says the same is not copied to again.

The files travel as one archive (``engine_archive``: one transfer and one unpack on the host, not
one ``copy`` per file, which took most of a first deploy's time: 30 s locally, 85 to 137 s per
host over SSH), built on the controller once per digest and run.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import tempfile
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


def engine_archive(bundle: dict[str, Any], cache_dir: str) -> dict[str, Any]:
    """The bundle as the plan carries it: ``{archive, digest, stamp, files}`` (``files``: how many).

    ``archive`` is ``<cache_dir>/llmops-sglang-engine-<digest>.tar.gz``, written when absent
    (atomically: the hosts of a run plan in parallel). Its members are the bundle's files and
    shim under their destinations, with their folders (0755), files 0644, owner root, mtime 0:
    the same digest gives the same bytes.
    """
    path = Path(cache_dir) / f"llmops-sglang-engine-{bundle['digest']}.tar.gz"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".engine-", dir=str(path.parent))
        try:
            with os.fdopen(fd, "wb") as raw:
                raw.write(_tar_gz(bundle))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return {"archive": str(path), "digest": bundle["digest"], "stamp": bundle["stamp"],
            "files": len(bundle["files"]) + len(bundle["shim"])}


def _member(name: str, *, size: int = 0, directory: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode = 0o755 if directory else 0o644
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _tar_gz(bundle: dict[str, Any]) -> bytes:
    folders = {str(parent) for folder in bundle["dirs"] for parent in (Path(folder), *Path(folder).parents)}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for folder in sorted(folders - {"", "."}):
            tar.addfile(_member(folder, directory=True))
        for item in sorted(bundle["files"] + bundle["shim"], key=lambda i: i["dest"]):
            data = Path(item["src"]).read_bytes()
            tar.addfile(_member(item["dest"], size=len(data)), io.BytesIO(data))
    # mtime 0 in the gzip header too: the same files give the same archive
    return gzip.compress(buf.getvalue(), compresslevel=6, mtime=0)
