# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.run_lock: the run lock of a host, judged on the controller
(documentation: plugins/modules/run_lock.py; rules: module_utils/_server/runlock.py; heartbeat:
plugin_utils/_lockbeat.py).

Why an action: the holder of a lock is an ``ansible-playbook`` process on a controller, which
the managed host cannot see. This action knows this run's identity (the controller's pid, its
start time, the host name), asks the host for the lock (module ``run_lock``), judges another
holder where it can be seen (this controller host: is its process alive and the same one?),
takes a stale lock over, waits or refuses, and starts the heartbeat that renews the lease.
"""
from __future__ import annotations

import contextlib
import getpass
import os
import time
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmops.sglang.plugins.lookup.controller_pid import controller_pid
from ansible_collections.llmops.sglang.plugins.module_utils import _detached
from ansible_collections.llmops.sglang.plugins.module_utils._server import runlock as _runlock
from ansible_collections.llmops.sglang.plugins.plugin_utils import _lockbeat
from ansible_collections.llmops.sglang.plugins.plugin_utils._stepaction import documented_args

display = Display()
MODULE = "llmops.sglang.run_lock"
RETRY_S = 2.0
TAKEOVER_TRIES = 5


class ActionModule(ActionBase):
    """Take (waiting up to ``timeout``), release or query the host's run lock."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        self._vars = task_vars or {}
        args = documented_args(self, "run_lock")
        path = str(args.get("path") or "")
        state = str(args["state"])
        if not path:
            raise AnsibleActionFail("run_lock: path (the deployment's sglang_base_dir) is required")
        if state not in ("acquired", "released", "query"):
            raise AnsibleActionFail(f"run_lock: state={state!r}: one of acquired, released, query")
        try:
            timeout = int(args["timeout"])
            lease = int(args["lease"])
        except (TypeError, ValueError) as err:
            raise AnsibleActionFail(f"run_lock: timeout and lease are whole seconds ({err})") from err
        if timeout < 0 or lease < 1:
            raise AnsibleActionFail(f"run_lock: timeout={timeout} must be >= 0 (0: refuse at once) and lease={lease} "
                                    ">= 1 second (sglang_lock_timeout, sglang_lock_lease)")
        me = _runlock.controller_identity(controller_pid(), str(args.get("playbook") or ""), _user())
        if state == "query" or self._task.check_mode:
            found = self._module({"path": path, "state": "query"})
            if found.get("held") and (found.get("holder") or {}).get("token") != me["token"]:
                found.setdefault("warnings", []).append(found.get("message"))
            result.update(found, changed=False)
            return result
        if state == "released":
            marker = _lockbeat.marker_path(me["token"], self._host(), _runlock.lock_path(path))
            Path(marker).unlink(missing_ok=True)  # the heartbeat ends at its next look
            result.update(self._module({"path": path, "state": "released", "token": me["token"]}), changed=False)
            return result
        result.update(self._acquire(path, me, timeout, lease))
        return result

    # ----------------------------------------------------------------------------------------

    def _host(self) -> str:
        return str(self._vars.get("inventory_hostname") or "")

    def _module(self, module_args: dict[str, Any]) -> dict[str, Any]:
        res = self._execute_module(module_name=MODULE, module_args=module_args, task_vars=self._vars)
        if res.get("failed"):
            raise AnsibleActionFail(str(res.get("msg") or f"run_lock failed: {res}"))
        return res

    def _acquire(self, path: str, me: dict[str, Any], timeout: int, lease: int) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        takeover: str | None = None
        tries = 0
        waited = False
        stale_why = ""
        while True:
            args = {"path": path, "state": "acquired", "holder": me, "lease": lease}
            if takeover is not None:
                args["takeover"] = takeover
            res = self._module(args)
            if res.get("acquired"):
                break
            record = res.get("holder") or {}
            verdict, why = _runlock.judge(record, me, bool(res.get("expired")))
            if verdict == "stale" and tries < TAKEOVER_TRIES:
                tries += 1
                takeover = str(record.get("token") or "")
                stale_why = why
                continue
            takeover = None
            holder = _runlock.describe(record, res.get("age_s"))
            if time.monotonic() >= deadline:
                raise AnsibleActionFail(
                    f"another run holds the lock of this host's deployment ({_runlock.lock_path(path)}): {holder} "
                    f"({why}). This run changes nothing here. Wait until it ends and run again, or set "
                    f"sglang_lock_timeout=<seconds> to wait for it; a lock whose holder is dead is taken over "
                    f"by the next run")
            if not waited:
                display.display(f"[{self._host()}] waiting up to {timeout} s for the run lock: {holder}")
                waited = True
            time.sleep(max(0.0, min(RETRY_S, deadline - time.monotonic())))
        # changed=false: the lock is the run's own bookkeeping, gone at its end; a run that
        # changes nothing else reports changed=0
        out = {"changed": False, "acquired": True, "holder": res.get("holder"),
               "took_over": res.get("took_over")}
        if res.get("took_over"):
            out["warnings"] = [f"took over the run lock of a stale holder ({stale_why}): "
                               f"{_runlock.describe(res['took_over'])}; the host may be half-changed by that run, "
                               "which this one completes"]
        if res.get("changed"):
            self._start_heartbeat(path, me, lease)
        return out

    def _start_heartbeat(self, path: str, me: dict[str, Any], lease: int) -> None:
        """Renew the lease every third of it while the run lives (_lockbeat.beat)."""
        marker = _lockbeat.marker_path(me["token"], self._host(), _runlock.lock_path(path))
        os.makedirs(os.path.dirname(marker), mode=0o700, exist_ok=True)
        Path(marker).write_text(me["token"] + "\n", encoding="utf-8")
        pid, starttime = me["controller_pid"], me["controller_starttime"]

        def alive() -> bool:
            stat = _detached.read_stat(pid)
            return stat is not None and stat.alive and stat.starttime == starttime

        def call(state: str) -> dict[str, Any]:
            # the task's remote temporary folder went with the task: each call makes its own
            self._connection._shell.tmpdir = None
            try:
                return self._execute_module(module_name=MODULE, task_vars=self._vars,
                                            module_args={"path": path, "state": state, "token": me["token"]})
            except Exception:  # noqa: BLE001 - a host out of reach: try again at the next renewal
                return {"acquired": True}
            finally:
                with contextlib.suppress(Exception):
                    self.cleanup(force=True)

        def run() -> None:
            display._final_q = None  # this process is no worker: nothing goes to the run's output
            display.verbosity = 0
            _lockbeat.beat(marker_exists=lambda: os.path.exists(marker), controller_alive=alive,
                           renew=lambda: bool(call("renewed").get("acquired")),
                           release=lambda: call("released"), interval=max(1.0, lease / 3))
            Path(marker).unlink(missing_ok=True)

        _lockbeat.spawn(run)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""
