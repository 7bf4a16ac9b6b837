"""Pre-flight (module_utils/_server/preflight.py): who holds a port, read from /proc like the module
does on a host, with real sockets bound by this test; files and programs that must exist."""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._server import preflight as pf


def _listening(family: int = socket.AF_INET, host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.bind((host, 0))
    sock.listen(1)
    return sock


def test_the_holder_of_a_port_is_named() -> None:
    sock = _listening()
    six = _listening(socket.AF_INET6, "::1")
    try:
        port, port6 = sock.getsockname()[1], six.getsockname()[1]
        held = {lst.port: lst for lst in pf.listeners([port, port6, 1])}
        assert set(held) == {port, port6}
        assert held[port].pid == os.getpid() and "python" in held[port].name.lower()
        assert held[port6].pid == os.getpid()
        problems = pf.check_ports([{"port": port, "instance": "gpu0", "what": "HTTP"},
                                   {"port": port + 1 if port + 1 != port6 else port + 2, "instance": "gpu1"}], None)
        assert problems == [f"port {port} (HTTP port of instance gpu0) is held by pid {os.getpid()} "
                            f"({held[port].name}), which is not this deployment's: stop it, or choose other ports "
                            "(sglang_base_port, sglang_nccl_port_base)"]
    finally:
        sock.close()
        six.close()


def test_a_port_held_by_the_deployments_own_server_is_fine(tmp_path: Path) -> None:
    """The instance that will be replaced holds its port: it is stopped before its replacement
    starts, so that is not a problem (found by its folder: this process works there)."""
    from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout

    base = tmp_path / "sglang"
    paths = _layout.instance_paths(str(base), "gpu0")
    Path(paths["dir"]).mkdir(parents=True)
    Path(paths["launch_script"]).write_text("#!/bin/sh\n")
    sock = _listening()
    here = os.getcwd()
    os.chdir(paths["dir"])
    try:
        port = sock.getsockname()[1]
        assert pf.check_ports([{"port": port, "instance": "gpu0"}], str(base)) == []
        assert pf.check_ports([{"port": port, "instance": "gpu0"}], str(tmp_path / "elsewhere")) != []
    finally:
        os.chdir(here)
        sock.close()


def test_missing_files_and_programs(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert pf.check_paths([{"path": str(tmp_path / "config.json"), "what": "the model's config"}],
                          [{"path": sys.executable}, {"path": "sh"}]) == []
    problems = pf.check_paths(
        [{"path": str(tmp_path / "m" / "config.json"), "what": "the model's config", "fix": "set sglang_model_path"}],
        [{"path": str(tmp_path / "nope" / "python"), "what": "the server's Python"}, {"path": "no-such-command-x"}])
    assert problems == [
        f"the model's config {tmp_path}/m/config.json does not exist on this host: set sglang_model_path",
        f"the server's Python {tmp_path}/nope/python is not an executable file on this host",
        "program no-such-command-x is not an executable file on this host",
    ]


def test_a_program_closed_to_the_service_user(tmp_path: Path) -> None:
    import pwd

    nobody = pwd.getpwnam("nobody").pw_name
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    prog = closed / "python"
    prog.write_text("#!/bin/sh\n")
    prog.chmod(0o755)
    closed.chmod(0o700)
    problems = pf.check_paths([], [{"path": str(prog), "what": "the server's Python"}], user=nobody)
    if os.geteuid() == 0:
        assert problems == [f"the server's Python {prog} cannot be run by {nobody}, the user the servers run as "
                            "(a folder above it or the file itself is closed to that user)"]
    assert pf.runnable_by("/bin/sh", nobody)
    assert pf.runnable_by(str(prog), "no-such-user-yet")  # created by the role later in the run


def test_a_port_held_by_this_router_is_fine_and_anyone_elses_is_named(tmp_path: Path) -> None:
    """The router's pre-flight: its port held by the router of its own folder (re-deploy, or a
    restart on the same port) passes; held by another program it is refused with the router's fix."""
    router_dir = tmp_path / "router-base" / "router"
    router_dir.mkdir(parents=True)
    sock = _listening()
    here = os.getcwd()
    want = [{"port": sock.getsockname()[1], "instance": "router", "what": "HTTP",
             "fix": "or choose another sglang_router_port / sglang_router_prometheus_port"}]
    try:
        port = want[0]["port"]
        [problem] = pf.check_ports(want, None, router_dir=str(router_dir))
        assert problem == (f"port {port} (HTTP port of instance router) is held by pid {os.getpid()} "
                           f"({pf.listeners([port])[0].name}), which is not this deployment's: stop it, "
                           "or choose another sglang_router_port / sglang_router_prometheus_port")
        os.chdir(router_dir)  # the launch script and the unit start the router in its folder
        assert os.getpid() in pf.router_pids(str(router_dir))
        assert pf.check_ports(want, None, router_dir=str(router_dir)) == []
        assert pf.check_ports(want, None, router_dir=str(tmp_path / "other" / "router")) != []
    finally:
        os.chdir(here)
        sock.close()


def test_a_port_held_by_the_service_of_its_ours_dir_is_fine(tmp_path: Path) -> None:
    """The storage tier's master: its ports held by the process working in its folder (a re-deploy)
    pass; held by anything else they are refused with the key to change."""
    folder = tmp_path / "kvstore"
    folder.mkdir()
    sock = _listening()
    here = os.getcwd()
    want = [{"port": sock.getsockname()[1], "instance": "kvstore", "what": "mooncake master RPC",
             "ours_dir": str(folder), "fix": "or choose another sglang_hicache_storage.master_port"}]
    try:
        [problem] = pf.check_ports(want, None)
        assert "(mooncake master RPC port of instance kvstore)" in problem and problem.endswith(
            "stop it, or choose another sglang_hicache_storage.master_port")
        os.chdir(folder)
        assert pf.check_ports(want, None) == []
    finally:
        os.chdir(here)
        sock.close()


def test_a_router_found_by_its_pid_file(tmp_path: Path) -> None:
    """A router that works elsewhere is still this router when its pid file's process group is
    its group (detached_service starts it with setsid and records the group)."""
    import subprocess
    import time

    from ansible_collections.llmops.sglang.plugins.module_utils import _detached

    router_dir = tmp_path / "router"
    router_dir.mkdir()
    pid_file = router_dir / "router.pid"
    script = ("import os, socket, sys, time\n"
              "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
              "print(s.getsockname()[1], flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=str(tmp_path),
                            start_new_session=True,
                            env=dict(os.environ, **{_detached.MARKER_ENV: "sglang-router"}))
    try:
        port = int(proc.stdout.readline())
        stat = _detached.read_stat(proc.pid)
        _detached.write_pid_file(pid_file, _detached.PidRecord(pid=proc.pid, pgid=stat.pgid, starttime=stat.starttime,
                                                               boot_id=_detached.boot_id(), name="sglang-router"))
        record = _detached.read_pid_file(pid_file)
        assert record is not None and record.pgid == proc.pid
        deadline = time.monotonic() + 30
        while not pf.listeners([port]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.pid in pf.router_pids(str(router_dir))
        assert pf.check_ports([{"port": port, "instance": "router"}], None, router_dir=str(router_dir)) == []
        pid_file.unlink()
        assert pf.check_ports([{"port": port, "instance": "router"}], None, router_dir=str(router_dir)) != []
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_commands_that_must_succeed(tmp_path: Path) -> None:
    ok = {"argv": [sys.executable, "-c", "pass"], "what": "a check"}
    fails = {"argv": [sys.executable, "-c", "import sys; print('one'); sys.exit('it is broken')"],
             "what": "the router's flags", "fix": "correct them"}
    missing = {"argv": [str(tmp_path / "nope" / "python"), "-c", "pass"], "what": "the router's flags"}
    assert pf.check_commands([ok]) == []
    assert pf.check_commands([dict(missing, missing_ok=True)]) == []  # installed later in the run
    assert pf.check_commands([fails, missing]) == [
        f"the router's flags: {sys.executable} exited 1: it is broken: correct them",
        f"the router's flags: {tmp_path}/nope/python is not an executable file on this host",
    ]


def test_a_remembered_pass_is_not_run_again_until_the_argv_the_program_or_its_packages_change(tmp_path: Path) -> None:
    """``remember``: the router's flag check (its Python's start and the router's import) runs
    once for the same argv, the same program and the same installed packages."""
    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    site = prefix / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    program = prefix / "bin" / "check"
    runs = tmp_path / "runs.log"
    program.write_text(f"#!/bin/sh\necho run >> {runs}\n[ \"$1\" = good ] || {{ echo 'bad flag' >&2; exit 2; }}\n")
    program.chmod(0o755)
    remember = tmp_path / "router" / ".flags-accepted"
    item = {"argv": [str(program), "good"], "what": "the flags", "remember": str(remember)}

    def ran() -> int:
        return len(runs.read_text().splitlines()) if runs.exists() else 0

    assert pf.check_commands([item]) == [] and ran() == 1
    assert not remember.exists()  # its folder is not there: nothing is created for it
    remember.parent.mkdir()
    assert pf.check_commands([item], record=False) == [] and ran() == 2 and not remember.exists()  # check mode
    assert pf.check_commands([item]) == [] and ran() == 3 and remember.exists()
    assert pf.check_commands([item]) == [] and ran() == 3  # remembered: not run
    assert pf.check_commands([dict(item, argv=[str(program), "bad"])]) == [
        f"the flags: {program} exited 2: bad flag"] and ran() == 4  # other flags: run, and a failure is not kept
    assert pf.check_commands([item]) == [] and ran() == 4
    (site / "sglang_router-9.9.dist-info").mkdir()  # a package installed or upgraded beside it
    os.utime(site, ns=(1, 1))
    assert pf.check_commands([item]) == [] and ran() == 5
    assert pf.check_commands([item]) == [] and ran() == 5
    program.write_text(program.read_text() + "# upgraded\n")  # the program itself changed
    assert pf.check_commands([item]) == [] and ran() == 6


def test_the_service_manager_auto_is_the_hosts(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "1" / "comm").write_text("systemd\n")
    run_systemd = tmp_path / "run-systemd"
    assert pf.service_manager("auto", proc, str(run_systemd)) == "process"  # no /run/systemd/system
    run_systemd.mkdir()
    assert pf.service_manager("auto", proc, str(run_systemd)) == "systemd"
    assert pf.service_manager("process", proc, str(run_systemd)) == "process"
    (proc / "1" / "comm").write_text("tini\n")
    assert pf.service_manager("auto", proc, str(run_systemd)) == "process"
    assert pf.service_manager("systemd", proc, str(run_systemd)) == "systemd"


def _venv(root: Path, dists: dict[str, str]) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("#!/bin/sh\n")
    site = root / "lib" / "python3.12" / "site-packages"
    for name, version in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nName: not-a-header\n")
    return root


def test_packages_current_only_for_exact_pins_the_venv_holds(tmp_path: Path) -> None:
    venv = _venv(tmp_path / "venv", {"aiohttp": "3.9.5", "Typing-Extensions": "4.12.2"})
    assert pf.installed_versions(str(venv)) == {"aiohttp": "3.9.5", "typing-extensions": "4.12.2"}
    assert pf.packages_current(str(venv), ["aiohttp==3.9.5"]) is True
    assert pf.packages_current(str(venv), ["aiohttp == 3.9.5", "typing_extensions==4.12.2"]) is True  # PEP 503 names
    assert pf.packages_current(str(venv), ["aiohttp==3.9.6"]) is False  # another version: pip changes it
    assert pf.packages_current(str(venv), ["aiohttp==3.9.5", "sglang==0.5.23"]) is False  # one missing
    for undecidable in ("aiohttp>=3.9", "aiohttp[speedups]==3.9.5", "aiohttp", "./wheels/aiohttp.whl"):
        assert pf.packages_current(str(venv), [undecidable]) is False, undecidable  # pip decides
    assert pf.packages_current(str(venv), []) is False
    assert pf.packages_current(str(tmp_path / "no-venv"), ["aiohttp==3.9.5"]) is False
    (venv / "bin" / "python").unlink()  # a venv without its Python is not one pip would leave alone
    assert pf.packages_current(str(venv), ["aiohttp==3.9.5"]) is False


def test_a_folder_the_run_makes_must_be_makeable_where_it_goes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HiCache storage folders: the folder, or the closest one above it that exists, writable on a
    read-write mount (server_files makes it); a file in the way is named."""
    (tmp_path / "file").write_text("x")
    folders = [{"path": str(tmp_path / "kv" / "gpu0"), "what": "the HiCache storage folder of gpu0", "fix": "move it"},
               {"path": str(tmp_path), "what": "storage"},
               {"path": str(tmp_path / "file" / "gpu0"), "what": "storage"}]
    assert pf.check_folders(folders) == [f"storage {tmp_path / 'file' / 'gpu0'}: {tmp_path / 'file'} is a file, "
                                         "not a folder"]
    # a folder this user may not write (root writes anywhere, so the answer is given here)
    monkeypatch.setattr(pf.os, "access", lambda path, mode: False)
    assert pf.check_folders(folders[:1]) == [
        f"the HiCache storage folder of gpu0 {tmp_path / 'kv' / 'gpu0'} (it does not exist yet; {tmp_path} would "
        "hold it) is not writable by this user: move it"]
