# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Server-side latency from the server's Prometheus histograms (``/metrics``, pure): parsing,
deltas over a level, the bucket range of a percentile.
"""
from __future__ import annotations

import math
import re
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import SERVER_HISTOGRAMS

_PROM_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LE_RE = re.compile(r'le="([^"]*)"')


def parse_histograms(text: str) -> dict[str, dict[str, Any]]:
    """The SERVER_HISTOGRAMS found in a Prometheus text exposition, summed over their series
    (label sets, e.g. ``is_streaming`` true and false): ``{key: {"sum", "count", "buckets":
    {upper bound: cumulative count}}}`` with keys ``ttft``, ``itl``, ``e2e``. A family without
    samples yet (no request served) is absent."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        match = _PROM_LINE.match(line)
        if match is None:
            continue
        metric, labels, raw = match.groups()
        base, _, suffix = metric.rpartition("_")
        if suffix not in ("sum", "count", "bucket"):
            continue
        if base.startswith(("sglang:", "sglang_")):
            base = base[len("sglang:"):]
        key = SERVER_HISTOGRAMS.get(base)
        if key is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        hist = out.setdefault(key, {"sum": 0.0, "count": 0.0, "buckets": {}})
        if suffix == "bucket":
            le = _LE_RE.search(labels or "")
            if le is None:
                continue
            try:
                bound = float(le.group(1))
            except ValueError:
                continue
            hist["buckets"][bound] = hist["buckets"].get(bound, 0.0) + value
        else:
            hist[suffix] += value
    return out


def histogram_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """after - before of one parsed histogram (a family absent before counts as zero); None when
    absent after or when a count went down (the server restarted in between)."""
    if after is None:
        return None
    before = before or {"sum": 0.0, "count": 0.0, "buckets": {}}
    count = after["count"] - before["count"]
    buckets = {b: after["buckets"][b] - before["buckets"].get(b, 0.0) for b in after["buckets"]}
    if count < 0 or any(v < 0 for v in buckets.values()):
        return None
    return {"sum": after["sum"] - before["sum"], "count": count, "buckets": buckets}


def histogram_rank_range(hist: dict[str, Any], p: float) -> tuple[float, float] | None:
    """Where the p-th percentile of the observations lies, to the histogram's resolution.

    With the sweep's own rule (rank = p/100 * (n-1) between the closest ranks), the percentile
    lies between the observation of rank floor(rank) and the one of rank ceil(rank); each lies
    in the bucket whose cumulative count first exceeds its rank. Returns (lower bound of the
    first bucket, upper bound of the second) (``inf`` for the +Inf bucket); None when empty.
    """
    count = hist.get("count") or 0.0
    if count < 1:
        return None
    bounds = sorted(hist["buckets"])
    rank = min(max(p, 0.0), 100.0) / 100.0 * (count - 1)

    def bucket(i: float) -> tuple[float, float]:
        prev = 0.0
        for bound in bounds:
            if hist["buckets"][bound] > i + 1e-9:
                return prev, bound
            prev = bound
        return prev, math.inf

    return bucket(math.floor(rank))[0], bucket(math.ceil(rank))[1]


def server_latency(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The server-side latency of one level from its histograms before and after it.

    Means are ``_sum`` / ``_count`` deltas; ``*_range`` give, per percentile, the bucket
    bounds the server's own p50/p90/p99 lie in (``null`` upper bound: the +Inf bucket). On a
    real server these are wall-clock seconds as the server timed them (no network, no client);
    on the time-scaled embedded engine, the modelled GPU time (docs/engine-api.md). None when
    no histogram moved (no metrics, or a restart)."""
    deltas = {key: histogram_delta(before.get(key), after.get(key)) for key in SERVER_HISTOGRAMS.values()}
    if not any(d and d["count"] > 0 for d in deltas.values()):
        return None

    def mean(key: str, unit: float, digits: int) -> float | None:
        d = deltas[key]
        return round(d["sum"] / d["count"] * unit, digits) if d and d["count"] > 0 else None

    def ranges(key: str, unit: float, digits: int) -> dict[str, list[float | None]] | None:
        d = deltas[key]
        if not d or d["count"] < 1:
            return None
        out: dict[str, list[float | None]] = {}
        for p in (50, 90, 99):
            rng = histogram_rank_range(d, p)
            if rng is not None:
                out[f"p{p}"] = [round(rng[0] * unit, digits), None if math.isinf(rng[1]) else round(rng[1] * unit, digits)]
        return out

    e2e, ttft, itl = deltas["e2e"], deltas["ttft"], deltas["itl"]
    return {
        "requests": int(e2e["count"]) if e2e else None,
        "first_tokens": int(ttft["count"]) if ttft else None,
        "itl_tokens": int(itl["count"]) if itl else None,
        "ttft_ms_mean": mean("ttft", 1000.0, 3),
        "itl_ms_mean": mean("itl", 1000.0, 4),
        "e2e_s_mean": mean("e2e", 1.0, 4),
        "ttft_ms_range": ranges("ttft", 1000.0, 3),
        "itl_ms_range": ranges("itl", 1000.0, 4),
        "e2e_s_range": ranges("e2e", 1.0, 4),
    }
