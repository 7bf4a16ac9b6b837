"""module_utils/_server/engineroot.py: the embedded engine's root, unpacked from the plan's archive
where its stamp does not say it holds the plan's digest (issue 27: one module run, not three)."""
from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._server.engineroot import (
    engine_current,
    stamp_matches,
    unpack_engine,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.engine import engine_archive, engine_bundle


def _tar(members: dict[str, bytes | None], kind: bytes = tarfile.REGTYPE) -> str:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            if body is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.type, info.mode, info.size = kind, 0o644, len(body)
                tar.addfile(info, io.BytesIO(body) if kind == tarfile.REGTYPE else None)
    return base64.b64encode(raw.getvalue()).decode()


def _stamp(tmp_path: Path, digest: str = "d1") -> dict:
    root = tmp_path / "engine"
    return {"path": f"{root}.files.sha256", "digest": digest, "shim": [f"{root}/sglang/launch_server.py"]}


def test_stamp_matches(tmp_path: Path) -> None:
    stamp = tmp_path / "engine.files.sha256"
    assert not stamp_matches(str(stamp), "abc")
    stamp.write_text("abc\n")
    assert stamp_matches(str(stamp), "abc") and not stamp_matches(str(stamp), "abd")


def test_the_plans_archive_is_unpacked_once_then_the_root_is_current(tmp_path: Path) -> None:
    """The real archive of the plan (plugin_utils/_plan/engine.py) for a release: unpacked with
    its stamp; a second run finds the root current and writes nothing; check mode writes nothing."""
    root = tmp_path / "engine"
    bundle = engine_bundle("0.5.17", str(root))
    archive = engine_archive(bundle, str(tmp_path / "cache"))
    content = base64.b64encode(Path(archive["archive"]).read_bytes()).decode()
    stamp = archive["stamp"]
    assert not engine_current(stamp)
    files, stamped = unpack_engine(content, str(root), stamp, check=True)
    assert files and stamped and not root.exists()  # check mode: said, not done
    files, stamped = unpack_engine(content, str(root), stamp, check=False)
    assert stamped and len([f for f in files if Path(f).is_file()]) == archive["files"]
    assert engine_current(stamp) and Path(stamp["path"]).read_text().strip() == bundle["digest"]
    assert (root / "sglang" / "launch_server.py").read_bytes() == Path(bundle["shim"][1]["src"]).read_bytes()
    assert oct((root / "sglang" / "launch_server.py").stat().st_mode & 0o777) == "0o644"
    assert unpack_engine(content, str(root), stamp, check=False) == ([], False)


def test_a_lost_stamp_rewrites_the_stamp_but_changes_no_engine_file(tmp_path: Path) -> None:
    """As `unarchive` did: only files whose bytes or mode differ are written, so a root whose stamp
    was removed is stamped again without counting as an engine change (nothing restarts)."""
    stamp = _stamp(tmp_path)
    content = _tar({"sglang": None, "sglang/launch_server.py": b"print('x')\n"})
    files, _ = unpack_engine(content, str(tmp_path / "engine"), stamp, check=False)
    assert files == [str(tmp_path / "engine" / "sglang"), str(tmp_path / "engine" / "sglang" / "launch_server.py")]
    Path(stamp["path"]).unlink()
    assert unpack_engine(content, str(tmp_path / "engine"), stamp, check=False) == ([], True)
    assert engine_current(stamp)
    changed = _tar({"sglang": None, "sglang/launch_server.py": b"print('y')\n"})
    files, _ = unpack_engine(changed, str(tmp_path / "engine"), {**stamp, "digest": "d2"}, check=False)
    assert files == [str(tmp_path / "engine" / "sglang" / "launch_server.py")]


@pytest.mark.parametrize(("members", "kind", "what"), [
    ({"../outside.py": b"x"}, tarfile.REGTYPE, "not under the engine root"),
    ({"/etc/x.py": b"x"}, tarfile.REGTYPE, "not under the engine root"),
    ({"sglang/link": b""}, tarfile.SYMTYPE, "neither a folder nor a file"),
])
def test_an_archive_with_anything_but_folders_and_files_under_the_root_writes_nothing(
        tmp_path: Path, members: dict, kind: bytes, what: str) -> None:
    stamp = _stamp(tmp_path)
    with pytest.raises(ValueError, match=what):
        unpack_engine(_tar({"sglang/ok.py": b"ok", **members}, kind) if kind == tarfile.REGTYPE
                      else _tar(members, kind), str(tmp_path / "engine"), stamp, check=False)
    assert not (tmp_path / "engine").exists() and not Path(stamp["path"]).exists()


def test_content_that_is_not_a_gzip_tar_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not base64"):
        unpack_engine("not base64!", str(tmp_path / "engine"), _stamp(tmp_path), check=False)
    with pytest.raises(ValueError, match="not a gzip tar"):
        unpack_engine(base64.b64encode(b"plain").decode(), str(tmp_path / "engine"), _stamp(tmp_path), check=False)
