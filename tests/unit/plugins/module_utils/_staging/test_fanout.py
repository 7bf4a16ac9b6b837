"""Fan-out of a model copy (issue 17): who copies from whom (plugin_utils/_modelsource.transfers),
the origin's manifest, the receiver's check and verification (module_utils/_staging/fanout.py),
and the bound on hosts receiving at once (roles/model/tasks/fanout.yml)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils._staging import disk, fanout, stage
from ansible_collections.llmops.sglang.plugins.module_utils._staging.errors import StageError
from ansible_collections.llmops.sglang.plugins.module_utils._staging.layout import Layout
from ansible_collections.llmops.sglang.plugins.module_utils._staging.listing import (
    Listing,
    RepoFile,
    marker_doc,
    read_marker,
    write_marker,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils import _modelsource as ms

ROOT = Path(__file__).resolve().parents[5]
REPO = "org/model"
C1 = "a" * 40
FILES = {"config.json": b'{"model_type": "qwen3"}\n', "model-1.safetensors": os.urandom(200_000),
         "sub/tokenizer.json": b'{"v": 1}'}


def _entry(path: str, data: bytes) -> RepoFile:
    return RepoFile(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())


def _manifest() -> fanout.Manifest:
    return fanout.Manifest([_entry(p, d) for p, d in FILES.items()])


def _write(folder: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)


def _staged_origin(cache: Path) -> fanout.Target:
    """A revision staged completely at an origin (files and marker, as model_stage leaves it)."""
    target = fanout.Target(cache_dir=str(cache), repo=REPO, commit=C1)
    _write(Path(target.folder), FILES)
    listing = Listing(repo=REPO, commit=C1, files=_manifest().files)
    stats = {p: (os.stat(target.file(p)).st_size, os.stat(target.file(p)).st_mtime_ns) for p in FILES}
    write_marker(target.marker, marker_doc(listing, stats))
    return target


# ---- the plan: who copies from whom


def _play(**hosts: list[dict]) -> dict[str, dict]:
    return {name: {"pinned": pinned, "cache_dir": f"/data/{name}"} for name, pinned in hosts.items()}


HUB = {"role": "model", "kind": "hub", "repo": REPO, "revision": "main", "ref": f"{REPO}@main", "commit": C1}


def test_hub_mode_plans_no_copy():
    play = _play(h1=[HUB], h2=[HUB])
    assert ms.transfers([HUB], "h1", "hub", play, "/ctl") == []


def test_controller_mode_every_host_receives_from_the_controller_cache():
    play = _play(h1=[HUB], h2=[HUB])
    plans = {h: ms.transfers([HUB], h, "controller", play, "/ctl") for h in play}
    for host, (one,) in plans.items():
        assert one["origin"] == "localhost" and not one["relay"]
        assert one["origin_dir"] == one["relay_dir"] == Layout("/ctl", REPO, C1).snapshot
        assert one["dest_dir"] == Layout(f"/data/{host}", REPO, C1).snapshot
        assert one["dest_args"] == {"repo": REPO, "revision": C1, "cache_dir": f"/data/{host}"}
    assert plans["h1"][0]["id"] == plans["h2"][0]["id"]  # one origin step for both


def test_seed_mode_the_seed_receives_nothing_the_others_get_its_copy_through_the_controller():
    play = _play(seed=[HUB], h2=[HUB], h3=[HUB])
    assert ms.transfers([HUB], "seed", "seed", play, "/ctl") == []
    (one,) = ms.transfers([HUB], "h2", "seed", play, "/ctl")
    assert one["origin"] == "seed" and one["relay"]
    assert one["origin_args"] == {"repo": REPO, "revision": C1, "cache_dir": "/data/seed"}
    assert one["origin_dir"] == Layout("/data/seed", REPO, C1).snapshot
    assert one["relay_dir"] == Layout("/ctl", REPO, C1).snapshot
    assert one["dest_dir"] == Layout("/data/h2", REPO, C1).snapshot
    assert ms.transfers([HUB], "h3", "seed", play, "/ctl")[0]["id"] == one["id"]


def test_stage_from_must_be_hub_controller_or_a_host_of_the_play():
    play = _play(h1=[HUB], h2=[HUB])
    with pytest.raises(ms.SourceError, match=r"sglang_model_stage_from='nohost'.*hub.*controller.*h1, h2"):
        ms.transfers([HUB], "h1", "nohost", play, "/ctl")


def test_a_seed_without_the_hosts_revision_is_refused():
    other = {**HUB, "commit": "b" * 40}
    play = _play(seed=[other], h2=[HUB])
    with pytest.raises(ms.SourceError, match=r"h2 stages org/model@a{40} but the seed seed does not"):
        ms.transfers([HUB], "h2", "seed", play, "/ctl")


def test_from_host_sources_copy_the_folder_from_that_host_to_the_same_path():
    srcs = ms.sources({"from_host": "h1", "path": "/models/m/"}, hosts=["h1", "h2"], host="h2")
    assert srcs == [{"role": "model", "kind": "peer", "from_host": "h1", "path": "/models/m"}]
    # on h1 itself it is a plain path
    assert ms.sources({"from_host": "h1", "path": "/models/m"}, hosts=["h1", "h2"], host="h1") == \
        [{"role": "model", "kind": "path", "path": "/models/m"}]
    with pytest.raises(ms.SourceError, match=r"from_host='h9' is not an inventory host"):
        ms.sources({"from_host": "h9", "path": "/m"}, hosts=["h1"], host="h1")
    (one,) = ms.transfers(ms.pin(srcs, {}, "/data/h2"), "h2", "hub", _play(h1=[], h2=srcs), "/ctl")
    assert (one["origin"], one["origin_dir"], one["dest_dir"]) == ("h1", "/models/m", "/models/m")
    assert one["relay_dir"] == "/ctl/copies/h1/models/m" and one["origin_args"]["cache_dir"] == "/data/h1"
    assert ms.paths(ms.pin(srcs, {}, "/data/h2")) == {"model": "/models/m"}


def test_fetches_one_per_file_of_each_relayed_copy():
    (one,) = ms.transfers([HUB], "h2", "seed", _play(seed=[HUB], h2=[HUB]), "/ctl")
    got = fanout.fetches(_manifest(), one["origin_dir"], one["relay_dir"])
    assert [g["path"] for g in got] == list(FILES)
    assert got[2]["src"] == Layout("/data/seed", REPO, C1).snapshot + "/sub/tokenizer.json"
    assert got[2]["dest"] == Layout("/ctl", REPO, C1).snapshot + "/sub/tokenizer.json"
    assert got[2]["size"] == _manifest().files[2].size


def test_the_copies_are_bounded_to_sglang_model_stage_parallel_hosts_at_once():
    tasks = yaml.safe_load((ROOT / "roles" / "model" / "tasks" / "fanout.yml").read_text())
    copies = [t for t in tasks if "ansible.builtin.copy" in t]
    assert len(copies) == 2
    for task in copies:
        assert task["throttle"] == "{{ sglang_model_stage_parallel }}", task["name"]
        assert task["when"] == "not ansible_check_mode"


# ---- the origin's manifest


def test_revision_manifest_is_the_origins_marker_and_refuses_what_it_cannot_vouch_for(tmp_path):
    target = _staged_origin(tmp_path / "origin")
    assert {f.path: f for f in fanout.revision_manifest(target).files} == {f.path: f for f in _manifest().files}
    data = bytearray(FILES["model-1.safetensors"])
    data[7] ^= 1
    Path(target.file("model-1.safetensors")).write_bytes(bytes(data))
    with pytest.raises(StageError, match="no longer matches its marker"):
        fanout.revision_manifest(target)
    os.unlink(target.marker)
    with pytest.raises(StageError, match="not completely staged"):
        fanout.revision_manifest(target)


def test_folder_manifest_hashes_at_the_source_and_only_what_changed_on_a_rerun(tmp_path):
    folder = tmp_path / "m"
    _write(folder, FILES)
    (folder / ".hidden").write_text("x")
    target = fanout.Target(cache_dir=str(tmp_path / "cache"), path=str(folder))
    manifest, hashed = fanout.folder_manifest(target)
    assert hashed == 3 and {f.path: f for f in manifest.files} == {f.path: f for f in _manifest().files}
    again, hashed = fanout.folder_manifest(target)
    assert hashed == 0 and again.digest == manifest.digest
    (folder / "config.json").write_bytes(b'{"model_type": "llama"}\n')
    changed, hashed = fanout.folder_manifest(target)
    assert hashed == 1 and changed.digest != manifest.digest
    with pytest.raises(StageError, match="is not a folder"):
        fanout.folder_manifest(fanout.Target(cache_dir=str(tmp_path), path=str(tmp_path / "none")))


# ---- the receiver: check, verify, marker


def test_received_copy_verified_marker_written_and_trusted_by_model_stage(tmp_path):
    target = fanout.Target(cache_dir=str(tmp_path / "host"), repo=REPO, commit=C1)
    before = fanout.check(target, _manifest())
    assert not before.complete and before.need_bytes == sum(len(d) for d in FILES.values())
    _write(Path(target.folder), FILES)  # what ansible.builtin.copy leaves
    got = fanout.receive(target, _manifest())
    assert got.complete and got.changed and got.bad == [] and os.path.isfile(target.marker)
    assert fanout.check(target, _manifest()).complete
    assert fanout.receive(target, _manifest()).changed is False  # a complete copy: nothing written
    # the received marker is the staging's: model_stage, offline, finds the revision complete
    res = stage.stage(stage.Request(repo=REPO, commit=C1, cache_dir=str(tmp_path / "host"), offline=True))
    assert res.changed is False and res.requests == "none"


def test_marker_written_only_when_every_file_checks_and_a_corrupted_copy_is_sent_again(tmp_path):
    target = fanout.Target(cache_dir=str(tmp_path / "host"), repo=REPO, commit=C1)
    bad = dict(FILES)
    flipped = bytearray(FILES["model-1.safetensors"])
    flipped[100] ^= 0xFF
    bad["model-1.safetensors"] = bytes(flipped)
    del bad["sub/tokenizer.json"]
    _write(Path(target.folder), bad)
    got = fanout.receive(target, _manifest())
    assert not got.complete and not os.path.exists(target.marker)
    assert sorted(b["path"] for b in got.bad) == ["model-1.safetensors", "sub/tokenizer.json"]
    assert "sha256" in got.bad[0]["problem"] and got.bad[1]["problem"] == "missing"
    assert not os.path.exists(target.file("model-1.safetensors"))  # deleted: the next copy sends it
    assert os.path.exists(target.file("config.json"))               # the good one stays
    # the second copy sends what is missing; now every file checks
    _write(Path(target.folder), {p: FILES[p] for p in ("model-1.safetensors", "sub/tokenizer.json")})
    again = fanout.receive(target, _manifest())
    assert again.complete and read_marker(target.marker, REPO, C1) is not None


def test_a_file_changed_after_the_marker_drops_it_before_anything_is_sent(tmp_path):
    target = fanout.Target(cache_dir=str(tmp_path / "host"), repo=REPO, commit=C1)
    _write(Path(target.folder), FILES)
    assert fanout.receive(target, _manifest()).complete
    data = bytearray(FILES["model-1.safetensors"])
    data[0] ^= 1
    Path(target.file("model-1.safetensors")).write_bytes(bytes(data))  # same size, new mtime
    assert not fanout.check(target, _manifest()).complete
    got = fanout.receive(target, _manifest())
    assert not got.complete and not os.path.exists(target.marker)


def test_a_folder_copy_has_its_own_marker_naming_the_source_content(tmp_path):
    folder = tmp_path / "dest" / "m"
    target = fanout.Target(cache_dir=str(tmp_path / "cache"), path=str(folder))
    _write(folder, FILES)
    assert fanout.receive(target, _manifest()).complete
    assert target.marker.startswith(str(tmp_path / "cache" / "copies"))
    assert fanout.check(target, _manifest()).complete
    changed = fanout.Manifest([*_manifest().files[:2], _entry("sub/tokenizer.json", b'{"v": 2}')])
    assert not fanout.check(target, changed).complete  # the source changed: a new copy is due


def test_check_refuses_a_host_without_room_before_any_byte(tmp_path, monkeypatch):
    target = fanout.Target(cache_dir=str(tmp_path / "host"), repo=REPO, commit=C1)
    monkeypatch.setenv(disk.FREE_BYTES_ENV, "1000")
    with pytest.raises(StageError, match=r"not enough disk space .* need \d+ bytes"):
        fanout.check(target, _manifest())
    assert not os.path.exists(target.folder)


def test_manifest_entries_are_checked():
    with pytest.raises(StageError, match="would leave the folder"):
        fanout.Manifest.from_json([{"path": "../x", "size": 1, "sha256": "0" * 64}])
    with pytest.raises(StageError, match="no hash"):
        fanout.Manifest.from_json([{"path": "x", "size": 1}])
    with pytest.raises(StageError, match="non-empty"):
        fanout.Manifest.from_json([])


def test_a_file_sent_again_with_the_same_bytes_gets_its_new_mtime_recorded(tmp_path):
    target = fanout.Target(cache_dir=str(tmp_path / "host"), repo=REPO, commit=C1)
    _write(Path(target.folder), FILES)
    assert fanout.receive(target, _manifest()).complete
    path = target.file("model-1.safetensors")
    os.utime(path, ns=(1, 1))
    got = fanout.receive(target, _manifest())
    assert got.complete and got.changed
    _, mtimes = read_marker(target.marker, REPO, C1)
    assert mtimes["model-1.safetensors"] == 1
    assert fanout.receive(target, _manifest()).changed is False
