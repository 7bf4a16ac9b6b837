# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""``report.html``: the whole report in one file that opens from disk with no server and no
network (no external URL: styles inline, charts as inline SVG, the PNG plots as data: URIs).
It holds every instance's tables (the Markdown of ``summary.md`` turned into HTML), the run's
settings (workload, seed, cache control), charts with every instance (compare mode: every
candidate) on the same axes (output tok/s and TTFT p50 against concurrency or offered rate; the
goodput curve when the points carry ``goodput_req_s``) and the capacity table when the results
carry one (``capacity``: a list of rows, from the ``sglang_capacity`` fact).
"""
from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._report.common import (
    dig,
    instance_label,
    num,
    points_of,
    unmeasurable,
)

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:.5em 0}"
         "td,th{border:1px solid #bbb;padding:2px 6px;text-align:right}th{background:#eee}"
         "td:first-child,th:first-child{text-align:left}svg{background:#fff;border:1px solid #ddd;margin:4px}"
         "pre{background:#f6f6f6;padding:6px}.wide{overflow-x:auto;max-width:100%}")
W, H, PAD = 520, 300, 50
# settings of one loop mode that the other ignores: shown as "-" there (a concurrency sweep's
# settings said "arrival poisson"; a rate sweep's listed the unused concurrency levels)
RATE_ONLY = ("rates", "arrival")
CLOSED_ONLY = ("concurrency",)


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _cell(text: str) -> str:
    """A table cell: escaped, its Markdown emphasis (``**no**``) as <strong>."""
    parts = _esc(text).split("**")
    if len(parts) % 2 == 0:  # an unpaired ** stays as it was written
        return _esc(text)
    return "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(parts))


def markdown_to_html(text: str) -> str:
    """The subset of Markdown ``summary.md`` uses: headings, pipe tables (``**bold**`` cells),
    paragraphs, `code`."""
    out: list[str] = []
    rows: list[list[str]] = []

    def flush_table() -> None:
        if rows:
            head, body = rows[0], [r for r in rows[1:] if not all(set(c) <= {"-", ":", " "} for c in r)]
            out.append("<table><tr>" + "".join(f"<th>{_cell(c)}</th>" for c in head) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in r) + "</tr>" for r in body)
                       + "</table>")
            rows.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|"):
            rows.append([c.strip() for c in stripped.strip("|").split("|")])
            continue
        flush_table()
        if not stripped:
            continue
        level = len(stripped) - len(stripped.lstrip("#"))
        if 0 < level <= 6 and stripped[level:level + 1] == " ":
            out.append(f"<h{level}>{_esc(stripped[level + 1:])}</h{level}>")
        else:
            parts = _esc(stripped).split("`")
            out.append("<p>" + "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts)) + "</p>")
    flush_table()
    return "\n".join(out)


def tick(value: float) -> str:
    """An axis label that fits the chart's left margin: no scientific notation (8.881e+05 was
    cut to "881e+05" by the margin), thousands as k and millions as M."""
    size = abs(value)
    if size >= 1e6:
        return f"{value / 1e6:.3g}M"
    if size >= 1e4:
        return f"{value / 1e3:.3g}k"
    if size >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.3g}"


def _scale(values: Sequence[float], log: bool, size: float, flip: bool) -> Any:
    vals = [math.log2(v) if log else v for v in values]
    low, high = min(vals), max(vals)
    if not log:
        low = min(low, 0.0)
    span = (high - low) or 1.0

    def to(v: float) -> float:
        x = ((math.log2(v) if log else v) - low) / span * size
        return (size - x if flip else x) + (PAD / 2 if flip else PAD)
    return to


def svg_chart(title: str, xlabel: str, ylabel: str, series: Sequence[tuple[str, list[tuple[float, float]]]]) -> str:
    """A line chart, one polyline per series, on shared axes (x log2 when every x > 0)."""
    series = [(label, [(x, y) for x, y in pts if x is not None and y is not None]) for label, pts in series]
    series = [(label, pts) for label, pts in series if pts]
    if not series:
        return ""
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    log = min(xs) > 0 and max(xs) / min(xs) >= 4
    fx = _scale(xs, log, W - PAD - 20, False)
    fy = _scale(ys, False, H - PAD - 25, True)
    parts = [f'<svg width="{W}" height="{H}" role="img">',
             f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13">{_esc(title)}</text>',
             f'<line x1="{PAD}" y1="{H - PAD + 25}" x2="{W - 20}" y2="{H - PAD + 25}" stroke="#444"/>',
             f'<line x1="{PAD}" y1="{PAD / 2}" x2="{PAD}" y2="{H - PAD + 25}" stroke="#444"/>',
             f'<text x="{W / 2}" y="{H - 4}" text-anchor="middle" font-size="11">{_esc(xlabel)}</text>',
             f'<text x="12" y="{H / 2}" font-size="11" transform="rotate(-90 12 {H / 2})" '
             f'text-anchor="middle">{_esc(ylabel)}</text>']
    for x in sorted(set(xs)):
        parts.append(f'<text x="{fx(x):.1f}" y="{H - PAD + 38}" text-anchor="middle" font-size="10">{x:g}</text>')
    top = max(ys)
    for frac in (0.0, 0.5, 1.0):
        y = top * frac
        parts.append(f'<text x="{PAD - 4}" y="{fy(y) + 3:.1f}" text-anchor="end" font-size="10">{tick(y)}</text>')
    for i, (label, pts) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        coords = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in sorted(pts))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        parts.extend(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="{color}"/>' for x, y in pts)
        parts.append(f'<text x="{PAD + 8}" y="{PAD / 2 + 14 * (i + 1)}" font-size="11" fill="{color}">'
                     f'{_esc(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _y_of(point: dict[str, Any], path: str) -> float | None:
    """The value to plot; none for a latency the tables mark n/m (not measurable at the engine's
    time scale)."""
    if path.startswith("ttft") and unmeasurable(point, path):
        return None
    return num(dig(point, path))


def _x_of(point: dict[str, Any]) -> float | None:
    return num(point.get("offered_rate")) if point.get("offered_rate") is not None else num(point.get("concurrency"))


def charts(items: Sequence[dict[str, Any]]) -> list[str]:
    """Throughput, TTFT p50 and (when present) goodput against the level, every item on one set
    of axes."""
    rated = any(p.get("offered_rate") is not None for i in items for p in points_of(i["sweep"]))
    xlabel = "offered rate (req/s)" if rated else "concurrency"
    out = []
    for title, ylabel, path in (("Output throughput", "tok/s", "output_tok_s"),
                                ("Time to first token (p50)", "ms", "ttft_ms.p50"),
                                ("Goodput (requests meeting the SLO)", "req/s", "goodput_req_s"),
                                ("Goodput tokens", "tok/s", "goodput_tok_s")):
        series = [(instance_label(i["meta"]), [(_x_of(p), _y_of(p, path)) for p in points_of(i["sweep"])])
                  for i in items]
        out.append(svg_chart(title, xlabel, ylabel, series))
    return [c for c in out if c]


def settings_table(items: Sequence[dict[str, Any]]) -> str:
    """Each instance's run settings: workload and seed, cache control, levels, lengths."""
    keys = ("api", "concurrency", "requests", "duration", "max_tokens", "seed", "workload", "flush_cache", "warm",
            "mode", "rates", "arrival", "slo", "repeats")
    rows = []
    for item in items:
        opts = dig(item["sweep"], "options") or {}
        unused = RATE_ONLY if opts.get("mode") != "rate" else CLOSED_ONLY  # the other mode's settings
        cells = [f"<td>{_esc(instance_label(item['meta']))}</td>"]
        cells.extend(f"<td>{_esc('-' if k in unused else _short(opts.get(k)))}</td>" for k in keys)
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = "<tr><th>instance</th>" + "".join(f"<th>{k}</th>" for k in keys) + "</tr>"
    return '<div class="wide"><table>' + head + "".join(rows) + "</table></div>"


def _short(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_short(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_short(v) for v in value)
    return str(value)


def capacity_table(capacity: Any) -> str:
    """The capacity rows (a list of mappings, or a mapping with ``rows``) as a table; "" if none."""
    rows = capacity.get("rows") if isinstance(capacity, dict) else capacity
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        return ""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    head = "<tr>" + "".join(f"<th>{_esc(k)}</th>" for k in keys) + "</tr>"
    body = "".join("<tr>" + "".join(f"<td>{_esc(_short(r.get(k)))}</td>" for k in keys) + "</tr>" for r in rows)
    return f"<h2>Capacity</h2><table>{head}{body}</table>"


def _png(path: str) -> str:
    try:
        data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    except OSError:
        return ""
    return f'<img alt="{_esc(Path(path).name)}" src="data:image/png;base64,{data}" style="max-width:100%">'


def render_html(items: Sequence[dict[str, Any]], markdown: str, title: str, plots: Sequence[str] = (),
                capacity: Any = None) -> str:
    """The whole ``report.html``."""
    if capacity is None:
        capacity = next((c for i in items for c in (dig(i, "sweep.capacity"), dig(i, "meta.capacity")) if c), None)
    # summary.md opens with the title as its own "# " heading: the page has it once, above
    tables = markdown.split("\n", 1)[1] if markdown.startswith("# ") else markdown
    body = [f"<h1>{_esc(title)}</h1>", "<h2>Settings</h2>", settings_table(items),
            "<h2>Charts</h2>", "".join(charts(items)), capacity_table(capacity),
            "<h2>Tables</h2>", markdown_to_html(tables)]
    pngs = "".join(_png(p) for p in plots if p.endswith(".png"))
    if pngs:
        body.extend(["<h2>Plots</h2>", pngs])
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{_esc(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(b for b in body if b) + "\n</body></html>\n")
