"""The layout owner (module_utils/_server/layout.py) and the manifest reader (_server/manifest.py): URLs for
wildcard binds, instance folders, schema 1 manifests, and manifests that are gone or broken."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout
from ansible_collections.llmops.sglang.plugins.module_utils._server import manifest as _manifest


@pytest.mark.parametrize(("bind", "connect", "advertise"), [
    ("127.0.0.1", "http://127.0.0.1:30000", None),
    ("0.0.0.0", "http://127.0.0.1:30000", "http://10.0.0.5:30000"),
    ("", "http://127.0.0.1:30000", "http://10.0.0.5:30000"),
    ("::", "http://[::1]:30000", "http://10.0.0.5:30000"),
    ("10.0.0.7", "http://10.0.0.7:30000", "http://10.0.0.7:30000"),
    ("fd00::7", "http://[fd00::7]:30000", "http://[fd00::7]:30000"),
    ("::1", "http://[::1]:30000", None),
    ("localhost", "http://localhost:30000", None),
    ("node-1.example", "http://node-1.example:30000", "http://node-1.example:30000"),
])
def test_connect_and_advertise_urls(bind: str, connect: str, advertise: str | None) -> None:
    assert _layout.connect_url(bind, 30000) == connect
    assert _layout.advertise_url(bind, 30000, "10.0.0.5") == advertise


def test_wildcard_without_a_host_address_has_no_advertise_url() -> None:
    assert _layout.advertise_url("0.0.0.0", 1, None) is None
    assert _layout.advertise_url("::", 1, "fd00::5") == "http://[fd00::5]:1"


def test_instance_paths_and_names() -> None:
    assert _layout.instance_paths("/opt/sglang", "gpu0-1") == {
        "dir": "/opt/sglang/gpu0-1", "launch_script": "/opt/sglang/gpu0-1/launch.sh",
        "env_file": "/opt/sglang/gpu0-1/env", "secrets_file": "/opt/sglang/gpu0-1/secrets.yaml",
        "pid_file": "/opt/sglang/gpu0-1/server.pid",
        "log_file": "/opt/sglang/gpu0-1/server.log"}
    assert _layout.instance_paths("/b", "%i")["launch_script"] == "/b/%i/launch.sh"  # the systemd template
    assert (_layout.unit_name("gpu1"), _layout.service_name("gpu1")) == ("sglang@gpu1.service", "sglang-gpu1")
    assert _layout.manifest_path("/b") == "/b/deployment.json" and _layout.engine_root("/b") == "/b/engine"


def _instance_folder(base: Path, name: str, port: int, host: str = "127.0.0.1", pid: bool = True) -> None:
    folder = base / name
    folder.mkdir(parents=True)
    (folder / "launch.sh").write_text(
        "#!/usr/bin/env bash\nset -euo pipefail\nargs=(\n  --model-path\n  '/m m'\n  --host\n"
        f"  {host}\n  --port\n  {port}\n)\nexec python -m sglang.launch_server \"${{args[@]}}\"\n")
    if pid:
        (folder / "server.pid").write_text("4242\n")


def test_discover_finds_instance_folders_only(tmp_path: Path) -> None:
    _instance_folder(tmp_path, "gpu10", 30010)
    _instance_folder(tmp_path, "gpu2", 30002)
    _instance_folder(tmp_path, "gpu0-1", 30000)
    (tmp_path / "engine").mkdir()
    (tmp_path / "gpu3").mkdir()  # empty: never deployed
    (tmp_path / "gpu4;rm -rf").mkdir()
    assert _layout.discover(str(tmp_path)) == ["gpu0-1", "gpu2", "gpu10"]
    assert _layout.discover(str(tmp_path / "nothing")) == []


def test_load_ok_and_schema_1_is_normalized(tmp_path: Path) -> None:
    v1 = {"schema_version": 1, "host": "h", "service_manager": "process", "instances": [
        {"name": "gpu0", "port": 31000, "url": "http://127.0.0.1:31000", "pid": 7,
         "pid_file": str(tmp_path / "gpu0/server.pid"), "log_file": str(tmp_path / "gpu0/server.log"),
         "launch_script": str(tmp_path / "gpu0/launch.sh"), "env_file": str(tmp_path / "gpu0/env")}]}
    (tmp_path / "deployment.json").write_text(json.dumps(v1))
    found = _manifest.load(str(tmp_path))
    assert found["state"] == "ok" and found["problem"] == ""
    inst = found["manifest"]["instances"][0]
    assert found["manifest"]["schema_version"] == 2
    assert inst["connect_url"] == "http://127.0.0.1:31000" and "url" not in inst
    assert inst["paths"] == _layout.instance_paths(str(tmp_path), "gpu0")
    assert inst["service"] == "sglang-gpu0" and inst["pid"] == 7


@pytest.mark.parametrize("garbage", ["{not json", "[]", '{"instances": "x"}', '{"instances": [{"port": 1}]}',
                                     '{"schema_version": 99, "instances": []}', ""])
def test_unreadable_manifest_is_rebuilt_from_the_folders(tmp_path: Path, garbage: str) -> None:
    _instance_folder(tmp_path, "gpu0", 31000)
    _instance_folder(tmp_path, "gpu1", 31001, host="0.0.0.0")
    (tmp_path / "deployment.json").write_text(garbage)
    found = _manifest.load(str(tmp_path))
    assert found["state"] == "unreadable"
    assert "is not a deployment manifest" in found["problem"] and "gpu0, gpu1" in found["problem"]
    rebuilt = found["manifest"]
    assert rebuilt["rebuilt_from_folders"] is True
    assert [i["connect_url"] for i in rebuilt["instances"]] == ["http://127.0.0.1:31000", "http://127.0.0.1:31001"]
    assert rebuilt["instances"][0]["paths"]["pid_file"] == str(tmp_path / "gpu0" / "server.pid")
    assert rebuilt["service_manager"] == "process"


def test_missing_manifest_and_nothing_at_all(tmp_path: Path) -> None:
    assert _manifest.load(str(tmp_path))["state"] == "absent"
    assert _manifest.load(str(tmp_path / "no-such-dir"))["manifest"] is None
    _instance_folder(tmp_path, "gpu0", 31000, pid=False)
    found = _manifest.load(str(tmp_path), service_manager="systemd")
    assert found["state"] == "missing" and "does not exist" in found["problem"]
    inst = found["manifest"]["instances"][0]
    assert inst["unit"] == "sglang@gpu0.service"  # no pid file on a systemd host: its unit


def test_launch_args_of_a_broken_script(tmp_path: Path) -> None:
    (tmp_path / "gpu0").mkdir()
    (tmp_path / "gpu0" / "launch.sh").write_text("args=( 'unterminated\n)\n")
    found = _manifest.from_folders(str(tmp_path))
    assert found["instances"][0]["connect_url"] is None


def test_a_live_instance_folder_the_manifest_does_not_list_is_part_of_the_deployment(tmp_path: Path) -> None:
    """The interrupted deploy: gpu1 was started, the manifest (written at the end) still lists
    gpu0 only. With gpu1's folder among the running ones it is added, marked and named."""
    _instance_folder(tmp_path, "gpu0", 31000)
    _instance_folder(tmp_path, "gpu1", 31001)
    _instance_folder(tmp_path, "gpu2", 31002)  # not running: a folder only
    manifest = {"schema_version": 2, "service_manager": "process", "instances": [{"name": "gpu0", "pid": 7}]}
    (tmp_path / "deployment.json").write_text(json.dumps(manifest))
    assert _manifest.load(str(tmp_path))["unlisted"] == []  # without the running list: as before
    found = _manifest.load(str(tmp_path), running=["gpu0", "gpu1", "gpu9"])
    assert found["state"] == "ok" and found["unlisted"] == ["gpu1"]
    names = [(i["name"], i.get("in_manifest", True)) for i in found["manifest"]["instances"]]
    assert names == [("gpu0", True), ("gpu1", False)]
    adopted = found["manifest"]["instances"][1]
    assert adopted["connect_url"] == "http://127.0.0.1:31001" and adopted["service"] == "sglang-gpu1"
    assert adopted["paths"] == _layout.instance_paths(str(tmp_path), "gpu1")
    assert "gpu1 under" in found["problem"] and "not in" in found["problem"] and "stop.yml stops them" in found["problem"]
    assert found["manifest"]["unlisted"] == ["gpu1"]
    # a manifest rebuilt from the folders already has every folder: nothing more to add
    (tmp_path / "deployment.json").unlink()
    rebuilt = _manifest.load(str(tmp_path), running=["gpu1"])
    assert rebuilt["state"] == "missing" and rebuilt["unlisted"] == []


def test_is_loopback_is_the_one_loopback_rule() -> None:
    from ansible_collections.llmops.sglang.plugins.module_utils._server.layout import is_loopback

    assert all(is_loopback(a) for a in ("127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"))
    assert not any(is_loopback(a) for a in ("10.0.0.5", "0.0.0.0", "gpu-node-01", "[2001:db8::1]", ""))
