# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The file systems a host's paths live on (host_facts' ``storage_paths``): where each is mounted,
its type, its free and total bytes, whether it is on the network, in memory, or on a rotating
disk. What a disk-backed cache tier is sized from (docs/host_facts.md "File systems"), as the
host-RAM tier is sized from the memory facts."""
from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server.hostfacts import HostFactsError
from ansible_collections.llmops.sglang.plugins.module_utils._staging.disk import existing_ancestor

# File system types whose data lives on other machines: shared between hosts, and as fast as the
# network (a page cache tier there is shared, not local).
NETWORK_TYPES = frozenset((
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "glusterfs", "fuse.glusterfs", "ceph", "fuse.ceph-fuse",
    "beegfs", "gpfs", "9p", "afs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs", "fuse.rclone",
    "wekafs",
))
# File system types held in host memory: what is written there is taken from the RAM the host
# tier and the processes share.
MEMORY_TYPES = frozenset(("tmpfs", "ramfs", "hugetlbfs"))


@dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mountinfo."""

    device: str  # "major:minor"
    root: str
    mount_point: str
    fstype: str
    source: str


def _unescape(text: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 4 <= len(text) and text[i + 1:i + 4].isdigit():
            out.append(chr(int(text[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """/proc/self/mountinfo's mounts, in its order (a later mount over the same point hides the
    earlier one). Lines that do not parse are skipped."""
    mounts = []
    for line in text.splitlines():
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 5 or len(tail) < 2:
            continue
        mounts.append(Mount(device=fields[2], root=_unescape(fields[3]), mount_point=_unescape(fields[4]),
                            fstype=tail[0], source=_unescape(tail[1])))
    return mounts


def mount_of(path: str, mounts: Iterable[Mount]) -> Mount | None:
    """The mount that holds ``path`` (an absolute, resolved path): the longest mount point that is
    it or a parent of it, the last mounted where two share a point."""
    best: Mount | None = None
    for mount in mounts:
        point = mount.mount_point.rstrip("/") or "/"
        inside = path == point or point == "/" or path.startswith(point + "/")
        if inside and (best is None or len(point) >= len(best.mount_point.rstrip("/") or "/")):
            best = mount
    return best


def rotational(device: str, sys_root: str = "/sys") -> bool | None:
    """Whether the block device ``major:minor`` rotates (``queue/rotational`` of it, or of the disk
    a partition is on); None where it is no block device (network, memory, overlay: major 0) or
    the kernel does not say."""
    if device.startswith("0:"):
        return None
    base = Path(sys_root) / "dev" / "block" / device
    for queue in (base / "queue" / "rotational", base / ".." / "queue" / "rotational"):
        try:
            return queue.read_text().strip() == "1"
        except OSError:
            continue
    return None


@dataclass
class FileSystem:
    """The file system of one asked path (host_facts' ``filesystems``)."""

    path: str
    checked_at: str  # the path, or its nearest existing parent (the folder does not exist yet)
    mount_point: str | None
    fstype: str | None
    source: str | None
    total_bytes: int
    free_bytes: int  # what an unprivileged writer may still use (statvfs f_bavail)
    network: bool
    memory: bool
    rotational: bool | None
    used_bytes: int  # the bytes of the files under the path itself (0 where it does not exist yet)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def filesystem_facts(paths: Iterable[str], mountinfo_text: str, sys_root: str = "/sys") -> list[dict[str, Any]]:
    """The file system of each of ``paths`` (duplicates kept once, in the order given)."""
    mounts = parse_mountinfo(mountinfo_text)
    out = []
    for path in dict.fromkeys(str(p) for p in paths):
        checked = os.path.realpath(existing_ancestor(path))
        try:
            st = os.statvfs(checked)
        except OSError as exc:
            raise HostFactsError(f"storage_paths: cannot read the file system of {path} at {checked} ({exc}): give a "
                                 "folder this user can reach") from None
        mount = mount_of(checked, mounts)
        fstype = mount.fstype if mount else None
        out.append(FileSystem(
            path=path, checked_at=checked, mount_point=mount.mount_point if mount else None, fstype=fstype,
            source=mount.source if mount else None, total_bytes=st.f_blocks * st.f_frsize,
            free_bytes=st.f_bavail * st.f_frsize, network=fstype in NETWORK_TYPES, memory=fstype in MEMORY_TYPES,
            rotational=rotational(mount.device, sys_root) if mount and fstype not in NETWORK_TYPES | MEMORY_TYPES
            else None,
            used_bytes=tree_bytes(path),
        ).to_dict())
    return out


def tree_bytes(path: str) -> int:
    """The sizes of the regular files under ``path`` added up (links not followed; 0 where the
    path does not exist): what a disk-backed cache tier already holds there, room it may reuse."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:  # removed while walking (a cache evicting)
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def read_mountinfo_text(proc_root: str = "/proc") -> str:
    """/proc/self/mountinfo (under ``proc_root``); raises HostFactsError when it cannot be read."""
    try:
        return (Path(proc_root) / "self" / "mountinfo").read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise HostFactsError(f"cannot read {proc_root}/self/mountinfo ({exc}): the file systems of storage_paths "
                             "are read from it") from None
