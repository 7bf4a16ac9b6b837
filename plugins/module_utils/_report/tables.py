# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The Markdown tables and lines of one instance: throughput and latency per level, the server
during each level, its /metrics latencies, the notes and the findings.
"""
from __future__ import annotations

from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._report.cache import (
    render_cache_table,
    workload_line,
)
from ansible_collections.llmops.sglang.plugins.module_utils._report.common import (
    DRIFT_MARK,
    ERROR_MARK,
    MISSING,
    NOT_MEASURABLE,
    dig,
    err_total,
    error_text,
    fmt,
    fmt_count,
    has_failed,
    instance_label,
    knee_of,
    level_cell,
    level_header,
    level_name,
    levels_text,
    md_row,
    num,
    peak_of,
    points_of,
    unmeasurable,
)
from ansible_collections.llmops.sglang.plugins.module_utils._report.ratetable import render_rate_table

# The seed's "wall s" column on a time-scaled engine, whose levels are in modelled seconds (a
# level of 5.8 wall seconds at scale 0.1 reads 58.0: "wall s" there misled, issue 28 item 11).
MODEL_SECONDS = "model s"
# summary.md per-instance table: the seed's seven columns, then latency.
TABLE_HEADER: tuple[str, ...] = (
    "C", "n", "ok", "err", "output tok/s", "avg_out", "wall s",
    "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms",
)


def _latency(point: dict[str, Any], path: str, decimals: int = 1) -> str:
    """A latency cell: ``n/m`` where the sweep found the value not measurable."""
    return NOT_MEASURABLE if unmeasurable(point, path) else fmt(dig(point, path), decimals)


def _drift_flagged(point: dict[str, Any]) -> bool:
    """The sweep flagged the level's throughput as drifting. A level with failed requests is not
    marked: its failures explain the drift, and it is already left out of peak and knee."""
    drift = point.get("drift")
    return isinstance(drift, dict) and drift.get("flagged") is True and not has_failed(point)


def render_table(sweep: dict[str, Any]) -> str:
    """The seed-style Markdown table for one sweep (no trailing newline).

    Columns: C, n, ok, err, output tok/s, avg_out, wall s (as in the seed), then TTFT p50/p99
    and ITL p50/p99 in ms. A level with failed requests has its C marked with ``!``, a
    client-limited level with ``*``, a level whose throughput drifted within its window with ``~``. A latency the sweep found not measurable
    (time-scaled engine, client disagreeing with the model) reads ``n/m``.
    """
    header = level_header(TABLE_HEADER, points_of(sweep))
    if sweep.get("time_base") == "model":  # a time-scaled engine's levels last modelled seconds
        header = [MODEL_SECONDS if h == "wall s" else h for h in header]
    lines = [md_row(header), md_row(["---"] * len(TABLE_HEADER))]
    for point in points_of(sweep):
        c_cell = level_cell(point)
        if has_failed(point):
            c_cell += ERROR_MARK
        if point.get("client_limited") is True:
            c_cell += "*"
        if _drift_flagged(point):
            c_cell += DRIFT_MARK
        lines.append(md_row([
            c_cell,
            fmt_count(point.get("requests")),
            fmt_count(point.get("ok")),
            fmt_count(err_total(point)),
            fmt(point.get("output_tok_s")),
            fmt_count(point.get("avg_output_tokens")),
            fmt(point.get("duration_s")),
            _latency(point, "ttft_ms.p50"),
            _latency(point, "ttft_ms.p99"),
            _latency(point, "itl_ms.p50", 2),
            _latency(point, "itl_ms.p99", 2),
        ]))
    return "\n".join(lines)


def _range_text(bounds: Any, decimals: int) -> str:
    """A server-side percentile range [lo, hi] as ``lo-hi`` (``>lo`` for the +Inf bucket)."""
    if not isinstance(bounds, list | tuple) or len(bounds) != 2 or num(bounds[0]) is None:
        return MISSING
    if num(bounds[1]) is None:
        return f">{fmt(bounds[0], decimals)}"
    return f"{fmt(bounds[0], decimals)}-{fmt(bounds[1], decimals)}"


SERVER_TABLE_HEADER: tuple[str, ...] = (
    "C", "requests", "TTFT mean ms", "TTFT p50 ms", "ITL mean ms", "ITL p50 ms", "e2e mean s",
)


def render_server_table(sweep: dict[str, Any]) -> str | None:
    """The server's own latency per level (from its /metrics histograms), or None when no level
    has it. Means from the histograms' sums and counts; p50 as the bucket range it lies in."""
    points = [p for p in points_of(sweep) if isinstance(p.get("server"), dict)]
    if not points:
        return None
    lines = [md_row(level_header(SERVER_TABLE_HEADER, points)), md_row(["---"] * len(SERVER_TABLE_HEADER))]
    for point in points:
        server = point["server"]
        lines.append(md_row([
            level_cell(point),
            fmt_count(server.get("requests")),
            fmt(server.get("ttft_ms_mean")),
            _range_text(dig(server, "ttft_ms_range.p50"), 0),
            fmt(server.get("itl_ms_mean"), 2),
            _range_text(dig(server, "itl_ms_range.p50"), 0),
            fmt(server.get("e2e_s_mean"), 2),
        ]))
    return "\n".join(lines)


SERVER_METRICS_HEADER: tuple[str, ...] = (
    "C", "output tok/s", "running mean/max", "queued mean/max", "token usage max", "accept length",
    "accept rate", "cache hit (device/host)", "retracted max",
)


def _pair(metrics: dict[str, Any], first: str, second: str, decimals: int = 1) -> str:
    a, b = metrics.get(first), metrics.get(second)
    return "-" if a is None and b is None else f"{fmt(a, decimals)} / {fmt(b, 0 if second.endswith('max') else decimals)}"


def _hits(m: dict[str, Any]) -> str:
    """The cache hits cell: device/host (/storage with a storage tier) by tier, else the total."""
    if m.get("cache_hit_rate_device") is None and m.get("cache_hit_rate_host") is None:
        return fmt(m.get("cache_hit_rate"), 2)
    tiers = _pair(m, "cache_hit_rate_device", "cache_hit_rate_host", 2).replace(" / ", "/")
    return tiers + (f"/{fmt(m['cache_hit_rate_storage'], 2)}" if m.get("cache_hit_rate_storage") is not None else "")


def render_server_metrics_table(sweep: dict[str, Any]) -> tuple[str, list[str]] | None:
    """"Server during each level": what the server's /metrics said beside the client's tok/s
    (running and queued requests sampled while the level ran, KV usage, accept length, cache
    hits, retractions), and one line per field the release did not report. None when no level
    has it."""
    points = [p for p in points_of(sweep) if isinstance(p.get("server_metrics"), dict)]
    if not points:
        return None
    header = SERVER_METRICS_HEADER
    if any(p["server_metrics"].get("cache_hit_rate_storage") is not None for p in points):
        header = tuple("cache hit (device/host/storage)" if h == "cache hit (device/host)" else h for h in header)
    lines = [md_row(level_header(header, points)), md_row(["---"] * len(header))]
    reasons: dict[str, set[str]] = {}
    for point in points:
        m = point["server_metrics"]
        for key, why in (m.get("notes") or {}).items():
            reasons.setdefault(why, set()).add(key)
        lines.append(md_row([
            level_cell(point) + (f" {ERROR_MARK}" if has_failed(point) else ""),
            fmt(point.get("output_tok_s")),
            _pair(m, "running_mean", "running_max"),
            _pair(m, "queued_mean", "queued_max"),
            fmt(m.get("token_usage_max"), 3),
            fmt(m.get("spec_accept_length"), 2),
            fmt(m.get("spec_accept_rate"), 2),
            _hits(m),
            fmt_count(m.get("retracted_max")),
        ]))
    notes = [f"{', '.join(sorted(keys))}: {why}." for why, keys in sorted(reasons.items())]
    return "\n".join(lines), notes


PD_HEADER: tuple[str, ...] = ("C", "output tok/s", "prefill KV waiting max", "decode waiting for KV max",
                              "bootstrap failed", "transfer failed")


def render_pd_table(sweep: dict[str, Any]) -> str | None:
    """"Prefill and decode during each level": a PD instance's side of the level (its /metrics):
    the prefill's computed KV not yet fetched, the decode's requests waiting for their KV, and the
    failures to bootstrap or transfer. None when no level is on a PD instance."""
    points = [p for p in points_of(sweep) if isinstance(p.get("server_metrics"), dict)
              and p["server_metrics"].get("pd_bootstrap_failed") is not None]
    if not points:
        return None
    lines = [md_row(level_header(PD_HEADER, points)), md_row(["---"] * len(PD_HEADER))]
    for point in points:
        m = point["server_metrics"]
        lines.append(md_row([level_cell(point) + (f" {ERROR_MARK}" if has_failed(point) else ""),
                             fmt(point.get("output_tok_s")), fmt_count(m.get("pd_prefill_inflight_max")),
                             fmt_count(m.get("pd_decode_transfer_max")), fmt_count(m.get("pd_bootstrap_failed")),
                             fmt_count(m.get("pd_transfer_failed"))]))
    return "\n".join(lines)


SIDES_HEADER: tuple[str, ...] = ("C", "output tok/s", "prefill running", "prefill queued",
                                 "prefill KV waiting max", "KV transfers", "KV transfer ms (mean)",
                                 "decode running", "decode waiting for KV max", "bootstrap / transfer failed")


def render_sides_table(sweep: dict[str, Any]) -> str | None:
    """"Each side during each level": a sweep through the router of a PD deployment read its workers'
    /metrics (``worker_metrics``; a point's ``sides``): the prefill side's running and queued requests
    (the side's sum of sampled means), its computed KV not yet fetched (the busiest instance's max),
    the KV hand-overs of the level and their mean latency, the decode side's running requests and
    requests waiting for their KV, and both sides' failures. None without sides."""
    points = [p for p in points_of(sweep) if isinstance(p.get("sides"), dict) and p["sides"]]
    if not points:
        return None
    lines = [md_row(level_header(SIDES_HEADER, points)), md_row(["---"] * len(SIDES_HEADER))]
    for point in points:
        pre, dec = point["sides"].get("prefill") or {}, point["sides"].get("decode") or {}
        failed = [sum(side.get(key) or 0 for side in (pre, dec)) for key in ("pd_bootstrap_failed", "pd_transfer_failed")]
        lines.append(md_row([level_cell(point) + (f" {ERROR_MARK}" if has_failed(point) else ""),
                             fmt(point.get("output_tok_s")), fmt(pre.get("running_mean"), 2),
                             fmt(pre.get("queued_mean"), 2), fmt_count(pre.get("pd_prefill_inflight_max")),
                             fmt_count(pre.get("pd_kv_transfers")), fmt(pre.get("pd_kv_transfer_ms_mean"), 2),
                             fmt(dec.get("running_mean"), 2), fmt_count(dec.get("pd_decode_transfer_max")),
                             f"{fmt_count(failed[0])} / {fmt_count(failed[1])}"]))
    return "\n".join(lines)


def render_notes(sweep: dict[str, Any]) -> list[str]:
    """Lines under the findings: failed requests, level warm-up, drift, and what ``n/m``
    stands for."""
    points = points_of(sweep)
    notes: list[str] = []
    failed = [p for p in points if has_failed(p)]
    if failed:
        first = next((m[0] for p in failed for m in [p.get("error_messages")] if isinstance(m, list) and m), None)
        notes.append(
            f"Requests failed (marked {ERROR_MARK}): "
            + "; ".join(error_text(p) for p in failed)
            + ". Their throughput and latencies mix the server's work with failures (a server that died, "
            "restarted or refused requests): they are left out of peak, knee and plateau."
            + (f" First error: {first}" if first else "")
        )
    warmed = [p["level_warmup"] for p in points if isinstance(p.get("level_warmup"), dict)]
    if warmed:
        failed = [
            f"{level_name(p)} ({fmt_count(dig(p, 'level_warmup.errors.total'))} of "
            f"{fmt_count(dig(p, 'level_warmup.requests'))})"
            for p in points if (num(dig(p, "level_warmup.errors.total")) or 0) > 0
        ]
        tokens = fmt_count(warmed[0].get("max_tokens"))
        notes.append(
            f"Each level was warmed by max(C, prompts) requests of {tokens}+ tokens (staggered) at its "
            "concurrency (not measured); "
            + ("warm-up errors: " + ", ".join(failed) + "." if failed else "no warm-up errors.")
        )
    drifted = [p for p in points if _drift_flagged(p)]
    short = [p for p in points if isinstance(p.get("drift"), dict) and p["drift"].get("checked") is False]
    if drifted or short:
        parts = []
        if drifted:
            parts.append(
                f"throughput drifted within the level (marked {DRIFT_MARK}: second half of its window vs the "
                "first beyond "
                + f"{(num(drifted[0]['drift'].get('threshold')) or 0.15) * 100:.0f}%): "
                + ", ".join(f"{level_name(p)} (x{fmt(p['drift'].get('ratio'), 2)})" for p in drifted)
            )
        if short:
            parts.append("too short to check for drift: " + levels_text(short))
        text = "; ".join(parts)
        notes.append(text[0].upper() + text[1:] + ".")
    elif any(isinstance(p.get("drift"), dict) for p in points):
        notes.append("No drift within levels.")
    marked = [p for p in points if isinstance(p.get("latency_unmeasurable"), dict) and p["latency_unmeasurable"]]
    if marked:
        scale = dig(sweep, "server.time_scale")
        at = f" at time scale {fmt_count(scale) if num(scale) is None else f'{float(scale):g}'}" if scale else ""
        tolerance = num(dig(marked[0], "latency_check.tolerance")) or 0.25
        levels = "; ".join(
            f"{level_name(p)} "
            + ", ".join(f"{k.split('_')[0].upper() if k != 'e2e_s' else 'e2e'} {'/'.join(v)}"
                        for k, v in p["latency_unmeasurable"].items())
            for p in marked
        )
        notes.append(
            f"n/m = not measurable{at}: the client's value disagrees with the engine's model by more than "
            f"{tolerance * 100:.0f}% (modelled gaps this short are below the client's timing jitter once scaled to "
            f"wall time); the model's own values are in the server-side table. Not measurable: {levels}. "
            "Reasons per level in the JSON (latency_check)."
        )
    return notes


def render_findings(sweep: dict[str, Any]) -> str:
    """One line naming peak and knee and flagging client-limited levels."""
    peak = peak_of(sweep)
    failed = [p for p in points_of(sweep) if has_failed(p)]
    if peak is None:
        parts = ["Peak: none (no level ran without failed requests)" if failed else "Peak: none (no level completed)"]
    else:
        parts = [f"Peak: {fmt(peak.get('output_tok_s'))} tok/s at {level_name(peak)}"]
    knee = knee_of(sweep)
    if knee is None:
        parts.append("knee: not found")
    else:
        share = num(knee.get("share_of_peak"))
        share_text = f", {share * 100:.0f}% of peak" if share is not None else ""
        parts.append(
            f"knee: {level_name(knee)} "
            f"({fmt(knee.get('output_tok_s'))} tok/s{share_text})"
        )
    limited = [p for p in points_of(sweep) if p.get("client_limited") is True]
    if limited:
        parts.append(
            "client-limited (marked *, the client not the server set the number): "
            + levels_text(limited)
        )
    else:
        parts.append("client-limited levels: none")
    if failed:
        parts.append(
            f"levels with failed requests (marked {ERROR_MARK}, left out of peak and knee): "
            + levels_text(failed)
        )
    if sweep.get("stopped_on_plateau") is True:
        parts.append("stopped on plateau")
    return "; ".join(parts) + "."


def _server_line(meta: dict[str, Any], sweep: dict[str, Any]) -> str:
    server = sweep.get("server") if isinstance(sweep.get("server"), dict) else {}
    bits = []
    for label, value in (
        ("release", meta.get("release")),
        ("engine", meta.get("engine")),
        ("server version", server.get("version")),
        ("model", sweep.get("model")),
        ("api", sweep.get("api")),
        ("max_running_requests", server.get("max_running_requests")),
        ("spec accept length", server.get("avg_spec_accept_length_after")),
        ("GPU" if len(meta.get("gpus") or []) == 1 else "GPUs", meta.get("gpus")),
        ("url", meta.get("url") or sweep.get("url")),
    ):
        if value in (None, "", []):
            continue
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        elif isinstance(value, float):
            value = f"{value:.2f}"
        bits.append(f"{label} {value}")
    window = ""
    if sweep.get("started") or sweep.get("finished"):
        window = f" Run {sweep.get('started') or '?'} to {sweep.get('finished') or '?'}."
    return ("; ".join(bits) + "." if bits else "") + window


def render_instance(meta: dict[str, Any], sweep: dict[str, Any]) -> str:
    """Heading, server line, table and findings for one instance."""
    header = f"### {instance_label(meta)}"
    parts = [header]
    server_line = _server_line(meta, sweep).strip()
    if server_line:
        parts.append(server_line)
    parts.append(render_table(sweep))
    rate = render_rate_table(sweep)  # rate levels, goodput, repeats (ratetable.py)
    if rate is not None:
        parts.append(rate)
    parts.append(render_findings(sweep))
    server = render_server_table(sweep)
    if server is not None:
        modelled = sweep.get("time_base") == "model"
        parts.append(
            "Server-side latency (the server's /metrics histograms over each level"
            + (", in the GPU time the engine models" if modelled else ", as the server timed it") + "):"
        )
        parts.append(server)
    during = render_server_metrics_table(sweep)
    if during is not None:
        parts.append(
            "Server during each level (its /metrics: running and queued requests sampled while the level "
            "ran, mean / max; KV token usage; speculative accept length and rate; prefix-cache hits; "
            "retractions):"
        )
        parts.append(during[0])
        if during[1]:
            parts.append("Not shown: " + " ".join(during[1]))
    pd = render_pd_table(sweep)
    if pd is not None:
        parts.append("Prefill and decode during each level (this PD instance's /metrics: KV computed and "
                     "not yet fetched, requests waiting for their KV, sampled max; failures over the level):")
        parts.append(pd)
    sides = render_sides_table(sweep)
    if sides is not None:
        parts.append("Each side during each level (the router's PD workers' /metrics: requests running and "
                     "queued, the side's sum of sampled means; KV computed and not yet fetched and requests "
                     "waiting for their KV, the busiest instance's max; the level's KV hand-overs and their "
                     "mean latency; failures over the level):")
        parts.append(sides)
    work = workload_line(sweep)
    cache = render_cache_table(sweep)
    if work is not None:
        parts.append(work)
    if cache is not None:
        parts.append("Prefix cache per level (server hit = cached / prompt tokens from its /metrics, by tier; "
                     "client hit = the cached_tokens the responses reported):")
        parts.append(cache)
    parts.extend(render_notes(sweep))
    return "\n\n".join(parts)
