"""Tests of module_utils/_bench/interrupt.py: when a long-running client must stop (signals, its reader
gone, a watched process gone). No network; child processes are reaped in finally."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._bench import interrupt as it


def test_reader_gone_on_a_pipe_and_never_on_a_file(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    try:
        assert it.reader_gone(write_end) is False
        os.close(read_end)
        read_end = -1
        assert it.reader_gone(write_end) is True  # nobody will ever read what is written
    finally:
        os.close(write_end)
        if read_end >= 0:
            os.close(read_end)
    with open(tmp_path / "out", "w") as handle:
        assert it.reader_gone(handle.fileno()) is False
    with open(os.devnull, "w") as handle:
        assert it.reader_gone(handle.fileno()) is False
    assert it.reader_gone(987654) is False  # not open at all


def test_reader_gone_on_a_socket() -> None:
    import socket

    mine, theirs = socket.socketpair()
    try:
        assert it.reader_gone(mine.fileno()) is False
        theirs.shutdown(socket.SHUT_WR)  # the peer only stopped writing (stdin EOF): still there
        assert it.reader_gone(mine.fileno()) is False
        theirs.close()
        assert it.reader_gone(mine.fileno()) is True
    finally:
        mine.close()
        theirs.close()


def test_process_alive_zombie_and_reused_pid() -> None:
    assert it.process_alive(os.getpid(), it.process_start(os.getpid())) is True
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while it.process_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.02)  # exited, not reaped yet: a zombie
        assert it.process_alive(child.pid) is False
    finally:
        child.wait(timeout=10)
    assert it.process_alive(child.pid) is False  # reaped: no such process
    # the same pid with another start time is another process
    assert it.process_alive(os.getpid(), "1") is False


def _run_guarded(guard: it.Interrupts, seconds: float) -> tuple[str | None, bool]:
    """Run a task of ``seconds`` under ``guard``; (reason, whether the task was cut). "Cut" is
    what "at once" means here, in terms load cannot move: the task ended by the guard's
    cancellation, before its own end."""

    async def main() -> tuple[str | None, bool]:
        task = asyncio.ensure_future(asyncio.sleep(seconds))
        guard.start(task)
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            guard.close()
        return guard.reason, task.cancelled()

    return asyncio.run(main())


def test_interrupts_cancel_when_the_watched_process_ends() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        reason, cut = _run_guarded(it.Interrupts(watch_pid=child.pid, interval=0.05), 30.0)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert reason is not None and f"process {child.pid} (watch_pid) is gone" in reason
    assert cut  # the 30 s task was cancelled, not waited for


def test_interrupts_cancel_when_the_reader_goes_away() -> None:
    read_end, write_end = os.pipe()
    open_ends = {read_end, write_end}

    def close_reader() -> None:
        os.close(read_end)
        open_ends.discard(read_end)

    async def main() -> tuple[str | None, bool]:
        guard = it.Interrupts(output_fd=write_end, interval=0.05)
        task = asyncio.ensure_future(asyncio.sleep(30.0))
        guard.start(task)
        asyncio.get_running_loop().call_later(0.2, close_reader)
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            guard.close()
        return guard.reason, task.cancelled()

    try:
        reason, cut = asyncio.run(main())
    finally:
        for fd in open_ends:
            os.close(fd)
    assert reason is not None and "reader of its result went away" in reason
    assert cut  # the 30 s task was cancelled, not waited for


def test_interrupts_cancel_on_a_signal_and_restore_the_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)

    async def main() -> tuple[str | None, bool]:
        guard = it.Interrupts(signals=(signal.SIGTERM,))
        task = asyncio.ensure_future(asyncio.sleep(30.0))
        guard.start(task)
        asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGTERM)
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            guard.close()
        return guard.reason, task.cancelled()

    assert asyncio.run(main()) == ("SIGTERM received", True)  # the 30 s task cut, not waited for
    assert signal.getsignal(signal.SIGTERM) in (before, signal.SIG_DFL)


def test_nothing_to_watch_changes_nothing() -> None:
    reason, cut = _run_guarded(it.Interrupts(), 0.05)
    assert reason is None and not cut
    assert it.Interrupts().check() is None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_ends_the_process_at_once(sig: int) -> None:
    code = (
        "import asyncio, os, signal, sys\n"
        "from ansible_collections.llmops.sglang.plugins.module_utils._bench import interrupt as it\n"
        "async def main():\n"
        "    guard = it.Interrupts(signals=it.STOP_SIGNALS)\n"
        "    task = asyncio.ensure_future(asyncio.sleep(60))\n"
        "    guard.start(task)\n"
        "    try:\n"
        "        await task\n"
        "    except asyncio.CancelledError:\n"
        "        pass\n"
        "    print('teardown', flush=True)\n"
        "    await asyncio.sleep(60)  # a teardown that hangs\n"
        "print('ready', flush=True)\n"
        "asyncio.run(main())\n"
    )
    root = Path(__file__).resolve().parents[5]
    env = dict(os.environ, PYTHONPATH=str(root / "collections"))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        proc.send_signal(sig)
        assert proc.stdout.readline().strip() == "teardown"
        proc.send_signal(sig)
        assert proc.wait(timeout=10) == 128 + sig
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_heartbeat_age_follows_the_later_of_its_start_and_the_last_refresh(tmp_path: Path) -> None:
    """The staleness rule: the clock starts when the sweep creates the file; each refresh of its
    mtime (``touch -c``) restarts it; a removed file keeps the last time seen; stale only past
    the timeout, with a reason naming the file and the timeout."""
    path = tmp_path / "job.heartbeat"
    beat = it.Heartbeat(str(path), 30.0)
    beat.begin()
    assert path.is_file() and (path.stat().st_mode & 0o777) == 0o600
    start = path.stat().st_mtime
    os.utime(path, (start - 1000, start - 1000))  # an older mtime never moves the clock back
    assert beat.age(start + 10) == pytest.approx(10, abs=0.5)
    assert beat.stale(start + 29) is None
    why = beat.stale(start + 31)
    assert why is not None and str(path) in why and "heartbeat_timeout=30 s" in why
    os.utime(path, (start + 100, start + 100))  # refreshed by the controller
    assert beat.stale(start + 120) is None and beat.age(start + 120) == pytest.approx(20)
    path.unlink()  # gone: the last refresh seen still counts, and only it
    assert beat.age(start + 120) == pytest.approx(20)
    assert beat.stale(start + 131) is not None
    assert beat.age(start) == 0.0  # a clock that went back: never negative
    beat.begin()
    beat.end()
    assert not path.exists()
    beat.end()  # twice: nothing to do


def test_heartbeat_refuses_a_symlink_and_a_timeout_not_above_zero(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    link = tmp_path / "job.heartbeat"
    link.symlink_to(target)
    with pytest.raises(OSError):
        it.Heartbeat(str(link), 5.0).begin()
    assert target.read_text() == "keep"
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="heartbeat_timeout must be > 0"):
            it.Heartbeat(str(tmp_path / "x"), bad)


def test_interrupts_cancel_when_the_heartbeat_goes_stale_and_not_while_it_is_refreshed(tmp_path: Path) -> None:
    path = tmp_path / "job.heartbeat"
    beat = it.Heartbeat(str(path), 0.4)
    beat.begin()
    reason, _ = _run_guarded(it.Interrupts(heartbeat=beat, interval=0.05), 30.0)
    assert reason is not None and "no heartbeat from the controller" in reason

    beat = it.Heartbeat(str(path), 0.4)
    beat.begin()

    async def refreshed() -> str | None:
        guard = it.Interrupts(heartbeat=beat, interval=0.05)
        task = asyncio.ensure_future(asyncio.sleep(1.5))  # well past the timeout
        guard.start(task)
        try:
            while not task.done():
                os.utime(path)  # sweep_wait's touch -c
                await asyncio.sleep(0.05)
            await task
        except asyncio.CancelledError:
            pass
        finally:
            guard.close()
        return guard.reason

    assert asyncio.run(refreshed()) is None
