"""The rollout guard's wiring: the window measured on the router's host (module_utils/
_rollout/window.py, with a fake HTTP getter and clock), the sides picked from hostvars, the
verdict on real SGLang 0.5.17 texts (plugin_utils/_canary.py), and what a rollback restores."""
from __future__ import annotations

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._rollout import window as rw
from ansible_collections.llmops.sglang.plugins.plugin_utils import _canary as c
from ansible_collections.llmops.sglang.plugins.plugin_utils import _guard as g

from .test_guard import scale, text, with_errors


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_window_reads_both_ends_and_samples_running_in_between() -> None:
    clock = FakeClock()
    served: dict[str, list[str]] = {}
    bodies = {"http://a:1/metrics": ["sglang:num_running_reqs 2\n", "sglang:num_running_reqs 4\n"],
              "http://b:1/metrics": []}

    def getter(url: str, timeout: float, key: str | None) -> tuple[int, bytes]:
        served.setdefault(url, []).append(str(clock.now))
        if url.startswith("http://b"):
            return 0, b""
        texts = bodies[url]
        return 200, (texts[min(len(served[url]) - 1, len(texts) - 1)] if texts else "").encode()

    out = rw.measure(["http://a:1/", "http://b:1"], 3.0, interval=1.0, getter=getter, clock=clock, sleep=clock.sleep)
    assert out["seconds"] == pytest.approx(3.0)
    a, b = out["instances"]["http://a:1"], out["instances"]["http://b:1"]
    assert a["start"] == "sglang:num_running_reqs 2\n" and a["end"] == "sglang:num_running_reqs 4\n"
    assert a["running_samples"] == 2 and a["running_mean"] == pytest.approx(4.0)  # samples at t=1 and t=2
    assert len(served["http://a:1/metrics"]) == 4  # start, two samples, end
    assert b["end"] is None and b["error"] == "no answer"
    assert out["router"] is None


def _hostvars() -> dict:
    def inst(name: str, host_ip: str, port: int) -> dict:
        return {"name": name, "rank0": True, "connect_url": f"http://127.0.0.1:{port}",
                "advertise_url": f"http://{host_ip}:{port}"}

    return {
        "s1": {"__sglang_plan": {"running": ["gpu0", "gpu1"], "instances": [inst("gpu0", "10.0.0.1", 30000),
                                                                            inst("gpu1", "10.0.0.1", 30001)]},
               "__sglang_services": {}},
        "s2": {"__sglang_plan": {"running": ["gpu0", "gpu1"], "instances": [inst("gpu0", "10.0.0.2", 30000),
                                                                            inst("gpu1", "10.0.0.2", 30001)]},
               "__sglang_services": {"gpu0": {"started": True, "pid": 5}, "gpu1": {"started": False, "pid": 6}}},
        "s3": {},  # left out of this run: not used
    }


def test_sides_compare_the_batch_with_what_this_run_did_not_restart() -> None:
    picked = c.sides(_hostvars(), ["s1", "s2", "s3"], "s1", ["gpu0"], "router")
    assert picked["canary"] == ["http://10.0.0.1:30000"]
    assert picked["baseline"] == ["http://10.0.0.1:30001", "http://10.0.0.2:30001"]
    assert picked["excluded"] == ["http://10.0.0.2:30000"]
    assert picked["baseline_kind"] == "old configuration"


def test_sides_fall_back_to_earlier_batches_when_nothing_old_is_left() -> None:
    hv = _hostvars()
    hv["s2"]["__sglang_services"]["gpu1"]["started"] = True
    hv["s1"]["__sglang_services"] = {"gpu1": {"started": True}}
    picked = c.sides(hv, ["s1", "s2"], "s1", ["gpu0"], "s1")
    assert picked["canary"] == ["http://127.0.0.1:30000"]  # the router's own host: connect_url
    assert picked["baseline_kind"].startswith("replaced by earlier batches")
    assert len(picked["baseline"]) == 3


def test_sides_refuse_a_batch_the_router_cannot_reach() -> None:
    with pytest.raises(g.GuardError, match="nothing to watch"):
        c.sides(_hostvars(), ["s1"], "s1", ["gpu7"], "router")


def _window(canary_end: str, base_end: str, seconds: float = 60.0) -> dict:
    return {"seconds": seconds, "router": None, "instances": {
        "http://c:1": {"start": scale(canary_end, 0.5), "end": canary_end, "running_mean": 4.0, "error": None},
        "http://b:1": {"start": scale(base_end, 0.5), "end": base_end, "running_mean": 4.0, "error": None}}}


PICKED = {"canary": ["http://c:1"], "baseline": ["http://b:1"], "baseline_kind": "old configuration", "excluded": []}


def test_judge_passes_the_same_configuration_and_rolls_back_errors() -> None:
    dense = text("dense")
    good = c.judge(_window(dense, dense), PICKED, {})
    assert good["decision"] == g.PASS and not good["rollback"]
    assert good["lines"][0].startswith("guard: PASS over 60 s")
    bad = c.judge(_window(with_errors(dense, 40), dense), PICKED, {})
    assert bad["decision"] == g.FAIL and bad["rollback"]
    assert any("error_rate" in line and "fail" in line for line in bad["lines"])


def test_judge_inconclusive_follows_the_setting() -> None:
    """Issue 28 item 1: an undecided window rolls back by default (a canary asked for is not
    rolled out unjudged), and the stop names the numbers and the settings that would decide it;
    proceed is for those who choose it."""
    dense = text("dense")
    little = {"min_requests": 10_000}
    verdict = c.judge(_window(dense, dense), PICKED, little)
    assert verdict["decision"] == g.INCONCLUSIVE and verdict["rollback"] and verdict["on_inconclusive"] == "rollback"
    stop = c.stop_lines({**verdict, "probe": {"rate": 0.2}}, "server1", ["gpu0"])
    assert stop[0].startswith("The rollout guard rolled back gpu0 of server1 (inconclusive): too little traffic")
    assert "probe 0.2 req/s to each instance" in stop[1] and "sglang_rollout_guard_probe_rate" in stop[1]
    assert "sglang_rollout_canary_seconds" in stop[1] and "sglang_rollout_guard_on_inconclusive: proceed" in stop[1]
    assert not c.judge(_window(dense, dense), PICKED, little, on_inconclusive="proceed")["rollback"]
    with pytest.raises(g.GuardError, match="proceed or rollback"):
        c.judge(_window(dense, dense), PICKED, {}, on_inconclusive="maybe")


def test_the_probe_gives_each_watched_instance_enough_to_decide_by_default() -> None:
    """Issue 28 item 1: behind sglang-router's default cache_aware policy a re-added canary got 1
    request in its 300 s window. auto: each instance alone reaches min_requests in the window."""
    assert c.probe_rate("auto", {}, 300) == pytest.approx(1.2 * 50 / 300)  # 0.2 req/s at the defaults
    assert c.probe_rate("auto", {"min_requests": 10}, 20) == pytest.approx(0.6)
    assert c.probe_rate(None, {}, 300) == c.probe_rate("AUTO", {}, 300)
    assert c.probe_rate("auto", {}, 0) == 0.0
    assert c.probe_rate(0, {}, 300) == 0.0 and c.probe_rate("2.5", {}, 300) == 2.5
    for bad in ("fast", -1):
        with pytest.raises(g.GuardError, match="sglang_rollout_guard_probe_rate"):
            c.probe_rate(bad, {}, 300)


def test_a_canary_without_metrics_fails() -> None:
    window = _window(text("dense"), text("dense"))
    window["instances"]["http://c:1"] = {"start": None, "end": None, "error": "no answer"}
    verdict = c.judge(window, PICKED, {})
    assert verdict["decision"] == g.FAIL and "no canary instance answered" in verdict["reason"]


def test_restore_keeps_what_earlier_batches_replaced() -> None:
    services = {"gpu0": {"started": True}, "gpu1": {"started": False}}
    assert c.to_restore(["gpu0", "gpu1", "gpu2"], services, ["gpu2"]) == ["gpu1", "gpu2"]
    assert c.to_restore(["gpu0", "gpu1"], {}, ["gpu0"]) == ["gpu0", "gpu1"]


def test_stop_lines_name_the_batch_the_reason_and_the_files_put_back_without_a_restart() -> None:
    bad = c.judge(_window(with_errors(text("dense"), 40), text("dense")), PICKED, {})
    bad["restore"] = ["gpu0", "gpu1"]
    stop = c.stop_lines(bad, "server1", ["gpu0"])
    assert stop[0].startswith("The rollout guard rolled back gpu0 of server1 (fail): ") and bad["reason"] in stop[0]
    assert stop[1:] == ["files put back for gpu1 (still running the previous configuration)"]
    bad["restore"] = ["gpu0"]
    assert len(c.stop_lines(bad, "server1", ["gpu0"])) == 1


def test_probe_sends_its_own_prompts_to_every_instance_alike_and_stops_with_the_window() -> None:
    seen: list[tuple[str, str]] = []

    def post(url: str, prompt: str, max_tokens: int, timeout: float, key: str | None) -> str:
        seen.append((url, prompt))
        return "HTTP 500" if url.endswith("b") else ""

    probe = rw.Probe(["http://a", "http://b"], rate=200.0, seconds=0.05, post=post).start()
    results = probe.stop()  # stopped at once: whatever was sent is counted, nothing after
    sent = {u: r["sent"] for u, r in results.items()}
    assert sum(sent.values()) == len(seen) <= 2 * 10  # bounded: rate x seconds per instance
    assert results["http://b"]["failed"] == results["http://b"]["sent"]
    assert len({prompt for _, prompt in seen}) == len(seen)  # no two requests share a prompt
    finished = rw.Probe(["http://a"], rate=100.0, seconds=0.03, post=post).start()
    for thread in finished._threads:
        thread.join(timeout=5)
    assert finished.stop()["http://a"]["sent"] == 3


def test_judge_states_the_probe_load() -> None:
    window = _window(text("dense"), text("dense"))
    window["probe"] = {"rate": 2.0, "instances": {"http://c:1": {"sent": 40, "failed": 0, "errors": []},
                                                  "http://b:1": {"sent": 40, "failed": 0, "errors": []}}}
    verdict = c.judge(window, PICKED, {})
    assert any(line.startswith("  probe load: 2 req/s to each instance, 80 sent, 0 failed") for line in verdict["lines"])
