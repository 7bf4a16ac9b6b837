# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The run lock's heartbeat (controller side): renews a host's lock while its run lives, and
releases it when the run's ``ansible-playbook`` process ends without releasing it (a failed
play, which skips the final release play; ``kill -9`` of ansible-playbook alone).

One process per host whose lock the run took, started by the action ``llmops.sglang.run_lock``
(``spawn``: a double fork of the task's worker, so it outlives the task; like ansible's workers
it is in a session of its own, and it ignores SIGINT and SIGHUP, so neither Ctrl-C nor a
``kill -9`` of the run's process group takes it before it has seen the run end). Its loop
(``beat``) ends

- when its marker file is gone: the run released the lock (the final play);
- when the controller process is gone (or is another process): it releases the lock once, if it
  is still the run's (``release`` compares the token on the host), then ends;
- when a renewal finds the lock is no longer the run's (taken over after its lease expired).

When the heartbeat is killed too (``kill -9`` of every process of the run, the controller host
down), the lock stays with a dead holder: the next run from this controller host takes it over
at once (``_runlock.judge``), a run from another controller host once the lease expired.
"""
from __future__ import annotations

import hashlib
import os
import signal
import tempfile
import time
from collections.abc import Callable

MARKER_DIR = "llmops-sglang-runlock"


def marker_path(token: str, host: str, lock_path: str) -> str:
    """The controller-side file whose presence keeps the heartbeat of one host's lock going."""
    digest = hashlib.sha256(f"{token}\0{host}\0{lock_path}".encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), MARKER_DIR, digest)


def beat(*, marker_exists: Callable[[], bool], controller_alive: Callable[[], bool], renew: Callable[[], bool],
         release: Callable[[], object], interval: float, poll: float = 0.5,
         clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> str:
    """Renew every ``interval`` seconds, look every ``poll`` seconds; returns why it ended:
    ``released`` (the marker is gone), ``controller gone`` (it released the lock), ``lost`` (the
    lock is another run's now)."""
    next_renewal = clock() + interval
    while True:
        if not marker_exists():
            return "released"
        if not controller_alive():
            release()
            return "controller gone"
        if clock() >= next_renewal:
            if not renew():
                return "lost"
            next_renewal = clock() + interval
        sleep(poll)


def spawn(run: Callable[[], object]) -> bool:
    """Run ``run`` in a grandchild of this process that nothing waits for: stdin, stdout and
    stderr on /dev/null (a reader of the run's output never waits for it), every other inherited
    descriptor closed, SIGINT and SIGHUP ignored. True in the caller once the child is gone."""
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return True
    try:  # the child: fork again and leave, so the grandchild is nobody's to wait for
        if os.fork():
            os._exit(0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 65536)
        run()
    except BaseException:  # noqa: BLE001 - nothing may escape into the worker's code
        pass
    os._exit(0)
