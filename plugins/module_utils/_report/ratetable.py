# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""One instance's open-loop, goodput and repeats table (docs/sweep.md "Open-loop rate mode",
"Goodput and SLOs", "Repeats"), and the SLO search's answer; None for a plain closed-loop sweep.
"""
from __future__ import annotations

from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._report.common import (
    MISSING,
    fmt,
    fmt_count,
    level_name,
    md_row,
    num,
)

RATE_HEADER = ["level", "sent req/s", "queued", "queue p99 ms", "completed req/s", "goodput req/s", "goodput tok/s",
               "SLO attainment", "SLO met", "output tok/s mean ± 95% CI (runs)"]
# Said under the table (issue 28 item 2: "achieved 4.0, goodput 3.53, attainment 1.0" read as 12%
# of the requests missing the SLO): which figures share which denominator.
RATE_NOTE = ("Completed req/s, goodput and tok/s are per second of the level (`duration_s`: first request sent "
             "to last answer, the drain included), so goodput equals completed req/s when every request met "
             "the SLO and never exceeds it; sent req/s (`achieved_rate`) is the rate the requests were sent "
             "at, over the arrival window (first to last send).")


def _interval(point: dict[str, Any]) -> str:
    block = point.get("repeats") if isinstance(point.get("repeats"), dict) else None
    measure = ((block or {}).get("measures") or {}).get("output_tok_s") or {}
    if num(measure.get("half_width")) is None:
        return MISSING
    text = f"{fmt(measure.get('mean'))} ± {fmt(measure.get('half_width'))} ({measure.get('n')})"
    return text + (" disagree" if block and block.get("disagree") else "")


def _met(value: Any) -> str:
    return MISSING if value is None else ("yes" if value else "**no**")


def render_rate_table(sweep: dict[str, Any]) -> str | None:
    """The table (and the search's answer under it), or None when the sweep has no rate level,
    SLO or repeats."""
    points = [p for p in sweep.get("points") or [] if isinstance(p, dict)]
    if not any(p.get("offered_rate") is not None or "slo_met" in p or p.get("repeats") for p in points):
        return None
    points = sorted(points, key=lambda p: (num(p.get("offered_rate")) or 0.0, num(p.get("concurrency")) or 0.0))
    lines = [md_row(RATE_HEADER), md_row(["---"] * len(RATE_HEADER))]
    for point in points:
        lines.append(md_row([
            level_name(point),
            fmt(point.get("achieved_rate"), 2),
            fmt_count(point.get("queued_requests")),
            fmt((point.get("queue_delay_ms") or {}).get("p99")),
            fmt(point.get("req_s"), 2),
            fmt(point.get("goodput_req_s"), 2),
            fmt(point.get("goodput_tok_s")),
            fmt(point.get("slo_attainment"), 3),
            _met(point.get("slo_met")),
            _interval(point),
        ]))
    slo = sweep.get("slo") or {}
    text = "\n".join(lines) + "\n\n" + RATE_NOTE
    if slo:
        text = "SLO " + ", ".join(f"{k} {v:g}" for k, v in slo.items()) + ":\n\n" + text
    limit = sweep.get("slo_limit")
    if isinstance(limit, dict):
        text += (f"\n\nSLO search: highest passing {limit.get('highest_pass')} {limit.get('unit')}, lowest failing "
                 f"{limit.get('lowest_fail')} ({len(limit.get('probes') or [])} probes, "
                 f"{'converged' if limit.get('converged') else 'not converged'} within {limit.get('tolerance')})")
    return text
