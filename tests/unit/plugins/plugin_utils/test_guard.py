"""The rollout guard's decision (plugin_utils/_guard.py) on metric windows built from the real
SGLang 0.5.17 recordings (tests/fixtures/metrics/) and from texts derived from them: counters
scaled (a shorter window), histograms stretched (every latency x k), error responses added."""
from __future__ import annotations

import bisect
import re
from collections import defaultdict
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils import _guard as g

from ....pdmetrics import pd_metrics

METRICS = Path(__file__).resolve().parents[3] / "fixtures" / "metrics"
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")
COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def text(kind: str) -> str:
    return (METRICS / f"sglang-0.5.17-h200-{kind}.txt").read_text()


def scale(body: str, factor: float) -> str:
    """Every counter, bucket, count and sum x factor: the same server earlier in its life."""
    out = []
    for line in body.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1).endswith(COUNTER_SUFFIXES):
            line = f"{m.group(1)}{m.group(2) or ''} {float(m.group(3)) * factor}"
        out.append(line)
    return "\n".join(out) + "\n"


def stretch(body: str, metric: str, factor: float) -> str:
    """Histogram ``metric`` as if every observation took ``factor`` times as long: each
    cumulative bucket becomes the old (piecewise-linear) CDF at le / factor; the sum x factor."""
    buckets: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for line in body.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == f"sglang:{metric}_bucket":
            le = float(re.search(r'le="([^"]+)"', m.group(2)).group(1))
            key = re.sub(r'le="[^"]+",?', "", m.group(2))
            buckets[key].append((le, float(m.group(3))))

    def cdf(key: str, x: float) -> float:
        rows = sorted(buckets[key])
        bounds = [b for b, _ in rows]
        i = bisect.bisect_left(bounds, x)
        if i < len(rows) and bounds[i] == x:
            return rows[i][1]
        lo, clo = (rows[i - 1] if i else (0.0, 0.0))
        hi, chi = rows[i]
        return chi if hi == float("inf") else clo + (chi - clo) * (x - lo) / (hi - lo)

    out = []
    for line in body.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == f"sglang:{metric}_bucket":
            le = float(re.search(r'le="([^"]+)"', m.group(2)).group(1))
            key = re.sub(r'le="[^"]+",?', "", m.group(2))
            line = f"{m.group(1)}{m.group(2)} {cdf(key, le / factor)}"
        elif m and m.group(1) == f"sglang:{metric}_sum":
            line = f"{m.group(1)}{m.group(2) or ''} {float(m.group(3)) * factor}"
        out.append(line)
    return "\n".join(out) + "\n"


def with_errors(body: str, count: float, status: str = "500") -> str:
    return body + (f'sglang:http_responses_total{{endpoint="/v1/completions",method="POST",'
                   f'status_code="{status}"}} {count}\n')


def window(end: str, start_factor: float = 0.5, *, running: float | None = 4.0, start: str | None = None) -> dict:
    """A 60-s window ending at ``end`` and starting at ``end`` scaled (or at ``start``)."""
    return g.instance_window(start if start is not None else scale(end, start_factor), end, 60.0,
                             running_mean=running)


def by_name(result: dict) -> dict[str, dict]:
    return {c["check"]: c for c in result["checks"]}


def test_same_configuration_passes_on_real_texts() -> None:
    dense = text("dense")
    result = g.decide([window(dense)], [window(dense), window(dense)])
    assert result["decision"] == g.PASS, result["reason"]
    assert result["canary"]["requests"] == pytest.approx(183 / 2 + 0.5, abs=1)
    # TTFT of the streaming requests sits in the first bucket: reported as such, not as a value
    assert by_name(result)["ttft_p50"]["canary"] == "< 0.1"


def test_real_window_between_two_recordings_of_one_server() -> None:
    """hybrid after-sweep-real -> after-sweep-warm: two scrapes of the same running server."""
    w = g.instance_window(text("hybrid-after-sweep-real"), text("hybrid-after-sweep-warm"), 120.0, running_mean=8)
    assert not w["restarted"]
    assert w["finished"] == 994 - 511
    assert w["generation_tokens"] == 228768 - 117968
    result = g.decide([w], [w])
    assert result["decision"] == g.PASS, result["reason"]
    accept = by_name(result)["spec_accept_length"]
    assert accept["canary"] == pytest.approx((228768 - 117968) / (227778 - 117463), rel=1e-3)


@pytest.mark.parametrize("metric,check", [("time_to_first_token_seconds", "ttft_mean"),
                                          ("inter_token_latency_seconds", "itl_p50")])
def test_twice_the_latency_fails(metric: str, check: str) -> None:
    dense = text("dense")
    slow = stretch(dense, metric, 2.0)
    result = g.decide([window(slow)], [window(dense)])
    assert result["decision"] == g.FAIL
    assert by_name(result)[check]["verdict"] == g.FAIL
    assert check in result["reason"]


def test_twice_the_itl_fails_on_hybrid_with_spec() -> None:
    hybrid = text("hybrid-after-sweep-warm")
    result = g.decide([window(stretch(hybrid, "inter_token_latency_seconds", 2.0))], [window(hybrid)])
    assert result["decision"] == g.FAIL
    assert any(c["check"].startswith("itl") and c["verdict"] == g.FAIL for c in result["checks"])


def test_ten_percent_slower_passes() -> None:
    dense = text("dense")
    slower = stretch(stretch(dense, "inter_token_latency_seconds", 1.1), "time_to_first_token_seconds", 1.1)
    assert g.decide([window(slower)], [window(dense)])["decision"] == g.PASS


def test_errors_beyond_noise_fail() -> None:
    dense = text("dense")
    result = g.decide([g.instance_window(scale(dense, 0.5), with_errors(dense, 20), 60, running_mean=4)],
                      [window(dense), window(dense)])
    errors = by_name(result)["error_rate"]
    assert result["decision"] == g.FAIL and errors["verdict"] == g.FAIL
    assert errors["canary"] > 0.15 and errors["baseline"] < 0.01  # the capture's one 400, halved


def test_one_error_each_side_is_noise() -> None:
    dense = text("dense")
    result = g.decide([g.instance_window(scale(dense, 0.5), with_errors(dense, 1), 60, running_mean=4)],
                      [g.instance_window(scale(dense, 0.5), with_errors(dense, 1, "503"), 60, running_mean=4)])
    assert by_name(result)["error_rate"]["verdict"] == g.PASS
    assert result["decision"] == g.PASS


def test_the_capture_bad_request_counts_as_client_error_only_when_asked() -> None:
    dense = text("dense")  # has one /v1/completions 400
    w = g.instance_window(None, dense, 60, running_mean=4)
    assert w["client_errors"] == 1 and w["server_errors"] == 0
    on = g.side([w], g.thresholds())
    off = g.side([w], g.thresholds({"count_client_errors": False}))
    assert on["errors"] == 1 and off["errors"] == 0


def test_too_little_traffic_is_inconclusive() -> None:
    dense = text("dense")
    result = g.decide([window(dense, 0.95)], [window(dense, 0.95)])
    assert result["decision"] == g.INCONCLUSIVE
    assert "too little traffic" in result["reason"]
    assert result["canary"]["requests"] < 50


def test_a_canary_failing_most_of_few_requests_still_fails() -> None:
    dense = text("dense")
    canary = g.instance_window(scale(dense, 0.95), with_errors(dense, 8), 60, running_mean=4)
    result = g.decide([canary], [window(dense)])
    assert result["decision"] == g.FAIL


def test_counter_reset_counts_from_the_restart() -> None:
    dense = text("dense")
    # the start scrape was taken before a restart: its counters are above the end's
    w = g.instance_window(dense, scale(dense, 0.5), 60, running_mean=4)
    assert w["restarted"] and w["seconds"] is None
    assert w["finished"] == pytest.approx(183 / 2)
    result = g.decide([w], [window(dense)])
    assert result["decision"] == g.PASS, result["reason"]
    # counted from the restart too: the same server's tokens per request-second
    check = by_name(result)["throughput_per_running"]
    assert check["verdict"] == g.PASS and check["canary"] == pytest.approx(check["baseline"], rel=0.01)


def test_halved_throughput_per_running_request_fails() -> None:
    """Every request twice as long for the same tokens: half the tokens per request-second,
    on ~90 finished requests a side: significant, the canary fails."""
    dense = text("dense")
    slow = stretch(dense, "e2e_request_latency_seconds", 2.0)
    result = g.decide([g.instance_window(scale(slow, 0.5), slow, 60.0)], [window(dense)])
    check = by_name(result)["throughput_per_running"]
    assert check["verdict"] == g.FAIL and result["decision"] == g.FAIL, check
    assert check["canary"] == pytest.approx(check["baseline"] / 2, rel=0.02)
    assert "ratio 0.5" in check["why"] and "p = " in check["why"]


def test_throughput_per_running_comes_from_the_latencies_not_a_sampled_running_count() -> None:
    """Issue 28 item 8: at light load the sampled num_running_reqs was mostly 0, and the check
    made 2,687 tok/s per running request out of an ITL that allows far less (then failed a good
    canary on it). Now: generation tokens / the finished requests' latencies summed, whatever
    was sampled."""
    dense = text("dense")
    one, other = window(dense, running=0.01), window(dense, running=40.0)
    for w in (one, other):
        side = g.side([w], g.thresholds())
        assert side["throughput_per_running"] == pytest.approx(w["generation_tokens"] / w["e2e"].sum)
    assert g.side([one], g.thresholds())["throughput_per_running"] == g.side([other], g.thresholds())["throughput_per_running"]
    # not above what the latencies allow: a request cannot make tokens faster than 1 / its mean ITL
    itl = one["histograms"]["itl"]
    assert g.side([one], g.thresholds())["throughput_per_running"] <= 1.0 / (itl.sum / itl.total)


def test_a_throughput_difference_within_the_noise_of_a_light_window_does_not_decide() -> None:
    """A few requests a side, the canary's slower by a factor the spread of their latencies
    explains: below the ratio, not significant, not a failure (and named so)."""
    dense = text("dense")
    slow = stretch(dense, "e2e_request_latency_seconds", 1.6)
    limits = {"min_requests": 5}
    canary = g.instance_window(scale(slow, 0.97), slow, 60.0)
    baseline = g.instance_window(scale(dense, 0.97), dense, 60.0)
    check = by_name(g.decide([canary], [baseline], limits))["throughput_per_running"]
    assert check["canary"] < 0.67 * check["baseline"], check
    assert check["verdict"] == g.PASS and "within the noise" in check["why"], check
    # fewer finished requests than min_requests: not judged at all
    check = by_name(g.decide([canary], [baseline], {"min_requests": 50}))["throughput_per_running"]
    assert check["verdict"] == g.NOT_MEASURED and "not judged" in check["why"]


def test_an_inconclusive_latency_check_shows_values_not_counts_beside_its_limit() -> None:
    dense = text("dense")
    light = [g.instance_window(scale(dense, 0.97), dense, 60.0)]
    check = by_name(g.decide(light, light, {"min_requests": 50}))["ttft"]
    assert check["verdict"] == g.INCONCLUSIVE
    assert isinstance(check["canary"], float) and check["canary"] < 10  # a mean in seconds
    assert check["why"] == "ttft observations below min_requests (50): canary 5, baseline 5"


def test_lower_accept_length_fails() -> None:
    warm = text("hybrid-after-sweep-warm")
    fewer = re.sub(r"^(sglang:spec_verify_calls_total\{[^}]*\}) (\S+)$",
                   lambda m: f"{m.group(1)} {float(m.group(2)) * 1.5}", warm, flags=re.M)
    result = g.decide([window(fewer)], [window(warm)])
    assert by_name(result)["spec_accept_length"]["verdict"] == g.FAIL


def test_no_accept_check_without_spec() -> None:
    dense = text("dense")
    assert "spec_accept_length" not in by_name(g.decide([window(dense)], [window(dense)]))


def test_quantile_interpolates_and_knows_the_first_bucket() -> None:
    hist = g.Histogram([0.1, 0.2, float("inf")], [0, 10, 0], 10, 1.5)
    value, lower, upper = g.quantile(hist, 0.5)
    assert (value, lower, upper) == (pytest.approx(0.15), 0.1, 0.2)
    first = g.Histogram([0.1, 0.2, float("inf")], [10, 0, 0], 10, 0.5)
    assert g.quantile(first, 0.9)[1] == 0.0
    tail = g.Histogram([0.1, 0.2, float("inf")], [0, 0, 3], 3, 3.0)
    assert g.quantile(tail, 0.5) == (None, 0.2, float("inf"))


def test_baseline_in_first_bucket_compared_at_its_bound() -> None:
    """Baseline TTFT p50 below 100 ms; canary at 0.14 s: not flagged (it may be 70 ms against
    90 ms), at 0.3 s: flagged (above 1.5 x 0.1 + slack whatever the baseline was)."""
    def fake(bucket: int) -> dict:
        counts = [0.0] * 4
        counts[bucket] = 100.0
        hist = g.Histogram([0.1, 0.2, 0.4, float("inf")], counts, 100, 0.0)
        return {"restarted": False, "seconds": 60.0, "responses": 100, "finished": 100, "client_errors": 0,
                "server_errors": 0, "aborted": 0, "generation_tokens": 1000, "spec": False, "verify_calls": 0,
                "running_mean": 1.0, "histograms": {"ttft": hist, "itl": hist}}
    limits = {"latency_quantiles": [0.5]}
    near = by_name(g.decide([fake(1)], [fake(0)], {**limits, "max_itl_ratio": 10}))
    assert near["ttft_p50"]["verdict"] == g.PASS and near["ttft_p50"]["baseline"] == "< 0.1"
    far = by_name(g.decide([fake(2)], [fake(0)], {**limits, "max_itl_ratio": 10}))
    assert far["ttft_p50"]["verdict"] == g.FAIL


def test_different_buckets_refused() -> None:
    dense = text("dense")
    other = dense.replace('le="0.1"', 'le="0.05"')
    with pytest.raises(g.GuardError, match="same buckets"):
        g.decide([window(other)], [window(dense)])


@pytest.mark.parametrize("overrides,message", [
    ({"max_ttft_ratio": "2"}, "a number >= 0"),
    ({"ttft": 2}, "unknown key 'ttft'"),
    ({"latency_quantiles": [0.5, 1.5]}, "quantiles in \\(0, 1\\)"),
    ({"count_client_errors": 1}, "true or false"),
    ({"min_requests": 0}, "at least 1"),
])
def test_bad_thresholds_named(overrides: dict, message: str) -> None:
    with pytest.raises(g.GuardError, match=message):
        g.thresholds(overrides)


def test_thresholds_override_and_defaults() -> None:
    limits = g.thresholds({"max_ttft_ratio": 3, "latency_quantiles": [0.99]})
    assert limits["max_ttft_ratio"] == 3 and limits["latency_quantiles"] == [0.99]
    assert limits["min_requests"] == g.DEFAULTS["min_requests"]


def test_binomial_tail() -> None:
    assert g.binomial_tail(0, 10, 0.3) == 1.0
    assert g.binomial_tail(3, 3, 0.5) == pytest.approx(0.125)
    assert g.binomial_tail(2, 4, 0.5) == pytest.approx(11 / 16)
    assert g.binomial_tail(500, 1000, 0.1) < 1e-100


def test_baseline_beyond_the_last_bucket_is_not_compared() -> None:
    hist = g.Histogram([0.1, float("inf")], [0, 100], 100, 1000.0)
    fast = g.Histogram([0.1, float("inf")], [100, 0], 100, 1.0)

    def w(h: g.Histogram) -> dict:
        return {"restarted": False, "seconds": 60.0, "responses": 100, "finished": 100, "client_errors": 0,
                "server_errors": 0, "aborted": 0, "generation_tokens": 1000, "spec": False, "verify_calls": 0,
                "running_mean": 1.0, "histograms": {"ttft": h, "itl": fast}}
    checks = by_name(g.decide([w(hist)], [w(hist)], {"latency_quantiles": [0.5]}))
    assert checks["ttft_p50"]["verdict"] == g.INCONCLUSIVE and checks["ttft_p50"]["baseline"] == "> 0.1"


ROUTER_T0 = """# TYPE smg_worker_cb_outcomes_total counter
smg_worker_cb_outcomes_total{worker="http://10.0.0.1:30000",outcome="success"} 100
smg_worker_cb_outcomes_total{worker="http://10.0.0.2:30000",outcome="success"} 100
smg_worker_cb_outcomes_total{worker="http://10.0.0.3:30000",outcome="success"} 100
"""


def router_end(canary_failures: int) -> str:
    return (ROUTER_T0.replace("} 100", "} 200")
            + f'smg_worker_cb_outcomes_total{{worker="http://10.0.0.1:30000",outcome="failure"}} {canary_failures}\n')


def test_router_failures_of_the_canary_fail_even_when_its_server_saw_none() -> None:
    """Refused connections never reach the server's /metrics; the router's breaker counts them."""
    dense = text("dense")
    outcomes = g.router_outcomes(ROUTER_T0, router_end(30), ["http://10.0.0.1:30000"],
                                 ["http://10.0.0.2:30000", "http://10.0.0.3:30000"])
    assert outcomes["canary"]["requests"] == 130 and outcomes["canary"]["errors"] == 30
    assert outcomes["baseline"]["requests"] == 200 and outcomes["baseline"]["errors"] == 0
    result = g.decide([window(dense)], [window(dense)], router=outcomes)
    assert result["decision"] == g.FAIL and by_name(result)["router_error_rate"]["verdict"] == g.FAIL
    quiet = g.router_outcomes(ROUTER_T0, router_end(0), ["http://10.0.0.1:30000"], ["http://10.0.0.2:30000"])
    assert g.decide([window(dense)], [window(dense)], router=quiet)["decision"] == g.PASS


def test_router_restart_counts_from_the_restart() -> None:
    outcomes = g.router_outcomes(router_end(0), ROUTER_T0, ["http://10.0.0.1:30000"], ["http://10.0.0.2:30000"])
    assert outcomes["canary"]["requests"] == 100


def test_every_check_a_verdict_lists_is_a_row_of_the_checks_table() -> None:
    """The verdict's checks, in order, are CHECKS' rows (the table docs/fleet.md is written from),
    the router's only with the router's outcomes; every threshold key has its row."""
    w = g.instance_window(text("hybrid-after-sweep-real"), text("hybrid-after-sweep-warm"), 120.0, running_mean=8)
    # as a PD prefill's window (its KV hand-overs too): every row is listed
    kv = g.instance_window(_kv_scrape(0, []), _kv_scrape(60, [3.0] * 60), 60.0)["kv_transfer"]
    w = dict(w, pd=True, pd_failed=0.0, kv_transfer=kv)
    router = {"canary": {"requests": 100, "errors": 0, "error_rate": 0.0},
              "baseline": {"requests": 100, "errors": 0, "error_rate": 0.0}}
    names = [c["check"] for c in g.decide([w], [w], router=router)["checks"]]
    rows = [row.reports for row in g.CHECKS]
    assert [next(i for i, row in enumerate(rows) if f"`{name}`" in row) for name in names] == sorted(
        next(i for i, row in enumerate(rows) if f"`{name}`" in row) for name in names)
    assert {next(i for i, row in enumerate(rows) if f"`{name}`" in row) for name in names} == set(range(len(rows)))
    assert "router_error_rate" not in [c["check"] for c in g.decide([w], [w])["checks"]]
    assert set(g.DEFAULTS) == set(g.THRESHOLDS) and g.thresholds() == g.DEFAULTS


def test_a_pd_canary_whose_requests_fail_to_bootstrap_fails_the_guard() -> None:
    """sglang_pd: the canary's bootstrap and transfer failures (sglang:num_bootstrap_failed_reqs_total,
    num_transfer_failed_reqs_total) against the baseline's, as error_rate's test; a unified side has
    no such check."""
    def scrape(requests: int, failed: int) -> str:
        return pd_metrics(requests=requests, bootstrap_failed=failed)
    canary = g.instance_window(scrape(0, 0), scrape(200, 40), 120.0, running_mean=4)
    baseline = g.instance_window(scrape(0, 0), scrape(200, 0), 120.0, running_mean=4)
    verdict = g.decide([canary], [baseline])
    (pd,) = [c for c in verdict["checks"] if c["check"] == "pd_failure_rate"]
    assert pd["verdict"] == g.FAIL and pd["canary"] == 0.2 and pd["baseline"] == 0.0
    assert verdict["decision"] == g.FAIL and "pd_failure_rate" in verdict["reason"]
    unified = g.instance_window(text("hybrid-after-sweep-real"), text("hybrid-after-sweep-warm"), 120.0, running_mean=8)
    assert "pd_failure_rate" not in [c["check"] for c in g.decide([unified], [unified])["checks"]]


def _kv_scrape(requests: int, latencies_ms: list[float]) -> str:
    return pd_metrics(requests=requests, latencies_ms=latencies_ms)


def test_a_pd_canary_whose_kv_transfers_slowed_fails_the_guard() -> None:
    """The KV hand-over's latency (sglang:kv_transfer_latency_ms, the prefill side's), compared as TTFT
    is: a canary whose transfers take 4x the baseline's fails; within the ratio it passes; a side that
    handed no KV over (decode instances) has no such check."""
    start = _kv_scrape(0, [])
    baseline = g.instance_window(start, _kv_scrape(100, [8.0] * 100), 60.0, running_mean=4)
    slow = g.instance_window(start, _kv_scrape(100, [30.0] * 100), 60.0, running_mean=4)
    same = g.instance_window(start, _kv_scrape(100, [9.0] * 100), 60.0, running_mean=4)
    verdict = g.decide([slow], [baseline])
    checks = {c["check"]: c for c in verdict["checks"]}
    assert checks["kv_transfer_mean"]["verdict"] == g.FAIL and checks["kv_transfer_mean"]["canary"] == 0.03
    assert checks["kv_transfer_p50"]["verdict"] == g.FAIL and "kv_transfer" in verdict["reason"]
    assert {c["check"]: c["verdict"] for c in g.decide([same], [baseline])["checks"]
            if c["check"].startswith("kv_transfer")} == {"kv_transfer_p50": g.PASS, "kv_transfer_p90": g.PASS,
                                                         "kv_transfer_mean": g.PASS}
    decode = g.instance_window(start, _kv_scrape(100, []), 60.0, running_mean=4)
    assert not [c for c in g.decide([decode], [decode])["checks"] if c["check"].startswith("kv_transfer")]
    assert g.thresholds({"max_kv_transfer_ratio": 5})["max_kv_transfer_ratio"] == 5
    assert g.decide([slow], [baseline], {"max_kv_transfer_ratio": 5})["decision"] != g.FAIL
