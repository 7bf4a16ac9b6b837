# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.sweep_wait: wait for async throughput_sweep jobs, printing each level as
it lands (documentation: plugins/modules/sweep_wait.py).

Why an action: the sweep runs where the bench role puts it (next to the server, or on the
controller), as an async job, and writes its progress lines there; the report and the person
watching are on the controller. An action runs on the controller with the task's connection, so
it can ask the job's machine for the job's status and its progress file, and then append to the
controller's ``reports/<run id>/progress.jsonl`` and print, in one loop bounded by ``timeout``.

The heartbeat: a sweep on another host cannot see the controller's process, so at each look this
action refreshes the jobs' ``heartbeat_file`` (one ``touch -c`` of all of them through the
connection, no module: a few milliseconds locally, one round trip over SSH) and the sweeps stop
when it is older than their ``heartbeat_timeout``. When the controller's main process is gone
(this worker orphaned: ``kill -9`` of ansible-playbook alone) the loop ends, so the heartbeats
stop with the controller and not only with the worker.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shlex
import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmops.sglang.plugins.module_utils._bench import progress as _progress
from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import documented_args

display = Display()


class _Job:
    """One async sweep job: its id, its instance, its progress file and the lines seen."""

    def __init__(self, start: dict[str, Any], template: str) -> None:
        self.start = start
        self.jid = start.get("ansible_job_id")
        item = start.get("item") or {}
        self.name = str(item.get("name") if isinstance(item, dict) else item)
        self.progress = template.replace("{instance}", self.name) if template else None
        self.heartbeat: str | None = None
        self.seen = 0
        self.result: dict[str, Any] | None = None


class ActionModule(ActionBase):
    """Poll the jobs until all finished: status and new progress lines each ``poll`` seconds."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = documented_args(self, "sweep_wait")
        poll = float(args["poll"])
        timeout = float(args["timeout"])
        if poll <= 0 or timeout <= 0:
            raise AnsibleActionFail(f"poll ({poll}) and timeout ({timeout}) must be > 0 seconds")
        starts = [j for j in args.get("jobs") or [] if isinstance(j, dict)]
        jobs = [_Job(j, str(args.get("progress_file") or "")) for j in starts if j.get("ansible_job_id")]
        beat = str(args.get("heartbeat_file") or "")
        for job in jobs:
            job.heartbeat = beat.replace("{instance}", job.name) if beat else None
        done = [{**j, "item": j.get("item")} for j in starts if not j.get("ansible_job_id")]  # skipped
        dest = args.get("dest") if not self._task.check_mode else None
        self._beat_warned = False
        self._dest_failed = False
        self._wait(jobs, task_vars, dest, poll, timeout)
        results = done + [{**(job.result or {}), "item": job.start} for job in jobs]
        failed = [r for r in results if r.get("failed")]
        # the sweeps' own warnings (failed levels, drift, ...): shown as this task's, as a sweep
        # that was not async would show them
        warnings = [w for r in results for w in (r.get("warnings") or [])]
        if warnings:
            result["warnings"] = result.get("warnings", []) + warnings
        sweeps = {job.name: (job.result or {}).get("ansible_facts", {}).get("sglang_sweep") for job in jobs}
        result.update(results=results, sweeps={k: v for k, v in sweeps.items() if isinstance(v, dict)}, changed=False)
        if failed:
            result.update(failed=True, msg="; ".join(str(r.get("msg")) for r in failed))
        return result

    def _wait(self, jobs: list[_Job], task_vars: dict[str, Any], dest: str | None, poll: float,
              timeout: float) -> None:
        """Look at the running jobs every ``poll`` seconds until all finished: their heartbeats
        first, then each one's status and progress."""
        deadline = time.monotonic() + timeout
        parent = os.getppid()
        while any(job.result is None for job in jobs):
            if os.getppid() != parent:
                raise AnsibleActionFail(f"the controller's process {parent} is gone: no more polling, and the sweeps "
                                        "stop once their heartbeat_file is older than their heartbeat_timeout")
            began = time.monotonic()
            self._beat([job for job in jobs if job.result is None])
            beat_s = time.monotonic() - began
            for job in jobs:
                if job.result is None:
                    self._poll(job, task_vars, dest)
            display.vvv(f"sweep_wait: one look took {time.monotonic() - began:.3f} s "
                        f"(the heartbeat's share {beat_s:.3f} s)")
            if all(job.result is not None for job in jobs):
                break
            if time.monotonic() > deadline:
                missing = ", ".join(job.name for job in jobs if job.result is None)
                raise AnsibleActionFail(f"sweep jobs still running after timeout={timeout:g}s: {missing}")
            time.sleep(poll)

    def _beat(self, jobs: list[_Job]) -> None:
        """Refresh the running jobs' heartbeat files in one command (never creating one: a sweep
        that ended removed its own, and a late refresh must leave nothing behind)."""
        paths = [job.heartbeat for job in jobs if job.heartbeat]
        if not paths:
            return
        res = self._low_level_execute_command("touch -c -- " + " ".join(shlex.quote(p) for p in paths))
        if res.get("rc") != 0 and not self._beat_warned:
            self._beat_warned = True
            display.warning(f"sweep_wait: cannot refresh the heartbeat files {', '.join(paths)} (rc {res.get('rc')}: "
                            f"{str(res.get('stderr') or '').strip()}); the sweeps stop once they are older than "
                            "their heartbeat_timeout")

    def _poll(self, job: _Job, task_vars: dict[str, Any], dest: str | None) -> None:
        """One look at a job: its status first, then its progress (the last lines of a job
        that just finished are read after it finished, so none is lost)."""
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        status = self._execute_module(module_name="ansible.legacy.async_status",
                                      module_args={"jid": job.jid, "_async_dir": async_dir}, task_vars=task_vars)
        # a status that could not be read at all (no "started") is final too: never wait on it
        finished = bool(status.get("finished")) or bool(status.get("failed") and not status.get("started"))
        if job.progress:
            self._new_lines(job, task_vars, dest)
        if finished:
            job.result = status
            if job.progress:
                self._execute_module(module_name="ansible.builtin.file",
                                     module_args={"path": job.progress, "state": "absent"}, task_vars=task_vars)

    def _new_lines(self, job: _Job, task_vars: dict[str, Any], dest: str | None) -> None:
        read = self._execute_module(module_name="ansible.builtin.slurp",
                                    module_args={"src": job.progress}, task_vars=task_vars)
        if read.get("failed") or "content" not in read:
            return  # not written yet: no level finished
        lines = _progress.complete_lines(base64.b64decode(read["content"]).decode("utf-8", "replace"))
        fresh = lines[job.seen:]
        job.seen = len(lines)
        for line in fresh:
            try:
                text = _progress.describe(json.loads(line))
            except ValueError:
                text = line
            display.display(f"sweep progress: {text}")
        if fresh and dest and not self._dest_failed:
            problem = _append_controller(dest, fresh)
            if problem:  # the lines are printed above and the sweep goes on: its result is what counts
                self._dest_failed = True
                display.warning(f"sweep_wait: {problem}; the sweeps go on, their levels are printed here and come "
                                "back in their results")


def _append_controller(dest: str, lines: list[str]) -> str | None:
    """Append whole lines to the controller's progress.jsonl, locked against the other hosts'
    forks writing the same file; what went wrong (never raised: a folder that fails mid-sweep
    must not end the sweeps and lose their results), or None."""
    try:
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        return f"cannot write the progress lines to {dest}: {exc.strerror or exc}"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, ("\n".join(lines) + "\n").encode("utf-8"))
    except OSError as exc:
        return f"cannot write the progress lines to {dest}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    return None
