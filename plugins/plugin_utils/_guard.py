# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The rollout guard's decision (controller side): canary instances against baseline instances
(still on the old configuration) over the same window, from the servers' own ``/metrics``.

Input: per instance two scrapes of ``/metrics`` (start and end of the window, parsed by
``module_utils/_shared/servermetrics.parse``, which reads real SGLang 0.5.17 text) and the window's
length. Output: ``pass``, ``fail`` or ``inconclusive`` (too little traffic to judge), with
every value measured on each side, every check and the reason. docs/fleet.md "The rollout
guard" explains each key of ``sglang_rollout_guard`` and why it is compared the way it is.

What is compared (names of SGLang 0.5.17; see rollout-guard facts):
- errors: 4xx/5xx of ``http_responses_total`` on the generation endpoints plus
  ``num_aborted_requests_total`` (absent until the first abort: read as 0), out of the
  generation responses; a one-sided conditional binomial test (given the errors of both sides,
  how likely is the canary's share of them if both had the same rate);
- TTFT and ITL: window histograms (cumulative buckets subtracted, ``is_streaming`` series
  summed), quantiles as Prometheus' ``histogram_quantile`` and the exact window mean. A
  quantile inside the first bucket (TTFT: below 100 ms by default) is only known to be below
  that bound: the canary then passes, and a baseline there is taken at the bound (never
  flagging a regression the buckets cannot show);
- throughput per running request: generation tokens / seconds / mean running requests;
- speculative accept length: generation tokens / verify calls, when both sides speculate.

A counter that went down between the scrapes is a restart: the instance's window is counted
from its restart (its end scrape alone) and its throughput is not used (the time since the
restart is unknown).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._shared import servermetrics as sm

Scrape = dict[str, Any]
PASS, FAIL, INCONCLUSIVE, NOT_MEASURED = "pass", "fail", "inconclusive", "not measured"
GENERATION_ENDPOINTS = ("/generate", "/v1/completions", "/v1/chat/completions", "/v1/responses")
HISTOGRAMS = {"ttft": "time_to_first_token_seconds", "itl": "inter_token_latency_seconds"}
# the request-seconds of a window (the sum of the finished requests' latencies): the denominator of
# throughput_per_running, taken from the latencies themselves so that it cannot contradict them
E2E = "e2e_request_latency_seconds"
# prefill/decode disaggregation: each request's KV hand-over, observed on the prefill side (ms; compared in s)
KV_TRANSFER = "kv_transfer_latency_ms"


@dataclass(frozen=True)
class Threshold:
    """A key of ``sglang_rollout_guard``: its default and what it means, and why this default (the
    table of docs/fleet.md "The rollout guard" is written from these: ``make generated``)."""
    default: Any
    meaning: str


# ``sglang_rollout_guard``: every key optional; adding one is a row here and the code that reads it.
THRESHOLDS: dict[str, Threshold] = {
    "min_requests": Threshold(50, "requests each side must serve in the window for a verdict on latency and throughput "
                              "(and TTFT/ITL observations per side); below it the decision is `inconclusive`. "
                              "Quantiles of fewer requests move by a bucket from one window to the next."),
    "error_alpha": Threshold(0.01, "significance of the error test: about one false alarm in 100 canaries of equal "
                                   "configurations"),
    "max_error_rate_increase": Threshold(0.0, "error-rate increase tolerated beyond noise (absolute share: 0.01 = one "
                                              "point); 0: any significant increase fails"),
    "count_client_errors": Threshold(True, "count 4xx as errors: a template or flag change can make valid requests "
                                           "fail with 400; both sides see the same clients, so their own bad requests "
                                           "cancel out"),
    "latency_quantiles": Threshold([0.5, 0.9], "TTFT and ITL quantiles compared (p99 of a 50-request window is one "
                                               "request)"),
    "max_ttft_ratio": Threshold(1.5, "canary TTFT above 1.5x the baseline fails: catches a 2x regression with room for "
                                     "window-to-window noise"),
    "max_itl_ratio": Threshold(1.5, "the same for inter-token latency"),
    "ttft_slack_s": Threshold(0.02, "absolute slack added to the TTFT limit (tiny latencies: 10 ms against 5 ms is not a "
                                    "regression)"),
    "itl_slack_s": Threshold(0.002, "the same for ITL (its first bucket is 2 ms)"),
    "min_throughput_ratio": Threshold(0.67, "canary tokens per request-second below 0.67x the baseline, and significant "
                                            "(p < `error_alpha`), fails (catches half the decode speed)"),
    "max_kv_transfer_ratio": Threshold(1.5, "prefill/decode: canary KV transfer latency above 1.5x the baseline fails "
                                            "(a transfer backend, network or page change that slows every hand-over)"),
    "kv_transfer_slack_s": Threshold(0.005, "absolute slack added to the KV transfer limit (its first bucket is 1 ms)"),
    "max_accept_length_drop": Threshold(0.2, "speculative accept length more than 20 % below the baseline fails (a draft "
                                             "model or step change that stops paying)"),
}
# the thresholds a decision uses: THRESHOLDS' defaults with the user's sglang_rollout_guard applied
GuardThresholds = dict[str, Any]
DEFAULTS: GuardThresholds = {key: threshold.default for key, threshold in THRESHOLDS.items()}


DIFFERENT_BUCKETS = ("instances serve different histogram buckets (--bucket-time-to-first-token / "
                     "--bucket-inter-token-latency): set the same buckets on every instance")


class GuardError(ValueError):
    """A bad ``sglang_rollout_guard`` or unusable metric windows; the message names the fix."""


def thresholds(overrides: Mapping[str, Any] | None = None) -> GuardThresholds:
    """DEFAULTS with the user's ``sglang_rollout_guard`` applied, every key checked."""
    out: dict[str, Any] = dict(DEFAULTS)
    for key, value in (overrides or {}).items():
        if key not in DEFAULTS:
            raise GuardError(f"sglang_rollout_guard: unknown key {key!r}; the keys are {', '.join(DEFAULTS)}")
        default = DEFAULTS[key]
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, list):
            ok = (isinstance(value, list) and bool(value)
                  and all(isinstance(q, (int, float)) and not isinstance(q, bool) and 0 < q < 1 for q in value))
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
        if not ok:
            takes = ("true or false" if isinstance(default, bool)
                     else "a list of quantiles in (0, 1)" if isinstance(default, list) else "a number >= 0")
            raise GuardError(f"sglang_rollout_guard.{key}={value!r} is not valid: it takes {takes} (default {default!r})")
        out[key] = list(value) if isinstance(value, list) else value
    if out["min_requests"] < 1:
        raise GuardError("sglang_rollout_guard.min_requests must be at least 1")
    return out


# --------------------------------------------------------------------------------------------
# One instance's window


@dataclass
class Histogram:
    """A window histogram: upper bounds (ascending, +Inf last) -> count in that bucket alone."""
    bounds: list[float] = field(default_factory=list)
    counts: list[float] = field(default_factory=list)
    total: float = 0.0
    sum: float = 0.0

    def add(self, other: Histogram) -> None:
        if not other.bounds:
            return
        if self.bounds and self.bounds != other.bounds:
            raise GuardError(DIFFERENT_BUCKETS)
        if not self.bounds:
            self.bounds, self.counts = list(other.bounds), [0.0] * len(other.bounds)
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total
        self.sum += other.sum


def _cumulative(scrape: Scrape, name: str) -> dict[float, float]:
    out: dict[float, float] = {}
    for labels, value in scrape["series"].get(f"{name}_bucket", []):
        le = float(labels.get("le", "nan"))
        if not math.isnan(le) and not math.isnan(value):
            out[le] = out.get(le, 0.0) + value  # is_streaming series summed
    return out


def _scaled(hist: Histogram, factor: float) -> Histogram:
    """The same histogram in another unit (bounds and sum times ``factor``)."""
    return Histogram([b * factor for b in hist.bounds], list(hist.counts), hist.total, hist.sum * factor)


def window_histogram(start: Scrape | None, end: Scrape, name: str) -> Histogram:
    """end - start of a histogram, per bucket (start None: since the restart)."""
    last = _cumulative(end, name)
    first = _cumulative(start, name) if start is not None else {}
    bounds = sorted(last)
    cum = [last[b] - first.get(b, 0.0) for b in bounds]
    counts = [c - (cum[i - 1] if i else 0.0) for i, c in enumerate(cum)]
    total = cum[-1] if cum else 0.0
    s = (sm.total(end, f"{name}_sum") or 0.0) - ((sm.total(start, f"{name}_sum") or 0.0) if start else 0.0)
    return Histogram(bounds, counts, total, s)


def quantile(hist: Histogram, q: float) -> tuple[float | None, float, float]:
    """(value, bucket lower bound, bucket upper bound) as Prometheus' histogram_quantile: the
    first bucket whose cumulative count reaches q x total, linear inside it (lower bound 0 for
    the first bucket). In +Inf only "above the last bound" is known: value None."""
    if hist.total <= 0:
        return None, 0.0, 0.0
    rank, seen, lower = q * hist.total, 0.0, 0.0
    for bound, count in zip(hist.bounds, hist.counts, strict=True):
        if count > 0 and seen + count >= rank:
            if math.isinf(bound):
                return None, lower, bound
            return lower + (bound - lower) * (rank - seen) / count, lower, bound
        seen += count
        lower = bound
    return None, lower, math.inf


def _went_down(start: Scrape, end: Scrape) -> bool:
    for name, rows in start["series"].items():
        if not (name.endswith("_total") or name.endswith("_bucket") or name.endswith("_count")):
            continue
        after = {tuple(sorted(labels.items())): v for labels, v in end["series"].get(name, [])}
        for labels, value in rows:
            if after.get(tuple(sorted(labels.items())), 0.0) < value:
                return True
    return False


def _responses(scrape: Scrape | None) -> tuple[float, float, float]:
    """(generation responses, 4xx, 5xx) counted so far."""
    every = client = server = 0.0
    for labels, value in (scrape or {"series": {}})["series"].get("http_responses_total", []):
        if labels.get("endpoint") not in GENERATION_ENDPOINTS:
            continue
        every += value
        status = labels.get("status_code", "")
        client += value if status.startswith("4") else 0.0
        server += value if status.startswith("5") else 0.0
    return every, client, server


def _running(start: Scrape | None, end: Scrape) -> float | None:
    values = [v for v in (sm.total(s, "num_running_reqs") for s in (start, end) if s is not None) if v is not None]
    return sum(values) / len(values) if values else None


def instance_window(start: Scrape | str | None, end: Scrape | str, seconds: float, *,
                    running_mean: float | None = None) -> dict[str, Any]:
    """One instance's counters over the window. ``start`` None or a scrape whose counters are
    above ``end``'s (a restart): counted from the restart. ``running_mean``: the mean of
    ``num_running_reqs`` sampled during the window (else the mean of the two scrapes')."""
    start = sm.parse(start) if isinstance(start, str) else start
    end = sm.parse(end) if isinstance(end, str) else end
    restarted = start is None or _went_down(start, end)
    base = None if restarted else start

    def delta(name: str) -> float:
        return (sm.total(end, name) or 0.0) - ((sm.total(base, name) or 0.0) if base else 0.0)

    r1, c1, s1 = _responses(end)
    r0, c0, s0 = _responses(base)
    spec = sm.spec_enabled(end)
    running = running_mean if running_mean is not None else _running(base, end)
    return {
        "restarted": restarted,
        "seconds": None if restarted else float(seconds),
        "responses": r1 - r0,
        "finished": delta("num_requests_total"),
        "client_errors": c1 - c0,
        "server_errors": s1 - s0,
        "aborted": delta("num_aborted_requests_total"),
        "generation_tokens": delta("generation_tokens_total"),
        "spec": spec,
        "verify_calls": delta("spec_verify_calls_total") if spec else 0.0,
        # prefill/decode disaggregation: requests that failed to bootstrap or transfer their KV
        "pd": sm.present(end, "num_bootstrap_failed_reqs_total"),
        "pd_failed": delta("num_bootstrap_failed_reqs_total") + delta("num_transfer_failed_reqs_total"),
        "running_mean": running,
        "histograms": {key: window_histogram(base, end, name) for key, name in HISTOGRAMS.items()},
        "kv_transfer": _scaled(window_histogram(base, end, KV_TRANSFER), 0.001),
        "e2e": window_histogram(base, end, E2E),
    }


# --------------------------------------------------------------------------------------------
# A side (canary or baseline): the instances' windows summed


def side(windows: Sequence[Mapping[str, Any]], limits: GuardThresholds) -> dict[str, Any]:
    """Sums over the instances of one side and the values the guard compares."""
    keys = ("responses", "finished", "client_errors", "server_errors", "aborted", "generation_tokens", "verify_calls")
    out: dict[str, Any] = {k: sum(w[k] for w in windows) for k in keys}
    out["instances"] = len(windows)
    out["restarted"] = sum(1 for w in windows if w["restarted"])
    requests = max(out["responses"], out["finished"])
    errors = out["server_errors"] + out["aborted"] + (out["client_errors"] if limits["count_client_errors"] else 0)
    out["requests"], out["errors"] = requests, errors
    out["error_rate"] = errors / requests if requests else None
    # generation tokens per request-second: the finished requests' latencies summed (Little's law:
    # the integral of the running requests over the window, exact, where a sampled running count
    # at light load was mostly 0 and made 2,687 tok/s per request out of an ITL that allows 60),
    # with its relative standard error from the spread of the requests' latencies (issue 28 item 8)
    e2e = Histogram()
    for w in windows:
        if w.get("e2e") is not None:
            e2e.add(w["e2e"])
    out["finished_requests"] = e2e.total
    out["request_seconds"] = e2e.sum
    out["throughput_per_running"] = out["generation_tokens"] / e2e.sum if e2e.total > 0 and e2e.sum > 0 else None
    out["throughput_rse"] = relative_standard_error(e2e)
    out["pd"] = bool(windows) and all(w.get("pd") for w in windows)
    pd_failed = sum(w.get("pd_failed", 0.0) for w in windows)
    out["pd_failures"] = {"errors": pd_failed, "requests": requests, "error_rate": pd_failed / requests if requests else None}
    out["spec"] = bool(windows) and all(w["spec"] for w in windows)
    out["accept_length"] = (out["generation_tokens"] / out["verify_calls"]
                            if out["spec"] and out["verify_calls"] > 0 else None)
    for key in HISTOGRAMS:
        out[key] = _latency([w["histograms"][key] for w in windows], limits)
    out["kv_transfer"] = _latency([w["kv_transfer"] for w in windows if w.get("kv_transfer")], limits)
    return out


def _latency(hists: Iterable[Histogram], limits: GuardThresholds) -> dict[str, Any]:
    """A side's latency histogram (its instances' summed): count, exact mean, the quantiles compared."""
    hist = Histogram()
    for one in hists:
        hist.add(one)
    return {"count": hist.total, "mean": hist.sum / hist.total if hist.total > 0 else None,
            "first_bound": hist.bounds[0] if hist.bounds else None, "bounds": hist.bounds,
            "quantiles": {str(q): _q(hist, q) for q in limits["latency_quantiles"]}}


def relative_standard_error(hist: Histogram) -> float | None:
    """The relative standard error of a per-request rate over ``hist``'s requests: the latencies'
    coefficient of variation (bucket midpoints around the exact mean; the +Inf bucket at its lower
    bound) over sqrt(n). None without two requests or a mean."""
    if hist.total < 2 or hist.sum <= 0:
        return None
    mean = hist.sum / hist.total
    lower, var = 0.0, 0.0
    for bound, count in zip(hist.bounds, hist.counts, strict=True):
        mid = lower if math.isinf(bound) else (lower + bound) / 2
        var += count * (mid - mean) ** 2
        lower = bound
    return math.sqrt(var / (hist.total - 1)) / mean / math.sqrt(hist.total)


def _q(hist: Histogram, q: float) -> dict[str, Any]:
    value, lower, upper = quantile(hist, q)
    return {"value": value, "lower": lower, "upper": upper, "first_bucket": lower == 0.0 and hist.total > 0}


# --------------------------------------------------------------------------------------------
# The checks


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), in log space (large n)."""
    if k <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p)
             + (n - i) * math.log1p(-p) for i in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def _check(name: str, verdict: str, canary: Any, baseline: Any, limit: str, why: str) -> dict[str, Any]:
    return {"check": name, "verdict": verdict, "canary": canary, "baseline": baseline, "limit": limit, "why": why}


def check_errors(can: Mapping[str, Any], base: Mapping[str, Any], limits: GuardThresholds,
                 name: str = "error_rate") -> dict[str, Any]:
    """Any error-rate increase beyond noise: the canary's share of all errors against its share
    of all requests (conditional binomial test, one-sided); judged even on little traffic, since
    a canary failing most of few requests is already significant. ``can`` / ``base``: mappings
    with ``errors``, ``requests`` and ``error_rate``."""
    ec, eb = int(round(can["errors"])), int(round(base["errors"]))
    nc, nb = can["requests"], base["requests"]
    rate_c, rate_b = can["error_rate"], base["error_rate"]
    if not nc:
        return _check(name, INCONCLUSIVE, rate_c, rate_b, "", "no request reached the canary")
    if not nb:
        return _check(name, INCONCLUSIVE, rate_c, rate_b, "", "no request reached the baseline")
    p_value = binomial_tail(ec, ec + eb, nc / (nc + nb))
    limit = f"p < {limits['error_alpha']} and rate above baseline + {limits['max_error_rate_increase']}"
    worse = rate_c > rate_b + limits["max_error_rate_increase"]
    if worse and p_value < limits["error_alpha"]:
        return _check(name, FAIL, rate_c, rate_b, limit,
                      f"canary {ec} errors of {nc:.0f} requests against baseline {eb} of {nb:.0f}: "
                      f"p = {p_value:.2g}, not noise")
    if min(nc, nb) < limits["min_requests"] and ec > 0:
        return _check(name, INCONCLUSIVE, rate_c, rate_b, limit,
                      f"{ec} canary errors, p = {p_value:.2g}, on fewer than {limits['min_requests']} requests a side")
    return _check(name, PASS, rate_c, rate_b, limit, f"p = {p_value:.2g}")


def router_outcomes(start: Scrape | str | None, end: Scrape | str, canary: Iterable[str],
                    baseline: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each side's attempts as the router's circuit breaker counted them over the window
    (``smg_worker_cb_outcomes_total{worker,outcome}`` of sglang-router 0.3.2: HTTP 4xx and 5xx
    and connection errors are failures; every retry is an attempt). A counter that went down
    (a router restart) counts from the restart."""
    start = sm.parse(start) if isinstance(start, str) else start
    end = sm.parse(end) if isinstance(end, str) else end
    base = None if start is None or _went_down(start, end) else start

    def count(workers: Iterable[str], outcome: str) -> float:
        return sum((sm.total(end, "smg_worker_cb_outcomes_total", worker=w, outcome=outcome) or 0.0)
                   - ((sm.total(base, "smg_worker_cb_outcomes_total", worker=w, outcome=outcome) or 0.0)
                      if base else 0.0) for w in workers)

    out = {}
    for key, workers in (("canary", list(canary)), ("baseline", list(baseline))):
        failure, success = count(workers, "failure"), count(workers, "success")
        attempts = failure + success
        out[key] = {"workers": workers, "requests": attempts, "errors": failure,
                    "error_rate": failure / attempts if attempts else None}
    return out


def _bounded(entry: Mapping[str, Any], first_bound: float | None) -> float | None:
    """A quantile as the guard compares it: inside the first bucket, the bound (only "below it"
    is known); in +Inf, the last bound (only "above it" is known: used for the canary only,
    where it understates the canary)."""
    if entry["first_bucket"] and first_bound is not None:
        return first_bound
    return entry["value"] if entry["value"] is not None else entry["lower"]


def check_latency(key: str, can: Mapping[str, Any], base: Mapping[str, Any], limits: GuardThresholds
                  ) -> list[dict[str, Any]]:
    """Canary latency above ratio x baseline + slack, on each quantile and on the exact mean."""
    ratio, slack = limits[f"max_{key}_ratio"], limits[f"{key}_slack_s"]
    c, b = can[key], base[key]
    limit = f"<= {ratio} x baseline + {slack} s"
    out = []
    if c["count"] < limits["min_requests"] or b["count"] < limits["min_requests"]:
        # the values beside the limit (in seconds); the counts in the reason
        return [_check(f"{key}", INCONCLUSIVE, c["mean"], b["mean"], limit,
                       f"{key} observations below min_requests ({limits['min_requests']}): canary "
                       f"{c['count']:.0f}, baseline {b['count']:.0f}")]
    for q, centry in c["quantiles"].items():
        bentry = b["quantiles"][q]
        name = f"{key}_p{float(q) * 100:g}"
        if centry["first_bucket"]:
            out.append(_check(name, PASS, f"< {c['first_bound']}", bentry["value"], limit,
                              f"canary inside the first bucket (< {c['first_bound']} s): no regression visible"))
            continue
        if bentry["value"] is None and not bentry["first_bucket"]:
            out.append(_check(name, INCONCLUSIVE, centry["value"], f"> {bentry['lower']}", limit,
                              "baseline above the last bucket: only a lower bound known"))
            continue
        cv, bv = _bounded(centry, c["first_bound"]), _bounded(bentry, b["first_bound"])
        shown_b = f"< {b['first_bound']}" if bentry["first_bucket"] else bv
        if cv is None or bv is None:
            out.append(_check(name, INCONCLUSIVE, cv, shown_b, limit, "no value"))
            continue
        bad = cv > ratio * bv + slack
        out.append(_check(name, FAIL if bad else PASS, round(cv, 6), shown_b, limit,
                          f"canary {cv:.4g} s against {ratio} x {bv:.4g} s + {slack} s"))
    cm, bm = c["mean"], b["mean"]
    bad = cm is not None and bm is not None and cm > ratio * bm + slack
    out.append(_check(f"{key}_mean", FAIL if bad else PASS, cm, bm, limit, "exact window mean (delta sum / count)"))
    return out


def check_throughput(can: Mapping[str, Any], base: Mapping[str, Any], limits: GuardThresholds) -> dict[str, Any]:
    """Generation tokens per request-second, canary against baseline. It decides only when it is
    significant as the error rate is: a one-sided z-test on the log ratio (each side's relative
    standard error from its requests' latencies) at ``error_alpha``; below ``min_requests``
    finished requests a side, or not significant, it does not fail the canary."""
    c, b = can["throughput_per_running"], base["throughput_per_running"]
    limit = f">= {limits['min_throughput_ratio']} x baseline, p < {limits['error_alpha']}"
    if c is None or b is None or b <= 0 or c <= 0:
        return _check("throughput_per_running", NOT_MEASURED, c, b, limit,
                      "no finished request in the window on a side (or every instance of it restarted)")
    nc, nb = can.get("finished_requests", 0), base.get("finished_requests", 0)
    if nc < limits["min_requests"] or nb < limits["min_requests"]:
        return _check("throughput_per_running", NOT_MEASURED, round(c, 4), round(b, 4), limit,
                      f"not judged: finished requests canary {nc:.0f}, baseline {nb:.0f}, below min_requests "
                      f"({limits['min_requests']})")
    rc, rb = can.get("throughput_rse"), base.get("throughput_rse")
    p_value = 0.0 if not (rc or rb) else 1.0 - _normal_cdf(math.log(b / c) / math.sqrt((rc or 0.0) ** 2 + (rb or 0.0) ** 2))
    low = c < limits["min_throughput_ratio"] * b
    why = f"tokens / request-second: ratio {c / b:.3f}, p = {p_value:.2g}"
    if low and p_value >= limits["error_alpha"]:
        why += " (below the limit, but within the noise of this window: not judged a regression)"
    return _check("throughput_per_running", FAIL if low and p_value < limits["error_alpha"] else PASS,
                  round(c, 4), round(b, 4), limit, why)


def check_pd(can: Mapping[str, Any], base: Mapping[str, Any], limits: GuardThresholds) -> dict[str, Any] | None:
    """Prefill/decode disaggregation's failures (bootstrap and KV transfer) as error_rate's test;
    only when both sides are PD instances."""
    if not (can.get("pd") and base.get("pd")):
        return None
    return check_errors(can["pd_failures"], base["pd_failures"], limits, "pd_failure_rate")


def check_kv_transfer(can: Mapping[str, Any], base: Mapping[str, Any], limits: GuardThresholds
                      ) -> list[dict[str, Any]]:
    """The KV hand-over's latency as TTFT's test (quantiles and mean, ratio + slack), when both sides
    handed KV over in the window: prefill instances (a decode observes none; a canary that handed
    none over fails ``pd_failure_rate``, or served nothing)."""
    if not (can.get("pd") and base.get("pd") and can["kv_transfer"]["count"] and base["kv_transfer"]["count"]):
        return []
    return check_latency("kv_transfer", can, base, limits)


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def check_accept(can: Mapping[str, Any], base: Mapping[str, Any], limits: GuardThresholds) -> dict[str, Any] | None:
    if not (can["spec"] and base["spec"]):
        return None
    c, b = can["accept_length"], base["accept_length"]
    limit = f">= (1 - {limits['max_accept_length_drop']}) x baseline"
    if c is None or b is None:
        return _check("spec_accept_length", INCONCLUSIVE, c, b, limit, "no verify call in the window")
    bad = c < (1 - limits["max_accept_length_drop"]) * b
    return _check("spec_accept_length", FAIL if bad else PASS, round(c, 4), round(b, 4), limit,
                  "generation tokens / verify calls")


@dataclass(frozen=True)
class GuardCheck:
    """One kind of check: the names it reports, what it is measured from and when it fails (the
    table of docs/fleet.md "The rollout guard" is written from these: ``make generated``), and
    how it runs on the two sides (None: the router's, which ``decide`` runs on the router's
    outcomes when it has them)."""
    reports: str
    measured: str
    fails: str
    run: Callable[[Mapping[str, Any], Mapping[str, Any], GuardThresholds], list[dict[str, Any]]] | None


# The checks, in the order a verdict lists them; adding one is a row here and its check function.
CHECKS: tuple[GuardCheck, ...] = (
    GuardCheck(
        "`error_rate`",
        "4xx + 5xx of `sglang:http_responses_total` on `/generate`, `/v1/completions`, `/v1/chat/completions`, "
        "`/v1/responses`, plus `sglang:num_aborted_requests_total` (absent until the first abort: 0), out of the "
        "generation responses (or `sglang:num_requests_total` if larger)",
        "the canary's rate is above the baseline's + `max_error_rate_increase` **and** a one-sided conditional "
        "binomial test says it is not noise (given the errors of both sides, the chance that the canary got at least "
        "its share if both had the same rate, its share of requests, is below `error_alpha`). Judged even on little "
        "traffic: a canary failing 8 of 9 requests fails.",
        lambda can, base, limits: [check_errors(can, base, limits)]),
    GuardCheck(
        "`router_error_rate` (when the router's scrapes are given: `router_outcomes()`)",
        "sglang-router 0.3.2's `smg_worker_cb_outcomes_total{worker,outcome}` for the canary's and the baseline's "
        "worker URLs: every attempt, failures being HTTP 4xx/5xx and connection errors, which a server's own "
        "`/metrics` never sees (a crashed or refusing canary)",
        "the same test as `error_rate`",
        None),
    GuardCheck(
        "`ttft_p50`, `ttft_p90`, `ttft_mean`",
        "histogram `sglang:time_to_first_token_seconds` (streaming and non-streaming summed)",
        "canary > `max_ttft_ratio` x baseline + `ttft_slack_s`",
        lambda can, base, limits: check_latency("ttft", can, base, limits)),
    GuardCheck(
        "`itl_p50`, `itl_p90`, `itl_mean`",
        "histogram `sglang:inter_token_latency_seconds` (one observation per token)",
        "canary > `max_itl_ratio` x baseline + `itl_slack_s`",
        lambda can, base, limits: check_latency("itl", can, base, limits)),
    GuardCheck(
        "`throughput_per_running`",
        "delta `sglang:generation_tokens_total` / delta `sglang:e2e_request_latency_seconds_sum`: generation tokens "
        "per request-second, the finished requests' latencies summed (the integral of the running requests over the "
        "window, by Little's law), so it cannot contradict the latencies; its relative standard error is the "
        "requests' latency spread (from the e2e histogram) over sqrt(n)",
        "canary < `min_throughput_ratio` x baseline **and** a one-sided z-test on the log ratio says it is not noise "
        "(p < `error_alpha`); below the limit but not significant it passes, saying so; \"not measured\" (not "
        "blocking) with fewer than `min_requests` finished requests a side. Before (issue 28 item 8) it divided by a "
        "sampled `num_running_reqs`, mostly 0 at light load: 2,687 tok/s per running request beside an ITL allowing "
        "about 60, and a good canary failed on it",
        lambda can, base, limits: [check_throughput(can, base, limits)]),
    GuardCheck(
        "`pd_failure_rate` (only when both sides are prefill/decode instances: `sglang_pd`)",
        "delta `sglang:num_bootstrap_failed_reqs_total` + delta `sglang:num_transfer_failed_reqs_total` out of the "
        "requests: a prefill that cannot be reached, a KV transfer that failed",
        "the same test as `error_rate`",
        lambda can, base, limits: [c for c in [check_pd(can, base, limits)] if c is not None]),
    GuardCheck(
        "`kv_transfer_p50`, `kv_transfer_p90`, `kv_transfer_mean` (only when both sides handed KV over: prefill "
        "instances of `sglang_pd`)",
        "histogram `sglang:kv_transfer_latency_ms` (observed by the prefill side for each request's KV; compared in "
        "seconds)",
        "canary > `max_kv_transfer_ratio` x baseline + `kv_transfer_slack_s`",
        check_kv_transfer),
    GuardCheck(
        "`spec_accept_length` (only when both sides speculate)",
        "delta `sglang:generation_tokens_total` / delta `sglang:spec_verify_calls_total`",
        "canary < (1 - `max_accept_length_drop`) x baseline",
        lambda can, base, limits: [c for c in [check_accept(can, base, limits)] if c is not None]),
)


def decide(canary: Iterable[Mapping[str, Any]], baseline: Iterable[Mapping[str, Any]],
           overrides: Mapping[str, Any] | None = None,
           router: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The decision: ``fail`` when any check fails; else ``inconclusive`` when either side saw
    fewer than ``min_requests`` requests (or a check could not be made); else ``pass``.
    ``canary`` / ``baseline``: ``instance_window`` results; ``router``: ``router_outcomes``
    (optional: adds the check ``router_error_rate``, which sees what the servers cannot, such
    as refused connections)."""
    limits = thresholds(overrides)
    can, base = side(list(canary), limits), side(list(baseline), limits)
    if not can["instances"] or not base["instances"]:
        raise GuardError("the guard needs at least one canary and one baseline instance")
    for key in HISTOGRAMS:
        if can[key]["bounds"] and base[key]["bounds"] and can[key]["bounds"] != base[key]["bounds"]:
            raise GuardError(f"{key}: canary and baseline: {DIFFERENT_BUCKETS}")
    checks: list[dict[str, Any]] = []
    for check in CHECKS:
        if check.run is not None:
            checks += check.run(can, base, limits)
        elif router is not None:
            checks.append(check_errors(router["canary"], router["baseline"], limits, "router_error_rate"))
    failed = [c for c in checks if c["verdict"] == FAIL]
    little = [s for s, v in (("canary", can), ("baseline", base)) if v["requests"] < limits["min_requests"]]
    if failed:
        decision, reason = FAIL, "; ".join(f"{c['check']}: {c['why']}" for c in failed)
    elif little:
        decision = INCONCLUSIVE
        reason = (f"too little traffic: {' and '.join(little)} below min_requests={limits['min_requests']} "
                  f"(canary {can['requests']:.0f}, baseline {base['requests']:.0f} requests)")
    elif any(c["verdict"] == INCONCLUSIVE for c in checks):
        decision = INCONCLUSIVE
        reason = "; ".join(f"{c['check']}: {c['why']}" for c in checks if c["verdict"] == INCONCLUSIVE)
    else:
        decision, reason = PASS, "every check within its limit"
    return {"decision": decision, "reason": reason, "checks": checks, "canary": can, "baseline": base,
            "router": dict(router) if router is not None else None, "thresholds": dict(limits)}
