# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Progress lines of a running sweep: one JSON line per finished level.

The sweep module appends them on the machine it runs on (next to the server, or the controller);
the bench role's ``sweep_wait`` action reads them while the job runs, appends them to
``reports/<run id>/progress.jsonl`` on the controller and prints them. A line is written once,
whole, with one ``write`` on a file opened for appending, so a reader never sees half a line
that a later read completes differently, and an interrupted sweep leaves every finished level's
line behind. Plain Python (host side, Python 3.10).
"""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any

LABELS = ("host", "instance", "profile")
# the label every printed line carries: the time its rates and latencies are in (a sweep of
# the time-scaled embedded engine, or of a router in front of it, is in the GPU time modelled)
TIME_BASES = {"model": "modelled time", "wall": "wall time"}


def _p50(point: dict[str, Any], key: str) -> Any:
    dist = point.get(key)
    return dist.get("p50") if isinstance(dist, dict) else None


def record(point: dict[str, Any], labels: dict[str, Any] | None, time_scale: Any = None) -> dict[str, Any]:
    """The progress line of one finished level. On the time-scaled embedded engine, rates and
    TTFT are converted to the GPU time it models (as the sweep's result is at its end)."""
    labels = labels or {}
    scale = float(time_scale) if isinstance(time_scale, (int, float)) and 0 < time_scale < 1 else None
    tok_s = point.get("output_tok_s")
    ttft = _p50(point, "ttft_ms")
    if scale is not None:
        tok_s = None if tok_s is None else round(tok_s * scale, 3)
        ttft = None if ttft is None else round(ttft / scale, 3)
    metrics = point.get("server_metrics") or {}
    return {
        **{key: labels.get(key) for key in LABELS},
        "concurrency": point.get("concurrency"),
        "offered_rate": point.get("offered_rate"),  # rate mode: the level is this rate (req/s)
        "output_tok_s": tok_s,
        "ttft_ms_p50": ttft,
        "requests": point.get("requests"),
        "errors": (point.get("errors") or {}).get("total"),
        "status": point.get("status"),
        "running_max": metrics.get("running_max"),
        "queued_max": metrics.get("queued_max"),
        "spec_accept_length": metrics.get("spec_accept_length"),
        "time_base": "model" if scale is not None else "wall",
        "at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def append(path: str, rec: dict[str, Any]) -> None:
    """Append one line (0600, not through a symbolic link) with a single write."""
    data = (json.dumps(rec, sort_keys=True) + "\n").encode("utf-8")
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def complete_lines(text: str) -> list[str]:
    """The whole lines of ``text`` (a trailing partial line is left for the next read)."""
    lines = text.split("\n")
    return [line for line in lines[:-1] if line.strip()]


def describe(rec: dict[str, Any]) -> str:
    """``node1 gpu0 (nospec) [wall time] C=16: 812.3 tok/s, TTFT p50 41.2 ms, 0 errors, ok; server:
    running max 16, ...``: the time base of the line's rates and latencies in brackets."""
    def num(value: Any, unit: str) -> str:
        return "n/a" if value is None else f"{value:g}{unit}"

    where = " ".join(str(rec[k]) for k in ("host", "instance") if rec.get(k))
    if rec.get("profile"):
        where += f" ({rec['profile']})"
    base = TIME_BASES.get(str(rec.get("time_base")))
    if base:
        where += f" [{base}]"
    rate = rec.get("offered_rate")
    level = f"{rate:g} req/s" if isinstance(rate, (int, float)) else f"C={rec.get('concurrency')}"
    text = (f"{where} {level}: {num(rec.get('output_tok_s'), ' tok/s')}, "
            f"TTFT p50 {num(rec.get('ttft_ms_p50'), ' ms')}, {rec.get('errors') or 0} errors, {rec.get('status')}")
    server = [f"{label} {rec[key]:g}" for label, key in (
        ("running max", "running_max"), ("queued max", "queued_max"), ("accept length", "spec_accept_length"))
        if isinstance(rec.get(key), (int, float))]
    return text.strip() + ("; server: " + ", ".join(server) if server else "")
