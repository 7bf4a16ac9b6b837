"""The installed artifact: the tarball `ansible-galaxy collection build` makes from this checkout
ships the product and nothing else, and, installed into an empty collections path, runs deploy,
status, bench and stop by FQCN with nothing read from, or written to, the checkout or itself."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._server.layout import engine_root

from .conftest import BIN, RECAP, ROOT, group_members, make_inventory

pytestmark = pytest.mark.integration

INSTALLED = ("ansible_collections", "llmops", "sglang")
# Top-level entries of the tarball: the product, and nothing else (galaxy.yml's build_ignore
# says why each of the rest stays out).
TOP_LEVEL = {"MANIFEST.json", "FILES.json", "LICENSE", "README.md", "changelogs", "data", "docs",
             "inventories", "meta", "playbooks", "plugins", "roles", "tests"}
# Tracked files under these roots all ship.
PRODUCT_ROOTS = ("plugins", "roles", "playbooks", "data", "docs", "meta", "changelogs", "tests",
                 "inventories/example")
NEVER = ("tools/", "inventories/gpu/", "inventories/local/", "inventories/seed/", "molecule/", ".venv",
         "build/", "reports/", ".run/", ".cache/", ".ci/", ".git/", "collections/", "Makefile", "ansible.cfg",
         "requirements", "pyproject.toml", ".gitignore", ".ansible-lint", ".yamllint")


def _minimal_env(cfg: Path, collections: Path | None = None) -> dict[str, str]:
    """The caller's environment without anything pointing at the checkout: no ANSIBLE_* (the
    Makefile exports ANSIBLE_CONFIG=<checkout>/ansible.cfg), no PYTHONPATH; a one-section
    ansible.cfg outside the checkout. PWD names the checkout on purpose: a stale $PWD (any process
    started without a shell inherits one) must not decide where anything goes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "PYTHONPATH"}
    env.update(ANSIBLE_CONFIG=str(cfg), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PWD=str(ROOT),
               PATH=f"{BIN}:{os.environ.get('PATH', '')}",
               # Python's own bytecode cache is the one thing that would otherwise appear in the
               # installed collection (the controller imports its filters from there)
               PYTHONDONTWRITEBYTECODE="1")
    if collections is not None:
        env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    return env


def _git_status() -> str:
    return subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=all"],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`ansible-galaxy collection build` of the checkout, run from a folder outside it."""
    work = tmp_path_factory.mktemp("build")
    cfg = work / "ansible.cfg"
    cfg.write_text("[defaults]\n")
    before = _git_status()
    res = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work / "out"),
                          str(ROOT)], cwd=work, env=_minimal_env(cfg), capture_output=True, text=True, check=False,
                         timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _git_status() == before  # the build leaves nothing in the checkout
    return next((work / "out").glob("llmops-sglang-*.tar.gz"))


def _shipping_files() -> set[str]:
    """What the build takes from under the product roots: tracked and untracked-not-ignored
    files (as `make sanity` copies them)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
                          *PRODUCT_ROOTS], cwd=ROOT, capture_output=True, check=True).stdout
    return {name for name in out.decode().split("\0") if name and (ROOT / name).is_file()}


def test_tarball_ships_the_product_and_nothing_else(tarball: Path) -> None:
    with tarfile.open(tarball) as tar:
        members = {m.name: m for m in tar.getmembers()}
    files = {name for name, m in members.items() if m.isfile()}
    extra = {name.split("/")[0] for name in members} - TOP_LEVEL
    assert not extra, sorted(extra)
    # everything under the product roots ships ...
    missing = _shipping_files() - files
    assert not missing, sorted(missing)
    # ... named: the collection's metadata, license, docs, playbooks, plugins, roles
    assert {"MANIFEST.json", "FILES.json", "LICENSE", "README.md", "meta/runtime.yml", "docs/engine.md",
            "playbooks/deploy.yml", "playbooks/status.yml", "playbooks/bench.yml", "playbooks/stop.yml",
            "plugins/modules/throughput_sweep.py", "plugins/filter/plan.py",
            "roles/server/tasks/main.yml", "roles/bench/tasks/main.yml",
            "data/releases.json", "data/gpus.json", "data/profiles.yml"} <= files
    # the model configs the embedded engine reads (configs only, never weights), every one
    models = sorted(p.parent.name for p in (ROOT / "data" / "models").glob("*/config.json"))
    assert "qwen3.6-27b" in models
    assert {f"data/models/{m}/config.json" for m in models} <= files
    assert {n for n in files if n.startswith("data/models/")} == {f"data/models/{m}/config.json" for m in models}
    # the flag schema of every release the collection knows (data/releases.json)
    releases = [r for r in json.loads((ROOT / "data" / "releases.json").read_text()) if not r.startswith("_")]
    assert len(releases) >= 3
    assert {f"data/flag_schemas/sglang-{r}.json" for r in releases} <= files
    # never: maintainers' tools, checkout inventories and toolchain, local state, build output
    for name in members:
        assert not any(name == n.rstrip("/") or name.startswith(n) for n in NEVER), name
        assert "__pycache__" not in name and not name.endswith((".pyc", ".tar.gz")), name
    assert not any(m.issym() or m.islnk() for m in members.values())  # e.g. collections/ -> ../../..


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def _play(env: dict[str, str], cwd: Path, inventory: Path, playbook: str, *args: str,
          timeout: int = 300) -> tuple[int, str, dict[str, dict[str, int]]]:
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), playbook, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    out = proc.stdout + proc.stderr
    recap = {m[0]: {"ok": int(m[1]), "changed": int(m[2]), "failed": int(m[4])} for m in RECAP.findall(out)}
    return proc.returncode, out, recap


def test_installed_collection_runs_deploy_status_bench_stop_by_fqcn(tarball: Path, tmp_path: Path) -> None:
    """Installed from the tarball into an empty collections path, run from a folder outside the
    checkout with a minimal ansible.cfg: the playbooks, the roles, the embedded engine's code and
    data and the model config all come from the install; the report lands in the working
    directory's reports/; nothing is written into the installed collection."""
    work, colls = tmp_path / "work", tmp_path / "collections"
    work.mkdir()
    colls.mkdir()
    for path in (tmp_path, work, colls):
        assert not path.resolve().is_relative_to(ROOT.resolve())
    cfg = work / "ansible.cfg"
    cfg.write_text("[defaults]\nretry_files_enabled = false\n")
    env = _minimal_env(cfg, colls)
    res = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "-p", str(colls), str(tarball)],
                         cwd=work, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    installed = colls.joinpath(*INSTALLED)
    # the only llmops.sglang Ansible can see is the install
    res = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "list", "llmops.sglang", "--format", "json"],
                         cwd=work, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    seen = {path for path, colls_there in json.loads(res.stdout).items() if "llmops.sglang" in colls_there}
    assert seen == {str(colls / "ansible_collections")}, res.stdout

    # Mark the install's host-side code: the deployed engine must carry the mark (the checkout's
    # copy, byte-identical otherwise, does not).
    mark = f"# installed-copy {uuid.uuid4().hex}\n"
    marked = sorted((installed / "plugins" / "module_utils").rglob("*.py"))  # the _engine package too
    assert marked
    for path in marked:
        path.write_text(path.read_text() + mark)
    before = _tree(installed)

    model = installed / "data" / "models" / "qwen3.6-27b"
    dep = make_inventory(tmp_path, sglang_model_path=str(model), sglang_gpus=[0])
    stopped, pid = False, 0
    try:
        rc, out, recap = _play(env, work, dep.inventory, "llmops.sglang.deploy", "-e", "profile=mtp_hicache")
        assert rc == 0, out[-4000:]
        assert recap["localhost"]["failed"] == 0 and recap["localhost"]["changed"] > 0
        manifest = json.loads((dep.base / "deployment.json").read_text())
        assert [i["name"] for i in manifest["instances"]] == ["gpu0"]
        pid = manifest["instances"][0]["pid"]

        # the engine's files under the base dir are the install's, marked
        engine = Path(engine_root(str(dep.base)), *INSTALLED)
        deployed = sorted(p for p in engine.rglob("*") if p.is_file())
        assert any(p.suffix == ".py" for p in deployed) and any(p.suffix == ".json" for p in deployed)
        for path in deployed:
            rel = path.relative_to(engine)
            assert path.read_bytes() == (installed / rel).read_bytes(), rel
            if path.suffix == ".py":
                assert path.read_text().endswith(mark), rel
        # the running server reads the install's model config and nothing of the checkout
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        assert argv[argv.index("--model-path") + 1] == str(model)
        environ = dict(e.split("=", 1) for e in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
                       if "=" in e)
        assert str(ROOT) not in environ.get("PYTHONPATH", "")
        assert engine_root(str(dep.base)) in environ["PYTHONPATH"].split(":")
        assert not Path(os.readlink(f"/proc/{pid}/cwd")).resolve().is_relative_to(ROOT.resolve())

        rc, out, _ = _play(env, work, dep.inventory, "llmops.sglang.status")
        assert rc == 0 and "gpu0: up http://" in out, out[-3000:]

        rc, out, _ = _play(env, work, dep.inventory, "llmops.sglang.bench", "-e", json.dumps(
            {"sglang_bench_concurrency": [1], "sglang_bench_requests": 2, "sglang_bench_max_tokens": 8}))
        assert rc == 0, out[-4000:]
        reports = work / "reports"
        folder = (reports / "latest").resolve()
        assert folder.parent == reports.resolve() and f"report: {folder}" in out, out[-2000:]
        result = folder / "localhost_gpu0_mtp_hicache.json"
        assert {"summary.md", "summary.csv", result.name} <= {p.name for p in folder.iterdir()}
        data = json.loads(result.read_text())
        assert data["sweep"]["points"][0]["ok"] == 2
        assert not (ROOT / "reports" / folder.name).exists()

        rc, out, _ = _play(env, work, dep.inventory, "llmops.sglang.stop")
        assert rc == 0, out[-3000:]
        stopped = True
        assert not group_members(pid)
    finally:
        if not stopped:
            _play(env, work, dep.inventory, "llmops.sglang.stop")
        for leftover in group_members(pid) if pid else []:
            try:
                os.kill(leftover, signal.SIGKILL)
            except OSError:
                pass

    # nothing was written into the installed collection; the working directory holds the reports
    assert _tree(installed) == before
    assert sorted(p.name for p in work.iterdir()) == ["ansible.cfg", "reports"]
