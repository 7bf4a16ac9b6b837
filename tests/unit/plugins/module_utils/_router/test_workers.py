"""module_utils/_router/workers.py and the router_workers module against the REAL sglang-router 0.3.2
(`.venv-router`, made by `make router`) and real workers (the embedded engine). Loopback only;
every wait is bounded; every process is killed in a finally."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._router import workers as r
from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout
from ansible_collections.llmops.sglang.plugins.plugin_utils import _routing

from .....ports import free_port

ROOT = Path(__file__).resolve().parents[5]
ROUTER_PY = ROOT / ".venv-router" / "bin" / "python"
ENGINE_MODULE = "ansible_collections.llmops.sglang.plugins.module_utils._engine"
MODEL = ROOT / "data" / "models" / "qwen3-0.6b-dense"
START_TIMEOUT = 60.0
# Fast health checks, as the role runs them for rollouts (the router's own default is 60 s).
FAST_HEALTH = ["--health-check-interval-secs", "1", "--health-failure-threshold", "2",
               "--health-success-threshold", "1"]


def _get(url: str, headers: dict[str, str] | None = None, body: Any = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    if data:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError:
        return 0, b""


class Proc:
    """A process in its own session, its output in a file, killed (whole group) in stop()."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log
        self._log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def wait_http(self, url: str, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.log()
                self.stop()
                pytest.fail(f"{self.proc.args} exited {self.proc.returncode}:\n{log[-3000:]}")
            if _get(url)[0] == 200:
                return
            time.sleep(0.1)
        log = self.log()
        self.stop()  # the caller never gets the object: nothing would stop it
        pytest.fail(f"{url} did not answer 200 within {timeout} s:\n{log[-3000:]}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self._log.closed:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        self._log.close()


class Router(Proc):
    def __init__(self, tmp: Path, *extra: str) -> None:
        if not ROUTER_PY.exists():
            pytest.fail(f"no sglang-router installation at {ROUTER_PY}: run `make router` (creates .venv-router "
                        "from requirements-router.txt)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__([str(ROUTER_PY), "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                          "--port", str(self.port), "--prometheus-host", "127.0.0.1",
                          "--prometheus-port", str(free_port()), *FAST_HEALTH, *extra, "--worker-urls"],
                         tmp / f"router-{self.port}.log")
        self.wait_http(self.url + "/health")


class Engine(Proc):
    def __init__(self, tmp: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "collections"), LLMOPS_SGLANG_RELEASE="0.5.23",
                   LLMOPS_SIM_GPUS="NVIDIA H200", CUDA_VISIBLE_DEVICES="0", LLMOPS_SIM_TIME_SCALE="0.001",
                   LLMOPS_SIM_HOST_MEM_AVAILABLE_GB="200")
        super().__init__([sys.executable, "-m", ENGINE_MODULE, "--model-path", str(MODEL), "--host", "127.0.0.1",
                          "--port", str(self.port), *extra], tmp / f"engine-{self.port}.log", env)
        self.wait_http(self.url + "/health")


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Engine]]:
    tmp = tmp_path_factory.mktemp("engines")
    started: list[Engine] = []
    try:
        for _ in range(2):
            started.append(Engine(tmp))
        yield started
    finally:
        for engine in started:
            engine.stop()


@pytest.fixture(scope="module")
def router_proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    router = None
    try:
        router = Router(tmp_path_factory.mktemp("router"))
        yield router
    finally:
        if router is not None:
            router.stop()


@pytest.fixture
def router(router_proc: Router) -> Router:
    """The module's router, emptied before each test."""
    r.reconcile(r.RouterClient(router_proc.url), [], "exact", timeout=10)
    return router_proc


def _urls(result: r.Result) -> list[str]:
    return sorted(w["url"] for w in result.workers)


# ------------------------------------------------------------------------------------------
# pure parts


@pytest.mark.parametrize(("given", "normal"), [
    ("http://10.0.0.11:30000", "http://10.0.0.11:30000"),
    ("http://10.0.0.11:30000/", "http://10.0.0.11:30000"),
    (" https://[::1]:30000// ", "https://[::1]:30000"),
])
def test_normalize_url(given: str, normal: str) -> None:
    assert r.normalize_url(given) == normal


@pytest.mark.parametrize("bad", ["10.0.0.11:30000", "ftp://h:1", "http://h:1/v1", "http://h:1/?x=1", ""])
def test_normalize_url_refuses_what_the_router_would_mangle(bad: str) -> None:
    with pytest.raises(r.RouterError, match="URL"):
        r.normalize_url(bad)


def test_changes_per_state() -> None:
    listed = ["http://a:1", "http://b:1"]
    assert r.changes(listed, ["http://b:1", "http://c:1"], "present") == (["http://c:1"], [])
    assert r.changes(listed, ["http://b:1", "http://c:1"], "absent") == ([], ["http://b:1"])
    assert r.changes(listed, ["http://b:1", "http://c:1"], "exact") == (["http://c:1"], ["http://a:1"])
    assert r.changes(listed, [], "exact") == ([], listed)
    assert r.changes(listed, listed, "exact") == ([], [])
    with pytest.raises(r.RouterError, match="state must be"):
        r.changes(listed, [], "latest")


def test_router_layout() -> None:
    layout = _layout.router_layout("/opt/sglang-router", "0.0.0.0", 8000)
    assert layout["connect_url"] == "http://127.0.0.1:8000"
    assert (layout["unit"], layout["service"]) == ("sglang-router.service", "sglang-router")
    assert layout["paths"] == {
        "dir": "/opt/sglang-router/router",
        "launch_script": "/opt/sglang-router/router/launch.sh",
        "env_file": "/opt/sglang-router/router/env",
        "pid_file": "/opt/sglang-router/router/router.pid",
        "log_file": "/opt/sglang-router/router/router.log",
    }
    assert not _layout.is_instance_name(_layout.ROUTER_DIR)  # may share the servers' base folder


def test_router_layout_advertise_url_for_other_hosts() -> None:
    """Where a sweep from the controller reaches a router on another host."""
    assert _layout.router_layout("/r", "0.0.0.0", 8000)["advertise_url"] is None  # no address given
    assert _layout.router_layout("/r", "0.0.0.0", 8000, "10.0.0.5")["advertise_url"] == "http://10.0.0.5:8000"
    assert _layout.router_layout("/r", "10.0.0.7", 8000, "10.0.0.5")["advertise_url"] == "http://10.0.0.7:8000"
    assert _layout.router_layout("/r", "127.0.0.1", 8000, "10.0.0.5")["advertise_url"] is None  # loopback only


def _instance(name: str, port: int, advertise: str | None, argv: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "connect_url": f"http://127.0.0.1:{port}", "advertise_url": advertise, "argv": argv or []}


def test_worker_urls_connect_on_the_routers_host_advertise_elsewhere_rank_0_only() -> None:
    deployments = {
        "gpu-node-01": {"instances": [_instance("gpu0", 30000, "http://10.0.0.11:30000"),
                                      _instance("gpu1", 30001, "http://10.0.0.11:30001/")]},
        "gpu-node-02": {"instances": [_instance("gpu0", 30000, "http://10.0.0.12:30000"),
                                      _instance("gpu0-r1", 30001, "http://10.0.0.12:30001",
                                                ["--tp", "16", "--node-rank", "1"])]},
        "gpu-node-03": {"instances": [dict(_instance("gpu0", 30000, "http://10.0.0.13:30000"), node_rank=1),
                                      dict(_instance("gpu1", 30001, "http://10.0.0.13:30001"), rank0=False)]},
        "empty-node": None,
    }
    assert _routing.worker_urls(deployments, "router-01") == [
        "http://10.0.0.11:30000", "http://10.0.0.11:30001", "http://10.0.0.12:30000"]
    assert _routing.worker_urls(deployments, "gpu-node-01")[:2] == ["http://127.0.0.1:30000", "http://127.0.0.1:30001"]
    assert _routing.node_rank({"argv": ["--node-rank=2"]}) == 2 and _routing.node_rank({}) == 0
    # a live instance its manifest does not list (an interrupted deploy) was never checked ready
    left = {"gpu-node-01": {"instances": [_instance("gpu0", 30000, "http://10.0.0.11:30000"),
                                          dict(_instance("gpu1", 30001, None), in_manifest=False)]}}
    assert _routing.worker_urls(left, "router-01") == ["http://10.0.0.11:30000"]


def test_worker_urls_refuse_a_partial_list() -> None:
    loopback_only = {"gpu-node-01": {"instances": [_instance("gpu0", 30000, None)]}, "gpu-node-02": _routing.NOT_READ}
    with pytest.raises(r.RouterError) as err:
        _routing.worker_urls(loopback_only, "router-01")
    msg = str(err.value)
    assert "instance gpu0 of gpu-node-01 has no advertise_url" in msg and "sglang_host_address" in msg
    assert "the deployment of gpu-node-02 was not read" in msg and "--limit" in msg
    # on the router's own host a loopback-only server is fine
    assert _routing.worker_urls({"localhost": loopback_only["gpu-node-01"]}, "localhost") == ["http://127.0.0.1:30000"]


# ------------------------------------------------------------------------------------------
# the real router


def test_a_new_router_has_no_workers_and_is_not_ready(router: Router) -> None:
    result = r.reconcile(r.RouterClient(router.url), [], "present")
    assert (result.changed, result.workers) == (False, [])
    assert _get(router.url + "/health")[0] == 200
    assert _get(router.url + "/readiness")[0] == 503
    assert _get(router.url + "/list_workers")[0] == 404  # the pre-0.3 API is gone


def test_add_wait_healthy_route_then_nothing_to_do(router: Router, engines: list[Engine]) -> None:
    client = r.RouterClient(router.url)
    urls = [e.url for e in engines]
    result = r.reconcile(client, urls, "present", wait_healthy=True, timeout=30)
    assert result.changed and result.added == urls and result.removed == []
    assert _urls(result) == sorted(urls)
    assert all(w["is_healthy"] and w["id"] and w["load"] == 0 for w in result.workers)
    assert _get(router.url + "/readiness")[0] == 200
    status, body = _get(router.url + "/v1/completions", body={"model": "m", "prompt": "hi", "max_tokens": 3})
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 3
    again = r.reconcile(client, [u + "/" for u in urls], "present", wait_healthy=True)
    assert (again.changed, again.added, again.removed) == (False, [], [])
    assert again.workers == result.workers or _urls(again) == _urls(result)


def test_check_mode_reports_and_changes_nothing(router: Router, engines: list[Engine]) -> None:
    client = r.RouterClient(router.url)
    would = r.reconcile(client, [engines[0].url], "exact", check_mode=True)
    assert (would.changed, would.added, would.workers) == (True, [engines[0].url], [])
    time.sleep(1.0)
    assert client.list_workers() == []


def test_exact_removes_the_others_and_absent_is_idempotent(router: Router, engines: list[Engine]) -> None:
    client = r.RouterClient(router.url)
    a, b = (e.url for e in engines)
    r.reconcile(client, [a, b], "present", wait_healthy=True, timeout=30)
    exact = r.reconcile(client, [a], "exact", wait_healthy=True, timeout=30)
    assert (exact.added, exact.removed, _urls(exact)) == ([], [b], [a])
    gone = r.reconcile(client, [a, b], "absent")
    assert (gone.changed, gone.removed, gone.workers) == (True, [a], [])
    again = r.reconcile(client, [a, b], "absent")
    assert (again.changed, again.removed) == (False, [])


def test_a_stopped_worker_turns_unhealthy_and_back(router: Router, tmp_path: Path) -> None:
    engine = Engine(tmp_path)
    client = r.RouterClient(router.url)
    try:
        r.reconcile(client, [engine.url], "present", wait_healthy=True, timeout=30)
        engine.proc.send_signal(signal.SIGSTOP)  # alive but silent: its /health times out
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and client.list_workers()[0].is_healthy:
            time.sleep(0.5)
        assert client.list_workers()[0].is_healthy is False  # listed, but gets no traffic
        assert _get(router.url + "/readiness")[0] == 503
        engine.proc.send_signal(signal.SIGCONT)
        while time.monotonic() < deadline and not client.list_workers()[0].is_healthy:
            time.sleep(0.5)
        assert client.list_workers()[0].is_healthy is True
    finally:
        engine.proc.send_signal(signal.SIGCONT)
        engine.stop()


def test_a_worker_that_never_answers_fails_with_the_routers_view(router: Router) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    client = r.RouterClient(router.url)
    start = time.monotonic()
    with pytest.raises(r.RouterError) as err:
        r.reconcile(client, [dead], "present", wait_healthy=True, timeout=3)
    assert time.monotonic() - start < 60  # the 3 s timeout and the router's answers, never a hang
    msg = str(err.value)
    assert dead in msg and "never became healthy" in msg and "registration is processing" in msg
    assert "goes on retrying it for its --worker-startup-timeout-secs and lists it once it answers" in msg
    assert f"{dead}/health" in msg


def test_unreachable_router_is_named() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(r.RouterError, match=rf"cannot reach the router at {url} .*sglang_router_port"):
        r.reconcile(r.RouterClient(url, timeout=2), ["http://127.0.0.1:1"], "present")


def test_check_mode_before_the_routers_first_start_would_add_everything() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    would = r.reconcile(r.RouterClient(url, timeout=2), ["http://10.0.0.11:30000/"], "exact", check_mode=True)
    assert (would.changed, would.added, would.removed, would.workers) == (True, ["http://10.0.0.11:30000"], [], [])
    assert "in check mode that is taken as a router with no worker yet" in would.msg


def test_api_key_required_from_clients_and_sent_to_workers(tmp_path: Path) -> None:
    router = engine = None
    try:
        router = Router(tmp_path, "--api-key", "sekret")
        engine = Engine(tmp_path, "--api-key", "sekret")
        with pytest.raises(r.RouterError, match=r"answered 401 to GET /workers: it requires an API key; "
                                                r"set api_key \(sglang_api_key in the roles\)"):
            r.reconcile(r.RouterClient(router.url), [engine.url], "present")
        with pytest.raises(r.RouterError, match="refused the key given as api_key"):
            r.reconcile(r.RouterClient(router.url, api_key="wrong"), [engine.url], "present")
        result = r.reconcile(r.RouterClient(router.url, api_key="sekret"), [engine.url], "present",
                             worker_api_key="sekret", wait_healthy=True, timeout=30)
        assert _urls(result) == [engine.url] and result.workers[0]["is_healthy"]
        request = {"model": "m", "prompt": "hi", "max_tokens": 2}
        assert _get(router.url + "/v1/completions", body=request)[0] == 401
        assert _get(router.url + "/v1/completions", {"Authorization": "Bearer wrong"}, request)[0] == 401
        assert _get(router.url + "/v1/completions", {"Authorization": "Bearer sekret"}, request)[0] == 200
        for public in ("/health", "/liveness", "/readiness"):
            assert _get(router.url + public)[0] == 200, public
    finally:
        for proc in (engine, router):
            if proc is not None:
                proc.stop()


# ------------------------------------------------------------------------------------------
# the module, through ansible


def _ansible(args: dict[str, Any], *flags: str) -> dict[str, Any]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    argv = [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "llmops.sglang.router_workers",
            "-a", json.dumps(args), *flags]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, check=False)
    marker = proc.stdout.find("localhost | ")
    head, sep, body = proc.stdout[max(marker, 0):].partition(" => ")
    assert marker >= 0 and sep, proc.stdout + proc.stderr
    result = json.loads(body)
    result["_status"] = head.removeprefix("localhost | ").strip()
    result["_stdout"] = proc.stdout
    return result


def test_module_check_diff_then_change(router: Router, engines: list[Engine]) -> None:
    args = {"router_url": router.url, "workers": [engines[0].url], "state": "exact", "wait_healthy": True,
            "timeout": 30, "api_key": "not-needed-here"}
    would = _ansible(args, "--check", "--diff")
    assert would["_status"] == "CHANGED" and would["added"] == [engines[0].url] and would["workers"] == []
    assert "+" + engines[0].url in would["_stdout"]  # --diff: the URLs before and after
    assert "not-needed-here" not in would["_stdout"]
    done = _ansible(args)
    assert done["_status"] == "CHANGED" and [w["url"] for w in done["workers"]] == [engines[0].url]
    assert done["workers"][0]["is_healthy"] is True
    again = _ansible(args)
    assert again["_status"] == "SUCCESS" and again["changed"] is False


def test_module_failure_names_the_router() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    failed = _ansible({"router_url": url, "workers": ["http://127.0.0.1:1"], "request_timeout": 2})
    assert failed["_status"].startswith("FAILED") and f"cannot reach the router at {url}" in failed["msg"]


class _Stub:
    """A router stand-in on loopback: GET /workers lists ``workers``, GET /readiness answers ``ready``."""

    def __init__(self, workers: list[dict[str, Any]], ready: int) -> None:
        import http.server
        import threading

        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                status, body = ((200, {"workers": stub.workers}) if self.path == "/workers"
                                else (stub.ready, {"status": "ready" if stub.ready == 200 else "not ready"}))
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.workers, self.ready = workers, ready
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_module_ready_waits_for_readiness_only_with_a_worker_and_fails_with_the_log(tmp_path: Path) -> None:
    log = tmp_path / "router.log"
    log.write_text("starting\nno healthy worker yet\n")
    worker = {"id": "w1", "url": "http://127.0.0.1:1", "is_healthy": False, "load": 0}
    stub = _Stub([worker], 503)
    try:
        ready = {"timeout": 2, "log_file": str(log), "name": "router-01"}
        failed = _ansible({"router_url": stub.url, "ready": ready})
        assert failed["_status"].startswith("FAILED"), failed["_stdout"]
        assert failed["msg"].startswith("the router on router-01 is not ready: no 200 from "
                                        f"{stub.url}/readiness within 2.0 s (last status 503)")
        assert "no healthy worker yet" in failed["msg"] and failed["ready"]["ready"] is False
        stub.ready = 200
        done = _ansible({"router_url": stub.url, "ready": ready})
        assert done["_status"] == "SUCCESS" and [w["url"] for w in done["workers"]] == [worker["url"]]
        # without a worker there is nothing to be ready with: no wait (a 503 is what it answers then)
        stub.workers, stub.ready = [], 503
        empty = _ansible({"router_url": stub.url, "ready": ready})
        assert empty["_status"] == "SUCCESS" and empty["workers"] == []
        # and without `ready` the module does not ask /readiness at all
        stub.workers = [worker]
        assert _ansible({"router_url": stub.url})["_status"] == "SUCCESS"
    finally:
        stub.close()


def test_worker_types_give_each_pd_instance_its_side_and_refuse_a_prefill_a_remote_decode_cannot_reach() -> None:
    """sglang_pd: a prefill goes to the router with its bootstrap port, a decode with its side; the
    router sends a decode the prefill URL's host as bootstrap_host, so a prefill registered at
    loopback (the router on its host) with a decode elsewhere is refused, naming the fix."""
    def pd(inst: dict[str, Any], role: str, port: int | None = None) -> dict[str, Any]:
        return dict(inst, pd_role=role, bootstrap_port=port)

    fleet = {"node-01": {"instances": [pd(_instance("gpu0", 30000, "http://10.0.0.11:30000"), "prefill", 8998)]},
             "node-02": {"instances": [pd(_instance("gpu0", 30000, "http://10.0.0.12:30000"), "decode"),
                                       _instance("gpu1", 30001, "http://10.0.0.12:30001")]}}
    assert _routing.worker_types(fleet, "router-01") == {
        "http://10.0.0.11:30000": {"worker_type": "prefill", "bootstrap_port": 8998},
        "http://10.0.0.12:30000": {"worker_type": "decode", "bootstrap_port": None}}  # gpu1: unified, not listed
    with pytest.raises(r.RouterError, match=r"prefill instance\(s\) gpu0 of node-01 are registered at a loopback URL, "
                                            r"which the decode instances of node-02 cannot reach .*\(sglang_host_address\)"):
        _routing.worker_types(fleet, "node-01")  # the router on the prefill's host: loopback
    one_host = {"node-01": {"instances": [pd(_instance("gpu0", 30000, None), "prefill", 8998),
                                          pd(_instance("gpu1", 30001, None), "decode")]}}
    assert set(_routing.worker_types(one_host, "node-01")) == {"http://127.0.0.1:30000", "http://127.0.0.1:30001"}
    assert _routing.worker_types({"node-01": {"instances": [_instance("gpu0", 30000, None)]}}, "node-01") == {}
