# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""A generation job's life on its host (docs/generate.md "The job's folder"): ``check`` before
anything is sent, ``run`` (one at a time per folder), ``status``, ``stop``.

The job's folder holds, beside ``store``'s files: ``job.json`` (the input it began with: path,
sha256, request count; the runs so far), ``job.lock`` (held with ``flock`` by the running job: the
kernel lets go when it dies, however it dies, so a lock that can be taken is a job that is not
running), ``job.pid`` (the running job's pid, written under the lock), ``job.log`` (what each run
did: recovery, targets down and up, retries, failures for good, the end), ``progress.json`` and
``runs.jsonl`` (one summary line per run).
"""
from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import logging
import os
import signal
import time
from collections.abc import Mapping
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._generate import inputs as _inputs
from ansible_collections.llmops.sglang.plugins.module_utils._generate import runner as _runner
from ansible_collections.llmops.sglang.plugins.module_utils._generate import store as _store
from ansible_collections.llmops.sglang.plugins.module_utils._server.files import atomic_write
from ansible_collections.llmops.sglang.plugins.module_utils._shared import modulespec

JOB = "job.json"
LOCK = "job.lock"
PID = "job.pid"
LOG = "job.log"
RUNS = "runs.jsonl"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class JobError(ValueError):
    """A job that cannot be checked, run or stopped; the message names the value, the rule, the fix."""


def _path(folder: str, name: str) -> str:
    return os.path.join(folder, name)


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def running_pid(folder: str) -> int | None:
    """The running job's pid (its lock is held), else None."""
    try:
        fd = os.open(_path(folder, LOCK), os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            try:
                with open(_path(folder, PID), encoding="ascii") as fh:
                    return int(fh.read().strip() or 0) or -1
            except (OSError, ValueError):
                return -1  # running, its pid not written yet
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _writable(folder: str) -> None:
    try:
        os.makedirs(folder, exist_ok=True)
        probe = _path(folder, f".write-probe-{os.getpid()}")
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"x")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise JobError(f"the job's folder {folder} cannot be written ({exc.strerror or exc}), nothing was sent: give "
                       f"sglang_generate_dir a folder the user {_user()} can create and write, on a filesystem with "
                       "room for the results") from None


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return str(os.geteuid())


def _scan(input_path: str, defaults: Mapping[str, Any] | None) -> tuple[_inputs.Scan, set[str]]:
    if not os.path.isfile(input_path):
        raise JobError(f"the input {input_path} is not a file on this host: give sglang_generate_input the path of a JSONL file")
    ids: set[str] = set()
    try:
        scanned = _inputs.scan(input_path, defaults, ids=ids)
    except OSError as exc:
        raise JobError(f"the input {input_path} cannot be read ({exc.strerror or exc})") from None
    if not scanned.ok:
        raise JobError(scanned.message())
    if not scanned.requests:
        raise JobError(f"the input {input_path} has no request (every line blank): nothing to generate")
    return scanned, ids


def _input_changed(folder: str, scanned: _inputs.Scan, allow: bool) -> dict[str, Any] | None:
    """job.json of an earlier run, after refusing an input that changed (unless ``allow``)."""
    before = _read_json(_path(folder, JOB))
    if not isinstance(before, dict):
        return None
    if before.get("digest") != scanned.digest and not allow:
        raise JobError(
            f"the input changed since this job began (sha256 {str(before.get('digest'))[:12]}... with "
            f"{before.get('requests')} requests, now {scanned.digest[:12]}... with {scanned.requests}), nothing was sent: "
            "resuming would mix two inputs. Give the job another name (sglang_generate_job) to start afresh, or set "
            "sglang_generate_allow_input_change=true to keep what is done and send the new input's other ids")
    return before


def check(folder: str, input_path: str, defaults: Mapping[str, Any] | None = None,
          allow_input_change: bool = False, retry_errors: bool = False) -> dict[str, Any]:
    """Everything that can refuse the job before a request is sent; what a run would do."""
    _writable(folder)
    pid = running_pid(folder)
    if pid is not None:
        return {"state": "running", "pid": pid, "folder": folder}
    scanned, ids = _scan(input_path, defaults)
    before = _input_changed(folder, scanned, allow_input_change)
    done, failed = _store.journaled(folder)
    done_here = len(ids & done)
    if retry_errors and failed & ids:
        done, failed = done - failed, set()
        done_here = len(ids & done)
    return {
        "state": "new" if before is None else ("finished" if done_here >= scanned.requests else "resumable"),
        "folder": folder, "pid": None,
        "input": {"path": input_path, "digest": scanned.digest, "requests": scanned.requests, "lines": scanned.lines,
                  "bytes": scanned.size, "endpoints": scanned.endpoints,
                  "changed": bool(before and before.get("digest") != scanned.digest)},
        "done": done_here, "errors": len(ids & failed), "pending": scanned.requests - done_here,
    }


def _take_lock(folder: str) -> int | None:
    fd = os.open(_path(folder, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _logger(folder: str) -> logging.Handler:
    handler = logging.FileHandler(_path(folder, LOG), encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    _runner.log.addHandler(handler)
    _runner.log.setLevel(logging.INFO)
    _runner.log.propagate = False
    return handler


def run(settings: _runner.Settings, allow_input_change: bool = False, job_name: str = "",
        retry_errors: bool = False) -> dict[str, Any]:
    """Run the job to its end in this process (the module runs it as an async task): under the
    folder's lock, or, when another process holds it, ``{"state": "running", "attached": true}``
    at once. Returns the final progress document."""
    folder = settings.folder
    _writable(folder)
    lock = _take_lock(folder)
    if lock is None:
        return {"state": "running", "attached": True, "pid": running_pid(folder), "folder": folder}
    handler = _logger(folder)
    try:
        atomic_write(_path(folder, PID), f"{os.getpid()}\n".encode("ascii"), 0o644)
        scanned, ids = _scan(settings.input, settings.defaults)
        before = _input_changed(folder, scanned, allow_input_change)
        if retry_errors:
            dropped = _store.retry_errors(folder)
            if dropped:
                _runner.log.info("retry_errors: the %d request(s) of errors.jsonl are sent again (the file kept as "
                                 "errors-retried-<n>.jsonl)", dropped)
        store = _store.Store(folder, settings.shard_lines).open()
        _write_job(folder, settings, scanned, before, job_name)
        done_before = len(ids & store.done)
        errors_before = len(ids & store.failed)
        settings = _replace_total(settings, scanned.requests)
        _runner.log.info("run %d of job %s: %d requests in %s (sha256 %s...), %d done before, %d to send, targets %s",
                         _runs(before) + 1, job_name or folder, scanned.requests, settings.input, scanned.digest[:12],
                         done_before, scanned.requests - done_before,
                         ", ".join(f"{t.name}={t.url} x{t.concurrency}" for t in settings.targets))
        if store.recovery.describe():
            _runner.log.warning("recovered the folder: %s", store.recovery.describe())
        report = asyncio.run(_main(settings, store, done_before, errors_before))
        _append_run(folder, report)
        return report
    except JobError as exc:
        _runner.log.error("%s", exc)
        raise
    finally:
        try:
            os.unlink(_path(folder, PID))
        except OSError:
            pass
        _runner.log.removeHandler(handler)
        handler.close()
        os.close(lock)  # releases the lock


async def _main(settings: _runner.Settings, store: _store.Store, done_before: int, errors_before: int) -> dict[str, Any]:
    job = _runner.Job(settings, store, done_before=done_before, errors_before=errors_before)
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, _stop_by_signal, job, sig)
    try:
        return await job.run()
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


def _stop_by_signal(job: _runner.Job, sig: int) -> None:
    if not job.stop.is_set():
        job.message = f"stopped by {signal.Signals(sig).name}: resume to send the rest"
        _runner.log.warning("%s", job.message)
        job.stop.set()


def _replace_total(settings: _runner.Settings, total: int) -> _runner.Settings:
    import dataclasses

    return dataclasses.replace(settings, total=total)


def _runs(before: Mapping[str, Any] | None) -> int:
    return int((before or {}).get("runs") or 0)


def _write_job(folder: str, settings: _runner.Settings, scanned: _inputs.Scan, before: Mapping[str, Any] | None,
               job_name: str) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc = {
        "job": job_name, "input": settings.input, "digest": scanned.digest, "requests": scanned.requests,
        "created_at": (before or {}).get("created_at") or now, "runs": _runs(before) + 1, "last_run_at": now,
        "inputs_before": list((before or {}).get("inputs_before") or [])
        + ([before["digest"]] if before and before.get("digest") != scanned.digest else []),
        "targets": [{"name": t.name, "url": t.url, "concurrency": t.concurrency} for t in settings.targets],
        "shard_lines": settings.shard_lines,
    }
    atomic_write(_path(folder, JOB), json.dumps(doc, indent=1).encode("utf-8"), 0o644)


def _append_run(folder: str, report: Mapping[str, Any]) -> None:
    line = {k: report.get(k) for k in ("state", "message", "started_at", "updated_at", "total", "done", "errors",
                                       "retries", "this_run", "targets", "instances") if k in report}
    with open(_path(folder, RUNS), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line, separators=(",", ":")) + "\n")


def status(folder: str) -> dict[str, Any]:
    """The job's state: running (with its pid), or the last run's end (``interrupted`` when it
    died without writing one: killed, or its host rebooted), with the progress document."""
    pid = running_pid(folder)
    progress = _read_json(_path(folder, _runner.PROGRESS))
    job = _read_json(_path(folder, JOB))
    if pid is not None:
        state = "running"
    elif not isinstance(job, dict):
        state = "none"
    elif not isinstance(progress, dict) or progress.get("state") == "running":
        state = "interrupted"
    else:
        state = str(progress.get("state"))
    return {"state": state, "pid": pid, "folder": folder, "job": job if isinstance(job, dict) else None,
            "progress": progress if isinstance(progress, dict) else None}


def stop(folder: str, timeout: float | None = None, interval: float = 0.2) -> dict[str, Any]:
    """SIGTERM to the running job, then wait until its lock is free (SIGKILL after ``timeout``:
    what it wrote stays, what was in flight is sent again on resume); ``timeout`` by default the
    module's documented ``stop_timeout_s``."""
    if timeout is None:
        timeout = float(modulespec.default("generate_job", "stop_timeout_s"))
    pid = running_pid(folder)
    if pid is None:
        return {"stopped": False, "was_running": False, "killed": False, **status(folder)}
    if pid <= 0:
        raise JobError(f"a job holds {_path(folder, LOCK)} but wrote no pid to {_path(folder, PID)}: try again in a moment")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    killed = False
    while running_pid(folder) is not None:
        if time.monotonic() > deadline and not killed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            killed = True
            deadline = time.monotonic() + 10
        elif killed and time.monotonic() > deadline:
            raise JobError(f"job {pid} still holds {_path(folder, LOCK)} 10 s after SIGKILL")
        time.sleep(interval)
    return {"stopped": True, "was_running": True, "killed": killed, **status(folder)}
