# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The embedded engine's child processes: SGLang's process shape without its work.

The real ``python -m sglang.launch_server`` (0.5.17) is a main process (HTTP server and
tokenizer manager) that starts, with multiprocessing, one scheduler process per TP (x PP) rank
of the node and one detokenizer process. They rename themselves with ``setproctitle``
(``/proc/<pid>/cmdline`` and ``comm``), die with their parent (``PR_SET_PDEATHSIG``) and are
what ``nvidia-smi`` lists on a GPU. The embedded engine starts the same processes, with the same
titles, as light sleepers: a small stdlib-only program fed on stdin to a Python started with
``argv == [title]``, that sets ``comm`` and the parent-death signal through ``prctl`` and blocks in
``signal.pause()``.

Source lines followed (sglang 0.5.17, ``sglang/srt``): ``entrypoints/engine.py``
``_launch_scheduler_processes`` / ``_calculate_rank_ranges`` / ``_compute_parallelism_ranks`` /
``_launch_detokenizer_subprocesses`` / ``_wait_for_scheduler_ready`` / ``_launch_subprocesses``
(watchdog names), ``managers/scheduler.py`` ``configure_scheduler_process`` (title, line 4859),
``managers/detokenizer_manager.py`` ``run_detokenizer_process`` (line 521),
``managers/data_parallel_controller.py`` (DP controller and its schedulers),
``utils/watchdog.py`` ``SubprocessWatchdog``, ``managers/tokenizer_manager.py``
``SignalHandler.running_phase_sigquit_handler`` and ``dump_requests_before_crash``,
``utils/common.py`` ``kill_process_tree`` / ``kill_itself_when_parent_died``.

Runs on hosts: Python 3.10+, stdlib only (no aiohttp here, and none in the children); ``cli``
starts them (``EngineProcs.spawn``) and runs the server under ``EngineProcs.supervise``.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

SCHEDULER_TITLE = "sglang::scheduler"
DETOKENIZER_TITLE = "sglang::detokenizer"
DETOKENIZER_ROUTER_TITLE = "sglang::detokenizer_router"
DP_CONTROLLER_TITLE = "sglang::data_parallel_controller"
COMM_LEN = 15  # TASK_COMM_LEN - 1: what /proc/<pid>/comm keeps of a title

WATCHDOG_INTERVAL_S = 1.0  # SubprocessWatchdog(interval=1.0), running phase
READY_POLL_S = 5.0  # _wait_for_scheduler_ready: reader.poll(timeout=5.0), then is_alive()
CRASH_DIAGNOSTICS_SLEEP_S = 5.0  # dump_requests_before_crash: time.sleep(5) (x time scale here)
STOP_TIMEOUT_S = 5.0  # the main's own stop: SIGTERM, then SIGKILL after this
KILL_TIMEOUT_S = 5.0
JOIN_POLL_S = 0.05  # wait_schedulers: how often a scheduler's exit is looked for

_FALSE = ("false", "0", "no", "n")  # environ.py EnvBool.parse

# The children's program (stdlib only), fed on stdin; CONF is filled in by child_program(). A
# child with "children" (the DP controller) starts them with the same program, as their parent.
# PR_SET_PDEATHSIG (1) is tied to the thread that started the child: start children from the
# main thread only. A parent that died before the prctl call is caught by the getppid() check.
# "@CONF@" is replaced by the configuration (a Python literal: str, int and list values).
_CHILD_SOURCE = r'''
import ctypes, os, signal
CONF = @CONF@
STARTED = []
def _stop(signum, frame):
    for pid in STARTED:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    raise SystemExit(0)
signal.signal(signal.SIGTERM, _stop)
signal.signal(signal.SIGINT, _stop)
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG, as kill_itself_when_parent_died()
if os.getppid() != CONF["parent"]:
    raise SystemExit(0)
libc.prctl(15, ctypes.c_char_p(CONF["title"].encode()), 0, 0, 0)  # PR_SET_NAME: comm
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
if CONF["children"]:
    import subprocess
    for title in CONF["children"]:
        conf = {"title": title, "parent": os.getpid(), "executable": CONF["executable"],
                "children": [], "source": ""}
        proc = subprocess.Popen([title], executable=CONF["executable"], stdin=subprocess.PIPE)
        proc.stdin.write(CONF["source"].replace("@CONF" + "@", repr(conf)).encode())
        proc.stdin.close()
        STARTED.append(proc.pid)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
while True:
    signal.pause()
'''


class _Log(Protocol):
    def info(self, msg: str) -> None: ...

    def error(self, msg: str) -> None: ...


# ---------------------------------------------------------------------------------------
# the process shape (pure)
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChildSpec:
    """One process the main process starts.

    ``name`` is what SGLang's SubprocessWatchdog calls it (``scheduler_0``, ``detokenizer``);
    ``children`` are the titles of the processes it starts itself (the DP controller's
    schedulers)."""

    name: str
    title: str
    children: tuple[str, ...] = ()


def _size(args: Mapping[str, Any], *dests: str) -> int:
    """A ``*_size`` flag by its dest (0.5.10 used the long names, e.g. tensor_parallel_size)."""
    for dest in dests:
        value = args.get(dest)
        if value is not None:
            try:
                return max(int(value), 1)
            except (TypeError, ValueError):
                return 1
    return 1


@dataclass(frozen=True)
class _Parallel:
    tp: int
    pp: int
    dp: int
    ep: int
    attn_cp: int
    moe_dp: int
    nnodes: int
    node_rank: int
    dp_attention: bool
    scale_joiner: bool
    rank_offset: int

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> _Parallel:
        return cls(
            tp=_size(args, "tp_size", "tensor_parallel_size"),
            pp=_size(args, "pp_size", "pipeline_parallel_size"),
            dp=_size(args, "dp_size", "data_parallel_size"),
            ep=_size(args, "ep_size", "expert_parallel_size"),
            attn_cp=_size(args, "attn_cp_size", "attention_context_parallel_size"),
            moe_dp=_size(args, "moe_dp_size", "moe_data_parallel_size"),
            nnodes=_size(args, "nnodes"),
            node_rank=max(int(args.get("node_rank") or 0), 0),
            dp_attention=bool(args.get("enable_dp_attention")),
            scale_joiner=args.get("ep_join_mode") == "scale",
            rank_offset=int(args.get("ep_join_rank_offset") or 0),
        )


def _rank_ranges(p: _Parallel) -> tuple[range, range]:
    """engine.py ``_calculate_rank_ranges``: the PP and TP ranks of this node."""
    pp_per_node = max(p.pp // p.nnodes, 1)
    nnodes_per_pp_rank = max(p.nnodes // p.pp, 1)
    pp_ranks = range(pp_per_node * (p.node_rank // nnodes_per_pp_rank),
                     pp_per_node * (p.node_rank // nnodes_per_pp_rank + 1))
    tp_per_node = p.tp // nnodes_per_pp_rank
    tp_ranks = range(tp_per_node * (p.node_rank % nnodes_per_pp_rank),
                     tp_per_node * (p.node_rank % nnodes_per_pp_rank + 1))
    return pp_ranks, tp_ranks


def _parallel_ranks(p: _Parallel, tp_rank: int, attn_dp_size: int) -> tuple[int, int, int]:
    """engine.py ``_compute_parallelism_ranks``: (attn_cp_rank, moe_dp_rank, moe_ep_rank)."""
    attn_tp = max(p.tp // attn_dp_size // p.attn_cp, 1)
    moe_tp_group = max(p.tp // p.moe_dp, 1)
    attn_cp_rank = (tp_rank // attn_tp) % p.attn_cp
    moe_dp_rank = tp_rank // moe_tp_group
    moe_ep_rank = tp_rank % moe_tp_group // max(moe_tp_group // p.ep, 1)
    return attn_cp_rank, moe_dp_rank, moe_ep_rank


def scheduler_title(p: _Parallel, *, pp_rank: int, tp_rank: int, attn_cp_rank: int,
                    moe_dp_rank: int, moe_ep_rank: int, dp_rank: int | None,
                    environ: Mapping[str, str]) -> str:
    """scheduler.py ``configure_scheduler_process``: ``sglang::scheduler`` + the rank prefix."""
    if dp_rank is None and "SGLANG_DP_RANK" in environ:
        with contextlib.suppress(ValueError):
            dp_rank = int(environ["SGLANG_DP_RANK"])
    prefix = ""
    if dp_rank is not None:
        prefix += f" DP{dp_rank}"
    if p.pp > 1:
        prefix += f" PP{pp_rank}"
    if p.attn_cp > 1:
        prefix += f" ATTN_CP{attn_cp_rank}"
    if p.moe_dp > 1:
        prefix += f" MOE_DP{moe_dp_rank}"
    if p.tp > 1:
        prefix += f" TP{tp_rank}"
    if p.ep > 1:
        prefix += f" EP{moe_ep_rank}"
    return SCHEDULER_TITLE + prefix.replace(" ", "_")


def _dp_controller_schedulers(p: _Parallel, environ: Mapping[str, str]) -> list[str]:
    """data_parallel_controller.py ``launch_tensor_parallel_group``: the controller's schedulers
    (display ranks shifted by ``ep_join_rank_offset``)."""
    pp_ranks, tp_ranks = _rank_ranges(p)
    if p.scale_joiner:
        tp_ranks = range(p.tp)
    groups: list[int | None] = [None] if p.dp_attention else list(range(p.dp))
    attn_dp_size = p.dp if p.dp_attention else 1
    titles = []
    for group in groups:
        for pp_rank in pp_ranks:
            for tp_rank in tp_ranks:
                dp_rank = group
                if p.dp_attention:  # compute_dp_attention_world_info
                    attn_tp = max(p.tp // p.dp // p.attn_cp, 1)
                    dp_rank = tp_rank // (attn_tp * p.attn_cp)
                cp, moe_dp, ep = _parallel_ranks(p, tp_rank, attn_dp_size)
                titles.append(scheduler_title(
                    p, pp_rank=pp_rank, tp_rank=tp_rank + p.rank_offset, attn_cp_rank=cp,
                    moe_dp_rank=moe_dp, moe_ep_rank=ep + p.rank_offset,
                    dp_rank=None if dp_rank is None else dp_rank + p.rank_offset,
                    environ=environ))
    return titles


def child_specs(args: Mapping[str, Any], environ: Mapping[str, str] | None = None,
                ) -> list[ChildSpec]:
    """The processes SGLang 0.5.17's main process starts for these parsed args, in its order:
    schedulers (or the DP controller), then the detokenizer(s) (node rank 0 only)."""
    env = os.environ if environ is None else environ
    p = _Parallel.from_args(args)
    specs: list[ChildSpec] = []
    if p.dp > 1 or p.scale_joiner:
        specs.append(ChildSpec("scheduler_0", DP_CONTROLLER_TITLE,
                               tuple(_dp_controller_schedulers(p, env))))
    else:
        pp_ranks, tp_ranks = _rank_ranges(p)
        for pp_rank in pp_ranks:
            for tp_rank in tp_ranks:
                cp, moe_dp, ep = _parallel_ranks(p, tp_rank, p.dp if p.dp_attention else 1)
                title = scheduler_title(p, pp_rank=pp_rank, tp_rank=tp_rank, attn_cp_rank=cp,
                                        moe_dp_rank=moe_dp, moe_ep_rank=ep, dp_rank=None,
                                        environ=env)
                specs.append(ChildSpec(f"scheduler_{len(specs)}", title))
    if p.node_rank >= 1:  # non-zero-rank nodes run no tokenizer/detokenizer
        return specs
    workers = int(args.get("detokenizer_worker_num") or 1)
    if workers <= 1:
        specs.append(ChildSpec("detokenizer", DETOKENIZER_TITLE))
    else:
        specs += [ChildSpec(f"detokenizer_{i}", DETOKENIZER_TITLE) for i in range(workers)]
        specs.append(ChildSpec("detokenizer_router", DETOKENIZER_ROUTER_TITLE))
    return specs


def child_program(title: str, parent: int, executable: str, children: tuple[str, ...] = (),
                  ) -> str:
    """The Python source a child runs (read from its stdin). ``parent`` is the pid it must have
    (else its parent died before it armed the parent-death signal); ``children`` are titles of
    processes it starts itself, as their parent, with the same program."""
    conf = {"title": title, "parent": parent, "executable": executable,
            "children": list(children), "source": _CHILD_SOURCE if children else ""}
    return _CHILD_SOURCE.replace("@CONF@", repr(conf))


def _child_env() -> dict[str, str]:
    """What ``/proc/<child>/environ`` shows: almost nothing, as for SGLang's children, whose
    setproctitle overwrites the environment area with the title (so a supervisor cannot find a
    marker variable there; seen on an H200). PYTHONHOME and PATH only: a Python started as
    ``[title]`` cannot find itself through argv[0] and would fall back to the prefix it was
    built for, which a relocated interpreter no longer has."""
    return {"PYTHONHOME": os.environ.get("PYTHONHOME") or f"{sys.base_prefix}:{sys.base_exec_prefix}",
            "PATH": os.environ.get("PATH", os.defpath)}


def _start(title: str, program: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``program`` under a Python whose whole argv is ``[title]`` (so /proc/<pid>/cmdline
    reads the title and nothing else); same session, process group, fds 1-2 and environment."""
    proc = subprocess.Popen([title], executable=sys.executable, stdin=subprocess.PIPE, env=env)
    if proc.stdin is None:  # stdin=PIPE always gives one
        raise AssertionError("no stdin pipe to the child")
    try:
        proc.stdin.write(program.encode())
        proc.stdin.close()
    except OSError:
        pass  # the child died at once; the watchdog sees it
    return proc


# ---------------------------------------------------------------------------------------
# /proc helpers
# ---------------------------------------------------------------------------------------
def _ppids() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            rest = text[text.rindex(")") + 1:].split()
        except (OSError, ValueError):
            continue
        if rest and rest[0] not in "ZX":
            out[int(entry)] = int(rest[1])
    return out


def descendants(pid: int) -> list[int]:
    """Live descendants of ``pid`` (psutil's ``children(recursive=True)``), parents first."""
    by_parent: dict[int, list[int]] = {}
    for child, parent in _ppids().items():
        by_parent.setdefault(parent, []).append(child)
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in sorted(by_parent.get(todo.pop(0), [])):
            found.append(child)
            todo.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return " ".join(p.decode(errors="replace") for p in handle.read().split(b"\0") if p)
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------
# the main process's side
# ---------------------------------------------------------------------------------------
@dataclass
class _Child:
    spec: ChildSpec
    proc: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return int(self.proc.pid)


@dataclass
class EngineProcs:
    """The children of one engine process and SGLang's handling of their death."""

    children: list[_Child]
    log: _Log
    time_scale: float = 1.0
    failure: str | None = None
    _watching: bool = field(default=False, repr=False)
    _joined: set[int] = field(default_factory=set, repr=False)

    @classmethod
    def spawn(cls, args: Mapping[str, Any], log: _Log, time_scale: float = 1.0) -> EngineProcs:
        """Start the schedulers (or the DP controller) and the detokenizer(s). Call it from the
        main thread: the parent-death signal follows the thread that started a child. Raises
        OSError, leaving no child behind."""
        env = _child_env()
        me = os.getpid()
        procs = cls([], log, time_scale)
        try:
            for spec in child_specs(args):
                program = child_program(spec.title, me, sys.executable, spec.children)
                procs.children.append(_Child(spec, _start(spec.title, program, env)))
        except BaseException:
            procs.kill()
            raise
        return procs

    # -- observation -------------------------------------------------------------------
    def _dead(self, schedulers_only: bool) -> _Child | None:
        for child in self.children:
            if schedulers_only and not child.spec.name.startswith("scheduler_"):
                continue
            code = child.proc.poll()
            if code is not None and code != 0:  # SubprocessWatchdog: exit code 0 is no crash
                return child
        return None

    # -- SGLang's reactions ----------------------------------------------------------------
    def kill_process_tree(self, include_parent: bool) -> None:
        """utils/common.py ``kill_process_tree(os.getpid(), include_parent)``: SIGKILL every
        descendant, then (include_parent) this process itself."""
        me = os.getpid()
        self.log.info(f"kill_process_tree called: parent_pid={me}, "
                      f"include_parent={include_parent}, pid={me}")
        self.kill()
        if include_parent:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            os.kill(me, signal.SIGKILL)

    def _on_sigquit(self, loading: bool) -> None:
        if loading:  # engine.py launch_phase_sigquit_handler
            self.log.error("Received sigquit from a child process. It usually means the child "
                           "failed.")
            self.kill_process_tree(include_parent=True)
            return
        # tokenizer_manager.py SignalHandler.running_phase_sigquit_handler
        self.log.error("SIGQUIT received. signum=None, frame=None. It usually means one child "
                       "failed.")
        self._watching = False
        if any(os.environ.get(k, "true").strip().lower() not in _FALSE
               for k in ("SGLANG_PYSPY_DUMP_BEFORE_CRASH", "SGLANG_CUDA_COREDUMP_BEFORE_CRASH")):
            self.log.info("Sleeping 5 seconds before crash diagnostics to let GPU activity "
                          "settle.")
            time.sleep(CRASH_DIAGNOSTICS_SLEEP_S * self.time_scale)  # blocks the loop, as there
            if not any(_cmdline(pid).startswith(SCHEDULER_TITLE)
                       for pid in descendants(os.getpid())):
                self.log.error("No live scheduler processes found; skipping py-spy and CUDA "
                               "coredump.")
            # (live schedulers: py-spy and CUDA core dumps are not modelled)
        self.kill_process_tree(include_parent=True)

    def _scheduler_died(self) -> bool:
        """While loading: a dead scheduler fails the start-up, as ``_wait_for_scheduler_ready``
        (the traceback's last line is kept for ``supervise``); True when one did."""
        dead = self._dead(schedulers_only=True)
        if dead is None:
            return False
        rank = self.children.index(dead)
        self.failure = (
            f"RuntimeError: Rank {rank} scheduler died during initialization "
            f"(exit code: {dead.proc.returncode}). If exit code is -9 (SIGKILL), a "
            "common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to "
            "check.")
        # launch_server.py: finally: kill_process_tree(os.getpid(), False)
        self.kill_process_tree(include_parent=False)
        return True

    def _child_crashed(self) -> bool:
        """Once loaded: a child that exited non-zero triggers SIGQUIT (``SubprocessWatchdog``)."""
        dead = self._dead(schedulers_only=False)
        if dead is None:
            return False
        self.log.error(
            f"Subprocess {dead.spec.name} (pid={dead.pid}) crashed with exit code "
            f"{dead.proc.returncode}. Triggering SIGQUIT for cleanup...")
        self._watching = False
        os.kill(os.getpid(), signal.SIGQUIT)
        return True

    async def watch(self, phase: Callable[[], str], stop: Callable[[], None]) -> None:
        """While the engine loads: a dead scheduler (checked every 5 s, as
        ``_wait_for_scheduler_ready``) fails the start-up; afterwards any child that exits
        non-zero (checked every second, ``SubprocessWatchdog``) triggers SIGQUIT."""
        loop = asyncio.get_running_loop()
        self._watching = True
        next_ready_check = loop.time() + READY_POLL_S
        while self._watching:
            await asyncio.sleep(WATCHDOG_INTERVAL_S)
            state = phase()
            if state == "stopping" or not self._watching:
                return
            if state == "placeholder":  # a rank > 0 has no watchdog: wait_schedulers joins
                continue
            if state == "loading":
                if loop.time() < next_ready_check:
                    continue
                next_ready_check = loop.time() + READY_POLL_S
                if self._scheduler_died():
                    stop()
                    return
                continue
            if self._child_crashed():
                return

    async def supervise(self, run: Awaitable[int], phase: Callable[[], str],
                        stop: Callable[[], None], launch_phase_only: bool = False) -> int:
        """Await the engine (``run``) while watching the children, with SGLang's SIGQUIT
        handler installed (``launch_phase_only``: the launch-phase one for good, as on a node of
        rank > 0, which never installs the running-phase one); the engine's exit code, or 1
        after a scheduler died during start-up (with the last line of the traceback the real
        server prints)."""
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGQUIT, lambda: self._on_sigquit(
            launch_phase_only or phase() == "loading"))
        watcher = asyncio.ensure_future(self.watch(phase, stop))
        try:
            code = await run
        finally:
            self._watching = False
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGQUIT)
        if self.failure is not None:
            sys.stderr.write(f"Traceback (most recent call last):\n{self.failure}\n")
            sys.stderr.flush()
            return 1
        return code

    # -- a node of rank > 0 ------------------------------------------------------------
    def terminate_schedulers(self) -> None:
        """Rank 0's ShutdownReq reached them: they leave their loop and exit 0."""
        for child in self.children:
            if child.spec.name.startswith("scheduler_") and child.proc.poll() is None:
                with contextlib.suppress(OSError):
                    child.proc.send_signal(signal.SIGTERM)

    async def wait_schedulers(self) -> None:
        """engine.py ``block_until_scheduler_exits``: join each scheduler in turn, logging
        ``Scheduler or DataParallelController <pid> terminated with <code>`` (once each)."""
        for child in self.children:
            if not child.spec.name.startswith("scheduler_"):
                continue
            while child.proc.poll() is None:
                await asyncio.sleep(JOIN_POLL_S)
            if child.pid not in self._joined:
                self._joined.add(child.pid)
                self.log.error(f"Scheduler or DataParallelController {child.pid} "
                               f"terminated with {child.proc.returncode}")

    # -- clean-up ----------------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL every descendant and reap our children (bounded)."""
        for pid in descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for child in self.children:
            with contextlib.suppress(OSError):
                child.proc.kill()
        self._reap(KILL_TIMEOUT_S)

    def _reap(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        for child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(max(0.0, deadline - time.monotonic()))
        return all(c.proc.returncode is not None for c in self.children)

    def stop(self) -> None:
        """The main process's own exit: SIGTERM the children (they exit 0), SIGKILL any left."""
        self._watching = False
        for child in self.children:
            if child.proc.poll() is None:
                with contextlib.suppress(OSError):
                    child.proc.send_signal(signal.SIGTERM)
        if not self._reap(STOP_TIMEOUT_S):
            self.kill()
