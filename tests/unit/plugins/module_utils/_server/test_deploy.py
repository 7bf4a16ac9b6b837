"""Readiness, manifest and status helpers of the server role."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server import deploy as _deploy
from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout
from ansible_collections.llmops.sglang.plugins.module_utils._server import manifest as _manifest


class FakeServer:
    """Answers 503 a given number of times, then 200 (per URL)."""

    def __init__(self, not_ready_polls: dict[str, int]) -> None:
        self.left = dict(not_ready_polls)
        self.calls: list[str] = []

    def __call__(self, url: str, timeout: float, api_key: str | None) -> tuple[int, bytes]:
        self.calls.append(url)
        key = url.split("/health_generate")[0]
        if self.left.get(key, 0) > 0:
            self.left[key] -= 1
            return 503, b""
        if self.left.get(key) == -1:
            return 0, b""
        return 200, b""


def test_wait_for_ready_parallel_and_timeout(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(f"line {i}" for i in range(100)) + "\n")
    fake = FakeServer({"http://a:1": 3, "http://b:2": 0, "http://c:3": -1})
    results = _deploy.wait_for_ready(
        [
            {"name": "a", "url": "http://a:1", "timeout": 5},
            {"name": "b", "url": "http://b:2", "timeout": 5},
            {"name": "c", "url": "http://c:3", "timeout": 0.05, "log_file": str(log)},
        ],
        interval=0.01,
        getter=fake,
        tail_lines=50,
    )
    assert results["a"]["ready"] and results["b"]["ready"]
    assert results["a"]["ready_at"].endswith("Z")
    assert not results["c"]["ready"]
    assert "within 0.05 s" in results["c"]["reason"]
    tail = results["c"]["log_tail"].splitlines()
    assert len(tail) == 50 and tail[-1] == "line 99"
    assert all(u.endswith("/health_generate") for u in fake.calls)


def test_wait_for_ready_polls_the_given_endpoint() -> None:
    """The router role waits through the same loop for a router's /health and /readiness."""
    seen: list[str] = []

    def router(url: str, timeout: float, api_key: str | None) -> tuple[int, bytes]:
        seen.append(url)
        return (200 if len(seen) > 2 else 503), b""

    results = _deploy.wait_for_ready([{"name": "router", "url": "http://r:8000/", "path": "readiness", "timeout": 5}],
                                     interval=0.01, getter=router)
    assert results["router"]["ready"] and seen == ["http://r:8000/readiness"] * 3
    fake = FakeServer({})
    assert _deploy.wait_for_ready([{"name": "a", "url": "http://a:1"}], getter=fake)["a"]["ready"]
    assert fake.calls == ["http://a:1/health_generate"]


def test_wait_for_ready_fails_fast_when_the_process_died(tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    pid_file = tmp_path / "server.pid"
    pid_file.write_text(f"{proc.pid}\n")
    fake = FakeServer({"http://d:4": 10_000})
    start = time.monotonic()
    results = _deploy.wait_for_ready(
        [{"name": "d", "url": "http://d:4", "timeout": 60, "pid_file": str(pid_file)}],
        interval=0.01, getter=fake,
    )
    assert not results["d"]["ready"]
    assert "exited" in results["d"]["reason"]
    assert time.monotonic() - start < 45  # seen exiting, not waited for until the 60 s timeout


def test_pid_alive_reads_detached_service_pid_files(tmp_path) -> None:
    from ansible_collections.llmops.sglang.plugins.module_utils import _detached

    me = _detached.read_stat(os.getpid())
    assert me is not None
    plain = tmp_path / "a.pid"
    plain.write_text(f"{os.getpid()}\n")
    good = tmp_path / "b.pid"
    good.write_text(_detached.PidRecord(pid=me.pid, pgid=me.pgid, starttime=me.starttime).to_text())
    recycled = tmp_path / "c.pid"  # same pid, another start time: another process
    recycled.write_text(_detached.PidRecord(pid=me.pid, pgid=me.pgid, starttime=me.starttime + 1).to_text())
    assert _deploy.pid_alive(str(plain)) is True
    assert _deploy.pid_alive(str(good)) is True
    assert _deploy.pid_alive(str(recycled)) is False
    assert _deploy.pid_alive(str(tmp_path / "missing.pid")) is None
    bad = tmp_path / "c.pid"
    bad.write_text("not a pid")
    assert _deploy.pid_alive(str(bad)) is False


def _plan_instance(name: str, gpu: int, port: int, base: str = "/b", bind: str = "127.0.0.1") -> dict:
    return {"name": name, "gpu_ids": [gpu], "port": port, "argv": ["--model-path", "/m"],
            "connect_url": _layout.connect_url(bind, port), "advertise_url": None,
            "paths": _layout.instance_paths(base, name), "unit": _layout.unit_name(name),
            "service": _layout.service_name(name)}


PLAN = {
    "release": "0.5.23",
    "profile": "mtp_hicache",
    "host_address": "127.0.0.1",
    "base_dir": "/b",
    "hicache": {"size_gb": 20, "pinned_per_instance_bytes": 23_600_000_000, "pin_seconds_estimate": 30},
    "instances": [_plan_instance("gpu0", 0, 30000), _plan_instance("gpu1", 1, 30001)],
}


def test_manifest_keeps_ready_time_of_instances_that_kept_running() -> None:
    first = _manifest.build(
        host="h", plan=PLAN, engine="sim", service_manager="process",
        services={"gpu0": {"pid": 10, "started": True}, "gpu1": {"pid": 11, "started": True}},
        ready={"gpu0": {"ready_at": "T0", "waited_s": 1.0, "warmup_s": 0.4}, "gpu1": {"ready_at": "T0", "waited_s": 2.0}},
        python="/venv/bin/python",
    )
    assert first["schema_version"] == 2 and first["base_dir"] == "/b"
    assert first["instances"][0]["connect_url"] == "http://127.0.0.1:30000"
    assert first["instances"][1]["paths"]["launch_script"] == "/b/gpu1/launch.sh"
    assert first["instances"][1]["unit"] is None and first["instances"][1]["service"] == "sglang-gpu1"
    assert first["python"] == "/venv/bin/python"
    # re-run: gpu0 unchanged (ready polled again at T1), gpu1 restarted
    second = _manifest.build(
        host="h", plan=PLAN, engine="sim", service_manager="process",
        services={"gpu0": {"pid": 10, "started": False}, "gpu1": {"pid": 12, "started": True}},
        ready={"gpu0": {"ready_at": "T1", "waited_s": 0.0}, "gpu1": {"ready_at": "T1", "waited_s": 3.0}},
        previous=first, python="/venv/bin/python",
    )
    assert second["instances"][0]["ready_at"] == "T0"
    assert second["instances"][0]["ready_after_s"] == 1.0
    assert first["instances"][0]["warmup_s"] == 0.4 and second["instances"][0]["warmup_s"] == 0.4  # kept with it
    assert second["instances"][1]["ready_at"] == "T1"
    assert second["instances"][1]["pid"] == 12
    systemd = _manifest.build(host="h", plan=PLAN, engine="sglang", service_manager="systemd",
                              services={}, ready={})
    assert systemd["instances"][0]["unit"] == "sglang@gpu0.service"


def test_systemd_unit_failure_is_seen_while_waiting() -> None:
    states = iter([
        {"ActiveState": "activating", "SubState": "start", "NRestarts": "0"},  # before the wait
        {"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "1", "ExecMainStatus": "1"},
    ])

    def getter(url: str, timeout: float, key: str | None) -> tuple[int, bytes]:
        return 503, b""

    res = _deploy.wait_for_ready([{"name": "gpu0", "url": "http://x:1", "timeout": 60, "unit": "sglang@gpu0.service"}],
                                 getter=getter, sleep=lambda _s: None, unit_reader=lambda _u: next(states))
    assert not res["gpu0"]["ready"] and "systemd restarts it" in res["gpu0"]["reason"]
    assert _deploy.unit_failed({"ActiveState": "failed", "ExecMainStatus": "2"}, 0).startswith("its unit failed")
    assert _deploy.unit_failed({"ActiveState": "active", "SubState": "running", "NRestarts": "2"}, 2) == ""
    assert _deploy.unit_failed({}, 0) == ""
    shown = "ActiveState=active\nSubState=running\nNRestarts=0\nExecMainStatus=0\n"
    assert _deploy.unit_state("u", runner=lambda argv: shown) == {
        "ActiveState": "active", "SubState": "running", "NRestarts": "0", "ExecMainStatus": "0"}


def test_process_state_from_ownership_and_pid_files(tmp_path) -> None:
    inst = {"name": "gpu0", "paths": {"pid_file": str(tmp_path / "server.pid")}}
    assert _deploy.process_state(inst, [42]) == "running"  # systemd: processes in its unit
    assert _deploy.process_state(inst, []) == "stopped"
    assert _deploy.process_state(inst, None) == "unknown"
    (tmp_path / "server.pid").write_text("999999999\n")
    assert _deploy.process_state(inst, []) == "dead"


def test_reclaim_pinned_adds_back_only_running_instances() -> None:
    facts = {"memory": {"available_bytes": 100, "effective_available_bytes": 90}, "gpus": []}
    previous = {"hicache": {"pinned_per_instance_bytes": 7},
                "instances": [{"name": "gpu0"}, {"name": "gpu1"}]}
    out = _manifest.reclaim_pinned(facts, previous, ["gpu1", "other"])
    assert out["memory"]["available_bytes"] == 107
    assert out["memory"]["effective_available_bytes"] == 97
    assert out["memory"]["reclaimed_pinned_bytes"] == 7
    assert facts["memory"]["available_bytes"] == 100  # not mutated
    assert _manifest.reclaim_pinned(facts, {}, [])["memory"]["reclaimed_pinned_bytes"] == 0
    sim = dict(previous, engine="sim")
    assert _manifest.reclaim_pinned(facts, sim, ["gpu1"])["memory"]["reclaimed_pinned_bytes"] == 0


def test_manifest_keeps_the_hicache_arithmetic_while_servers_keep_running() -> None:
    plan1 = dict(PLAN, hicache={"size_gb": 20, "available_bytes": 1, "pinned_per_instance_bytes": 5})
    first = _manifest.build(host="h", plan=plan1, engine="sim", service_manager="process",
                            services={"gpu0": {"started": True}}, ready={})
    plan2 = dict(PLAN, hicache={"size_gb": 20, "available_bytes": 2, "pinned_per_instance_bytes": 5})
    second = _manifest.build(host="h", plan=plan2, engine="sim", service_manager="process",
                             services={}, ready={}, previous=first)
    assert second["hicache"]["available_bytes"] == 1
    third = _manifest.build(host="h", plan=plan2, engine="sim", service_manager="process",
                            services={"gpu1": {"started": True}}, ready={}, previous=first)
    assert third["hicache"]["available_bytes"] == 2


def test_manifest_keeps_the_storage_arithmetic_while_servers_keep_running_with_the_same_caps() -> None:
    tier = {"root": "/kv", "instances": {"gpu0": {"cap_bytes": 5}, "gpu1": {"cap_bytes": 5}}, "reasoning": ["free 1"]}
    first = _manifest.build(host="h", plan=dict(PLAN, hicache_storage=tier), engine="sim", service_manager="process",
                            services={"gpu0": {"started": True}}, ready={})
    assert first["hicache_storage"] == tier
    moved = dict(tier, reasoning=["free 2"])  # free space moved, the same caps: the first arithmetic stays
    assert _manifest.build(host="h", plan=dict(PLAN, hicache_storage=moved), engine="sim", service_manager="process",
                           services={}, ready={}, previous=first)["hicache_storage"] == tier
    resized = dict(tier, instances={"gpu0": {"cap_bytes": 4}, "gpu1": {"cap_bytes": 4}})
    assert _manifest.build(host="h", plan=dict(PLAN, hicache_storage=resized), engine="sim",
                           service_manager="process", services={}, ready={}, previous=first)["hicache_storage"] == resized
    # what a re-plan keeps: the caps of the instances that still run
    assert _manifest.running_storage(first, ["gpu1"]) == {"root": "/kv", "caps": {"gpu1": 5}}
    assert _manifest.running_storage(first, []) is None and _manifest.running_storage({}, ["gpu0"]) is None
    facts = {"memory": {"available_bytes": 100}, "gpus": []}
    assert _manifest.reclaim_pinned(facts, first, ["gpu0"])["hicache_storage_running"]["caps"] == {"gpu0": 5}


def test_status_and_sweep_read_the_same_limit_from_server_info(fixtures_dir) -> None:
    """One reader of /server_info (_serverinfo): status reports the limit the scheduler applies,
    as the sweep's snapshots do, from the recorded real 0.5.17 answer."""
    from ansible_collections.llmops.sglang.plugins.module_utils import _sweep
    from ansible_collections.llmops.sglang.plugins.module_utils._server import info as _serverinfo

    text = (fixtures_dir / "sglang-0.5.17-h200" / "hybrid" / "ep_server_info.txt").read_text()
    body = text[text.index("{"):].encode()

    def getter(url: str, timeout: float, key: str | None) -> tuple[int, bytes]:
        return 200, (b"" if url.endswith("/health") else body)

    status = _deploy.instance_status({"name": "gpu0", "connect_url": "http://x:1"}, getter=getter)
    info = json.loads(body)
    assert status["max_running_requests"] == _sweep.server_summary(info)["max_running_requests"] == 16
    assert status["version"] == _serverinfo.summarize(info)["version"] == "0.5.17"
    info["internal_states"][0]["effective_max_running_requests_per_dp"] = 9  # a clamp the scheduler applied
    assert _serverinfo.effective_max_running_requests(info) == 9


def test_in_flight_from_recorded_metrics_and_waiting_for_idle(fixtures_dir) -> None:
    text = (fixtures_dir / "sglang-0.5.17-h200" / "hybrid" / "metrics.txt").read_text()
    assert _deploy.in_flight(text) == 0.0  # the recorded server after its sweep: nothing running
    line = next(x for x in text.splitlines() if x.startswith("sglang:num_running_reqs{"))
    busy = text.replace(line, line.rsplit(" ", 1)[0] + " 3.0")
    assert _deploy.in_flight(busy) == 3.0
    assert _deploy.in_flight("no gauges here") is None
    answers = {"a": [busy, busy, text], "b": [busy] * 100}
    now = {"t": 0.0}

    def getter(url: str, timeout: float, key: str | None) -> tuple[int, bytes]:
        name = url.split("//")[1].split(":")[0]
        if name == "c":
            return 404, b"Not Found"
        return 200, answers[name].pop(0).encode()

    def sleep(seconds: float) -> None:
        now["t"] += seconds

    res = _deploy.wait_for_idle([{"name": "a", "url": "http://a:1"}, {"name": "b", "url": "http://b:1"},
                                 {"name": "c", "url": "http://c:1"}], timeout=5, grace=2, interval=1,
                                getter=getter, clock=lambda: now["t"], sleep=sleep)
    assert res["a"] == {"idle": True, "waited_s": 2.0, "in_flight": 0.0, "how": "metrics"}
    assert res["b"]["idle"] is False and res["b"]["in_flight"] == 3.0 and res["b"]["waited_s"] >= 5
    assert res["c"]["how"] == "grace" and res["c"]["idle"]


def test_status_line_and_instance_status() -> None:
    info = json.dumps({"version": "0.5.17", "max_running_requests": 16,
                       "internal_states": [{"avg_spec_accept_length": 1.0, "last_gen_throughput": 5.0}]}).encode()

    def getter(url: str, timeout: float, key: str | None) -> tuple[int, bytes]:
        if url.endswith("/health"):
            return 200, b""
        if url.endswith("/server_info"):
            return 404, b""
        return 200, info

    st = _deploy.instance_status({"name": "gpu0", "connect_url": "http://x:1"}, getter=getter)
    assert st["up"] and st["version"] == "0.5.17" and st["max_running_requests"] == 16
    assert st["server_info_path"] == "/get_server_info"
    line = _deploy.status_line(st)
    assert line.startswith("gpu0: up http://x:1") and "max_running_requests=16" in line
    assert "NOT IN THE MANIFEST" not in line
    assert "NOT IN THE MANIFEST (left by an interrupted deploy" in _deploy.status_line(dict(st, in_manifest=False))
    assert _deploy.status_lines(True, [st], "held by run 12", "manifest rebuilt") == ["held by run 12", "manifest rebuilt", line]
    assert _deploy.status_lines(False, [], "held by run 12") == ["held by run 12", "no deployment on this host"]


def test_ready_means_a_sampled_warm_up_request_answered_too() -> None:
    """Issue 28 item 5: on SGLang 0.5.17 the first sampled request after /health_generate took
    100-140 s on an H200. With a warm-up, readiness is after one such request answered, and the
    result says how long it took; one that fails (or never answers) is named."""
    posted: list[tuple[str, Any, float]] = []
    ticks = iter(float(i) for i in range(1000))

    def poster(url: str, body: Any, timeout: float, api_key: str | None) -> tuple[int, bytes]:
        posted.append((url, body, timeout))
        return (200 if "good" in url else 0), b""

    warmup = {"path": "/generate", "body": {"text": "w", "sampling_params": {"temperature": 0.6, "top_p": 0.95}},
              "timeout": 300}
    results = _deploy.wait_for_ready([{"name": "a", "url": "http://good:1"}, {"name": "b", "url": "http://bad:2"}],
                                     getter=FakeServer({}), poster=poster, warmup=warmup, clock=lambda: next(ticks))
    assert results["a"]["ready"] and results["a"]["warmup_s"] is not None and results["a"]["reason"] == ""
    assert sorted(url for url, _, _ in posted) == ["http://bad:2/generate", "http://good:1/generate"]
    assert all(body == warmup["body"] and timeout == 300 for _, body, timeout in posted)
    bad = results["b"]
    assert not bad["ready"] and bad["ready_at"] is None
    assert bad["reason"] == ("/health_generate answered, but its warm-up request (POST /generate, "
                             "sglang_ready_warmup) failed: no answer within 300 s")
    # without a warm-up nothing is posted
    posted.clear()
    assert _deploy.wait_for_ready([{"name": "a", "url": "http://good:1"}], getter=FakeServer({}), poster=poster)["a"]["ready"]
    assert posted == []


def test_an_instance_with_a_storage_tier_is_ready_only_once_its_prime_answered() -> None:
    """Issue 30: SGLang 0.5.17 compiles the storage tier's page-hash extension at the first prefill
    that reaches the tier. The prime (the plan's hicache_storage.prime) goes after the warm-up, its
    time counted in warmup_s; a server that dies on it (no compiler or headers) is not ready, and
    the reason says what the request was for."""
    posted: list[str] = []
    ticks = iter(float(i) for i in range(1000))
    prime = {"path": "/generate", "body": {"text": "many pages"}, "timeout": 900}

    def poster(url: str, body: Any, timeout: float, api_key: str | None) -> tuple[int, bytes]:
        posted.append(f"{url} {body.get('text')} {timeout:g}")
        return (500 if "bad" in url and body is prime["body"] else 200), b""

    warmup = {"path": "/generate", "body": {"text": "w"}, "timeout": 300}
    results = _deploy.wait_for_ready([{"name": "a", "url": "http://good:1", "prime": prime},
                                      {"name": "b", "url": "http://bad:2", "prime": prime},
                                      {"name": "c", "url": "http://good:3"}],
                                     getter=FakeServer({}), poster=poster, warmup=warmup, clock=lambda: next(ticks))
    assert results["a"]["ready"] and results["c"]["ready"]
    assert [p for p in posted if p.startswith("http://good:1")] == ["http://good:1/generate w 300",
                                                                    "http://good:1/generate many pages 900"]
    assert [p for p in posted if p.startswith("http://good:3")] == ["http://good:3/generate w 300"]  # no tier
    bad = results["b"]
    assert not bad["ready"] and bad["ready_at"] is None
    assert bad["reason"].startswith("/health_generate answered, but its storage tier's first prefill (POST /generate, "
                                    "which makes SGLang compile the tier's page-hash extension")
    assert bad["reason"].endswith("failed: HTTP 500")
    # the plan's prime gives words: a greedy one-token request of that many words
    body = _deploy.prime_body(1024)
    assert len(body["text"].split()) >= 1024 and body["sampling_params"] == {"max_new_tokens": 1, "temperature": 0}
    assert _deploy.prime_body(1024) == body  # the same text, the same pages, every deploy
    sent: list[Any] = []
    _deploy.wait_for_ready([{"name": "a", "url": "http://good:1", "prime": {"path": "/generate", "words": 1024}}],
                           getter=FakeServer({}), poster=lambda u, b, t, k: (sent.append(b), (200, b""))[1])
    assert sent == [body]
    # without a warm-up the prime still goes
    posted.clear()
    assert _deploy.wait_for_ready([{"name": "a", "url": "http://good:1", "prime": prime}], getter=FakeServer({}),
                                  poster=poster)["a"]["ready"]
    assert posted == ["http://good:1/generate many pages 900"]


def test_a_prefill_is_ready_only_once_its_bootstrap_server_answers() -> None:
    """Issue 32: a prefill whose API answers but whose bootstrap server (where decodes fetch its KV)
    does not is not ready yet: the router would pair it with decodes that cannot get the KV. It is
    polled until it answers, or the instance's timeout says why."""
    ticks = iter(float(i) for i in range(1000))
    fake = FakeServer({"http://10.0.0.1:8998/health": 2, "http://10.0.0.1:8999/health": -1})
    results = _deploy.wait_for_ready(
        [{"name": "p", "url": "http://10.0.0.1:30000", "bootstrap": "http://10.0.0.1:8998/health", "timeout": 100},
         {"name": "q", "url": "http://10.0.0.1:30001", "bootstrap": "http://10.0.0.1:8999/health", "timeout": 20}],
        getter=fake, clock=lambda: next(ticks), sleep=lambda _s: None)
    assert results["p"]["ready"] and fake.calls.count("http://10.0.0.1:8998/health") == 3
    assert not results["q"]["ready"] and results["q"]["reason"] == (
        "/health_generate answered, but its bootstrap server http://10.0.0.1:8999/health did not (last status no "
        "answer): decodes could not fetch its KV")
