# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The report's files: ``summary.csv``, the per-instance JSON, ``fleet.csv``/``fleet.json``,
``summary.md``, the plots and the ``latest`` link (``write_report``, ``plan_files``).
"""
from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._bench import fleet as _fleet
from ansible_collections.llmops.sglang.plugins.module_utils._report.common import (
    ERROR_MARK,
    LATEST_NAME,
    csv_value,
    dig,
    err_total,
    failed_levels,
    knee_of,
    normalize,
    num,
    peak_of,
    points_of,
    unmeasurable,
)
from ansible_collections.llmops.sglang.plugins.module_utils._report.fleetview import (
    FLEET_FILES,
    fleet_csv_rows,
    fleet_rows,
)
from ansible_collections.llmops.sglang.plugins.module_utils._report.html import render_html
from ansible_collections.llmops.sglang.plugins.module_utils._report.markdown import render_markdown
from ansible_collections.llmops.sglang.plugins.module_utils._report.plots import write_plots

# summary.csv columns: (column name, path into the point, or a meta key prefixed with "meta.").
CSV_COLUMNS: tuple[tuple[str, str], ...] = (
    ("host", "meta.host"),
    ("instance", "meta.instance"),
    ("profile", "meta.profile"),
    ("release", "meta.release"),
    ("engine", "meta.engine"),
    ("gpus", "meta.gpus"),
    ("concurrency", "concurrency"),
    ("requests", "requests"),
    ("ok", "ok"),
    ("err", "errors.total"),
    ("err_http", "errors.http"),
    ("err_stream", "errors.stream"),
    ("err_timeout", "errors.timeout"),
    ("err_connection", "errors.connection"),
    ("err_short", "errors.short"),
    ("error_rate", "error_rate"),
    ("status", "status"),
    ("output_tokens", "output_tokens"),
    ("output_tok_s", "output_tok_s"),
    ("steady_output_tok_s", "steady_output_tok_s"),
    ("avg_out", "avg_output_tokens"),
    ("wall_s", "duration_s"),
    ("req_s", "req_s"),
    ("ttft_mean_ms", "ttft_ms.mean"),
    ("ttft_p50_ms", "ttft_ms.p50"),
    ("ttft_p90_ms", "ttft_ms.p90"),
    ("ttft_p99_ms", "ttft_ms.p99"),
    ("itl_mean_ms", "itl_ms.mean"),
    ("itl_p50_ms", "itl_ms.p50"),
    ("itl_p90_ms", "itl_ms.p90"),
    ("itl_p99_ms", "itl_ms.p99"),
    ("tpot_mean_ms", "tpot_ms.mean"),
    ("tpot_p50_ms", "tpot_ms.p50"),
    ("tpot_p90_ms", "tpot_ms.p90"),
    ("tpot_p99_ms", "tpot_ms.p99"),
    ("e2e_mean_s", "e2e_s.mean"),
    ("e2e_p50_s", "e2e_s.p50"),
    ("e2e_p90_s", "e2e_s.p90"),
    ("e2e_p99_s", "e2e_s.p99"),
    ("achieved_concurrency", "achieved_concurrency"),
    ("client_limited", "client_limited"),
    ("client_loop_lag_ms_p99", "client.loop_lag_ms_p99"),
    ("client_cpu_util", "client.cpu_util"),
    ("latency_measurable", "latency_measurable"),
    ("server_requests", "server.requests"),
    ("server_ttft_mean_ms", "server.ttft_ms_mean"),
    ("server_itl_mean_ms", "server.itl_ms_mean"),
    ("server_e2e_mean_s", "server.e2e_s_mean"),
    ("server_running_mean", "server_metrics.running_mean"),
    ("server_running_max", "server_metrics.running_max"),
    ("server_queued_mean", "server_metrics.queued_mean"),
    ("server_queued_max", "server_metrics.queued_max"),
    ("server_token_usage_max", "server_metrics.token_usage_max"),
    ("server_spec_accept_length", "server_metrics.spec_accept_length"),
    ("server_spec_accept_rate", "server_metrics.spec_accept_rate"),
    ("server_cache_hit_rate", "server_metrics.cache_hit_rate"),
    ("server_cache_hit_rate_device", "server_metrics.cache_hit_rate_device"),
    ("server_cache_hit_rate_host", "server_metrics.cache_hit_rate_host"),
    ("server_cache_hit_rate_storage", "server_metrics.cache_hit_rate_storage"),
    ("server_storage_prefetched_tokens", "server_metrics.storage_prefetched_tokens"),
    ("server_storage_backuped_tokens", "server_metrics.storage_backuped_tokens"),
    ("server_retracted_max", "server_metrics.retracted_max"),
    ("drift_first_half_tok_s", "drift.first_half_tok_s"),
    ("drift_second_half_tok_s", "drift.second_half_tok_s"),
    ("drift_ratio", "drift.ratio"),
    ("drift_flagged", "drift.flagged"),
    ("warmup_requests", "level_warmup.requests"),
    ("warmup_errors", "level_warmup.errors.total"),
    ("warmup_s", "level_warmup.seconds"),
    ("is_peak", "@peak"),
    ("is_knee", "@knee"),
)
CSV_HEADER: tuple[str, ...] = tuple(name for name, _ in CSV_COLUMNS)


def _same_c(a: Any, b: Any) -> bool:
    x, y = num(a), num(b)
    return x is not None and y is not None and x == y


def _safe(part: Any) -> str:
    text = str(part) if part not in (None, "") else "unknown"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "unknown"


def csv_rows(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per instance x level, columns as in CSV_HEADER."""
    rows: list[dict[str, Any]] = []
    for item in items:
        meta, sweep = item["meta"], item["sweep"]
        peak, knee = peak_of(sweep), knee_of(sweep)
        for point in points_of(sweep):
            row: dict[str, Any] = {}
            for name, path in CSV_COLUMNS:
                if path.startswith("meta."):
                    value = meta.get(path[5:])
                elif path == "@peak":
                    value = peak is not None and _same_c(peak.get("concurrency"), point.get("concurrency"))
                elif path == "@knee":
                    value = knee is not None and _same_c(knee.get("concurrency"), point.get("concurrency"))
                elif path == "errors.total":
                    value = err_total(point)
                    value = int(value) if value is not None else None
                elif unmeasurable(point, path):
                    value = None  # not measurable at the engine's time scale: never a wrong number
                else:
                    value = dig(point, path)
                row[name] = csv_value(value)
            rows.append(row)
    return rows


def _json_names(items: Sequence[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for item in items:
        meta = item["meta"]
        stem = "_".join(_safe(meta.get(k)) for k in ("host", "instance", "profile"))
        name, n = f"{stem}.json", 2
        while name in names:
            name, n = f"{stem}-{n}.json", n + 1
        names.append(name)
    return names


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- latest link
def update_latest(out: Path) -> str:
    """Point ``<parent>/latest`` at ``out`` with a relative link, replaced atomically."""
    parent = out.parent
    link = parent / LATEST_NAME
    if link.exists() and not link.is_symlink():
        raise OSError(f"{link} exists and is not a symlink; not replacing it")
    tmp = parent / f".{LATEST_NAME}.tmp-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(os.path.relpath(out, parent), tmp)
    os.replace(tmp, link)
    return str(link)


# --------------------------------------------------------------------------- entry point
def plan_files(results: list[dict[str, Any]], out_dir: str) -> list[str]:
    """The data files write_report would write (plots excluded), without writing anything."""
    items = normalize(results)
    out = Path(out_dir)
    fleet = [str(out / n) for n in FLEET_FILES] if _fleet.has_router(items) else []
    return [str(out / n) for n in _json_names(items)] + [str(out / "summary.csv"), str(out / "summary.md")] + fleet


def write_fleet(items: Sequence[dict[str, Any]], out: Path) -> list[str]:
    """fleet.csv and fleet.json (the rows and how they were made); [] without a router."""
    if not _fleet.has_router(items):
        return []
    rows = fleet_rows(items)
    csv_path = out / "fleet.csv"
    tmp = csv_path.with_name(f".{csv_path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(_fleet.ROW_FIELDS))
        writer.writeheader()
        writer.writerows(fleet_csv_rows(rows))
    os.replace(tmp, csv_path)
    doc = {"rows": rows, "sources": _json_names(items), "rule": "plugins/module_utils/_bench/fleet.py (docs/reports.md)"}
    json_path = out / "fleet.json"
    _write_text(json_path, json.dumps(doc, indent=2) + "\n")
    return [str(csv_path), str(json_path)]


def write_report(
    results: list[dict[str, Any]],
    out_dir: str,
    *,
    title: str | None = None,
    latest_link: bool = True,
) -> dict[str, Any]:
    """Write the report folder; return {dir, files, table, plots, warnings, latest}.

    ``files`` lists everything written (JSON, CSV, Markdown and plots); ``table`` is the
    Markdown of the instance tables (and the profile table) for printing; ``plots`` is empty,
    with a warning, when matplotlib is missing; ``latest`` is the link path or None.
    """
    items = normalize(results)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    warnings: list[str] = []

    for name, item in zip(_json_names(items), items, strict=True):
        doc = {"meta": item["meta"], "sweep": item["sweep"]}
        target = out / name
        _write_text(target, json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
        files.append(str(target))

    csv_path = out / "summary.csv"
    tmp = csv_path.with_name(f".{csv_path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(CSV_HEADER))
        writer.writeheader()
        writer.writerows(csv_rows(items))
    os.replace(tmp, csv_path)
    files.append(str(csv_path))

    files.extend(write_fleet(items, out))

    md_text, table = render_markdown(items, title)
    md_path = out / "summary.md"
    _write_text(md_path, md_text)
    files.append(str(md_path))

    plots, plot_warnings = write_plots(items, out, title or "SGLang throughput sweep")
    files.extend(plots)
    html_path = out / "report.html"  # one self-contained file: tables, charts, settings, the PNGs inline
    _write_text(html_path, render_html(items, md_text, title or "SGLang throughput sweep", plots))
    files.append(str(html_path))
    warnings.extend(f"requests failed at {line} (marked {ERROR_MARK} in summary.md)" for line in failed_levels(items))
    warnings.extend(plot_warnings)

    latest: str | None = None
    if latest_link:
        try:
            latest = update_latest(out)
        except OSError as exc:
            warnings.append(f"latest link not updated: {exc}")

    return {
        "dir": str(out),
        "files": files,
        "table": table,
        "plots": plots,
        "warnings": warnings,
        "latest": latest,
    }
