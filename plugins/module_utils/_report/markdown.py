# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""``summary.md``: every instance's section, the profile comparison and the fleet view.
"""
from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench import fleet as _fleet
from ansible_collections.llmops.sglang.plugins.module_utils._report.common import (
    MISSING,
    fmt,
    fmt_count,
    instance_label,
    knee_of,
    md_row,
    num,
    peak_of,
    points_of,
    profiles_in_order,
)
from ansible_collections.llmops.sglang.plugins.module_utils._report.fleetview import render_fleet
from ansible_collections.llmops.sglang.plugins.module_utils._report.tables import render_instance


def profile_summary(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per profile (first seen first): instances, best peak and its ratio to the baseline."""
    rows: list[dict[str, Any]] = []
    for profile in profiles_in_order(items):
        members = [i for i in items if str(i["meta"].get("profile") or "unknown") == profile]
        peaks = [(peak_of(i["sweep"]), i) for i in members]
        valid = [(p, i) for p, i in peaks if p is not None and num(p.get("output_tok_s")) is not None]
        best = max(valid, key=lambda pi: float(pi[0]["output_tok_s"]), default=None)
        knees = [knee_of(i["sweep"]) for i in members]
        rows.append({
            "profile": profile,
            "instances": len(members),
            "peak_output_tok_s": float(best[0]["output_tok_s"]) if best else None,
            "peak_concurrency": best[0].get("concurrency") if best else None,
            "peak_instance": instance_label(best[1]["meta"]) if best else None,
            "mean_peak_output_tok_s": (
                sum(float(p["output_tok_s"]) for p, _ in valid) / len(valid) if valid else None
            ),
            "knee_concurrency": sorted({k["concurrency"] for k in knees if k is not None}),
        })
    base = rows[0]["peak_output_tok_s"] if rows else None
    for row in rows:
        peak = row["peak_output_tok_s"]
        row["ratio"] = peak / base if peak is not None and base else None
    return rows


def render_profiles(items: Sequence[dict[str, Any]]) -> str:
    """The profile comparison table (baseline: the first profile)."""
    rows = profile_summary(items)
    header = ("profile", "instances", "peak tok/s", "at C", "mean peak tok/s", "knee C", "vs baseline")
    lines = [md_row(header), md_row(["---"] * len(header))]
    for index, row in enumerate(rows):
        ratio = row["ratio"]
        if index == 0:
            ratio_text = "1.00x (baseline)"
        elif ratio is None:
            ratio_text = MISSING
        else:
            ratio_text = f"{ratio:.2f}x ({(ratio - 1) * 100:+.0f}%)"
        knees = ", ".join(fmt_count(k) for k in row["knee_concurrency"]) or MISSING
        lines.append(md_row([
            row["profile"],
            str(row["instances"]),
            fmt(row["peak_output_tok_s"]),
            fmt_count(row["peak_concurrency"]),
            fmt(row["mean_peak_output_tok_s"]),
            knees,
            ratio_text,
        ]))
    return "\n".join(lines)


def render_markdown(items: Sequence[dict[str, Any]], title: str | None = None) -> tuple[str, str]:
    """(the whole summary.md, the part to print: instance tables and the profile table)."""
    sections = [render_instance(i["meta"], i["sweep"]) for i in items]
    if len(profiles_in_order(items)) > 1:
        sections.append("### Profiles (peak output tok/s, baseline = first profile)\n\n" + render_profiles(items))
    if _fleet.has_router(items):
        sections.append(render_fleet(items))
    body = "\n\n".join(sections)
    rated = any(num(p.get("offered_rate")) is not None for i in items for p in points_of(i["sweep"]))
    level = ("level = the offered rate (open loop; each level's C is only the in-flight cap)" if rated
             else "C = concurrency")
    intro = (
        f"Columns: {level}, n = requests, ok = completed, err = failed (all kinds), "
        "output tok/s = output tokens / wall time of the level (ramp-up and tail included), "
        "avg_out = output tokens per ok request, wall s = first send to last finish "
        "(model s on a time-scaled engine: the same in the seconds it models), "
        "TTFT/ITL = time to first token / inter-token latency (token level). "
        f"`!` after {'the level' if rated else 'C'}: requests failed at that level; `*`: client-limited level; "
        "`~`: throughput drifted within the level; "
        "n/m: not measurable at the engine's time scale. See docs/reports.md."
    )
    # the title as text: Markdown renders raw HTML in a heading (report.html escapes it too)
    doc = f"# {html.escape(title or 'SGLang throughput sweep', quote=False)}\n\n{intro}\n\n{body}\n"
    return doc, body
