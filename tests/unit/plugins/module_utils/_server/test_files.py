"""module_utils/_server/files.py: every instance's files in one pass, compared before written."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._server import files as _serverfiles
from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout
from ansible_collections.llmops.sglang.plugins.module_utils._server.files import (
    Owner,
    launch_text,
    write_instances,
    write_manifest,
)


def _inst(base: Path, name: str, secrets: bool = False) -> dict[str, Any]:
    return {"name": name, "gpu_ids": [int(name[3:])], "paths": _layout.instance_paths(str(base), name),
            "argv": ["--model-path", "/models/it's", "--port", "30000"],
            "env": {"CUDA_VISIBLE_DEVICES": name[3:], "X": "a b"}, "env_secrets": {"HF_TOKEN": "sglang_hf_token"},
            "secrets": {"api-key": "sglang_api_key"} if secrets else {}}


def _write(base: Path, instances: list[dict[str, Any]], check: bool = False, **over: Any) -> Any:
    kwargs: dict[str, Any] = {"base_dir": str(base), "profile": "mtp", "release": "0.5.23", "engine": "sim",
                              "python": "/venv/bin/python", "secret_env": {"HF_TOKEN": "hf_x"}, "api_key": "k1",
                              "owner": Owner(), "check": check}
    kwargs.update(over)
    return write_instances(instances, **kwargs)


def test_first_pass_writes_everything_then_nothing_changes(tmp_path: Path) -> None:
    base = tmp_path / "sglang"
    insts = [_inst(base, "gpu0", secrets=True), _inst(base, "gpu1")]
    first = _write(base, insts)
    assert first.restart == ["gpu0", "gpu1"]
    env = (base / "gpu0" / "env").read_text()
    assert "HF_TOKEN=hf_x" in env and "X='a b'" in env and oct((base / "gpu0" / "env").stat().st_mode & 0o777) == "0o600"
    assert json.loads((base / "gpu0" / "secrets.yaml").read_text()) == {"api-key": "k1"}
    assert not (base / "gpu1" / "secrets.yaml").exists()
    assert oct((base / "gpu1" / "launch.sh").stat().st_mode & 0o777) == "0o750"
    # the script runs: bash sources the env file and execs the Python with the argv, quoted
    out = subprocess.run(["bash", "-c", f"sed 's/^exec /echo /' {base}/gpu1/launch.sh | bash"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "/venv/bin/python -m sglang.launch_server --model-path /models/it's --port 30000"
    again = _write(base, insts)
    assert again.restart == [] and again.changed == []


def test_drift_restarts_only_that_instance_and_check_mode_writes_nothing(tmp_path: Path) -> None:
    base = tmp_path / "sglang"
    insts = [_inst(base, "gpu0"), _inst(base, "gpu1")]
    _write(base, insts)
    env = base / "gpu1" / "env"
    env.write_text(env.read_text() + "SOMETHING=else\n")
    before = env.read_text()
    check = _write(base, insts, check=True)
    assert check.restart == ["gpu1"] and env.read_text() == before
    assert check.diffs[0]["before"] == "(secret)\n"  # env files may hold secrets: never in a diff
    assert _write(base, insts).restart == ["gpu1"] and "SOMETHING" not in env.read_text()
    os.chmod(base / "gpu0" / "launch.sh", 0o755)  # a mode alone is fixed, nothing restarts
    fixed = _write(base, insts)
    assert fixed.restart == [] and fixed.changed == [str(base / "gpu0" / "launch.sh")]


def test_the_storage_tiers_folder_is_made_once_and_restarts_nothing(tmp_path: Path) -> None:
    base = tmp_path / "sglang"
    insts = [dict(_inst(base, "gpu0"), storage_dir=str(tmp_path / "kv" / "gpu0")), _inst(base, "gpu1")]
    _write(base, insts, check=True)
    assert not (tmp_path / "kv").exists()  # check mode makes nothing
    _write(base, insts)
    folder = tmp_path / "kv" / "gpu0"
    assert folder.is_dir() and oct(folder.stat().st_mode & 0o777) == "0o750"
    (folder / "page.bin").write_bytes(b"kv")  # the server's pages stay
    again = _write(base, insts)
    assert again.restart == [] and again.changed == [] and (folder / "page.bin").exists()


def test_the_launch_script_keeps_pages_of_its_layout_and_removes_others(tmp_path: Path) -> None:
    """The plan's storage_layout (its digest) against the folder's stamp, checked each time the
    server starts: the same layout keeps the pages (a warm restart), another removes them first."""
    base, folder = tmp_path / "sglang", tmp_path / "kv" / "gpu0"

    def inst(digest: str) -> dict[str, Any]:
        layout = {"of": {"release": "0.5.17"}, "digest": digest, "stamp": str(folder / ".llmops-layout")}
        return dict(_inst(base, "gpu0"), storage_dir=str(folder), storage_layout=layout)

    def start() -> str:  # the launch script up to its exec
        return subprocess.run(["bash", "-c", f"sed 's/^exec /echo /' {base}/gpu0/launch.sh | bash"],
                              capture_output=True, text=True, check=True).stdout

    assert "llmops-layout" not in launch_text(_inst(base, "gpu0"), profile="p", release="r", engine="e", python="/p")
    _write(base, [inst("aaaa")])
    start()
    assert (folder / ".llmops-layout").read_text() == "aaaa\n"
    (folder / "p1_m_0_1.bin").write_bytes(b"kv")
    (folder / "notes.txt").write_text("not a page")
    start()  # restarted, same layout: the pages stay
    assert (folder / "p1_m_0_1.bin").exists()
    changed = _write(base, [inst("bbbb")])  # another layout: the script changed, the instance restarts
    assert changed.restart == ["gpu0"]
    start()
    assert not (folder / "p1_m_0_1.bin").exists() and (folder / "notes.txt").exists()
    assert (folder / ".llmops-layout").read_text() == "bbbb\n"


def test_log_is_created_once_and_never_touched(tmp_path: Path) -> None:
    base = tmp_path / "sglang"
    _write(base, [_inst(base, "gpu0")])
    log = base / "gpu0" / "server.log"
    log.write_text("served\n")
    _write(base, [_inst(base, "gpu0")])
    assert log.read_text() == "served\n" and oct(log.stat().st_mode & 0o777) == "0o600"


def test_a_script_bash_refuses_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "sglang"
    inst = _inst(base, "gpu0")
    assert "launch_server" in launch_text(inst, profile="p", release="r", engine="e", python="py")
    monkeypatch.setattr(_serverfiles, "launch_text", lambda *a, **k: "if then fi (\n")
    with pytest.raises(ValueError, match="bash -n"):
        _write(base, [inst])
    assert not (base / "gpu0" / "launch.sh").exists()


def test_manifest(tmp_path: Path) -> None:
    path = tmp_path / "deployment.json"
    assert write_manifest(str(path), {"b": 1, "a": [1]}, Owner(), check=False).changed == [str(path)]
    assert json.loads(path.read_text()) == {"a": [1], "b": 1}
    assert write_manifest(str(path), {"a": [1], "b": 1}, Owner(), check=False).changed == []


def test_files_that_served_are_kept_and_a_rollback_puts_them_back(tmp_path: Path) -> None:
    base = tmp_path / "sglang"
    old = [_inst(base, "gpu0", secrets=True), _inst(base, "gpu1")]
    _write(base, old)
    before = {key: Path(old[0]["paths"][key]).read_bytes() for key in ("env_file", "launch_script", "secrets_file")}
    new = [dict(i, argv=i["argv"] + ["--enable-metrics"]) for i in old]
    out = _write(base, new, keep_previous=["gpu0"])  # gpu1 never served: nothing kept
    assert sorted(out.restart) == ["gpu0", "gpu1"]
    assert _serverfiles.has_previous(old[0]["paths"]) and not _serverfiles.has_previous(old[1]["paths"])
    assert "--enable-metrics" in Path(old[0]["paths"]["launch_script"]).read_text()
    # a re-run with nothing changed keeps the copy as it is
    _write(base, new, keep_previous=["gpu0"])
    kept = Path(old[0]["paths"]["dir"]) / "previous" / "launch.sh"
    assert kept.read_bytes() == before["launch_script"]

    back = _serverfiles.restore_previous(new, ["gpu0", "gpu1"], check=False)
    assert back == {"restored": ["gpu0"], "missing": ["gpu1"],
                    "lines": ["no previous configuration kept for gpu1: left as they are"]}
    for key, data in before.items():
        assert Path(old[0]["paths"][key]).read_bytes() == data
    assert os.stat(old[0]["paths"]["secrets_file"]).st_mode & 0o777 == 0o600
    aside = Path(old[0]["paths"]["dir"]) / "rolled-back" / "launch.sh"
    assert "--enable-metrics" in aside.read_text()  # what was rolled back stays readable
    assert not _serverfiles.has_previous(old[0]["paths"])
    # the old files render again as they are: the next deploy of the old variables changes nothing
    assert _write(base, old).restart == ["gpu1"]


def test_check_mode_neither_keeps_nor_restores(tmp_path: Path) -> None:
    base = tmp_path / "sglang"
    old = [_inst(base, "gpu0")]
    _write(base, old)
    new = [dict(old[0], argv=["--x"])]
    _write(base, new, check=True, keep_previous=["gpu0"])
    assert not _serverfiles.has_previous(old[0]["paths"])
    _write(base, new, keep_previous=["gpu0"])
    assert _serverfiles.restore_previous(new, ["gpu0"], check=True) == {"restored": ["gpu0"], "missing": [], "lines": []}
    assert "--x" in Path(old[0]["paths"]["launch_script"]).read_text()
