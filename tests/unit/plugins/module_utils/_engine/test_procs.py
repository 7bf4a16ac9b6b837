"""The embedded engine's process shape (module_utils/_engine/procs.py): SGLang 0.5.17's scheduler
and detokenizer children, their titles, their group, and what happens when one of them dies.

Every engine runs in its own session; the ``groups`` fixture SIGKILLs whatever is left of each
group at teardown. Every wait is bounded.
"""
from __future__ import annotations

import ast
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _detached as d
from ansible_collections.llmops.sglang.plugins.module_utils._engine import procs as ep

from .....ports import free_port

ROOT = Path(__file__).resolve().parents[5]
ENGINE_MODULE = "ansible_collections.llmops.sglang.plugins.module_utils._engine"
DENSE = str(ROOT / "data" / "models" / "qwen3-0.6b-dense")
HYBRID = str(ROOT / "data" / "models" / "qwen35-hybrid-small")
START_TIMEOUT = 30.0
GONE_TIMEOUT = 10.0
MARKER = "sglang-test-procs"


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT / "collections")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update({
        "PYTHONPATH": os.pathsep.join(paths),
        "LLMOPS_SGLANG_RELEASE": "0.5.17",
        "LLMOPS_SIM_GPUS": "NVIDIA H200",
        "CUDA_VISIBLE_DEVICES": "0",
        "LLMOPS_SIM_TIME_SCALE": "0.001",
        "LLMOPS_SIM_HOST_MEM_AVAILABLE_GB": "200",
        d.MARKER_ENV: MARKER,
    })
    env.pop("LLMOPS_SIM_ACCEPT_LENGTH", None)
    env.update(extra)
    return env


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def children_of(pid: int) -> list[d.ProcStat]:
    return sorted((s for s in d.all_stats() if s.ppid == pid and s.alive), key=lambda s: s.pid)


def cmdline_raw(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().rstrip("\n")


def health(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return 0


class Groups:
    """Process groups started by a test; whatever is left of them is SIGKILLed at teardown."""

    def __init__(self) -> None:
        self.pgids: set[int] = set()

    def kill_all(self) -> None:
        for pgid in self.pgids:
            for _ in range(100):
                left = d.group_members(pgid)
                if not left:
                    break
                for proc in left:
                    try:
                        os.kill(proc.pid, signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.05)


@pytest.fixture
def groups() -> Iterator[Groups]:
    tracker = Groups()
    yield tracker
    tracker.kill_all()


class Engine:
    """One engine process in a session of its own, its log in files."""

    def __init__(self, tmp: Path, groups: Groups, argv: list[str], name: str = "engine",
                 port: int | None = None, **env: str) -> None:
        self.port = port or free_port()
        self.argv = ["--model-path", DENSE, "--port", str(self.port), *argv]
        self.err_path = tmp / f"{name}.stderr"
        with open(self.err_path, "w") as err, open(tmp / f"{name}.stdout", "w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", ENGINE_MODULE, *self.argv],
                                         env=_env(**env), stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        groups.pgids.add(self.proc.pid)

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def log(self) -> str:
        return self.err_path.read_text()

    def wait_ready(self) -> None:
        ok = wait_for(lambda: self.proc.poll() is not None or health(self.port) == 200,
                      START_TIMEOUT)
        assert ok and self.proc.poll() is None, f"not ready: {self.log()[-2000:]}"

    def wait_children(self, count: int) -> list[d.ProcStat]:
        assert wait_for(lambda: len(children_of(self.pid)) == count, 10.0), \
            (children_of(self.pid), self.log()[-2000:])
        return children_of(self.pid)

    def wait_exit(self, timeout: float = GONE_TIMEOUT) -> int:
        return int(self.proc.wait(timeout=timeout))

    def group_empty(self) -> bool:
        return wait_for(lambda: not d.group_members(self.pid), GONE_TIMEOUT)


def assert_titles(engine: Engine, expected: list[str]) -> list[d.ProcStat]:
    """The main's children carry exactly these titles (cmdline and comm), in the main's
    process group and session."""
    kids = engine.wait_children(len(expected))
    # titles are set by the children themselves: give them a moment
    assert wait_for(lambda: sorted(comm(k.pid) for k in kids)
                    == sorted(t[:ep.COMM_LEN] for t in expected), 10.0)
    assert sorted(cmdline_raw(k.pid) for k in kids) == sorted(t.encode() + b"\0" for t in expected)
    main = d.read_stat(engine.pid)
    assert main is not None and main.pgid == engine.pid and main.sid == engine.pid
    for kid in kids:
        assert (kid.ppid, kid.pgid, kid.sid) == (engine.pid, engine.pid, engine.pid)
        assert d.read_cmdline(kid.pid) == [cmdline_raw(kid.pid).rstrip(b"\0").decode()]
        # as after SGLang's setproctitle: the children's /proc environ shows no service marker
        environ = d.read_environ(kid.pid)
        assert environ is not None and d.MARKER_ENV not in environ
    return kids


def by_title(kids: list[d.ProcStat], title: str) -> int:
    return next(k.pid for k in kids if cmdline_raw(k.pid) == title.encode() + b"\0")


# ------------------------------------------------------------------------------------------
# the shape (pure): SGLang 0.5.17's naming rule
# ------------------------------------------------------------------------------------------
def _titles(args: dict[str, object], environ: dict[str, str] | None = None,
            ) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(s.name, s.title, s.children) for s in ep.child_specs(args, environ or {})]


def test_titles_follow_sglang_0_5_17() -> None:
    assert _titles({}) == [("scheduler_0", "sglang::scheduler", ()),
                           ("detokenizer", "sglang::detokenizer", ())]
    assert _titles({"tp_size": 2}) == [("scheduler_0", "sglang::scheduler_TP0", ()),
                                       ("scheduler_1", "sglang::scheduler_TP1", ()),
                                       ("detokenizer", "sglang::detokenizer", ())]
    assert [t for _, t, _ in _titles({"tp_size": 2, "pp_size": 2})] == [
        "sglang::scheduler_PP0_TP0", "sglang::scheduler_PP0_TP1", "sglang::scheduler_PP1_TP0",
        "sglang::scheduler_PP1_TP1", "sglang::detokenizer"]
    # EP rank = tp_rank % (tp / moe_dp) // (tp / moe_dp / ep)
    assert [t for _, t, _ in _titles({"tp_size": 4, "ep_size": 2})][:4] == [
        "sglang::scheduler_TP0_EP0", "sglang::scheduler_TP1_EP0", "sglang::scheduler_TP2_EP1",
        "sglang::scheduler_TP3_EP1"]
    assert [t for _, t, _ in _titles({"tp_size": 4, "attn_cp_size": 2, "moe_dp_size": 2})][:4] == [
        "sglang::scheduler_ATTN_CP0_MOE_DP0_TP0", "sglang::scheduler_ATTN_CP0_MOE_DP0_TP1",
        "sglang::scheduler_ATTN_CP1_MOE_DP1_TP2", "sglang::scheduler_ATTN_CP1_MOE_DP1_TP3"]
    # two nodes: this node's half of the ranks, and no detokenizer on node rank 1
    assert _titles({"tp_size": 4, "nnodes": 2, "node_rank": 1}) == [
        ("scheduler_0", "sglang::scheduler_TP2", ()), ("scheduler_1", "sglang::scheduler_TP3", ())]
    # 0.5.10's schema names the sizes by their long flags
    assert [t for _, t, _ in _titles({"tensor_parallel_size": 2})][:2] == [
        "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    # SGLANG_DP_RANK (router) adds the DP part
    assert _titles({}, {"SGLANG_DP_RANK": "3"})[0][1] == "sglang::scheduler_DP3"
    assert _titles({"detokenizer_worker_num": 2})[1:] == [
        ("detokenizer_0", "sglang::detokenizer", ()), ("detokenizer_1", "sglang::detokenizer", ()),
        ("detokenizer_router", "sglang::detokenizer_router", ())]


def test_data_parallel_runs_a_controller_with_the_schedulers() -> None:
    assert _titles({"dp_size": 2, "tp_size": 2}) == [
        ("scheduler_0", "sglang::data_parallel_controller",
         ("sglang::scheduler_DP0_TP0", "sglang::scheduler_DP0_TP1", "sglang::scheduler_DP1_TP0",
          "sglang::scheduler_DP1_TP1")),
        ("detokenizer", "sglang::detokenizer", ())]
    # DP attention: one TP group, the DP rank follows the TP rank
    assert _titles({"dp_size": 2, "tp_size": 4, "enable_dp_attention": True})[0][2] == (
        "sglang::scheduler_DP0_TP0", "sglang::scheduler_DP0_TP1", "sglang::scheduler_DP1_TP2",
        "sglang::scheduler_DP1_TP3")


def test_children_are_light_and_stdlib_only() -> None:
    """The module and the children's program import only the stdlib (no aiohttp, no perf
    model); the program compiles and never busy-loops."""
    source = (ROOT / "plugins" / "module_utils" / "_engine" / "procs.py").read_text()
    tree = ast.parse(source)
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    program = ep.child_program("sglang::scheduler", 1, sys.executable, ("sglang::scheduler_DP0",))
    compile(program, "<child>", "exec")
    assert "aiohttp" not in program and "perfmodel" not in program
    assert "signal.pause()" in program and "os.wait()" in program


def test_server_role_ships_every_engine_module() -> None:
    """The server role ships the engine package and the module_utils declared in its
    ``MODULE_UTILS`` (through the engine_files lookup): the declaration must hold every sibling
    the package imports, directly or through another one."""
    from ansible_collections.llmops.sglang.plugins.module_utils import _engine

    shipped = set(_engine.MODULE_UTILS)
    utils = ROOT / "plugins" / "module_utils"
    package = ".module_utils._engine"
    needed: set[str] = set()
    todo = [p.relative_to(utils).as_posix() for p in (utils / "_engine").rglob("*.py")]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if not name.startswith("_engine/"):
            needed.add(name)
        tree = ast.parse((utils / name).read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = node.module or ""
            if module.endswith(package) or f"{package}." in module:
                continue  # the package itself ships whole
            if module.endswith("module_utils"):
                todo += [f"{alias.name}.py" for alias in node.names if (utils / f"{alias.name}.py").is_file()]
            elif ".module_utils._" in module:
                parts = module.split(".module_utils.", 1)[1].split(".")
                if (utils / Path(*parts)).is_dir():  # from ..._shared import flags: the files it names
                    todo += ["/".join([*parts, alias.name]) + ".py" for alias in node.names]
                else:
                    todo.append("/".join(parts) + ".py")
    assert needed <= shipped, needed - shipped


# ------------------------------------------------------------------------------------------
# real processes
# ------------------------------------------------------------------------------------------
def test_tp1_shape_and_group_sigterm_leaves_nothing(tmp_path: Path, groups: Groups) -> None:
    engine = Engine(tmp_path, groups, [])
    engine.wait_ready()
    assert_titles(engine, ["sglang::scheduler", "sglang::detokenizer"])
    os.killpg(engine.pid, signal.SIGTERM)
    assert engine.wait_exit() == 0
    assert engine.group_empty(), d.group_members(engine.pid)
    log = engine.log()
    assert "SIGTERM received. signum=None frame=None. Draining requests and shutting down..." in log
    assert "crashed" not in log and "SIGQUIT" not in log


def test_tp2_shape_and_children_die_with_the_main(tmp_path: Path, groups: Groups) -> None:
    engine = Engine(tmp_path, groups, ["--tp-size", "2"],
                    LLMOPS_SIM_GPUS="NVIDIA H200,NVIDIA H200", CUDA_VISIBLE_DEVICES="0,1")
    engine.wait_ready()
    kids = assert_titles(engine, ["sglang::scheduler_TP0", "sglang::scheduler_TP1",
                                  "sglang::detokenizer"])
    os.kill(engine.pid, signal.SIGKILL)  # the main alone: PR_SET_PDEATHSIG takes the children
    assert engine.wait_exit() == -signal.SIGKILL
    assert wait_for(lambda: not any(d.read_stat(k.pid) and d.read_stat(k.pid).alive  # type: ignore[union-attr]
                                    for k in kids), GONE_TIMEOUT)
    assert engine.group_empty()


def test_data_parallel_controller_and_its_schedulers(tmp_path: Path, groups: Groups) -> None:
    engine = Engine(tmp_path, groups, ["--dp-size", "2"],
                    LLMOPS_SIM_GPUS="NVIDIA H200,NVIDIA H200", CUDA_VISIBLE_DEVICES="0,1")
    engine.wait_ready()
    kids = assert_titles(engine, ["sglang::data_parallel_controller", "sglang::detokenizer"])
    controller = by_title(kids, "sglang::data_parallel_controller")
    assert wait_for(lambda: len(children_of(controller)) == 2, 10.0)
    grand = children_of(controller)
    assert wait_for(lambda: sorted(cmdline_raw(g.pid) for g in grand)
                    == [b"sglang::scheduler_DP0\0", b"sglang::scheduler_DP1\0"], 10.0)
    assert all(g.pgid == engine.pid and g.sid == engine.pid for g in grand)
    assert wait_for(lambda: {comm(g.pid) for g in grand} == {"sglang::schedul"}, 10.0)
    os.kill(engine.pid, signal.SIGKILL)
    assert engine.wait_exit() == -signal.SIGKILL
    assert engine.group_empty(), d.group_members(engine.pid)


def test_a_dead_scheduler_takes_the_server_down(tmp_path: Path, groups: Groups,
                                                fixtures_dir: Path) -> None:
    engine = Engine(tmp_path, groups, [])
    engine.wait_ready()
    kids = assert_titles(engine, ["sglang::scheduler", "sglang::detokenizer"])
    scheduler = by_title(kids, "sglang::scheduler")
    os.kill(scheduler, signal.SIGKILL)
    # SubprocessWatchdog (1 s) -> SIGQUIT -> 5 s x time scale -> kill_process_tree -> SIGKILL
    assert engine.wait_exit() == -signal.SIGKILL
    assert engine.group_empty(), d.group_members(engine.pid)
    lines = [line.split("] ", 1)[1] for line in engine.log().splitlines()
             if line.startswith("[")]
    tail = lines[lines.index(f"Subprocess scheduler_0 (pid={scheduler}) crashed with exit code "
                             "-9. Triggering SIGQUIT for cleanup..."):]
    assert tail == [
        f"Subprocess scheduler_0 (pid={scheduler}) crashed with exit code -9. Triggering "
        "SIGQUIT for cleanup...",
        "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        "Sleeping 5 seconds before crash diagnostics to let GPU activity settle.",
        "No live scheduler processes found; skipping py-spy and CUDA coredump.",
        f"kill_process_tree called: parent_pid={engine.pid}, include_parent=True, "
        f"pid={engine.pid}",
    ]
    recorded = (fixtures_dir / "sglang-0.5.17-h200" / "dense" / "server.log").read_text()
    for line in tail[1:4]:
        assert f"] {line}\n" in recorded  # the recorded wording


def test_a_scheduler_dead_while_loading_fails_the_start(tmp_path: Path, groups: Groups) -> None:
    # at time scale 0.2 the modelled load (about 145 s) takes about 29 s: plenty to kill it
    engine = Engine(tmp_path, groups, [], LLMOPS_SIM_TIME_SCALE="0.2")
    kids = engine.wait_children(2)
    assert health(engine.port) in (0, 503)
    os.kill(by_title(kids, "sglang::scheduler"), signal.SIGKILL)
    # _wait_for_scheduler_ready notices within its 5 s poll
    assert engine.wait_exit(timeout=15.0) == 1
    assert engine.group_empty(), d.group_members(engine.pid)
    log = engine.log()
    assert (f"kill_process_tree called: parent_pid={engine.pid}, include_parent=False, "
            f"pid={engine.pid}") in log
    assert log.rstrip().endswith(
        "Traceback (most recent call last):\nRuntimeError: Rank 0 scheduler died during "
        "initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause is the "
        "OS OOM killer. Run `dmesg -T | grep -i oom` to check.")


def test_failed_starts_leave_no_child(tmp_path: Path, groups: Groups) -> None:
    bad_flag = Engine(tmp_path, groups, ["--bogus-flag", "1"], name="bad")
    assert bad_flag.wait_exit(START_TIMEOUT) == 2
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        in_use = Engine(tmp_path, groups, [], name="busy", port=busy.getsockname()[1])
        assert in_use.wait_exit(START_TIMEOUT) == 1
    assert "address already in use" in in_use.log()
    too_big = Engine(tmp_path, groups, ["--enable-hierarchical-cache", "--hicache-size", "500"],
                     name="hicache", LLMOPS_SIM_HOST_MEM_AVAILABLE_GB="12")
    assert too_big.wait_exit(START_TIMEOUT) == 1
    assert "Not enough host memory" in too_big.log()
    for engine in (bad_flag, in_use, too_big):
        assert engine.group_empty(), d.group_members(engine.pid)
        assert "crashed" not in engine.log()


def test_detached_service_stop_leaves_no_process(tmp_path: Path, groups: Groups) -> None:
    port = free_port()
    env = _env()
    exports = "".join(f"export {k}={_q(v)}\n" for k, v in env.items()
                      if k.startswith(("LLMOPS_", "CUDA_", "PYTHONPATH")) and k != d.MARKER_ENV)
    script = tmp_path / "launch.sh"
    script.write_text(f"#!/bin/sh\n{exports}exec {_q(sys.executable)} -m {ENGINE_MODULE} "
                      f"--model-path {_q(DENSE)} --port {port}\n")
    script.chmod(0o755)
    spec = d.ServiceSpec(name="sglang-gpu0", command=[str(script)],
                         pid_file=str(tmp_path / "run" / "gpu0.pid"),
                         log_file=str(tmp_path / "log" / "gpu0.log"), chdir=str(tmp_path),
                         start_grace=0.2, stop_timeout=10.0, kill_timeout=5.0)
    try:
        started = d.start(spec)
    finally:
        record = d.read_pid_file(spec.pid_file)
        if record is not None:
            groups.pgids.add(record.pgid)
    pid = started.status.pid
    assert pid is not None
    assert wait_for(lambda: health(port) == 200, START_TIMEOUT), \
        Path(spec.log_file).read_text()[-2000:]
    assert wait_for(lambda: len(children_of(pid)) == 2, 10.0)
    kids = children_of(pid)
    status = d.status(spec)
    assert status.running and set(status.group_pids) == {pid} | {k.pid for k in kids}
    record = d.read_pid_file(spec.pid_file)
    for kid in kids:  # no marker visible (setproctitle's doing on a real server), yet the service's own
        environ = d.read_environ(kid.pid)
        assert environ is not None and d.MARKER_ENV not in environ
        assert d.belongs_to(record, kid.pid, spec.name)
    result = d.stop(spec)
    assert result.changed and not result.killed, result.msg
    assert set(result.stopped_pids) >= {pid} | {k.pid for k in kids}
    assert d.group_members(pid) == []
    assert "crashed" not in Path(spec.log_file).read_text()


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
