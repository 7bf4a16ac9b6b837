"""Pre-flight (module_utils/_preflight.py): who holds a port, read from /proc like the module
does on a host, with real sockets bound by this test; files and programs that must exist."""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils import _preflight as pf
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.server import preflight_spec


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
    from ansible_collections.llmops.sglang.plugins.module_utils import _layout

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


def test_preflight_spec_from_a_plan() -> None:
    plan = {"model": {"path": "/models/m/"}, "instances": [
        {"name": "gpu0", "port": 30000, "nccl_port": 31000}, {"name": "gpu1", "port": 30001, "nccl_port": 31001}]}
    spec = preflight_spec(plan, {"engine": "sglang"}, python="/v/bin/python", install=False)
    assert [(p["port"], p["instance"], p["what"]) for p in spec["ports"]] == [
        (30000, "gpu0", "HTTP"), (31000, "gpu0", "NCCL"), (30001, "gpu1", "HTTP"), (31001, "gpu1", "NCCL")]
    assert spec["files"][0]["path"] == "/models/m/config.json"
    assert spec["executables"][0]["path"] == "/v/bin/python"
    hub = preflight_spec(dict(plan, model={"path": "Qwen/Qwen3-8B"}), {"engine": "sglang"},
                         python="/v/bin/python", install=True)
    assert hub["files"] == [] and hub["executables"][0]["path"] == "python3"


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
