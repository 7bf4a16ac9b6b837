"""The storage tier's sizing from disk facts (_plan/storage.py, issue 30)."""
from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._server.manifest import running_storage
from ansible_collections.llmops.sglang.plugins.module_utils._shared.releases import release_traits
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import GB, GIB, PlanError
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.storage import (
    StorageInstance,
    StorageRequest,
    lent_bytes,
    storage_plan,
    storage_request,
)

ROOT = "/data/sglang/hicache"
TWO = [StorageInstance("gpu0", 1), StorageInstance("gpu1", 1)]


def _fs(free: int, used: int = 0, **over: Any) -> dict[str, Any]:
    return {"path": ROOT, "checked_at": "/data", "mount_point": "/data", "fstype": "xfs", "source": "/dev/nvme1n1",
            "total_bytes": 4000 * GB, "free_bytes": free, "used_bytes": used, "network": False, "memory": False,
            "rotational": False, **over}


def _request(**over: Any) -> StorageRequest:
    return StorageRequest(**{"backend": "file", "root": ROOT, "size_gb": 0, "fraction": 0.5, "reserve_gib": 50,
                             **over})


def _plan(request: StorageRequest, fs: dict[str, Any], instances=TWO, release: str = "0.5.17", mla: bool = False,
          pending: int = 0, running: dict[str, Any] | None = None) -> dict[str, Any]:
    return storage_plan(request, instances=instances, filesystems=[fs], release=release,
                        traits=release_traits(release), mla=mla, pending_bytes=pending, running=running)


def test_a_local_disk_gives_each_instance_half_of_what_is_usable_after_the_reserve() -> None:
    plan = _plan(_request(), _fs(free=1050 * GIB))
    usable = 1050 * GIB - 50 * GIB
    each = int(usable * 0.5) // 2
    assert plan["usable_bytes"] == usable and plan["reserve_bytes"] == 50 * GIB
    gpu0 = plan["instances"]["gpu0"]
    assert gpu0["dir"] == f"{ROOT}/gpu0" and gpu0["cap_bytes"] == each and gpu0["owners"] == 1
    assert gpu0["env"] == {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": f"{ROOT}/gpu0",
                           "SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE": str(each),
                           "SGLANG_HICACHE_FILE_BACKEND_MIN_FREE_SPACE": str(50 * GIB)}
    assert plan["flags"] == ["--hicache-storage-backend", "file"] and plan["warnings"] == []
    assert plan["cap_bytes_total"] == 2 * each <= usable
    assert any("reserve 50 GiB" in line for line in plan["reasoning"])


def test_what_the_tier_holds_already_counts_as_room_so_a_rerun_keeps_the_same_cap() -> None:
    """The tier's own pages took free space: a second plan with them in used_bytes is the same."""
    first = _plan(_request(), _fs(free=1050 * GIB))
    written = 300 * GIB
    again = _plan(_request(), _fs(free=1050 * GIB - written, used=written))
    assert again["instances"] == first["instances"]


def test_staging_still_to_come_on_the_same_file_system_comes_first() -> None:
    plain = _plan(_request(), _fs(free=1050 * GIB))
    staged = _plan(_request(), _fs(free=1050 * GIB), pending=200 * GIB)
    assert staged["usable_bytes"] == plain["usable_bytes"] - 200 * GIB
    assert staged["instances"]["gpu0"]["cap_bytes"] < plain["instances"]["gpu0"]["cap_bytes"]


def test_each_tp_rank_is_capped_on_its_own_and_an_mla_model_by_rank_0_alone() -> None:
    four = [StorageInstance("gpu0-3", 4)]
    plan = _plan(_request(), _fs(free=450 * GIB), instances=four)
    group = plan["instances"]["gpu0-3"]
    assert group["owners"] == 4 and group["rank_cap_bytes"] * 4 == group["cap_bytes"]
    assert group["env"]["SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"] == str(group["rank_cap_bytes"])
    mla = _plan(_request(), _fs(free=450 * GIB), instances=four, mla=True)["instances"]["gpu0-3"]
    assert mla["owners"] == 1 and mla["rank_cap_bytes"] == mla["cap_bytes"] == int(400 * GIB * 0.5)


def test_an_explicit_size_that_fits_is_kept_and_one_that_does_not_is_refused_with_the_largest() -> None:
    plan = _plan(_request(size_gb=100), _fs(free=1050 * GIB))
    assert plan["instances"]["gpu1"]["cap_bytes"] == 100 * GB
    with pytest.raises(PlanError, match=r"size_gb=600 does not fit .*2 instance\(s\) x 600.00 GB.*largest that fits "
                                        r"is 536 GB"):
        _plan(_request(size_gb=600), _fs(free=1050 * GIB))


def test_a_network_file_system_and_a_spinning_disk_are_warned_about() -> None:
    nfs = _plan(_request(), _fs(free=1050 * GIB, fstype="nfs4", network=True, rotational=None))
    assert "network file system (nfs4)" in nfs["warnings"][0]
    hdd = _plan(_request(), _fs(free=1050 * GIB, rotational=True))
    assert "spinning disk (/dev/nvme1n1)" in hdd["warnings"][0]


@pytest.mark.parametrize(("fs", "request_over", "release", "message"), [
    (_fs(free=1050 * GIB, fstype="tmpfs", memory=True), {}, "0.5.17", "is on tmpfs, which is host memory"),
    (_fs(free=51 * GIB), {}, "0.5.17", r"leaves 0.\d+ GB per instance .* under the 1.00 GB a tier needs: free space"),
    (_fs(free=1050 * GIB), {}, "0.5.10", "release 0.5.10: its file backend has no size cap .* pin sglang_release "
                                         "0.5.17 or later"),
    (_fs(free=1050 * GIB), {"backend": "mooncake", "root": ""}, "0.5.10", "backend='mooncake': release 0.5.10 has "
                                                                          "no storage backend of that name .*known: file"),
    (_fs(free=1050 * GIB), {"fraction": 1.5}, "0.5.17", r"fraction=1.5: must be in \(0, 1\]"),
    (_fs(free=1050 * GIB), {"root": "relative/dir"}, "0.5.17", "must be an absolute folder"),
    (dict(_fs(free=1050 * GIB), path="/elsewhere"), {}, "0.5.17", "no file system facts for the storage tier's "
                                                                  "folder .* storage_paths including"),
])
def test_refusals_name_the_value_the_rule_and_the_fix(
        fs: dict[str, Any], request_over: dict[str, Any], release: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        _plan(_request(**request_over), fs, release=release)


def test_policies_become_the_release_flags_when_given() -> None:
    plan = _plan(_request(prefetch_policy="wait_complete"), _fs(free=1050 * GIB))
    assert plan["flags"] == ["--hicache-storage-backend", "file", "--hicache-storage-prefetch-policy", "wait_complete"]


def test_the_running_instances_size_is_kept_while_it_fits_so_moving_free_space_restarts_nothing() -> None:
    first = _plan(_request(), _fs(free=1050 * GIB))
    manifest = {"hicache_storage": first}
    running = running_storage(manifest, ["gpu0", "gpu1"])
    assert running == {"root": ROOT, "caps": {name: item["cap_bytes"] for name, item in first["instances"].items()}}
    # 40 GB of logs later: the fraction would give less, the kept size still fits the usable space
    later = _plan(_request(), _fs(free=1010 * GIB), running=running)
    assert later["instances"] == first["instances"] and "kept" in later["reasoning"][2]
    # the disk filled up: the kept size no longer fits, sized again
    full = _plan(_request(), _fs(free=500 * GIB), running=running)
    assert full["instances"]["gpu0"]["cap_bytes"] < first["instances"]["gpu0"]["cap_bytes"]
    # not running, another folder, or an explicit size: not kept
    assert running_storage(manifest, []) is None
    moved = _plan(_request(root="/other"), dict(_fs(free=1010 * GIB), path="/other"), running=running)
    assert moved["instances"]["gpu0"]["cap_bytes"] != first["instances"]["gpu0"]["cap_bytes"]
    assert _plan(_request(size_gb=10), _fs(free=1010 * GIB), running=running)["instances"]["gpu0"]["cap_bytes"] == 10 * GB


def test_the_users_dict_is_checked_key_by_key_and_empty_means_no_tier() -> None:
    assert storage_request({}, "/opt/sglang") is None and storage_request(None, "/opt/sglang") is None
    assert storage_request({"size_gb": 10}, "/opt/sglang") is None  # no backend: no tier
    req = storage_request({"backend": "file"}, "/opt/sglang/")
    assert req == StorageRequest(backend="file", root="/opt/sglang/hicache-storage", size_gb=0, fraction=0.5,
                                 reserve_gib=50)
    given = storage_request({"backend": "file", "path": "/nvme/kv", "size_gb": "200", "fraction": 0.3,
                             "prefetch_policy": "wait_complete"}, "/opt/sglang")
    assert (given.root, given.size_gb, given.fraction, given.prefetch_policy) == ("/nvme/kv", 200.0, 0.3,
                                                                                  "wait_complete")
    for bad, message in (({"backend": "file", "size": 1}, r"unknown key\(s\) size; the keys are backend, path"),
                         ({"backend": "nixl"}, "backend='nixl': this collection renders file"),
                         ({"backend": "file", "fraction": "half"}, r"fraction='half': must be a number \(default 0.5\)"),
                         ({"backend": "file", "path": 7}, "path=7: must be a string"),
                         (["file"], "must be a dict .* or {} for no storage tier")):
        with pytest.raises(PlanError, match=message):
            storage_request(bad, "/opt/sglang")


# -- mooncake: host RAM lent to a store shared through its master --------------------------------
def test_mooncake_lends_each_instances_segment_to_a_master_this_host_runs() -> None:
    request = storage_request({"backend": "mooncake", "segment_gib": 8}, "/opt/sglang")
    assert request is not None and request.root == "" and request.lent_bytes_per_instance == 8 * GIB
    tp2 = [StorageInstance("gpu0", 2), StorageInstance("gpu2", 2)]
    plan = storage_plan(request, instances=tp2, filesystems=[], release="0.5.17", traits=release_traits("0.5.17"),
                        mla=False, host_address="10.0.0.7")
    assert plan["master"] == {"address": "10.0.0.7:50051", "local": True, "host": "10.0.0.7", "port": 50051,
                              "metrics_port": 9003, "bind": "10.0.0.7"}
    gpu0 = plan["instances"]["gpu0"]
    assert gpu0["extra_config"] == {
        "master_server_address": "10.0.0.7:50051", "local_hostname": "10.0.0.7", "protocol": "tcp",
        "device_name": "", "global_segment_size": 8 * GIB, "metadata_server": "P2PHANDSHAKE",
        "master_metrics_port": 9003}
    # the release splits the segment over the TP ranks, each rank adds its 16 MiB transfer buffer
    assert gpu0["rank_segment_bytes"] == 4 * GIB and gpu0["lent_bytes"] == 8 * GIB + 2 * 16 * 2**20
    assert plan["lent_bytes_total"] == 2 * gpu0["lent_bytes"] == lent_bytes(request, release_traits("0.5.17"), 2, 2)
    assert plan["flags"] == ["--hicache-storage-backend", "mooncake"] and plan["package"].startswith(
        "mooncake-transfer-engine-cuda13==")
    assert gpu0["env"] == {} and "dir" not in gpu0  # no folder, no file-backend variables
    assert any("taken out of the host tier's memory budget" in line for line in plan["reasoning"])
    # the file tier lends no RAM; no tier, nothing
    assert lent_bytes(storage_request({"backend": "file"}, "/o"), release_traits("0.5.17"), 2, 2) == 0 == \
        lent_bytes(None, release_traits("0.5.17"), 2, 2)


def test_mooncake_with_another_hosts_master_and_extra_config_keys() -> None:
    request = storage_request({"backend": "mooncake", "master": "10.0.0.5:50051", "protocol": "rdma",
                               "device_name": "mlx5_0", "extra_config": {"prefetch_threshold": 128}}, "/o")
    assert request is not None
    plan = storage_plan(request, instances=TWO, filesystems=[], release="0.5.17", traits=release_traits("0.5.17"),
                        mla=False, host_address="10.0.0.7")
    assert plan["master"]["local"] is False and plan["master"]["address"] == "10.0.0.5:50051"
    extra = plan["instances"]["gpu1"]["extra_config"]
    assert (extra["master_server_address"], extra["protocol"], extra["device_name"], extra["prefetch_threshold"]) == \
        ("10.0.0.5:50051", "rdma", "mlx5_0", 128)
    # the file tier takes extra_config too: one flag, JSON
    file_request = storage_request({"backend": "file", "extra_config": {"prefetch_threshold": 128}}, "/data/sglang")
    assert file_request is not None
    file_plan = _plan(StorageRequest(**{**file_request.__dict__, "root": ROOT}), _fs(free=1050 * GIB))
    assert file_plan["flags"] == ["--hicache-storage-backend", "file", "--hicache-storage-backend-extra-config",
                                  '{"prefetch_threshold": 128}']


@pytest.mark.parametrize(("value", "host", "message"), [
    ({"backend": "mooncake", "master": "nowhere"}, "10.0.0.7", "master='nowhere': must be ADDRESS:PORT"),
    ({"backend": "mooncake", "protocol": "udp"}, "10.0.0.7", "protocol='udp': must be one of tcp, rdma"),
    ({"backend": "mooncake", "segment_gib": 0.5}, "10.0.0.7", "segment_gib=0.5: each instance lends the store at "
                                                              "least 1 GiB"),
    ({"backend": "mooncake", "master_port": 70000}, "10.0.0.7", "master_port=70000: must be a TCP port"),
    ({"backend": "mooncake", "size_gb": 10}, "10.0.0.7", "size_gb do.* not apply to backend 'mooncake' .*only to "
                                                         "file.*remove them"),
    ({"backend": "file", "segment_gib": 4}, "10.0.0.7", "segment_gib do.* not apply to backend 'file'"),
    ({"backend": "mooncake", "extra_config": {"global_segment_size": 1}}, "10.0.0.7",
     "extra_config sets global_segment_size, which the plan sets .* use those"),
    ({"backend": "mooncake", "extra_config": "x"}, "10.0.0.7", "extra_config='x': must be a dict"),
    ({"backend": "mooncake", "master": "10.0.0.5:50051"}, "127.0.0.1",
     "master='10.0.0.5:50051' is on another host, which reaches this host's segment at local_hostname "
     "'127.0.0.1', a loopback address: set sglang_host_address"),
])
def test_mooncake_refusals_name_the_key_the_rule_and_the_fix(value: dict[str, Any], host: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        request = storage_request(value, "/opt/sglang")
        assert request is not None
        storage_plan(request, instances=TWO, filesystems=[], release="0.5.17", traits=release_traits("0.5.17"),
                     mla=False, host_address=host)
