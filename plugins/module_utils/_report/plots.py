# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The PNG plots (matplotlib, imported only when writing them): throughput, latency and, with
several profiles, the profile comparison.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._report.common import (
    MISSING,
    dig,
    fmt,
    fmt_count,
    has_failed,
    instance_label,
    knee_of,
    num,
    points_of,
    profiles_in_order,
    unmeasurable,
)
from ansible_collections.llmops.sglang.plugins.module_utils._report.markdown import profile_summary


# --------------------------------------------------------------------------- plots
def _concurrency_ticks(ax: Any, values: Iterable[float]) -> None:
    ticks = sorted({float(v) for v in values if v and v > 0})
    ax.set_xscale("log", base=2)
    if ticks:
        ax.set_xticks(ticks)
        ax.set_xticklabels([fmt_count(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlim(ticks[0] / 1.25, ticks[-1] * 1.25)


def _x(point: dict[str, Any]) -> float | None:
    """A level's place on the x axis: its offered rate in rate mode (its ``concurrency`` is only
    the in-flight cap there), else its concurrency."""
    rate = num(point.get("offered_rate"))
    return rate if rate is not None else num(point.get("concurrency"))


def _rated(items: Sequence[dict[str, Any]]) -> bool:
    return any(num(p.get("offered_rate")) is not None for i in items for p in points_of(i["sweep"]))


def _x_axis(ax: Any, items: Sequence[dict[str, Any]], note: str = "") -> None:
    """Concurrency on a log2 axis, or, for rate-mode sweeps, the offered rate on a linear one."""
    if not _rated(items):
        _concurrency_ticks(ax, _all_concurrency(items))
        ax.set_xlabel(f"concurrency ({note}log2 scale)")
        return
    rates = sorted({x for i in items for p in points_of(i["sweep"]) if (x := _x(p)) is not None})
    if rates:
        ax.set_xticks(rates)
        ax.set_xticklabels([f"{r:g}" for r in rates])
        ax.set_xlim(0, rates[-1] * 1.1)
    ax.set_xlabel("offered rate (requests/s)")


def _x_name(items: Sequence[dict[str, Any]]) -> str:
    return "offered rate" if _rated(items) else "concurrency"


def _series(sweep: dict[str, Any], path: str) -> tuple[list[float], list[float]]:
    """(level, value) of the points that have the value (not measurable ones left out); the
    level is the concurrency, or the offered rate in rate mode."""
    xs, ys = [], []
    for point in points_of(sweep):
        if unmeasurable(point, path):
            continue
        x, y = _x(point), num(dig(point, path))
        if x is not None and x > 0 and y is not None:
            xs.append(x)
            ys.append(y)
    return xs, ys


def _all_concurrency(items: Sequence[dict[str, Any]]) -> list[float]:
    return [float(p["concurrency"]) for i in items for p in points_of(i["sweep"])]


def _plot_throughput(items: Sequence[dict[str, Any]], path: Path, title: str, figure_cls: Any) -> None:
    fig = figure_cls(figsize=(9, 5.5), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    any_steady = False
    for index, item in enumerate(items):
        color = f"C{index % 10}"
        sweep = item["sweep"]
        xs, ys = _series(sweep, "output_tok_s")
        if not xs:
            continue
        ax.plot(xs, ys, marker="o", color=color, label=instance_label(item["meta"]))
        sx, sy = _series(sweep, "steady_output_tok_s")
        if sx:
            any_steady = True
            ax.plot(sx, sy, linestyle=":", color=color, linewidth=1.2)
        limited = [(x, y) for p in points_of(sweep) if p.get("client_limited") is True
                   for x, y in [(_x(p), num(p.get("output_tok_s")))]
                   if x is not None and y is not None]
        if limited:
            ax.scatter([x for x, _ in limited], [y for _, y in limited], marker="x", s=90,
                       color="black", zorder=5)
        failed = [(x, y) for p in points_of(sweep) if has_failed(p)
                  for x, y in [(_x(p), num(p.get("output_tok_s")))]
                  if x is not None and y is not None]
        if failed:
            ax.scatter([x for x, _ in failed], [y for _, y in failed], marker="o", s=150,
                       facecolors="none", edgecolors="red", linewidths=1.5, zorder=5)
        knee = knee_of(sweep)
        if knee is not None and num(knee.get("output_tok_s")) is not None:
            kx, ky = float(_x(knee) or 0.0), float(knee["output_tok_s"])
            ax.scatter([kx], [ky], marker="*", s=260, color=color, edgecolors="black", zorder=6)
            ax.annotate(f"knee C={fmt_count(kx)}", (kx, ky), textcoords="offset points",
                        xytext=(6, -14), fontsize=8, color=color)
    _x_axis(ax, items, "requests in flight, ")
    ax.set_ylabel("output tokens / s (whole level)")
    ax.set_title(f"{title}: output throughput vs {_x_name(items)}")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="major", alpha=0.3)
    # Legend: one entry per instance, plus what the markers mean.
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], marker="*", linestyle="", markersize=13, color="grey",
                          markeredgecolor="black"))
    labels.append("knee")
    if any_steady:
        handles.append(Line2D([], [], linestyle=":", color="grey"))
        labels.append("steady-state window")
    if any(p.get("client_limited") is True for i in items for p in points_of(i["sweep"])):
        handles.append(Line2D([], [], marker="x", linestyle="", color="black"))
        labels.append("client-limited level")
    if any(has_failed(p) for i in items for p in points_of(i["sweep"])):
        handles.append(Line2D([], [], marker="o", linestyle="", markerfacecolor="none", markeredgecolor="red"))
        labels.append("level with failed requests")
    ax.legend(handles, labels, loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")


def _plot_latency(items: Sequence[dict[str, Any]], path: Path, title: str, figure_cls: Any) -> None:
    fig = figure_cls(figsize=(12, 5), dpi=110)
    ax_ttft = fig.add_subplot(1, 2, 1)
    ax_itl = fig.add_subplot(1, 2, 2)
    ttft_values: list[float] = []
    for index, item in enumerate(items):
        color = f"C{index % 10}"
        label = instance_label(item["meta"])
        xs, ys = _series(item["sweep"], "ttft_ms.p50")
        if xs:
            ax_ttft.plot(xs, ys, marker="o", color=color, label=f"{label} p50")
            ttft_values += ys
        xs, ys = _series(item["sweep"], "ttft_ms.p99")
        if xs:
            ax_ttft.plot(xs, ys, marker="^", linestyle="--", color=color, label=f"{label} p99")
            ttft_values += ys
        xs, ys = _series(item["sweep"], "itl_ms.p50")
        if xs:
            ax_itl.plot(xs, ys, marker="o", color=color, label=f"{label} p50")
        # the server's own means (its /metrics histograms; the model's on the scaled engine)
        xs, ys = _series(item["sweep"], "server.ttft_ms_mean")
        if xs:
            ax_ttft.plot(xs, ys, marker="s", linestyle=":", color=color, label=f"{label} server mean")
            ttft_values += ys
        xs, ys = _series(item["sweep"], "server.itl_ms_mean")
        if xs:
            ax_itl.plot(xs, ys, marker="s", linestyle=":", color=color, label=f"{label} server mean")
    positive = [v for v in ttft_values if v > 0]
    if positive and max(positive) / min(positive) > 50:
        ax_ttft.set_yscale("log")
    else:
        ax_ttft.set_ylim(bottom=0)
    ax_itl.set_ylim(bottom=0)
    for ax, what in ((ax_ttft, "time to first token (ms)"), (ax_itl, "inter-token latency p50 (ms)")):
        _x_axis(ax, items)
        ax.set_ylabel(what)
        ax.grid(True, which="major", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=7)
    ax_ttft.set_title("TTFT p50 (solid), p99 (dashed), server mean (dotted)")
    ax_itl.set_title("ITL p50 (token level), server mean (dotted)")
    fig.suptitle(f"{title}: latency vs {_x_name(items)}")
    fig.tight_layout()
    fig.savefig(path, format="png")


def _plot_profiles(items: Sequence[dict[str, Any]], path: Path, title: str, figure_cls: Any) -> None:
    """Left: mean throughput curve per profile; right: peak per profile vs the baseline."""
    fig = figure_cls(figsize=(12, 5), dpi=110)
    ax_curve = fig.add_subplot(1, 2, 1)
    ax_bar = fig.add_subplot(1, 2, 2)
    profiles = profiles_in_order(items)
    for index, profile in enumerate(profiles):
        by_c: dict[float, list[float]] = {}
        members = [i for i in items if str(i["meta"].get("profile") or "unknown") == profile]
        for item in members:
            for x, y in zip(*_series(item["sweep"], "output_tok_s"), strict=True):
                by_c.setdefault(x, []).append(y)
        if by_c:
            xs = sorted(by_c)
            ys = [sum(by_c[x]) / len(by_c[x]) for x in xs]
            ax_curve.plot(xs, ys, marker="o", color=f"C{index % 10}",
                          label=f"{profile} (mean of {len(members)} instance{'s' if len(members) > 1 else ''})")
    _x_axis(ax_curve, items)
    ax_curve.set_ylabel("output tokens / s per instance")
    ax_curve.set_title("throughput per profile")
    ax_curve.set_ylim(bottom=0)
    ax_curve.grid(True, alpha=0.3)
    if ax_curve.get_legend_handles_labels()[0]:
        ax_curve.legend(loc="best", fontsize=8)

    rows = profile_summary(items)
    names = [r["profile"] for r in rows]
    peaks = [r["peak_output_tok_s"] or 0.0 for r in rows]
    bars = ax_bar.bar(range(len(names)), peaks, color=[f"C{i % 10}" for i in range(len(names))])
    for index, (bar, row) in enumerate(zip(bars, rows, strict=True)):
        ratio = row["ratio"]
        note = "baseline" if index == 0 else (f"{ratio:.2f}x ({(ratio - 1) * 100:+.0f}%)" if ratio is not None else MISSING)
        ax_bar.annotate(f"{fmt(row['peak_output_tok_s'])}\n{note}",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        textcoords="offset points", xytext=(0, 3), ha="center", va="bottom", fontsize=9)
    ax_bar.set_xticks(range(len(names)))
    ax_bar.set_xticklabels(names)
    ax_bar.set_xlabel("profile")
    ax_bar.set_ylabel("peak output tokens / s (best instance)")
    ax_bar.set_title("peak throughput per profile")
    ax_bar.set_ylim(0, max(peaks + [1.0]) * 1.2)
    ax_bar.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{title}: profiles compared")
    fig.tight_layout()
    fig.savefig(path, format="png")


def _figure_class() -> Any:
    """matplotlib's Figure (Agg canvas, no pyplot state), or None when it is not installed."""
    try:
        # Figure without pyplot draws through the Agg canvas when saving a PNG, and leaves
        # the process's pyplot backend alone.
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure


def write_plots(items: Sequence[dict[str, Any]], out: Path, title: str) -> tuple[list[str], list[str]]:
    """(plot paths written, warnings)."""
    figure_cls = _figure_class()
    if figure_cls is None:
        return [], ["matplotlib is not installed on the controller: no PNG plots were written"]
    jobs = [("throughput.png", _plot_throughput), ("latency.png", _plot_latency)]
    if len(profiles_in_order(items)) > 1:
        jobs.append(("profiles.png", _plot_profiles))
    plots: list[str] = []
    warnings: list[str] = []
    for name, func in jobs:
        target = out / name
        try:
            func(items, target, title, figure_cls)
        except Exception as exc:  # a plot must never cost the data files
            warnings.append(f"{name} not written: {type(exc).__name__}: {exc}")
            continue
        plots.append(str(target))
    return plots, warnings
