"""The run lock (module_utils/_server/runlock.py) and its heartbeat (plugin_utils/_lockbeat.py): two
runs taking it at once, stale holders (gone, pid reused, rebooted, lease expired), takeover only
of the holder judged stale, release only of one's own lock."""
from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _detached
from ansible_collections.llmops.sglang.plugins.module_utils._server import runlock as _runlock
from ansible_collections.llmops.sglang.plugins.plugin_utils import _lockbeat


def me(pid: int | None = None, host: str = "ctl-a") -> dict:
    return _runlock.controller_identity(pid or os.getpid(), "deploy.yml", "ops", hostname=host)


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_identity_names_this_process_with_its_start_time() -> None:
    holder = me()
    stat = _detached.read_stat(os.getpid())
    assert stat is not None
    assert holder["controller_pid"] == os.getpid() and holder["controller_starttime"] == stat.starttime
    assert holder["controller_boot_id"] == _detached.boot_id()
    assert holder["token"] == f"ctl-a/{holder['controller_boot_id']}/{os.getpid()}/{stat.starttime}"
    assert holder["started_at"].endswith("+00:00") and holder["playbook"] == "deploy.yml"


def test_take_reenter_refuse_release(tmp_path: Path) -> None:
    base = str(tmp_path / "sglang")  # created when missing
    first = _runlock.acquire(base, me(), lease_s=60, now=1000.0)
    assert first["acquired"] and not first["reentered"]
    record = json.loads(Path(_runlock.lock_path(base)).read_text())
    assert record["token"] == me()["token"] and record["renewed_at"] == 1000.0 and record["lease_s"] == 60
    again = _runlock.acquire(base, me(), lease_s=60, now=1010.0)
    assert again["acquired"] and again["reentered"]
    other = dict(me(host="ctl-b"))
    other["token"] = _runlock.make_token(other)
    refused = _runlock.acquire(base, other, lease_s=60, now=1030.0)
    assert not refused["acquired"] and refused["holder"]["token"] == me()["token"]
    assert refused["age_s"] == 20.0 and refused["expired"] is False
    assert _runlock.release(base, other["token"]) == {"released": False, "holder": refused["holder"]}
    assert Path(_runlock.lock_path(base)).exists()
    assert _runlock.release(base, me()["token"])["released"] is True
    assert not Path(_runlock.lock_path(base)).exists()
    assert _runlock.release(base, me()["token"])["released"] is False
    assert _runlock.release(str(tmp_path / "never"), "x") == {"released": False, "holder": None}


def _race(base: str, index: int, start: multiprocessing.synchronize.Event, out: multiprocessing.Queue) -> None:
    holder = {"controller_host": f"ctl-{index}", "controller_pid": 100 + index, "token": f"run-{index}"}
    start.wait()
    out.put((index, _runlock.acquire(base, holder)["acquired"]))


def test_runs_taking_the_lock_at_once_one_gets_it(tmp_path: Path) -> None:
    base = str(tmp_path)
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(base, i, start, out)) for i in range(8)]
    for proc in procs:
        proc.start()
    start.set()
    results = dict(out.get(timeout=60) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
    winners = [i for i, got in results.items() if got]
    assert len(winners) == 1
    assert _runlock.read(base)["token"] == f"run-{winners[0]}"


def test_a_holder_whose_process_is_gone_is_stale_and_taken_over_once(tmp_path: Path) -> None:
    base = str(tmp_path)
    gone = me()
    gone.update(controller_pid=dead_pid())
    gone["token"] = _runlock.make_token(gone)
    assert _runlock.acquire(base, gone)["acquired"]
    mine = me()
    seen = _runlock.acquire(base, mine)
    assert not seen["acquired"]
    verdict, why = _runlock.judge(seen["holder"], mine, seen["expired"])
    assert verdict == "stale" and f"process {gone['controller_pid']} is gone" in why
    # a takeover names the holder it replaces: a newer holder (another run took over first) stays
    third = dict(me(host="ctl-c"), token="run-c")
    assert not _runlock.acquire(base, third, takeover="some-other-token")["acquired"]
    took = _runlock.acquire(base, mine, takeover=gone["token"])
    assert took["acquired"] and took["took_over"]["token"] == gone["token"]
    assert not _runlock.acquire(base, third, takeover=gone["token"])["acquired"]  # too late: it is mine now
    assert _runlock.read(base)["token"] == mine["token"]


def test_a_reused_pid_is_another_process(tmp_path: Path) -> None:
    """The holder's pid is alive, but it started at another time: pid reuse, the holder is dead."""
    mine = me()
    reused = dict(mine, controller_starttime=mine["controller_starttime"] - 1)
    reused["token"] = _runlock.make_token(reused)
    verdict, why = _runlock.judge(reused, mine, expired=False)
    assert verdict == "stale" and "now another process" in why
    assert _runlock.judge(mine, dict(mine, token="x"), expired=True)[0] == "live"  # alive, same start: live


def test_a_live_holder_on_this_controller_host_is_live_whatever_its_lease(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holder = me(sleeper.pid)
        assert _runlock.judge(holder, me(), expired=True) == (
            "live", f"its holder's process {sleeper.pid} runs on this controller host")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert _runlock.judge(holder, me(), expired=False)[0] == "stale"


def test_a_holder_on_another_controller_host_is_stale_only_after_its_lease(tmp_path: Path) -> None:
    base = str(tmp_path)
    remote = dict(me(host="ctl-b"))
    remote["token"] = _runlock.make_token(remote)
    _runlock.acquire(base, remote, lease_s=60, now=1000.0)
    mine = me()
    fresh = _runlock.acquire(base, mine, now=1059.0)
    assert _runlock.judge(fresh["holder"], mine, fresh["expired"])[0] == "live"
    assert _runlock.renew(base, remote["token"], now=1100.0)  # the holder renews its lease
    assert not _runlock.renew(base, mine["token"], now=1100.0)  # a run renews only its own lock
    late = _runlock.acquire(base, mine, now=1159.0)
    assert not late["expired"]
    expired = _runlock.acquire(base, mine, now=1161.0)
    verdict, why = _runlock.judge(expired["holder"], mine, expired["expired"])
    assert verdict == "stale" and "lease expired" in why and "ctl-b" in why


def test_a_rebooted_controller_host_holds_nothing(tmp_path: Path) -> None:
    mine = me()
    before = dict(mine, controller_boot_id="an-earlier-boot")
    before["token"] = _runlock.make_token(before)
    assert _runlock.judge(before, mine, expired=False) == ("stale", "the controller host rebooted since its holder started")


def test_a_lock_file_that_is_not_a_lock_is_stale(tmp_path: Path) -> None:
    Path(_runlock.lock_path(str(tmp_path))).write_text("{ half a lock")
    record = _runlock.read(str(tmp_path))
    assert record["unreadable"] and _runlock.judge(record, me(), expired=True)[0] == "stale"
    seen = _runlock.acquire(str(tmp_path), me())
    assert not seen["acquired"] and seen["expired"]
    assert _runlock.acquire(str(tmp_path), me(), takeover="")["acquired"]


def test_query_says_a_run_is_in_progress(tmp_path: Path) -> None:
    assert _runlock.query(str(tmp_path / "none"))["held"] is False
    _runlock.acquire(str(tmp_path), me(), lease_s=120, now=2000.0)
    found = _runlock.query(str(tmp_path), now=2030.0)
    assert found["held"] and found["age_s"] == 30.0 and not found["expired"]
    assert f"deploy.yml of pid {os.getpid()} on controller host ctl-a (user ops)" in found["message"]
    assert "lease renewed 30 s ago (expires after 120 s)" in found["message"]


def test_heartbeat_renews_until_released() -> None:
    clock = [0.0]
    calls: list[str] = []
    marker = [True]

    def sleep(seconds: float) -> None:
        clock[0] += seconds
        if clock[0] >= 100:
            marker[0] = False

    def renew() -> bool:
        calls.append(f"renew@{clock[0]:g}")
        return True

    why = _lockbeat.beat(marker_exists=lambda: marker[0], controller_alive=lambda: True, renew=renew,
                         release=lambda: calls.append("release"), interval=40, poll=5,
                         clock=lambda: clock[0], sleep=sleep)
    assert why == "released" and calls == ["renew@40", "renew@80"]


def test_heartbeat_releases_when_the_controller_is_gone_and_stops_when_the_lock_is_lost() -> None:
    clock = [0.0]
    calls: list[str] = []

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    why = _lockbeat.beat(marker_exists=lambda: True, controller_alive=lambda: clock[0] < 12, renew=lambda: True,
                         release=lambda: calls.append(f"release@{clock[0]:g}"), interval=40, poll=5,
                         clock=lambda: clock[0], sleep=sleep)
    assert why == "controller gone" and calls == ["release@15"]
    lost = _lockbeat.beat(marker_exists=lambda: True, controller_alive=lambda: True, renew=lambda: False,
                          release=lambda: calls.append("no"), interval=1, poll=1, clock=lambda: clock[0], sleep=sleep)
    assert lost == "lost" and calls == ["release@15"]


def test_heartbeat_markers_differ_per_run_host_and_lock() -> None:
    one = _lockbeat.marker_path("t1", "h1", "/opt/sglang/.run.lock")
    assert one != _lockbeat.marker_path("t2", "h1", "/opt/sglang/.run.lock")
    assert one != _lockbeat.marker_path("t1", "h2", "/opt/sglang/.run.lock")
    assert one.startswith(os.path.join(os.path.dirname(os.path.dirname(one)), _lockbeat.MARKER_DIR))


@pytest.mark.parametrize("bad", [{"controller_host": "x"}])
def test_a_holder_without_a_token_is_refused(tmp_path: Path, bad: dict) -> None:
    with pytest.raises(_runlock.RunLockError):
        _runlock.acquire(str(tmp_path), bad)
