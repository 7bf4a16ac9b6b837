# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The fleet view of a run with a router's sweep: per worker, the fleet total merged from the raw
records (``_fleet``) and the router's own, side by side (table, notes, CSV rows).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench import fleet as _fleet
from ansible_collections.llmops.sglang.plugins.module_utils._report.common import (
    ERROR_MARK,
    NOT_MEASURABLE,
    csv_value,
    fmt,
    fmt_count,
    md_row,
    num,
)

FLEET_FILES = ("fleet.csv", "fleet.json")
# summary.md fleet table: (header, row key, decimals; None = a count)
FLEET_COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("in flight", "in_flight", None),
    ("n", "requests", None),
    ("ok", "ok", None),
    ("err", "err", None),
    ("output tok/s", "output_tok_s", 1),
    ("req/s", "req_s", 2),
    ("window s", "window_s", 1),
    ("TTFT p50 ms", "ttft_p50_ms", 1),
    ("TTFT p99 ms", "ttft_p99_ms", 1),
    ("ITL mean ms", "itl_mean_ms", 2),
    ("e2e p50 s", "e2e_p50_s", 2),
    ("e2e p99 s", "e2e_p99_s", 2),
)


def _fleet_label(meta: dict[str, Any]) -> str:
    if meta.get("role") == _fleet.ROUTER_ROLE:
        return f"router {meta.get('host') or '?'}"
    return f"{meta.get('host') or '?'}/{meta.get('instance') or '?'}"


def fleet_rows(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The side-by-side rows (``_fleet.side_by_side``), labelled as in summary.md."""
    return _fleet.side_by_side(items, _fleet_label)


def _fleet_cell(row: dict[str, Any], key: str, decimals: int | None) -> str:
    if key in (row.get("not_measurable") or []):
        return NOT_MEASURABLE
    return fmt_count(row.get(key)) if decimals is None else fmt(row.get(key), decimals)


def _fleet_view(row: dict[str, Any]) -> str:
    text = str(row.get("label"))
    if row.get("view") == "fleet" and row.get("alignment"):
        text += f" [{row['alignment']}]"
    if row.get("records_missing"):
        text += " (no records)"
    return text


def render_fleet_table(rows: Sequence[dict[str, Any]]) -> str:
    """One line per row: C (``!`` where requests failed), the view, then FLEET_COLUMNS."""
    header = ["C", "view"] + [name for name, _, _ in FLEET_COLUMNS]
    lines = [md_row(header), md_row(["---"] * len(header))]
    for row in rows:
        c_cell = fmt_count(row.get("concurrency")) + (ERROR_MARK if (num(row.get("err")) or 0) > 0 else "")
        view = _fleet_view(row)
        if row.get("view") == "fleet":
            view = f"**{view}**"
        lines.append(md_row([c_cell, view] + [_fleet_cell(row, k, d) for _, k, d in FLEET_COLUMNS]))
    return "\n".join(lines)


def _fleet_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    notes = []
    modes = {r.get("alignment") for r in rows if r.get("view") == "fleet"}
    if _fleet.ALIGNED in modes:
        notes.append(
            "[aligned]: the workers were swept one after another; each worker's level is shifted to "
            "start at 0, so the fleet total is the fleet as if every worker ran that level at the same "
            "time (sound for workers that share no GPU)."
        )
    if _fleet.CLOCK in modes:
        notes.append("[clock]: the workers' levels ran at the same time; the window is their union on the wall clock.")
    bases = {r.get("time_base") for r in rows}
    if len(bases) > 1:
        notes.append(f"Time bases differ ({', '.join(sorted(str(b) for b in bases))}): these rows are not comparable.")
    if any(r.get("records_missing") for r in rows):
        notes.append("(no records): the sweep kept no per-request records (return_records: false).")
    return notes


def render_fleet(items: Sequence[dict[str, Any]]) -> str:
    """The summary.md section: per worker, fleet total (merged) and through the router."""
    rows = fleet_rows(items)
    intro = (
        "Per level C: each worker swept at C, the fleet total merged from all the workers' "
        "per-request records at C (N x C requests in flight), and each router swept at C (C in "
        "flight, spread over its workers). Every row is computed from the raw records by one rule: "
        "output tok/s = output tokens of completed requests / window (first send to last finish), "
        "percentiles over all ok requests, ITL mean weighted by tokens. To compare the router with "
        "the fleet at the same load, read the router at N x C beside the fleet total at C."
    )
    parts = ["### Fleet: per worker, fleet total (merged), through the router", intro, render_fleet_table(rows)]
    parts.extend(_fleet_notes(rows))
    return "\n\n".join(parts)


def fleet_csv_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """fleet.csv: the rows' fields (``_fleet.ROW_FIELDS``), a not measurable value left empty."""
    out = []
    for row in rows:
        marked = row.get("not_measurable") or []
        out.append({k: csv_value(None if k in marked else row.get(k)) for k in _fleet.ROW_FIELDS})
    return out
