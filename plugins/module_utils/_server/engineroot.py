# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The embedded engine's root on a host: whether it holds the plan's files, and their unpacking
(module llmops.sglang.server_files, option ``engine_archive``).

The plan builds the engine's files as one gzip tar on the controller (plugin_utils/_plan/engine.py:
folders 0755, files 0644, the same bytes for the same digest); the action ``server_files`` sends
its bytes with the module's arguments, and the module unpacks them here, then writes the stamp
beside the root (``<root>.files.sha256``, the digest), only where the stamp does not say the root
holds that digest already. One module run on a first deploy instead of three (a folder, an
``unarchive`` with its transfer, the stamp's ``copy``): issue 27.

Only folders and regular files, under relative names without ``..``, are taken from the archive:
anything else in it is refused before a file is written. Stdlib only; runs on the host (Python
>= 3.10).
"""
from __future__ import annotations

import base64
import binascii
import io
import os
import posixpath
import tarfile
from collections.abc import Mapping
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server.files import atomic_write


def stamp_matches(path: str, digest: str) -> bool:
    """Whether the engine root's stamp file holds ``digest`` (the files unpacked last time)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() == digest
    except OSError:
        return False


def engine_current(stamp: Mapping[str, Any]) -> bool:
    """The stamp says ``stamp['digest']`` and the shim's files are there."""
    return stamp_matches(str(stamp["path"]), str(stamp["digest"])) and all(
        os.path.isfile(str(p)) for p in stamp.get("shim") or [])


def _members(data: bytes) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    """The archive's folders and files (name checked, file bytes read), before anything is written."""
    out: list[tuple[tarfile.TarInfo, bytes | None]] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = posixpath.normpath(member.name)
            if name.startswith("/") or name == ".." or name.startswith("../"):
                raise ValueError(f"engine archive: member {member.name!r} is not under the engine root")
            if member.isdir():
                out.append((member, None))
            elif member.isfile():
                handle = tar.extractfile(member)
                out.append((member, handle.read() if handle else b""))
            else:
                raise ValueError(f"engine archive: member {member.name!r} is neither a folder nor a file")
    return out


def _same(path: str, body: bytes, mode: int) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read() == body and (os.stat(path).st_mode & 0o777) == mode
    except OSError:
        return False


def unpack_engine(content: str, root: str, stamp: Mapping[str, Any], check: bool) -> tuple[list[str], bool]:
    """Unpack the archive (``content``: its bytes in base64) into ``root`` and write the stamp,
    where the root does not hold ``stamp['digest']`` already. Returns the engine's files that
    changed (written, or that would be in check mode: only a file whose bytes or mode differ is
    written, as ``unarchive`` did) and whether the stamp was (or would be) written. The stamp is
    written last: an unpack cut short leaves a root that is unpacked again by the next run."""
    if engine_current(stamp):
        return [], False
    try:
        data = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"engine archive: not base64 ({exc})") from None
    try:
        members = _members(data)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ValueError(f"engine archive: not a gzip tar ({exc})") from None
    changed: list[str] = []
    if not check:
        os.makedirs(root, mode=0o755, exist_ok=True)
    for member, body in members:
        target = os.path.join(root, posixpath.normpath(member.name))
        if body is None:
            if not os.path.isdir(target):
                changed.append(target)
                if not check:
                    os.makedirs(target, mode=0o755, exist_ok=True)
            continue
        mode = member.mode & 0o777 or 0o644
        if _same(target, body, mode):
            continue
        changed.append(target)
        if not check:
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            atomic_write(target, body, mode)
    if not check:
        atomic_write(str(stamp["path"]), (str(stamp["digest"]) + "\n").encode(), 0o644)
    return changed, True
