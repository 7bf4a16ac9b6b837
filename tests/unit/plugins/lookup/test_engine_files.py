"""The lookup llmops.sglang.engine_files (plugins/lookup/engine_files.py) and what it ships: the
embedded engine imports and starts from exactly the files it lists (plus the role's
``sglang.launch_server`` shim), laid out like a host's engine root, with nothing of the checkout
on the path; and it does not when one declared file is left out.

Engines run in their own session; each is stopped (SIGTERM, then SIGKILL of its group) and
every wait is bounded.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible.errors import AnsibleLookupError

from ansible_collections.llmops.sglang.plugins.lookup import engine_files as lookup
from ansible_collections.llmops.sglang.plugins.module_utils import _engine
from ansible_collections.llmops.sglang.plugins.module_utils._shared import releases as _releases

from ....ports import free_port

ROOT = Path(__file__).resolve().parents[4]
SHIM = ROOT / "roles" / "server" / "files" / "sglang"
MODEL = ROOT / "data" / "models" / "qwen3-0.6b-dense"
RELEASE = _releases.DEFAULT_RELEASE
START_TIMEOUT = 30.0
PREFIX = "ansible_collections/llmops/sglang/"


def _engine_root(base: Path, files: list[dict[str, str]]) -> Path:
    """An engine root as the server role lays it out: the listed files and the shim, only."""
    root = base / "engine"
    for item in files:
        target = root / item["dest"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(item["src"], target)
    (root / "sglang").mkdir(parents=True)
    for shim in ("__init__.py", "launch_server.py"):
        shutil.copyfile(SHIM / shim, root / "sglang" / shim)
    return root


def _model(base: Path) -> Path:
    """A model folder of its own (config.json only, as data/models has)."""
    folder = base / "model"
    folder.mkdir()
    shutil.copyfile(MODEL / "config.json", folder / "config.json")
    return folder


def _env(root: Path) -> dict[str, str]:
    """A clean environment: the engine root is the whole PYTHONPATH; aiohttp comes from the
    interpreter's own site-packages."""
    return {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": str(root),
            "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(root.parent), "LLMOPS_SGLANG_RELEASE": RELEASE,
            "LLMOPS_SIM_GPUS": "NVIDIA H200", "CUDA_VISIBLE_DEVICES": "0",
            "LLMOPS_SIM_TIME_SCALE": "0.001", "LLMOPS_SIM_HOST_MEM_AVAILABLE_GB": "200"}


def _python(root: Path, *argv: str, timeout: float = START_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-s", *argv], env=_env(root), cwd=root.parent,
                          capture_output=True, text=True, timeout=timeout, check=False)


class _Server:
    """``python -m sglang.launch_server`` from an engine root, in its own session."""

    def __init__(self, root: Path, model: Path) -> None:
        self.port = free_port()
        self.log = root.parent / "server.log"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-s", "-m", "sglang.launch_server", "--model-path", str(model),
                 "--host", "127.0.0.1", "--port", str(self.port)],
                env=_env(root), cwd=root.parent, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def health_generate(self) -> int | None:
        try:
            url = f"http://127.0.0.1:{self.port}/health_generate"
            with urllib.request.urlopen(url, timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None

    def wait_healthy(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.health_generate() == 200:
                return True
            time.sleep(0.1)
        return False

    def wait_exit(self) -> int | None:
        try:
            return self.proc.wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.wait_exit()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything of its group left behind
        except OSError:
            pass
        if code is None:
            code = self.proc.wait(timeout=10)
        return code

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@pytest.fixture
def servers() -> Iterator[list[_Server]]:
    started: list[_Server] = []
    yield started
    for server in started:
        server.stop()


# ------------------------------------------------------------------------------------------
# the list
# ------------------------------------------------------------------------------------------
def test_lists_the_package_the_declared_module_utils_and_the_release_data() -> None:
    files = lookup.engine_files([RELEASE])
    dests = [item["dest"] for item in files]
    assert len(dests) == len(set(dests))
    assert all(dest.startswith(PREFIX) for dest in dests)
    assert all(Path(item["src"]).is_absolute() and Path(item["src"]).is_file() for item in files)
    assert all(Path(item["src"]).as_posix().endswith(item["dest"][len(PREFIX):]) for item in files)
    package = ROOT / "plugins" / "module_utils" / "_engine"
    walked = {f"{PREFIX}{p.relative_to(ROOT).as_posix()}" for p in package.rglob("*.py")}
    assert walked <= set(dests)
    assert {f"{PREFIX}plugins/module_utils/{name}" for name in _engine.MODULE_UTILS} <= set(dests)
    assert {f"{PREFIX}data/{name}" for name in _engine.data_files(RELEASE)} <= set(dests)
    assert f"{PREFIX}data/flag_schemas/sglang-{RELEASE}.json" in dests
    assert len(dests) == len(walked) + len(_engine.MODULE_UTILS) + len(_engine.DATA_FILES)


def test_through_ansible_and_for_an_unknown_release() -> None:
    module = lookup.LookupModule()
    assert module.run([RELEASE], variables={}) == lookup.engine_files([RELEASE])
    two = module.run(["0.5.17", "0.5.23"], variables={})
    schemas = sorted(i["dest"].rsplit("/", 1)[1] for i in two if "/flag_schemas/" in i["dest"])
    assert schemas == ["sglang-0.5.17.json", "sglang-0.5.23.json"]
    with pytest.raises(AnsibleLookupError, match=r"sglang-9\.9\.json.*sglang-0\.5\.23\.json"):
        module.run(["9.9"], variables={})
    with pytest.raises(AnsibleLookupError, match="release"):
        module.run([], variables={})


def test_documents_itself() -> None:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    res = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "-t", "lookup",
                          "--json", "llmops.sglang.engine_files"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)["llmops.sglang.engine_files"]
    assert doc["doc"]["short_description"] and doc["examples"]
    assert set(doc["return"]["_raw"]["contains"]) == {"src", "dest"}


# ------------------------------------------------------------------------------------------
# the engine from exactly those files
# ------------------------------------------------------------------------------------------
def test_the_engine_starts_from_only_the_shipped_files(tmp_path: Path, servers: list[_Server]) -> None:
    root = _engine_root(tmp_path, lookup.engine_files([RELEASE]))
    where = _python(root, "-c", "import ansible_collections.llmops.sglang.plugins.module_utils._engine.cli as m, "
                                "sglang.launch_server as s; print(m.__file__); print(s.__file__)")
    assert where.returncode == 0, where.stderr
    assert all(Path(line).is_relative_to(root) for line in where.stdout.split()), where.stdout
    helped = _python(root, "-m", "sglang.launch_server", "--help")
    assert helped.returncode == 0, helped.stderr[-3000:]
    assert "--model-path" in helped.stdout
    server = _Server(root, _model(tmp_path))
    servers.append(server)
    assert server.wait_healthy(), server.output()
    assert server.stop() == 0, server.output()
    assert "The server is fired up and ready to roll!" in server.output()


DECLARED = ([("MODULE_UTILS", name) for name in _engine.MODULE_UTILS]
            + [("DATA_FILES", name) for name in _engine.DATA_FILES])


@pytest.mark.parametrize("attr,name", DECLARED, ids=[name for _, name in DECLARED])
def test_the_engine_does_not_start_without_a_declared_file(
        attr: str, name: str, tmp_path: Path, servers: list[_Server], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each declared file is needed: dropped from the declaration, the engine fails at start
    (an import, argv or plan error) instead of serving."""
    monkeypatch.setattr(_engine, attr, tuple(n for n in getattr(_engine, attr) if n != name))
    files = lookup.engine_files([RELEASE])
    assert not any(item["dest"].endswith("/" + name.format(release=RELEASE)) for item in files)
    server = _Server(_engine_root(tmp_path, files), _model(tmp_path))
    servers.append(server)
    code = server.wait_exit()
    assert code is not None and code != 0, server.output()
