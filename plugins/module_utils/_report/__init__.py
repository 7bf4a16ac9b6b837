# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Benchmark report writer, run on the controller; a package.

Input: one item per server instance, ``{"meta": {...}, "sweep": <sglang_sweep fact>}`` where
``meta`` comes from the deployment manifest (host, instance, profile, release, engine, gpus,
url) and ``sweep`` is the ``ansible_facts.sglang_sweep`` that ``throughput_sweep`` returned
(schema_version 1). Output, in one folder (``reports/<UTC timestamp>/``):

- ``<host>_<instance>_<profile>.json``: the full sweep (raw records included) plus meta;
- ``summary.csv``: one row per instance x concurrency level, scalar fields flattened;
- ``summary.md``: per instance the seed-style table, peak/knee line, profile comparison;
- ``throughput.png``, ``latency.png`` and, with several profiles, ``profiles.png``;
- with a router's sweep among the items (``meta.role: router``): ``fleet.csv`` and
  ``fleet.json``, the side-by-side rows of ``_fleet`` (per worker, fleet total merged from the
  raw records, through the router), also a section of ``summary.md``;

and a relative ``latest`` symlink beside the folder. Every field of the sweep is optional
here: a missing value is shown as ``-`` and never stops the report.

One job per file; each imports only files before it in this list, never this ``__init__``:
``common`` (marks, formatting, levels, peak and knee, normalized items), ``cache`` (the workload
line and prefix-cache table), ``ratetable`` (rate levels, goodput and repeats), ``tables`` (one
instance's tables, notes and findings), ``fleetview`` (the fleet view), ``markdown``
(``summary.md``), ``plots`` (the PNGs), ``html`` (``report.html``, self-contained) and ``files``
(``write_report``: every file, the ``latest`` link). The names below are re-exported:
``from ..._report import write_report``.
"""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils._report.common import (  # noqa: F401
    DRIFT_MARK,
    ERROR_KINDS,
    ERROR_MARK,
    LATEST_NAME,
    MISSING,
    NOT_MEASURABLE,
    csv_value,
    dig,
    err_total,
    error_text,
    failed_levels,
    fmt,
    fmt_count,
    has_failed,
    instance_label,
    knee_of,
    md_row,
    normalize,
    num,
    peak_of,
    points_of,
    profiles_in_order,
    unmeasurable,
)
from ansible_collections.llmops.sglang.plugins.module_utils._report.files import (  # noqa: F401
    CSV_COLUMNS,
    CSV_HEADER,
    csv_rows,
    plan_files,
    update_latest,
    write_fleet,
    write_report,
)
from ansible_collections.llmops.sglang.plugins.module_utils._report.fleetview import (  # noqa: F401
    FLEET_COLUMNS,
    FLEET_FILES,
    fleet_csv_rows,
    fleet_rows,
    render_fleet,
    render_fleet_table,
)
from ansible_collections.llmops.sglang.plugins.module_utils._report.markdown import (  # noqa: F401
    profile_summary,
    render_markdown,
    render_profiles,
)
from ansible_collections.llmops.sglang.plugins.module_utils._report.plots import (  # noqa: F401
    write_plots,
)
from ansible_collections.llmops.sglang.plugins.module_utils._report.tables import (  # noqa: F401
    SERVER_METRICS_HEADER,
    SERVER_TABLE_HEADER,
    TABLE_HEADER,
    render_findings,
    render_instance,
    render_notes,
    render_server_metrics_table,
    render_server_table,
    render_table,
)
