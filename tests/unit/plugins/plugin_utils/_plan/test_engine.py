"""plugin_utils/_plan/engine.py: the embedded engine's files for a host, as one archive."""
from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.lookup.engine_files import engine_files
from ansible_collections.llmops.sglang.plugins.module_utils._shared.releases import DEFAULT_RELEASE
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.engine import engine_archive, engine_bundle


def test_the_archive_holds_exactly_the_bundle_under_its_destinations(tmp_path: Path) -> None:
    bundle = engine_bundle(DEFAULT_RELEASE, "/srv/sglang/engine")
    shipped = engine_archive(bundle, str(tmp_path))
    assert shipped["digest"] == bundle["digest"] and shipped["stamp"] == bundle["stamp"]
    assert shipped["files"] == len(engine_files([DEFAULT_RELEASE])) + 2
    with tarfile.open(shipped["archive"]) as tar:
        members = {m.name: m for m in tar.getmembers()}
        files = {name: m for name, m in members.items() if m.isfile()}
        assert set(files) == {i["dest"] for i in bundle["files"] + bundle["shim"]}
        for item in bundle["files"] + bundle["shim"]:
            data = tar.extractfile(files[item["dest"]]).read()  # type: ignore[union-attr]
            assert data == Path(item["src"]).read_bytes(), item["dest"]
        # every folder a member lives in is a member too, 0755; files 0644; nothing absolute or ..
        for name in files:
            assert str(Path(name).parent) in members or Path(name).parent == Path(".")
        assert {m.mode for m in members.values() if m.isdir()} == {0o755}
        assert {m.mode for m in files.values()} == {0o644}
        assert not [n for n in members if n.startswith("/") or ".." in Path(n).parts]


def test_the_same_files_give_the_same_bytes_and_an_existing_archive_is_reused(tmp_path: Path) -> None:
    bundle = engine_bundle(DEFAULT_RELEASE, "/srv/a/engine")
    first = engine_archive(bundle, str(tmp_path / "one"))
    second = engine_archive(engine_bundle(DEFAULT_RELEASE, "/srv/b/engine"), str(tmp_path / "two"))
    digest = [hashlib.sha256(Path(s["archive"]).read_bytes()).hexdigest() for s in (first, second)]
    assert digest[0] == digest[1]
    # written once per digest: a second plan in the run finds it and does not write it again
    os.utime(first["archive"], (1, 1))
    again = engine_archive(bundle, str(tmp_path / "one"))
    assert again["archive"] == first["archive"] and os.stat(first["archive"]).st_mtime == 1
    assert not [p for p in (tmp_path / "one").iterdir() if p.name.startswith(".engine-")]
