"""The file systems of a host's paths (module_utils/_server/filesystems.py, host_facts'
storage_paths): mountinfo parsed, the mount that holds a path, network / memory / rotating disk
told apart, free and total bytes from statvfs; and the module reporting them."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._server import filesystems as fs
from ansible_collections.llmops.sglang.plugins.module_utils._server.hostfacts import HostFactsError

from .test_hostfacts import bare_path, fake_host, run_module

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
30 27 259:5 / /data rw,noatime shared:7 - xfs /dev/nvme1n1 rw,attr2
31 27 8:17 / /archive rw - ext4 /dev/sdb1 rw
32 27 0:50 / /shared rw,relatime shared:9 - nfs4 10.0.0.2:/export rw,vers=4.2
33 24 0:23 / /dev/shm rw,nosuid - tmpfs tmpfs rw,size=24683664k
34 27 0:60 / /my\\040cache rw - ext4 /dev/sdc rw
35 30 0:61 / /data rw - tmpfs tmpfs rw
garbage line
"""


def test_mountinfo_is_parsed_with_its_escapes_and_optional_fields() -> None:
    mounts = fs.parse_mountinfo(MOUNTINFO)
    assert len(mounts) == 8  # the garbage line skipped
    assert mounts[1] == fs.Mount(device="259:2", root="/", mount_point="/", fstype="ext4", source="/dev/nvme0n1p2")
    assert mounts[4].fstype == "nfs4" and mounts[4].source == "10.0.0.2:/export"
    assert mounts[6].mount_point == "/my cache"


def test_the_mount_of_a_path_is_the_longest_point_and_the_last_mounted() -> None:
    mounts = fs.parse_mountinfo(MOUNTINFO)
    assert fs.mount_of("/data/sglang/hicache", mounts).fstype == "tmpfs"  # mounted over /data last
    assert fs.mount_of("/data2/x", mounts).mount_point == "/"  # /data is not a parent of /data2
    assert fs.mount_of("/shared", mounts).fstype == "nfs4"
    assert fs.mount_of("/my cache/pages", mounts).device == "0:60"
    assert fs.mount_of("/x", []) is None


def test_rotational_from_the_device_or_the_disk_of_its_partition(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    disk = sysfs / "devices" / "sdb"
    (disk / "queue").mkdir(parents=True)
    (disk / "queue" / "rotational").write_text("1\n")
    (disk / "sdb1").mkdir()
    nvme = sysfs / "devices" / "nvme1n1" / "queue"
    nvme.mkdir(parents=True)
    (nvme / "rotational").write_text("0\n")
    links = sysfs / "dev" / "block"
    links.mkdir(parents=True)
    (links / "8:17").symlink_to(disk / "sdb1")
    (links / "259:5").symlink_to(nvme.parent)
    assert fs.rotational("8:17", str(sysfs)) is True  # a partition: its disk's queue
    assert fs.rotational("259:5", str(sysfs)) is False
    assert fs.rotational("0:50", str(sysfs)) is None  # no block device (NFS, tmpfs, overlay)
    assert fs.rotational("9:9", str(sysfs)) is None  # the kernel does not say


def test_facts_of_paths_from_statvfs_and_the_mount(tmp_path: Path) -> None:
    real = tmp_path / "cache"
    real.mkdir()
    point = os.path.realpath(tmp_path)
    info = f"27 1 259:2 / / rw - ext4 /dev/root rw\n40 27 0:77 / {point} rw - nfs4 server:/export rw\n"
    wanted = str(real / "not-yet" / "pages")  # does not exist yet: looked up at its parent
    facts = fs.filesystem_facts([wanted, str(real), wanted], info, str(tmp_path / "nosys"))
    assert [f["path"] for f in facts] == [wanted, str(real)]  # each once, in the order given
    first = facts[0]
    st = os.statvfs(real)
    assert first["checked_at"] == os.path.realpath(real) and first["mount_point"] == point
    assert (first["fstype"], first["source"], first["network"], first["memory"], first["rotational"]) == \
        ("nfs4", "server:/export", True, False, None)
    assert first["total_bytes"] == st.f_blocks * st.f_frsize and 0 <= first["free_bytes"] <= first["total_bytes"]
    local = fs.filesystem_facts([str(real)], "27 1 259:2 / / rw - tmpfs tmpfs rw\n")[0]
    assert local["memory"] is True and local["network"] is False and local["rotational"] is None
    assert first["used_bytes"] == 0 and local["used_bytes"] == 0  # nothing there yet


def test_used_bytes_adds_up_the_files_under_the_path_not_what_links_point_to(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    (tier / "gpu0").mkdir(parents=True)
    (tier / "gpu0" / "a.bin").write_bytes(b"x" * 4096)
    (tier / "b.bin").write_bytes(b"y" * 100)
    outside = tmp_path / "big"
    outside.write_bytes(b"z" * 10000)
    (tier / "link").symlink_to(outside)
    (tier / "dirlink").symlink_to(tmp_path)
    assert fs.tree_bytes(str(tier)) == 4196
    assert fs.tree_bytes(str(tmp_path / "missing")) == 0
    (found,) = fs.filesystem_facts([str(tier)], "27 1 259:2 / / rw - ext4 /dev/root rw\n", str(tmp_path / "nosys"))
    assert found["used_bytes"] == 4196


def test_an_unreadable_mountinfo_is_named(tmp_path: Path) -> None:
    with pytest.raises(HostFactsError, match="cannot read .*/self/mountinfo"):
        fs.read_mountinfo_text(str(tmp_path))


def test_the_module_reports_the_file_systems_of_storage_paths(repo_root: Path, tmp_path: Path,
                                                              h200x2: dict[str, Any]) -> None:
    host = fake_host(tmp_path, h200x2)
    mountinfo = Path(host["proc_root"]) / "self" / "mountinfo"
    mountinfo.write_text(f"27 1 0:88 / / rw - xfs /dev/md0 rw\n41 27 0:89 / {os.path.realpath(tmp_path)} rw - "
                         "lustre 10.1.1.1@tcp:/scratch rw\n")
    args = {"declared_gpus": ["NVIDIA H200"], "storage_paths": [str(tmp_path / "hicache")], **host}
    status, result = run_module(repo_root, tmp_path, args, bare_path(tmp_path))
    assert status == "SUCCESS", result
    (found,) = result["ansible_facts"]["sglang_host"]["filesystems"]
    assert found["path"] == str(tmp_path / "hicache") and found["fstype"] == "lustre" and found["network"] is True
    assert found["total_bytes"] > 0
    without = run_module(repo_root, tmp_path, {"declared_gpus": ["NVIDIA H200"], **host}, bare_path(tmp_path))[1]
    assert "filesystems" not in without["ansible_facts"]["sglang_host"]
