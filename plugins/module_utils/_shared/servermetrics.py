# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What the server itself says about one sweep level: its /metrics read before and after the
level (counters: differences) and sampled while it runs (gauges: mean and max).

Plain Python, no Ansible import, no aiohttp: the sweep fetches the text, this file reads it.
Names are those of the real releases (tests/fixtures/metrics/: SGLang 0.5.17 on an H200);
a field whose metric a release does not serve is ``None`` and named in ``not_reported``,
never guessed. See docs/sweep.md "Server during each level" for every field.

Why both kinds: a counter difference is exact over the level whatever the sampling missed
(accept length, cache hits), while gauges (running and queued requests, token usage) exist only
as the instant they are read, so the level's mean and max come from samples taken while it runs.
"""
from __future__ import annotations

import math
import re
from typing import Any

# One sample line: name, optional {labels}, value (timestamps ignored).
_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_DECLARED = re.compile(r"^# TYPE (?:sglang[:_])?(\S+) ")

# Gauges sampled during a level: field prefix -> metric (without the 'sglang:' prefix).
SAMPLED_GAUGES: dict[str, str] = {
    "running": "num_running_reqs",
    "queued": "num_queue_reqs",
    "token_usage": "token_usage",
    "retracted": "num_retracted_reqs",
    "hicache_host_used_tokens": "hicache_host_used_tokens",
    "spec_accept_length_gauge": "spec_accept_length",
    "spec_accept_rate_gauge": "spec_accept_rate",
    "pd_prefill_inflight": "num_prefill_inflight_queue_reqs",
    "pd_decode_transfer": "num_decode_transfer_queue_reqs",
}
NOT_REPORTED = "not reported by this release"
SPEC_OFF = "speculative decoding off"
NO_SAMPLES = "no sample: the level was shorter than the sampling interval"
NO_PROMPTS = "no prompt tokens counted in the level"
RESTARTED = "a counter went down: the server restarted during the level"
# The fields of a point's ``server_metrics``, in the order the docs and the report list them.
FIELDS: tuple[str, ...] = (
    "samples", "running_mean", "running_max", "queued_mean", "queued_max", "token_usage_mean",
    "token_usage_max", "spec_accept_length", "spec_accept_rate", "cache_hit_rate",
    "cache_hit_rate_device", "cache_hit_rate_host", "cache_hit_rate_storage", "storage_prefetched_tokens",
    "storage_backuped_tokens", "hicache_host_usage_max", "retracted_max",
    "pd_prefill_inflight_max", "pd_decode_transfer_max", "pd_bootstrap_failed", "pd_transfer_failed",
    "pd_kv_transfers", "pd_kv_transfer_ms_mean",
)
_PD_KEYS = FIELDS[FIELDS.index("pd_prefill_inflight_max"):]

Scrape = dict[str, Any]


def parse(text: str) -> Scrape:
    """A Prometheus text exposition -> ``{"series": {name: [(labels, value)]}, "declared":
    {names with a TYPE line}}``; names lose their ``sglang:`` / ``sglang_`` prefix. A labelled
    counter no request has touched yet has no series (0.5.17's ``cached_tokens_total`` on a
    server without cache hits is not even declared)."""
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    declared: set[str] = set()
    for line in text.splitlines():
        if line.startswith("#"):
            match = _DECLARED.match(line)
            if match:
                declared.add(match.group(1))
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        name, raw_labels, raw = match.groups()
        for prefix in ("sglang:", "sglang_"):
            if name.startswith(prefix):
                name = name[len(prefix):]
        try:
            value = float(raw)
        except ValueError:
            continue
        labels = dict(_LABEL.findall(raw_labels or ""))
        series.setdefault(name, []).append((labels, value))
    return {"series": series, "declared": declared}


def total(scrape: Scrape, name: str, **match: str) -> float | None:
    """The sum of ``name``'s series whose labels match (NaN skipped); None when absent."""
    rows = [v for labels, v in scrape["series"].get(name, [])
            if all(labels.get(k) == want for k, want in match.items()) and not math.isnan(v)]
    return math.fsum(rows) if rows else None


def present(scrape: Scrape, name: str) -> bool:
    return name in scrape["series"] or name in scrape["declared"]


class GaugeSamples:
    """Running count, sum and max of each sampled gauge: constant memory however long a level
    runs. ``busy`` counts samples with a running request (the spec gauges are only averaged
    over those: an idle server reports its last or a zero accept length)."""

    def __init__(self) -> None:
        self.count = 0
        self.sums: dict[str, float] = {}
        self.maxes: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.spec_on = False
        self.hicache_total: float | None = None

    def add(self, scrape: Scrape) -> None:
        self.count += 1
        busy = (total(scrape, "num_running_reqs") or 0.0) > 0
        self.spec_on = self.spec_on or spec_enabled(scrape)
        host_total = total(scrape, "hicache_host_total_tokens")
        if host_total:
            self.hicache_total = host_total
        for key, metric in SAMPLED_GAUGES.items():
            value = total(scrape, metric)
            if value is None or (key.startswith("spec_") and not busy):
                continue
            self.sums[key] = self.sums.get(key, 0.0) + value
            self.counts[key] = self.counts.get(key, 0) + 1
            self.maxes[key] = max(self.maxes.get(key, value), value)

    def mean(self, key: str) -> float | None:
        n = self.counts.get(key)
        return self.sums[key] / n if n else None

    def max(self, key: str) -> float | None:
        return self.maxes.get(key)


def spec_enabled(scrape: Scrape) -> bool:
    """Speculative decoding is on: the release counts verify calls, or its active step count
    is above zero (0.5.17 serves the spec gauges at 0 without speculative decoding)."""
    return present(scrape, "spec_verify_calls_total") or (total(scrape, "spec_num_steps") or 0.0) > 0


def _delta(before: Scrape, after: Scrape, name: str, **match: str) -> float | None:
    """after - before of a counter (absent before: 0); None when absent after, or when it went
    down (a restart in between)."""
    end = total(after, name, **match)
    if end is None:
        return None
    diff = end - (total(before, name, **match) or 0.0)
    return diff if diff >= 0 else None


def _rnd(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _accept(before: Scrape, after: Scrape, samples: GaugeSamples, notes: dict[str, str]) -> dict[str, Any]:
    """Accept length: generated tokens per verify call over the level (counters), else the
    sampled gauge; accept rate: the release's own gauge (accepted / proposed drafts), sampled."""
    if not (samples.spec_on or spec_enabled(after)):
        notes["spec_accept_length"] = notes["spec_accept_rate"] = SPEC_OFF
        return {"spec_accept_length": None, "spec_accept_rate": None}
    verify = _delta(before, after, "spec_verify_calls_total")
    generated = _delta(before, after, "generation_tokens_total")
    length = generated / verify if verify and generated is not None else samples.mean("spec_accept_length_gauge")
    rate = samples.mean("spec_accept_rate_gauge")
    for key, value in (("spec_accept_length", length), ("spec_accept_rate", rate)):
        if value is None:
            notes[key] = NOT_REPORTED if not present(after, key) else NO_SAMPLES
    return {"spec_accept_length": _rnd(length, 3), "spec_accept_rate": _rnd(rate, 3)}


def _cache(before: Scrape, after: Scrape, notes: dict[str, str]) -> dict[str, Any]:
    """Prefix-cache hits over the level: cached / prompt tokens. The total from the prompt and
    uncached-prompt histograms' sums; by tier from ``cached_tokens_total{cache_source}``
    (device: the radix cache on the GPU; host: HiCache's host pool; the storage tier: ``_storage``). 0.5.17 declares that
    counter only once a hit happened, so with no hit at all both tiers are 0."""
    prompt = _delta(before, after, "prompt_tokens_histogram_sum")
    uncached = _delta(before, after, "uncached_prompt_tokens_histogram_sum")
    out: dict[str, Any] = {"cache_hit_rate": None, "cache_hit_rate_device": None, "cache_hit_rate_host": None}
    if prompt is None or uncached is None:
        served = total(after, "prompt_tokens_histogram_sum") is not None
        for key in out:
            notes[key] = RESTARTED if served else NOT_REPORTED
        return out
    if prompt <= 0:
        for key in out:
            notes[key] = NO_PROMPTS
        return out
    hits = max(prompt - uncached, 0.0)
    out["cache_hit_rate"] = round(hits / prompt, 4)
    for source in ("device", "host"):
        key = f"cache_hit_rate_{source}"
        cached = _delta(before, after, "cached_tokens_total", cache_source=source)
        if cached is None and (hits == 0 or present(after, "cached_tokens_total")):
            cached = 0.0  # no hit at all, or none from this tier
        if cached is None:
            notes[key] = NOT_REPORTED
        else:
            out[key] = round(cached / prompt, 4)
    return out


def storage_source(scrape: Scrape) -> str | None:
    """The storage tier's ``cache_source`` of ``cached_tokens_total`` (``storage_`` + the backend's
    class: ``storage_HiCacheFile``), once it has one."""
    return next((labels["cache_source"] for labels, _ in scrape["series"].get("cached_tokens_total", [])
                 if str(labels.get("cache_source", "")).startswith("storage_")), None)


def _storage(before: Scrape, after: Scrape, notes: dict[str, str]) -> dict[str, Any]:
    """HiCache's storage tier over the level: its share of the prompt tokens (hits read from it),
    the tokens prefetched from it (storage -> host) and backed up to it (host -> storage). The
    tier's counters exist only with a storage backend (and --enable-metrics): null without one
    (no note: most servers have none)."""
    keys = ("cache_hit_rate_storage", "storage_prefetched_tokens", "storage_backuped_tokens")
    out: dict[str, Any] = dict.fromkeys(keys)
    if not (present(after, "prefetched_tokens_total") or present(after, "backuped_tokens_total")):
        return out
    # SGLang declares each of the tier's counters at its first use (device run 12: with the
    # best_effort prefetch policy prefetched_tokens_total never appeared): absent is 0, not a restart
    for key, name in (("storage_prefetched_tokens", "prefetched_tokens_total"),
                      ("storage_backuped_tokens", "backuped_tokens_total")):
        out[key] = _rnd(_delta(before, after, name), 0) if present(after, name) else 0.0
    prompt = _delta(before, after, "prompt_tokens_histogram_sum")
    source = storage_source(after)
    cached = _delta(before, after, "cached_tokens_total", cache_source=source) if source else 0.0
    if prompt and cached is not None:
        out["cache_hit_rate_storage"] = round(cached / prompt, 4)
    for key in keys:
        if out[key] is None:
            notes[key] = NO_PROMPTS if key == "cache_hit_rate_storage" and prompt == 0 else RESTARTED
    return out


def _pd(before: Scrape, after: Scrape, samples: GaugeSamples) -> dict[str, Any]:
    """Prefill/decode disaggregation over the level: the prefill's requests whose KV waits to be
    fetched and the decode's requests waiting for their KV (sampled maxima), bootstrap and transfer
    failures (counter differences). Null on a unified server, which declares neither failure counter
    (its PD queue gauges read 0: no note)."""
    if not present(after, "num_bootstrap_failed_reqs_total"):
        return dict.fromkeys(_PD_KEYS)
    # the KV hand-overs of the level (the prefill side observes them; a decode: 0 and no mean)
    transfers = _delta(before, after, "kv_transfer_latency_ms_count") or 0.0
    spent = _delta(before, after, "kv_transfer_latency_ms_sum") if transfers else None
    return {"pd_prefill_inflight_max": _rnd(samples.max("pd_prefill_inflight"), 0),
            "pd_decode_transfer_max": _rnd(samples.max("pd_decode_transfer"), 0),
            "pd_bootstrap_failed": _rnd(_delta(before, after, "num_bootstrap_failed_reqs_total"), 0),
            "pd_transfer_failed": _rnd(_delta(before, after, "num_transfer_failed_reqs_total"), 0),
            "pd_kv_transfers": _rnd(transfers, 0),
            "pd_kv_transfer_ms_mean": _rnd(spent / transfers, 3) if transfers and spent is not None else None}


# A side of a PD deployment swept through its router (``side_metrics``): what is summed over its
# instances (the side's total), what is the busiest instance's
SIDE_SUMS = ("running_mean", "queued_mean", "pd_bootstrap_failed", "pd_transfer_failed", "pd_kv_transfers")
SIDE_MAXES = ("running_max", "queued_max", "token_usage_max", "pd_prefill_inflight_max", "pd_decode_transfer_max",
              "retracted_max")


def side_metrics(per_instance: list[dict[str, Any] | None]) -> dict[str, Any]:
    """One side's level from its instances' ``level_metrics`` (None: an instance not read): the
    means and counts summed (the side's running requests, its failures), the maxima of its busiest
    instance, the KV transfer mean weighted by each instance's transfers; ``read`` of ``instances``."""
    got = [m for m in per_instance if m]
    out: dict[str, Any] = {"instances": len(per_instance), "read": len(got)}
    for keys, combine in ((SIDE_SUMS, sum), (SIDE_MAXES, max)):
        for key in keys:
            values = [m[key] for m in got if m.get(key) is not None]
            out[key] = round(combine(values), 4) if values else None
    weighted = [(m["pd_kv_transfer_ms_mean"], m["pd_kv_transfers"]) for m in got
                if m.get("pd_kv_transfer_ms_mean") is not None and m.get("pd_kv_transfers")]
    count = sum(n for _, n in weighted)
    out["pd_kv_transfer_ms_mean"] = round(sum(v * n for v, n in weighted) / count, 3) if count else None
    return out


def level_metrics(before: Scrape | None, after: Scrape | None, samples: GaugeSamples) -> dict[str, Any] | None:
    """A point's ``server_metrics`` from the scrapes around the level and the samples taken
    during it; None without both scrapes (no /metrics)."""
    if before is None or after is None:
        return None
    notes: dict[str, str] = {}
    out: dict[str, Any] = {"samples": samples.count}
    for key, digits in (("running", 2), ("queued", 2), ("token_usage", 4)):
        out[f"{key}_mean"] = _rnd(samples.mean(key), digits)
        out[f"{key}_max"] = _rnd(samples.max(key), digits)
        if out[f"{key}_mean"] is None:
            reason = NOT_REPORTED if not present(after, SAMPLED_GAUGES[key]) else NO_SAMPLES
            notes[f"{key}_mean"] = notes[f"{key}_max"] = reason
    out.update(_accept(before, after, samples, notes))
    out.update(_cache(before, after, notes))
    out.update(_storage(before, after, notes))
    host_used = samples.max("hicache_host_used_tokens")
    host_total = samples.hicache_total or total(after, "hicache_host_total_tokens")
    out["hicache_host_usage_max"] = round(host_used / host_total, 4) if host_used is not None and host_total else None
    if out["hicache_host_usage_max"] is None:
        notes["hicache_host_usage_max"] = ("HiCache off (no host pool)" if not present(after, "hicache_host_total_tokens")
                                           else NO_SAMPLES)
    out.update(_pd(before, after, samples))
    out["retracted_max"] = _rnd(samples.max("retracted"), 0)
    if out["retracted_max"] is None:
        notes["retracted_max"] = NOT_REPORTED if not present(after, "num_retracted_reqs") else NO_SAMPLES
    out["notes"] = notes
    return out


def sample_interval(time_scale: Any, base: float = 0.5, floor: float = 0.05) -> float:
    """Seconds between samples: ``base`` on a real server; on the time-scaled embedded engine
    the same in the GPU time it models, but never below ``floor`` of wall time (a bound on the
    client's own load)."""
    if isinstance(time_scale, (int, float)) and 0 < time_scale < 1:
        return max(floor, base * float(time_scale))
    return base
