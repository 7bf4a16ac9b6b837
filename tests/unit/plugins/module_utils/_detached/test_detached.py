"""Tests for module_utils/_detached.py and the detached_service module, with real processes.

Every service under test is a small shell script in tmp_path that ``exec``s a sleeping Python
with a recognizable command line (``llmops-test-server``), like a launch script exec'ing
``python -m sglang.launch_server``. Every process group a test starts is killed by the
``groups`` fixture's finalizer, whatever the test's outcome.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _detached as d
from ansible_collections.llmops.sglang.plugins.module_utils._detached import starting as d_starting

ROOT = Path(__file__).resolve().parents[5]
PY = sys.executable
SLEEP = "import time; time.sleep(120)"
IGNORE_TERM = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('stubborn ready', flush=True); time.sleep(120)"
)
SPAWN_WORKER = (
    "import subprocess, sys, time; "
    f"subprocess.Popen([sys.executable, '-c', {SLEEP!r}, 'llmops-test-worker']); time.sleep(120)"
)
SPAWN_STUBBORN = (
    "import subprocess, sys, time; "
    f"subprocess.Popen([sys.executable, '-c', {IGNORE_TERM!r}, 'llmops-test-stubborn']); time.sleep(120)"
)


def _q(text: str) -> str:
    """Single-quote for sh."""
    return "'" + text.replace("'", "'\"'\"'") + "'"


def write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return path


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def members(pgid: int) -> list[d.ProcStat]:
    return d.group_members(pgid)


class Groups:
    """Process groups started by a test; all killed at teardown."""

    def __init__(self) -> None:
        self.pgids: set[int] = set()

    def add(self, pgid: int | None) -> None:
        if pgid:
            self.pgids.add(pgid)

    def add_from_pid_file(self, pid_file: Path) -> None:
        record = d.read_pid_file(pid_file)
        if record is not None:
            self.add(record.pgid)

    def kill_all(self) -> None:
        for pgid in self.pgids:
            for _ in range(50):
                left = members(pgid)
                if not left:
                    break
                for proc in left:
                    try:
                        os.kill(proc.pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                for proc in left:
                    try:
                        os.waitpid(proc.pid, os.WNOHANG)
                    except ChildProcessError:
                        pass
                time.sleep(0.05)
            try:
                os.waitpid(pgid, os.WNOHANG)
            except ChildProcessError:
                pass


@pytest.fixture
def groups() -> Iterator[Groups]:
    tracker = Groups()
    yield tracker
    tracker.kill_all()


@pytest.fixture
def server_script(tmp_path: Path) -> Path:
    """Leaves a re-parented orphan (subshell exits) and a worker child, then execs the server."""
    body = (
        f'echo "launching $0"\n'
        f"( {_q(PY)} -c {_q(SLEEP)} llmops-test-orphan & )\n"
        f"exec {_q(PY)} -c {_q(SPAWN_WORKER)} llmops-test-server --port 1\n"
    )
    return write_script(tmp_path / "launch.sh", body)


def make_spec(tmp_path: Path, script: Path, **kw: object) -> d.ServiceSpec:
    spec = d.ServiceSpec(
        name=str(kw.pop("name", "test-svc")),
        command=[str(script)],
        pid_file=str(tmp_path / "run" / "svc.pid"),
        log_file=str(tmp_path / "log" / "svc.log"),
        chdir=str(tmp_path),
        start_grace=0.2,
        stop_timeout=5.0,
        kill_timeout=5.0,
    )
    for key, value in kw.items():
        setattr(spec, key, value)
    return spec


def started(spec: d.ServiceSpec, groups: Groups) -> d.ActionResult:
    try:
        result = d.start(spec)
    finally:
        groups.add_from_pid_file(Path(spec.pid_file))
    groups.add(result.status.pgid)
    return result


# ------------------------------------------------------------------------------------------
# pure parsing


def test_parse_stat_with_spaces_and_parens_in_comm() -> None:
    fields = " ".join(["S", "1", "4242", "4242"] + ["0"] * 15 + ["98765"] + ["0"] * 10)
    stat = d.parse_stat(f"4243 (odd) name (x)) {fields}\n")
    assert (stat.pid, stat.comm, stat.state) == (4243, "odd) name (x)", "S")
    assert (stat.ppid, stat.pgid, stat.sid, stat.starttime) == (1, 4242, 4242, 98765)


def test_parse_stat_of_own_process() -> None:
    stat = d.read_stat(os.getpid())
    assert stat is not None and stat.pid == os.getpid() and stat.alive
    assert stat.pgid == os.getpgid(0) and stat.sid == os.getsid(0)


def test_pid_file_round_trip_and_bare_and_garbage(tmp_path: Path) -> None:
    record = d.PidRecord(pid=12, pgid=12, starttime=345, boot_id="b", started_at="t", name="n", argv=("a",))
    path = tmp_path / "x" / "svc.pid"
    d.write_pid_file(path, record)
    assert path.read_text().splitlines()[0] == "12"
    assert (path.stat().st_mode & 0o777) == 0o644
    assert d.read_pid_file(path) == record
    assert list(path.parent.iterdir()) == [path]  # no temp file left behind
    assert d.parse_pid_file("77\n") == d.PidRecord(pid=77, pgid=77)
    assert d.parse_pid_file("77\nnot json\n") == d.PidRecord(pid=77, pgid=77)
    assert d.parse_pid_file("") is None
    assert d.parse_pid_file("abc\n") is None
    assert d.parse_pid_file("-3\n") is None


def test_parse_env_file() -> None:
    text = "# comment\n\nA=1\nexport B = two words \nC='quoted = x'\nD=\"dq\"\nE=\n"
    assert d.parse_env_file(text) == {"A": "1", "B": "two words", "C": "quoted = x", "D": "dq", "E": ""}
    with pytest.raises(d.DetachedServiceError) as err:
        d.parse_env_file("A=1\nsecret-value-without-key\n")
    assert "line 2" in err.value.msg and "secret-value" not in err.value.msg


def test_parse_umask() -> None:
    assert d.parse_umask("0022") == 0o22
    assert d.parse_umask("027") == 0o27
    assert d.parse_umask(0o077) == 0o77
    assert d.parse_umask(None) is None
    with pytest.raises(d.DetachedServiceError):
        d.parse_umask("0999")


# ------------------------------------------------------------------------------------------
# real processes


def test_start_detaches_and_survives_its_parent(tmp_path: Path, server_script: Path, groups: Groups) -> None:
    spec = make_spec(tmp_path, server_script)
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'collections')!r})\n"
        "from ansible_collections.llmops.sglang.plugins.module_utils import _detached as d\n"
        f"spec = d.ServiceSpec(name='test-svc', command=[{str(server_script)!r}], pid_file={spec.pid_file!r}, "
        f"log_file={spec.log_file!r}, start_grace=0.2)\n"
        "r = d.start(spec)\n"
        "print(json.dumps({'pid': r.status.pid, 'changed': r.changed}))\n"
    )
    parent = subprocess.run(
        [PY, "-c", code], capture_output=True, text=True, timeout=20, cwd=tmp_path, check=False
    )
    groups.add_from_pid_file(Path(spec.pid_file))
    assert parent.returncode == 0, parent.stderr
    out = json.loads(parent.stdout)
    pid = out["pid"]
    assert out["changed"] is True
    # The starting process is gone; the server runs on, leading its own session and group.
    stat = d.read_stat(pid)
    assert stat is not None and stat.alive
    assert stat.pgid == pid and stat.sid == pid
    assert stat.sid != os.getsid(0)
    # the launch script execs the server (no `match` here: start does not wait for the exec); on a
    # loaded machine the leader may still be the shell when start returns (CI run Z3)
    assert wait_for(lambda: "llmops-test-server" in d.read_cmdline(pid), 30), d.read_cmdline(pid)
    assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    assert os.readlink(f"/proc/{pid}/fd/1") == spec.log_file
    assert os.readlink(f"/proc/{pid}/fd/2") == spec.log_file
    assert os.readlink(f"/proc/{pid}/cwd") == str(tmp_path)  # no chdir: the parent's cwd
    current = d.status(spec)
    assert current.running and current.pid == pid
    assert "launching" in Path(spec.log_file).read_text()
    assert d.stop(spec).changed


def test_start_twice_is_idempotent(tmp_path: Path, server_script: Path, groups: Groups) -> None:
    spec = make_spec(tmp_path, server_script, match="llmops-test-server")
    first = started(spec, groups)
    assert first.changed and first.status.running and first.status.pid
    assert first.status.pgid == first.status.pid
    assert first.status.started_at and first.status.uptime is not None
    second = started(spec, groups)
    assert not second.changed
    assert second.status.pid == first.status.pid
    assert d.apply(spec, "status").status.pid == first.status.pid


def test_stop_kills_whole_group_including_reparented(tmp_path: Path, server_script: Path, groups: Groups) -> None:
    spec = make_spec(tmp_path, server_script)
    pid = started(spec, groups).status.pid
    assert pid is not None
    # server + its worker + the orphan re-parented away from the script's subshell
    assert wait_for(lambda: len(members(pid)) == 3)
    group = members(pid)
    assert any(p.ppid != pid and p.pid != pid for p in group), "expected a re-parented process"
    result = d.stop(spec)
    assert result.changed and not result.killed
    assert set(result.stopped_pids) >= {p.pid for p in group}
    assert members(pid) == []
    assert not Path(spec.pid_file).exists()
    again = d.stop(spec)
    assert not again.changed and not again.stopped_pids


def test_sigterm_ignoring_process_gets_sigkill(tmp_path: Path, groups: Groups) -> None:
    script = write_script(tmp_path / "stubborn.sh", f"exec {_q(PY)} -c {_q(SPAWN_STUBBORN)} llmops-test-server\n")
    spec = make_spec(tmp_path, script, stop_timeout=0.5)
    pid = started(spec, groups).status.pid
    assert pid is not None
    assert wait_for(lambda: "stubborn ready" in Path(spec.log_file).read_text())
    begin = time.monotonic()
    result = d.stop(spec)
    assert result.changed and result.killed
    assert len(result.stopped_pids) == 2
    assert members(pid) == []
    # SIGKILL after stop_timeout: never before; the upper bound only guards against waiting on
    # a process that ignores SIGTERM for ever (load cannot stretch 0.5 s to 60)
    assert 0.5 <= time.monotonic() - begin < 60.0


def _dead_pid() -> int:
    proc = subprocess.Popen([PY, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("kind", ["bare_own_pid", "own_pid_other_starttime", "dead_pid", "garbage"])
def test_stale_pid_file_is_not_running_and_start_works(
    tmp_path: Path, server_script: Path, groups: Groups, kind: str
) -> None:
    spec = make_spec(tmp_path, server_script)
    pid_file = Path(spec.pid_file)
    pid_file.parent.mkdir(parents=True)
    me = d.read_stat(os.getpid())
    assert me is not None
    if kind == "bare_own_pid":
        pid_file.write_text(f"{os.getpid()}\n")
    elif kind == "own_pid_other_starttime":
        record = d.PidRecord(pid=me.pid, pgid=me.pgid, starttime=me.starttime + 1, boot_id=d.boot_id())
        pid_file.write_text(record.to_text())
    elif kind == "dead_pid":
        pid_file.write_text(f"{_dead_pid()}\n")
    else:
        pid_file.write_text("not a pid\n")
    current = d.status(spec)
    assert not current.running and current.stale and current.group_pids == []
    result = started(spec, groups)
    assert result.changed and result.removed_stale_pid_file and result.status.running
    assert result.status.pid != os.getpid()
    assert os.getpid() in [p.pid for p in d.all_stats()]  # the unrelated process was left alone
    d.stop(spec)


def test_stale_pid_file_from_another_boot(tmp_path: Path, server_script: Path, groups: Groups) -> None:
    spec = make_spec(tmp_path, server_script)
    me = d.read_stat(os.getpid())
    assert me is not None
    record = d.PidRecord(pid=me.pid, pgid=me.pgid, starttime=me.starttime, boot_id="another-boot")
    d.write_pid_file(spec.pid_file, record)
    assert not d.status(spec).running


def test_stop_with_stale_pid_file_removes_it(tmp_path: Path, server_script: Path) -> None:
    spec = make_spec(tmp_path, server_script)
    d.write_pid_file(spec.pid_file, d.PidRecord(pid=_dead_pid(), pgid=1, starttime=1))
    assert d.stop(spec, check_mode=True).changed
    assert Path(spec.pid_file).exists()
    result = d.stop(spec)
    assert result.changed and result.removed_stale_pid_file and not result.stopped_pids
    assert not Path(spec.pid_file).exists()


def test_a_leader_that_execs_after_the_grace_is_still_the_one_started(tmp_path: Path, groups: Groups) -> None:
    """A launch script shows `match` only once it has exec'd the server; on a busy host that
    came after start_grace (seen with 6 test workers on 2 cores: start returned pid None for a
    leader that was running). Here the script waits 1.5 s before its exec, grace 0.2 s."""
    script = write_script(tmp_path / "slow.sh", f"sleep 1.5\nexec {_q(PY)} -c {_q(SLEEP)} llmops-test-server\n")
    spec = make_spec(tmp_path, script, match="llmops-test-server")
    result = started(spec, groups)
    assert result.changed and result.status.running, result
    assert result.status.pid == d.status(spec).pid and "llmops-test-server" in " ".join(result.status.cmdline)
    d.stop(spec)


def test_a_leader_that_exits_before_it_execs_is_reported_with_its_log(tmp_path: Path, groups: Groups) -> None:
    script = write_script(tmp_path / "dies.sh", "sleep 0.5\necho 'no GPU found' >&2\nexit 3\n")
    spec = make_spec(tmp_path, script, match="llmops-test-server")
    with pytest.raises(d.DetachedServiceError, match="status 3 before it ran what `match` names") as err:
        started(spec, groups)
    assert "no GPU found" in str(err.value) and not Path(spec.pid_file).exists()


def test_match_must_be_in_cmdline(tmp_path: Path, server_script: Path, groups: Groups) -> None:
    spec = make_spec(tmp_path, server_script, match="llmops-test-server")
    pid = started(spec, groups).status.pid
    other = make_spec(tmp_path, server_script, match="sglang.launch_server")
    assert not d.status(other).running
    assert d.status(spec).running and d.status(spec).pid == pid
    d.stop(spec)


def test_leftovers_of_a_dead_leader_are_stopped(tmp_path: Path, server_script: Path, groups: Groups) -> None:
    spec = make_spec(tmp_path, server_script)
    pid = started(spec, groups).status.pid
    assert pid is not None
    assert wait_for(lambda: len(members(pid)) == 3)
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: len(members(pid)) == 2)
    current = d.status(spec)
    assert not current.running and current.stale and len(current.group_pids) == 2
    result = d.stop(spec)
    assert result.changed and len(result.stopped_pids) == 2
    assert members(pid) == []


def test_script_that_exits_fails_with_log_tail(tmp_path: Path) -> None:
    lines = "".join(f"echo line-{i}\n" for i in range(80))
    script = write_script(tmp_path / "crash.sh", lines + "echo 'boom: bad flag --frobnicate' >&2\nexit 3\n")
    spec = make_spec(tmp_path, script, name="sglang-gpu7", log_tail_lines=5)
    with pytest.raises(d.DetachedServiceError) as err:
        d.start(spec)
    msg = err.value.msg
    assert "sglang-gpu7" in msg and "status 3" in msg and "boom: bad flag --frobnicate" in msg
    assert err.value.log_tail == ["line-76", "line-77", "line-78", "line-79", "boom: bad flag --frobnicate"]
    assert not Path(spec.pid_file).exists()


def test_missing_or_non_executable_command_fails(tmp_path: Path) -> None:
    script = tmp_path / "plain.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(d.DetachedServiceError, match="not executable"):
        d.start(make_spec(tmp_path, script))
    with pytest.raises(d.DetachedServiceError, match="does not exist"):
        d.start(make_spec(tmp_path, tmp_path / "missing.sh"))


def test_env_file_reaches_process_not_cmdline(tmp_path: Path, groups: Groups) -> None:
    secret = "hf_s3cr3t_value_42"
    env_file = tmp_path / "secrets.env"
    env_file.write_text(f"# token\nexport HF_TOKEN={secret}\nOVERRIDDEN=from-file\n")
    env_file.chmod(0o600)
    script = write_script(tmp_path / "env.sh", f"exec {_q(PY)} -c {_q(SLEEP)} llmops-test-server\n")
    spec = make_spec(
        tmp_path, script, env_file=str(env_file), env={"OVERRIDDEN": "from-env", "CUDA_VISIBLE_DEVICES": "3"}
    )
    pid = started(spec, groups).status.pid
    assert pid is not None
    environ = d.read_environ(pid)
    assert environ is not None
    assert environ["HF_TOKEN"] == secret
    assert environ["OVERRIDDEN"] == "from-env"
    assert environ["CUDA_VISIBLE_DEVICES"] == "3"
    assert environ[d.MARKER_ENV] == "test-svc"
    assert not any(secret in arg for arg in d.read_cmdline(pid))
    assert secret not in Path(spec.pid_file).read_text()
    assert secret not in Path(spec.log_file).read_text()
    d.stop(spec)


def test_umask_is_applied(tmp_path: Path, groups: Groups) -> None:
    script = write_script(tmp_path / "umask.sh", f"umask\nexec {_q(PY)} -c {_q(SLEEP)} llmops-test-server\n")
    spec = make_spec(tmp_path, script, umask=0o027)
    started(spec, groups)
    assert "0027" in Path(spec.log_file).read_text()
    d.stop(spec)


def test_check_mode_changes_nothing(tmp_path: Path, server_script: Path, groups: Groups) -> None:
    spec = make_spec(tmp_path, server_script)
    would = d.start(spec, check_mode=True)
    assert would.changed and not would.status.running
    assert not Path(spec.pid_file).exists() and not Path(spec.log_file).exists()
    assert not d.stop(spec, check_mode=True).changed
    pid = started(spec, groups).status.pid
    before = Path(spec.pid_file).read_text()
    assert not d.start(spec, check_mode=True).changed
    assert d.stop(spec, check_mode=True).changed
    assert d.restart(spec, check_mode=True).changed
    current = d.status(spec)
    assert current.running and current.pid == pid
    assert Path(spec.pid_file).read_text() == before
    d.stop(spec)


def test_restart_replaces_the_process(tmp_path: Path, server_script: Path, groups: Groups) -> None:
    spec = make_spec(tmp_path, server_script)
    first = started(spec, groups).status.pid
    assert first is not None
    assert wait_for(lambda: len(members(first)) == 3)
    try:
        result = d.restart(spec)
    finally:
        groups.add_from_pid_file(Path(spec.pid_file))
    assert result.changed and result.status.running and result.status.pid != first
    assert members(first) == []
    assert first in result.stopped_pids
    d.stop(spec)


def test_restart_changed_restarts_only_a_service_started_with_another_command(tmp_path: Path, groups: Groups) -> None:
    """state=started with restart_changed (the storage tier's master): the same command line is
    left running, another one (the pid file's recorded argv) is restarted."""
    spec = d.ServiceSpec(name="kv", command=[PY, "-c", SLEEP, "one"], pid_file=str(tmp_path / "kv.pid"),
                         log_file=str(tmp_path / "kv.log"), chdir=str(tmp_path), start_grace=0.2, stop_timeout=5.0,
                         kill_timeout=5.0, restart_changed=True)
    try:
        first = d.apply(spec, "started")
        groups.add(first.status.pgid)
        same = d.apply(spec, "started")
        assert not same.changed and same.status.pid == first.status.pid
        spec.command = [PY, "-c", SLEEP, "two"]
        changed = d.apply(spec, "started")
        groups.add(changed.status.pgid)
        assert changed.changed and changed.status.pid != first.status.pid and "another command line" in changed.msg
        assert changed.status.cmdline[-1] == "two" and first.status.pid in changed.stopped_pids
    finally:
        groups.add_from_pid_file(Path(spec.pid_file))
        d.stop(spec)


# ------------------------------------------------------------------------------------------
# end to end through ansible


def _ansible(args: dict[str, object], check: bool = False) -> dict[str, object]:
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCALHOST_WARNING": "0",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
            "ANSIBLE_PYTHON_INTERPRETER": PY,
        }
    )
    argv = [str(Path(PY).parent / "ansible"), "localhost", "-m", "llmops.sglang.detached_service"]
    argv += ["-a", json.dumps(args)] + (["--check"] if check else [])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, check=False)
    # The default callback prints "localhost | CHANGED => {...json...}" (after an error
    # summary when the task failed).
    marker = proc.stdout.find("localhost | ")
    head, sep, body = proc.stdout[max(marker, 0) :].partition(" => ")
    assert marker >= 0 and sep, proc.stdout + proc.stderr
    result = json.loads(body)
    assert isinstance(result, dict)
    result["_status"] = head.removeprefix("localhost | ").strip()  # SUCCESS, CHANGED, FAILED!
    result["_rc"] = proc.returncode
    return result


def test_end_to_end_through_ansible(tmp_path: Path, server_script: Path, groups: Groups) -> None:
    args: dict[str, object] = {
        "name": "e2e-svc",
        "command": [str(server_script)],
        "pid_file": str(tmp_path / "run" / "e2e.pid"),
        "log_file": str(tmp_path / "log" / "e2e.log"),
        "chdir": str(tmp_path),
        "match": "llmops-test-server",
        "env": {"LLMOPS_E2E": "yes"},
        "start_grace": 0.3,
        "stop_timeout": 5,
    }
    try:
        first = _ansible(args)
    finally:
        groups.add_from_pid_file(tmp_path / "run" / "e2e.pid")
    assert first.get("changed") is True and first["running"] is True, first
    pid = first["pid"]
    assert isinstance(pid, int)
    stat = d.read_stat(pid)
    assert stat is not None and stat.alive and stat.sid == pid
    environ = d.read_environ(pid) or {}
    assert environ.get("LLMOPS_E2E") == "yes" and environ.get(d.MARKER_ENV) == "e2e-svc"

    probe = _ansible({**args, "state": "status"})
    assert probe.get("changed") is False and probe["running"] is True and probe["pid"] == pid
    assert "llmops-test-server" in probe["cmdline"]  # type: ignore[operator]

    would_stop = _ansible({**args, "state": "stopped"}, check=True)
    assert would_stop.get("changed") is True
    assert d.read_stat(pid) is not None and (tmp_path / "run" / "e2e.pid").exists()

    stopped = _ansible({**args, "state": "stopped"})
    assert stopped.get("changed") is True and stopped["running"] is False, stopped
    assert pid in stopped["stopped_pids"]  # type: ignore[operator]
    assert members(pid) == []
    assert not (tmp_path / "run" / "e2e.pid").exists()


def test_end_to_end_failure_reports_log_tail(tmp_path: Path) -> None:
    script = write_script(tmp_path / "crash.sh", "echo 'fatal: CUDA out of memory' >&2\nexit 1\n")
    result = _ansible(
        {
            "name": "e2e-crash",
            "command": str(script),
            "pid_file": str(tmp_path / "crash.pid"),
            "log_file": str(tmp_path / "crash.log"),
            "start_grace": 0.5,
        }
    )
    assert result["_status"] == "FAILED!" and result["_rc"] != 0
    assert "e2e-crash" in str(result["msg"]) and "CUDA out of memory" in str(result["msg"])
    assert "fatal: CUDA out of memory" in result["log_tail"]  # type: ignore[operator]


def test_services_in_one_run_each_as_if_alone_and_one_failure_does_not_stop_the_others(
        tmp_path: Path, server_script: Path, groups: Groups) -> None:
    """``services``: the server role starts a batch's instances in one module run (one per GPU of
    a host before): each is started, found running or fails on its own, in the items' order."""
    crash = write_script(tmp_path / "crash.sh", "echo 'fatal: CUDA out of memory' >&2\nexit 1\n")

    def item(name: str, command: str) -> dict[str, object]:
        return {"name": name, "command": [command], "pid_file": str(tmp_path / name / "server.pid"),
                "log_file": str(tmp_path / name / "server.log"), "chdir": str(tmp_path)}

    shared = {"match": "llmops-test-server", "start_grace": 0.3, "stop_timeout": 5}
    two = [item("svc-a", str(server_script)), item("svc-b", str(server_script))]
    try:
        first = _ansible({"services": two, **shared})
        again = _ansible({"services": two, **shared})
        mixed = _ansible({"services": [two[0], {**item("svc-c", str(crash))}], **shared, "match": None})
    finally:
        for name in ("svc-a", "svc-b"):
            groups.add_from_pid_file(tmp_path / name / "server.pid")
    assert first.get("changed") is True and [r["name"] for r in first["services"]] == ["svc-a", "svc-b"], first
    assert all(r["running"] and r["changed"] and r["pid"] for r in first["services"])  # type: ignore[union-attr]
    assert first["services"][0]["pid"] != first["services"][1]["pid"]  # type: ignore[index]
    # found running: no change, the same pids
    assert again.get("changed") is False
    assert [r["pid"] for r in again["services"]] == [r["pid"] for r in first["services"]]  # type: ignore[union-attr]
    # svc-c fails with its log tail, svc-a is reported as it is all the same
    assert mixed["_status"] == "FAILED!" and "svc-c:" in str(mixed["msg"]) and "CUDA out of memory" in str(mixed["msg"])
    a, c = mixed["services"]  # type: ignore[misc]
    assert (a["failed"], a["running"], a["pid"]) == (False, True, first["services"][0]["pid"])  # type: ignore[index]
    assert c["failed"] and "fatal: CUDA out of memory" in c["log_tail"]
    stopped = _ansible({"services": two, **shared, "state": "stopped"})
    assert stopped.get("changed") is True and not any(r["running"] for r in stopped["services"])  # type: ignore[union-attr]
    refused = _ansible({"services": two, "name": "x"})
    assert refused["_status"] == "FAILED!" and "mutually exclusive" in str(refused["msg"])


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")
def test_user_drops_privileges(groups: Groups) -> None:
    import pwd
    import shutil
    import tempfile

    nobody = pwd.getpwnam("nobody")
    # pytest's tmp_path is private to root; the unprivileged server needs to read its script.
    work = Path(tempfile.mkdtemp(prefix="llmops-detached-"))
    try:
        work.chmod(0o755)
        script = write_script(work / "as-nobody.sh", "exec sleep 97\n")
        spec = make_spec(work, script, user="nobody", match="sleep 97")
        pid = started(spec, groups).status.pid
        assert pid is not None
        uids = [line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:")]
        assert uids and set(uids[0].split()[1:]) == {str(nobody.pw_uid)}
        assert Path(spec.log_file).stat().st_uid == nobody.pw_uid
        assert d.stop(spec).changed
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_user_switch_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(d_starting.os, "geteuid", lambda: 12345)
    with pytest.raises(d.DetachedServiceError, match="root"):
        d.resolve_credentials("root", None)
    with pytest.raises(d.DetachedServiceError, match="does not exist"):
        d.resolve_credentials("no-such-user-llmops", None)


def test_zombie_leader_with_live_threads_still_counts(tmp_path) -> None:
    """A server whose main thread exited while its other threads release memory is not gone."""
    from ansible_collections.llmops.sglang.plugins.module_utils import _detached as d

    def fake(pid: int, state: str, threads: int) -> None:
        (tmp_path / str(pid) / "task").mkdir(parents=True)
        for t in range(threads):
            (tmp_path / str(pid) / "task" / str(pid + t)).mkdir()
        fields = [state, "1", "4242", "4242"] + ["0"] * 15 + ["12345"]
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (python3) " + " ".join(fields) + "\n")

    fake(4242, "Z", 3)   # leader exited, 2 threads still running
    fake(4300, "Z", 1)   # a plain zombie
    fake(4301, "S", 1)   # a live member
    members = [s.pid for s in d.group_members(4242, proc=tmp_path)]
    assert members == [4242, 4301]


def test_log_tails_never_repeat_a_secret(tmp_path: Path) -> None:
    """SGLang logs its whole server_args, api_key included (0.5.10-0.5.23): a tail the
    collection shows is redacted; the log itself is its owner's only (0600)."""
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-12-01 04:32:17] server_args=ServerArgs(model_path='/m', api_key='sk-live-123', admin_api_key=None)\n"
        '{"api_key": "sk-live-123", "port": 1}\n'
        "exec python -m sglang.launch_server --api-key sk-live-123 --port 1\n"
        "curl -H 'Authorization: Bearer sk-live-123'\n"
        "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123\n")
    tail = d.log_tail(str(log), 10)
    assert len(tail) == 5 and not any("sk-live-123" in line or "hf_abc" in line for line in tail)
    assert "admin_api_key=None" in tail[0] and tail[0].count(d.REDACTED) == 1
    spec = d.ServiceSpec(name="t", command=["/bin/true"], pid_file=str(tmp_path / "p"), log_file=str(log))
    log.chmod(0o644)
    fd, _ = d_starting._open_log(spec, d.resolve_credentials(None, None))
    os.close(fd)
    assert log.stat().st_mode & 0o777 == 0o600
