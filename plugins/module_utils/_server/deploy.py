# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Deployment helpers: readiness timeouts, readiness waiting, status.

Stdlib only: the functions that run on hosts (wait_for_ready, query_status) are shipped
inside modules through AnsiballZ and must run on any host Python >= 3.10.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils import _detached
from ansible_collections.llmops.sglang.plugins.module_utils._server import info as _serverinfo

MANIFEST_SCHEMA_VERSION = 1

# What a real server needs before /health_generate answers 200, measured on a fresh H200
# with SGLang 0.5.17 (147 s dense, 193 s hybrid: kernel JIT and CUDA-graph capture),
# plus margin for loading real weights from disk.
REAL_STARTUP_BASE_S = 600.0
# Pinning the HiCache host pools is estimated by the plan (_plan.hicache_plan's
# pin_seconds_estimate, from data/perfmodel.json); the timeout gives it this margin.
PIN_MARGIN = 1.5
SIM_MARGIN_S = 30.0


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_timeout(
    *,
    engine: str,
    pin_seconds: float,
    explicit_s: float = 0,
    time_scale: float = 1.0,
) -> int:
    """Seconds to wait for /health_generate, growing with what the instance must do.

    explicit_s > 0 wins. Otherwise: start-up (JIT, graph capture, weights) plus the plan's
    estimate of pinning the HiCache host pools, with a 1.5x margin. For the embedded
    engine the same modelled seconds are scaled by its time scale, plus a fixed margin.
    """
    if explicit_s and explicit_s > 0:
        return int(explicit_s)
    modelled = REAL_STARTUP_BASE_S + PIN_MARGIN * max(float(pin_seconds), 0.0)
    if engine == "sim":
        return int(modelled * max(time_scale, 0.0) + SIM_MARGIN_S)
    return int(modelled)


# --------------------------------------------------------------------------- processes


def pid_alive(pid_file: str | None) -> bool | None:
    """True/False when a pid file names a live/dead server; None when there is no pid file.

    The pid file is the one `detached_service` writes (its format and identity rule live in
    _detached): a pid whose start time differs from the recorded one is another process.
    """
    if not pid_file or not os.path.exists(pid_file):
        return None
    try:
        record = _detached.read_pid_file(pid_file)
    except _detached.DetachedServiceError:
        return False
    if record is None:
        return False
    stat = _detached.read_stat(record.pid)
    if stat is None or not (stat.alive or _detached.has_live_threads(stat.pid)):
        return False
    return record.starttime is None or stat.starttime == record.starttime


def unit_state(unit: str, runner: Callable[[list[str]], str] | None = None) -> dict[str, str]:
    """ActiveState, SubState, NRestarts and ExecMainStatus of a systemd unit ({} when systemctl
    cannot tell)."""
    def run(argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout if done.returncode == 0 else ""

    text = (runner or run)(["systemctl", "show", unit,
                            "--property=ActiveState,SubState,NRestarts,ExecMainStatus"])
    state = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            state[key.strip()] = value.strip()
    return state


def unit_failed(state: dict[str, str], restarts_before: int) -> str:
    """Why a unit being waited for has failed ('' when it has not): it is failed, or systemd
    restarted it (Restart=on-failure: the server died while loading)."""
    if not state:
        return ""
    if state.get("ActiveState") == "failed":
        return f"its unit failed (exit status {state.get('ExecMainStatus', '?')})"
    restarts = int(state.get("NRestarts") or 0) if str(state.get("NRestarts", "")).isdigit() else 0
    if restarts > restarts_before or state.get("SubState") == "auto-restart":
        return (f"its unit's server exited while loading (exit status {state.get('ExecMainStatus', '?')}) and "
                "systemd restarts it")
    return ""


def log_tail(path: str | None, lines: int = 50) -> str:
    """The last `lines` lines of a log file ('' when unreadable)."""
    return "\n".join(_detached.log_tail(path, lines)) if path else ""


# --------------------------------------------------------------------------- HTTP


def http_get(url: str, timeout: float, api_key: str | None = None) -> tuple[int, bytes]:
    """GET a URL; (status, body). Connection problems give status 0."""
    return _http(urllib.request.Request(url), timeout, api_key)


def http_post(url: str, body: Any, timeout: float, api_key: str | None = None) -> tuple[int, bytes]:
    """POST ``body`` as JSON; (status, body). Connection problems and timeouts give status 0."""
    return _http(urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), method="POST",
                                        headers={"Content-Type": "application/json"}), timeout, api_key)


def _http(request: urllib.request.Request, timeout: float, api_key: str | None) -> tuple[int, bytes]:
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return int(response.status), response.read()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read() if err.fp else b""
    except (urllib.error.URLError, OSError, ValueError):
        return 0, b""


# what a failed request of an instance's readiness was for (wait_ready's warmup and prime)
WARMUP_WHAT = "its warm-up request ({path}, sglang_ready_warmup)"
PRIME_WHAT = ("its storage tier's first prefill ({path}, which makes SGLang compile the tier's page-hash "
              "extension: a C++ compiler, Python's and OpenSSL's headers; see the log)")


def prime_body(words: int) -> dict[str, Any]:
    """The body of an instance's readiness prime (wait_ready's ``prime`` with ``words``): greedy,
    one new token, ``words`` words of a fixed text."""
    text = " ".join(f"storage tier readiness page word {i}" for i in range(max(int(words), 1) // 6 + 1))
    return {"text": text, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}


def warm_up(url: str, warmup: dict[str, Any], api_key: str | None = None,
            poster: Callable[[str, Any, float, str | None], tuple[int, bytes]] = http_post,
            clock: Callable[[], float] = time.monotonic, what_for: str = WARMUP_WHAT) -> tuple[float, str]:
    """One request as real traffic sends it, after ``/health_generate`` answered (issue 28 item 5:
    on SGLang 0.5.17 the first *sampled* request took 100-140 s after readiness; greedy ones and
    /health_generate did not pay it). (seconds it took, "" or why it failed, named by ``what_for``)."""
    path = "/" + str(warmup.get("path") or "/generate").lstrip("/")
    timeout = float(warmup.get("timeout") or 300)
    started = clock()
    status, _ = poster(url.rstrip("/") + path, warmup.get("body") or {}, timeout, api_key)
    took = round(clock() - started, 2)
    if status == 200:
        return took, ""
    what = f"no answer within {timeout:g} s" if status == 0 else f"HTTP {status}"
    return took, f"/health_generate answered, but {what_for.format(path='POST ' + path)} failed: {what}"


def bootstrap_ready(url: str, deadline: float, *, getter: Callable[[str, float, str | None], tuple[int, bytes]],
                    clock: Callable[[], float], sleep: Callable[[float], None], interval: float,
                    request_timeout: float) -> str:
    """A prefill instance's bootstrap server (``GET /health`` "OK" on its bootstrap port, which
    decodes ask for the KV) answers before the deadline: "" or why not. Its API answering is not
    enough: the router would send it requests whose KV no decode could fetch."""
    status = 0
    while True:
        status, _ = getter(url, request_timeout, None)
        if status == 200:
            return ""
        if clock() >= deadline:
            return (f"/health_generate answered, but its bootstrap server {url} did not (last status "
                    f"{status or 'no answer'}): decodes could not fetch its KV")
        sleep(interval)


def wait_for_ready(
    instances: list[dict[str, Any]],
    *,
    interval: float = 2.0,
    request_timeout: float = 30.0,
    api_key: str | None = None,
    tail_lines: int = 50,
    warmup: dict[str, Any] | None = None,
    getter: Callable[[str, float, str | None], tuple[int, bytes]] = http_get,
    poster: Callable[[str, Any, float, str | None], tuple[int, bytes]] = http_post,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    unit_reader: Callable[[str], dict[str, str]] = unit_state,
) -> dict[str, dict[str, Any]]:
    """Poll every instance's /health_generate in parallel until 200, death or its timeout.

    Each instance: {name, url, timeout, path?, log_file?, pid_file?, unit?}; ``path`` is the
    endpoint polled (default /health_generate; the router role waits for /health and /readiness). A server that died while
    loading fails at once (no point waiting out its timeout): its pid file names a dead
    process, or its systemd unit failed or was restarted by systemd. With ``warmup`` ({path,
    body, timeout}), an instance is ready once that request answered 200 too (``warm_up``); with
    ``bootstrap`` (a prefill's bootstrap server's /health URL), once that answered 200 too.
    Returns name -> result: {ready, status, waited_s, ready_at, reason, log_tail, warmup_s}.
    """
    results: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()

    def watch(inst: dict[str, Any]) -> None:
        start = clock()
        deadline = start + float(inst.get("timeout") or 600)
        url = inst["url"].rstrip("/") + "/" + str(inst.get("path") or "/health_generate").lstrip("/")
        status = 0
        reason = ""
        unit = inst.get("unit")
        before = unit_reader(unit) if unit else {}
        restarts_before = int(before.get("NRestarts") or 0) if str(before.get("NRestarts", "")).isdigit() else 0
        while True:
            status, _ = getter(url, request_timeout, api_key)
            if status == 200:
                took, failed_warmup = warm_up(inst["url"], warmup, api_key, poster, clock) if warmup else (None, "")
                if not failed_warmup and inst.get("prime"):
                    prime = dict(inst["prime"])
                    if prime.get("words") and not prime.get("body"):
                        prime["body"] = prime_body(prime["words"])
                    primed, failed_warmup = warm_up(inst["url"], prime, api_key, poster, clock, PRIME_WHAT)
                    took = round((took or 0.0) + primed, 2)
                if not failed_warmup and inst.get("bootstrap"):
                    failed_warmup = bootstrap_ready(str(inst["bootstrap"]), deadline, getter=getter, clock=clock,
                                                    sleep=sleep, interval=interval, request_timeout=request_timeout)
                res = {"ready": not failed_warmup, "status": status, "waited_s": round(clock() - start, 2),
                       "ready_at": None if failed_warmup else utc_now(), "reason": failed_warmup,
                       "log_tail": log_tail(inst.get("log_file"), tail_lines) if failed_warmup else "",
                       "warmup_s": took}
                break
            alive = pid_alive(inst.get("pid_file"))
            failed = unit_failed(unit_reader(unit), restarts_before) if unit else ""
            if alive is False:
                reason = "its process exited before it became ready"
            elif failed:
                reason = failed
            elif clock() >= deadline:
                reason = f"no 200 from {url} within {inst.get('timeout')} s (last status {status or 'no answer'})"
            if reason:
                res = {"ready": False, "status": status, "waited_s": round(clock() - start, 2),
                       "ready_at": None, "reason": reason,
                       "log_tail": log_tail(inst.get("log_file"), tail_lines), "warmup_s": None}
                break
            sleep(interval)
        with lock:
            results[inst["name"]] = res

    threads = [threading.Thread(target=watch, args=(inst,), daemon=True) for inst in instances]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def server_info(base_url: str, api_key: str | None = None, timeout: float = 10.0,
                getter: Callable[[str, float, str | None], tuple[int, bytes]] = http_get,
                ) -> dict[str, Any] | None:
    """Server info from /server_info, falling back to the older /get_server_info."""
    for path in _serverinfo.SERVER_INFO_PATHS:
        status, body = getter(base_url.rstrip("/") + path, timeout, api_key)
        if status == 200:
            try:
                data = json.loads(body)
            except ValueError:
                return None
            if isinstance(data, dict):
                data["_path"] = path
                return data
    return None


def process_state(inst: dict[str, Any], pids: list[int] | None) -> str:
    """running (live processes found: its process group, or its systemd unit's control group),
    dead (a pid file naming no live server), stopped (neither), unknown (not looked for)."""
    if pids:
        return "running"
    alive = pid_alive((inst.get("paths") or {}).get("pid_file"))
    if alive is not None:
        return "running" if alive else "dead"
    return "stopped" if pids is not None else "unknown"


def instance_status(inst: dict[str, Any], api_key: str | None = None, timeout: float = 10.0,
                    getter: Callable[[str, float, str | None], tuple[int, bytes]] = http_get,
                    pids: list[int] | None = None) -> dict[str, Any]:
    """Status of one manifest instance (schema 2, ``_manifest.normalize``): process, health,
    version, effective limits. ``pids``: its live processes (``_ownership``), when looked for."""
    url = (inst.get("connect_url") or "").rstrip("/")
    health, _ = getter(url + "/health", timeout, api_key) if url else (0, b"")
    info = server_info(url, api_key, timeout, getter) if health == 200 else None
    summary = _serverinfo.summarize(info or {})
    return {
        "name": inst["name"],
        "url": url,
        "up": health == 200,
        "health": health,
        "process": process_state(inst, pids),
        "pid": inst.get("pid"),
        "pids": sorted(pids or []),
        "version": summary["version"],
        "max_running_requests": summary["max_running_requests"],
        "avg_spec_accept_length": summary["avg_spec_accept_length"],
        "last_gen_throughput": summary["last_gen_throughput"],
        "server_info_path": (info or {}).get("_path"),
    }


# --------------------------------------------------------------------------- draining

# The scheduler's gauges in /metrics (--enable-metrics; every profile turns it on): requests
# being generated and requests waiting, summed over the ranks' label sets.
BUSY_GAUGES = ("sglang:num_running_reqs", "sglang:num_queue_reqs")


def in_flight(metrics_text: str) -> float | None:
    """Running plus queued requests from a /metrics text; None when the gauges are absent."""
    total, seen = 0.0, False
    for line in metrics_text.splitlines():
        if not line.startswith(BUSY_GAUGES):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in BUSY_GAUGES:
            continue
        try:
            total += float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        seen = True
    return total if seen else None


def wait_for_idle(
    instances: list[dict[str, Any]],
    *,
    timeout: float = 120.0,
    grace: float = 5.0,
    interval: float = 0.5,
    api_key: str | None = None,
    getter: Callable[[str, float, str | None], tuple[int, bytes]] = http_get,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, dict[str, Any]]:
    """Wait until each instance has no request running or queued (its /metrics gauges), at most
    ``timeout`` seconds; an instance without /metrics gets ``grace`` seconds instead. A router
    that removed a worker sends it nothing new, but DELETE does not drain: the requests it
    already forwarded run to their end on the worker. Returns name -> {idle, waited_s,
    in_flight, how}; never fails (a drain that times out is reported, the caller decides)."""
    results: dict[str, dict[str, Any]] = {}
    for inst in instances:
        start = clock()
        url = inst["url"].rstrip("/") + "/metrics"
        last: float | None = None
        how = "metrics"
        while True:
            status, body = getter(url, 10.0, api_key)
            last = in_flight(body.decode("utf-8", "replace")) if status == 200 else None
            if last is None:  # no /metrics (or the server is gone): a fixed grace
                how = "grace" if status != 0 else "gone"
                if status != 0:
                    sleep(max(0.0, grace - (clock() - start)))
                break
            if last == 0 or clock() - start >= timeout:
                break
            sleep(interval)
        results[inst["name"]] = {"idle": last in (0, 0.0) or how in ("grace", "gone"),
                                 "waited_s": round(clock() - start, 2), "in_flight": last, "how": how}
    return results


def status_line(status: dict[str, Any]) -> str:
    """One line per instance for people: up/down, version, limits, accept length."""
    state = "up" if status.get("up") else "DOWN"
    parts = [f"{status.get('name')}: {state} {status.get('url')}", f"process={status.get('process')}"]
    if status.get("version"):
        parts.append(f"sglang={status['version']}")
    if status.get("max_running_requests") is not None:
        parts.append(f"max_running_requests={status['max_running_requests']}")
    if status.get("avg_spec_accept_length") is not None:
        parts.append(f"accept_length={status['avg_spec_accept_length']}")
    if not status.get("up"):
        parts.append(f"health={status.get('health')}")
    if status.get("in_manifest") is False:
        parts.append("NOT IN THE MANIFEST (left by an interrupted deploy: stop.yml stops it, deploy.yml replaces it)")
    if status.get("candidate"):
        parts.append("CANDIDATE, NOT JUDGED (its rollout stopped while the guard watched it: rollback.yml puts back "
                     "its previous configuration, deploy.yml replaces and judges it again)")
    return " ".join(parts)


def status_lines(manifest_found: bool, statuses: list[dict[str, Any]], lock_message: str = "",
                 manifest_problem: str = "") -> list[str]:
    """What status.yml prints for a host: the run lock's holder, the manifest's problem, then one
    line per instance (``status_line``); without a deployment, that there is none."""
    head = [lock_message] if lock_message else []
    if not manifest_found:
        return head + ["no deployment on this host"]
    return head + ([manifest_problem] if manifest_problem else []) + [status_line(s) for s in statuses]
