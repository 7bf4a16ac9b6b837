"""The embedded engine against the real SGLang 0.5.17 recordings (loopback only, bounded)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .....ports import free_port

ROOT = Path(__file__).resolve().parents[5]
ENGINE_MODULE = "ansible_collections.llmops.sglang.plugins.module_utils._engine"
RELEASE = "0.5.17"  # the release of the recordings
HTTP_TIMEOUT = 10.0
START_TIMEOUT = 30.0


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT / "collections")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                           if p]
    env.update({
        "PYTHONPATH": os.pathsep.join(paths),
        "LLMOPS_SGLANG_RELEASE": RELEASE,
        "LLMOPS_SIM_GPUS": "NVIDIA H200",
        "CUDA_VISIBLE_DEVICES": "0",
        "LLMOPS_SIM_TIME_SCALE": "0.001",
        "LLMOPS_SIM_HOST_MEM_AVAILABLE_GB": "200",
    })
    env.pop("LLMOPS_SIM_ACCEPT_LENGTH", None)
    env.update(extra)
    return env


def _model_dir(tmp: Path, name: str, recorded: Path) -> str:
    """data/models/<name> when present, else a copy of the recorded model-config.json."""
    shipped = ROOT / "data" / "models" / name
    if (shipped / "config.json").is_file():
        return str(shipped)
    target = tmp / name
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(recorded / "model-config.json", target / "config.json")
    return str(target)


def _recorded_argv(folder: Path, model: str, port: int) -> list[str]:
    words = (folder / "argv.txt").read_text().split()
    argv = words[words.index("sglang.launch_server") + 1:]
    argv = [model if w == "MODEL" else w for w in argv]
    argv[argv.index("--port") + 1] = str(port)
    return argv


def _run_engine(argv: list[str], timeout: float = 30.0, **env: str,
                ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", ENGINE_MODULE, *argv], env=_env(**env),
                          capture_output=True, text=True, timeout=timeout, check=False)


def _http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
          ) -> tuple[int, dict[str, str], bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()


def _sse(raw: bytes) -> list[Any]:
    events: list[Any] = []
    for block in raw.decode().split("\n\n"):
        block = block.strip()
        if not block:
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def _recorded_body(path: Path) -> Any:
    text = path.read_text()
    return json.loads(text[text.index("\n\n") + 2:] if "HTTP/1.1" in text[:10] else text)


def _keypaths(obj: Any, prefix: str = "") -> set[str]:
    """Recursive key set: dict keys as paths, list items merged under '[]'."""
    paths: set[str] = set()
    if isinstance(obj, dict):
        for key, value in obj.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            paths.add(path)
            paths |= _keypaths(value, path)
    elif isinstance(obj, list):
        for item in obj:
            paths |= _keypaths(item, prefix + "[]")
    return paths


class Server:
    """A running engine subprocess with its log files."""

    def __init__(self, argv: list[str], tmp: Path, name: str, **env: str) -> None:
        self.port = int(argv[argv.index("--port") + 1])
        self.base = f"http://127.0.0.1:{self.port}"
        self.out_path = tmp / f"{name}.stdout"
        self.err_path = tmp / f"{name}.stderr"
        self._out = open(self.out_path, "w")  # noqa: SIM115 - closed in stop()
        self._err = open(self.err_path, "w")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", ENGINE_MODULE, *argv],
                                     env=_env(**env), stdout=self._out, stderr=self._err)
        self.health_seen: list[int] = []

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"engine exited {self.proc.returncode}: {self.log()[-3000:]}")
            try:
                status, _, body = _http("GET", self.base + "/health")
            except OSError:
                status = 0
            if not self.health_seen or self.health_seen[-1] != status:
                self.health_seen.append(status)
            if status == 200:
                assert body == b""
                return
            time.sleep(0.01)
        pytest.fail(f"engine not ready within {timeout}s: {self.log()[-3000:]}")

    def get(self, path: str, **kw: Any) -> tuple[int, dict[str, str], bytes]:
        return _http("GET", self.base + path, **kw)

    def post(self, path: str, body: Any, **kw: Any) -> tuple[int, dict[str, str], bytes]:
        return _http("POST", self.base + path, body, **kw)

    def log(self) -> str:
        for handle in (self._out, self._err):
            if not handle.closed:
                handle.flush()
        return self.err_path.read_text() + self.out_path.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._out.close()
        self._err.close()
        return int(self.proc.returncode)


@pytest.fixture(scope="module")
def rec(fixtures_dir: Path) -> Path:
    return fixtures_dir / "sglang-0.5.17-h200"


@pytest.fixture(scope="module")
def dense(rec: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("dense")
    model = _model_dir(tmp, "qwen3-0.6b-dense", rec / "dense")
    # slower clock for this one so that the 503 phase is observable by polling
    server = Server(_recorded_argv(rec / "dense", model, free_port()), tmp, "dense",
                    LLMOPS_SIM_TIME_SCALE="0.01")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def hybrid(rec: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("hybrid")
    model = _model_dir(tmp, "qwen35-hybrid-small", rec / "hybrid")
    server = Server(_recorded_argv(rec / "hybrid", model, free_port()), tmp, "hybrid",
                    LLMOPS_SIM_ACCEPT_LENGTH="3")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------------------------
# start-up, health, shutdown
# ------------------------------------------------------------------------------------------
def test_health_503_while_loading_then_200(dense: Server) -> None:
    seen = [s for s in dense.health_seen if s]
    assert seen[-1] == 200
    assert 503 in seen, dense.health_seen
    assert seen.index(503) < seen.index(200)
    status, _, body = dense.get("/health_generate")
    assert (status, body) == (200, b"")


def test_startup_log_lines(dense: Server, hybrid: Server, rec: Path) -> None:
    for server in (dense, hybrid):
        log = server.log()
        assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] server_args=ServerArgs\(model_path=",
                         log, re.M)
        assert re.search(r"max_total_num_tokens=\d+, .*max_running_requests=\d+", log)
        assert "The server is fired up and ready to roll!" in log
        assert "Uvicorn running on http://127.0.0.1:" in log
    hybrid_log = hybrid.log()
    assert "max_running_requests=16" in hybrid_log
    for needle in ("Allocating kv hierarchical KV host pool:",
                   "host memory for hierarchical Mamba cache",
                   "Allocating draft hierarchical KV host pool:"):
        assert needle in hybrid_log
        assert needle in (rec / "hybrid" / "server.log").read_text()


def test_release_0510_and_sigterm_exits_zero(rec: Path, tmp_path: Path) -> None:
    model = _model_dir(tmp_path, "qwen3-0.6b-dense", rec / "dense")
    traits = json.loads((ROOT / "data" / "releases.json").read_text())["0.5.10"]
    server = Server(["--model-path", model, "--port", str(free_port())], tmp_path, "term",
                    LLMOPS_SGLANG_RELEASE="0.5.10")
    try:
        server.wait_ready()
        status, _, body = server.get(traits["server_info_path"])
        assert status == 200 and json.loads(body)["version"] == "0.5.10"
        other = {"/server_info", "/get_server_info"} - {traits["server_info_path"]}
        expected = 200 if traits.get("server_info_deprecated_path") in other else 404
        assert server.get(other.pop())[0] == expected
    finally:
        assert server.stop() == 0
    assert "SIGTERM received. signum=None frame=None. Draining requests and shutting down..." \
        in server.log()


def test_deprecated_flag_warning(dense: Server) -> None:
    # the dense argv of the recording uses --cuda-graph-max-bs, deprecated in 0.5.17
    assert ("\x1b[1;33m'--cuda-graph-max-bs' is deprecated and will be removed in a future "
            "release. Use '--cuda-graph-max-bs-decode' instead.\x1b[0m") in dense.log()


# ------------------------------------------------------------------------------------------
# info endpoints: recursive key sets as recorded
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("endpoint", ["get_model_info", "model_info", "v1_models"])
def test_info_endpoint_keys(dense: Server, hybrid: Server, rec: Path, endpoint: str) -> None:
    for server, folder in ((dense, "dense"), (hybrid, "hybrid")):
        recorded = _recorded_body(rec / folder / f"ep_{endpoint}.txt")
        status, headers, body = server.get("/" + endpoint.replace("v1_", "v1/"))
        assert status == 200
        assert headers["content-type"].startswith("application/json")
        assert _keypaths(json.loads(body)) == _keypaths(recorded)


def test_server_info_keys_and_values(dense: Server, hybrid: Server, rec: Path) -> None:
    for server, folder in ((dense, "dense"), (hybrid, "hybrid")):
        recorded = _recorded_body(rec / folder / "ep_server_info.txt")
        status, _, body = server.get("/server_info")
        assert status == 200
        info = json.loads(body)
        status2, _, body2 = server.get("/get_server_info")
        assert status2 == 200 and set(json.loads(body2)) == set(info)
        assert info["version"] == RELEASE
        assert info["llmops_sim"]["time_scale"] in (0.001, 0.01)
        assert info["llmops_sim"]["gpu"] == "NVIDIA H200"
        # every top-level key and every internal_states key of the recording is there
        missing = set(recorded) - set(info)
        assert not missing, sorted(missing)
        rec_state = recorded["internal_states"][0]
        state = info["internal_states"][0]
        assert not (set(rec_state) - set(state) - {"avg_spec_accept_length"}), sorted(
            set(rec_state) - set(state))
        assert _keypaths(state["memory_usage"]) == _keypaths(rec_state["memory_usage"])
        assert set(info["startup_time"]) == set(recorded["startup_time"])
        assert info["max_running_requests"] == state["effective_max_running_requests_per_dp"]
    assert json.loads(hybrid.get("/server_info")[2])["max_running_requests"] == 16
    assert "Endpoint '/get_server_info' is deprecated" in hybrid.log()


def test_avg_spec_accept_length_after_first_verify(hybrid: Server) -> None:
    # 1 prefill token + 20 verify steps of 3 tokens (LLMOPS_SIM_ACCEPT_LENGTH=3)
    hybrid.post("/generate", {"text": "warm", "sampling_params": {"max_new_tokens": 61}})
    state = json.loads(hybrid.get("/server_info")[2])["internal_states"][0]
    assert 2.0 < state["avg_spec_accept_length"] <= 3.0
    assert state["last_gen_throughput"] >= 0.0


# ------------------------------------------------------------------------------------------
# generation: responses and SSE chunks field by field
# ------------------------------------------------------------------------------------------
def test_completions_non_stream(dense: Server, rec: Path) -> None:
    recorded = json.loads((rec / "dense" / "completions.json").read_text())
    status, _, body = dense.post("/v1/completions", {"model": "x", "prompt": "Hello there, how",
                                                     "max_tokens": 24, "ignore_eos": True})
    assert status == 200
    data = json.loads(body)
    assert _keypaths(data) == _keypaths(recorded)
    assert data["object"] == "text_completion" and data["model"] == "x"
    assert data["usage"]["completion_tokens"] == 24
    assert data["usage"]["total_tokens"] == data["usage"]["prompt_tokens"] + 24
    assert data["choices"][0]["finish_reason"] == "length"


def test_generate_non_stream(dense: Server, hybrid: Server, rec: Path) -> None:
    for server, folder in ((dense, "dense"), (hybrid, "hybrid")):
        recorded = json.loads((rec / folder / "generate.json").read_text())
        prompt = {"text": "The capital of France", "sampling_params": {"max_new_tokens": 24,
                                                                       "ignore_eos": True}}
        server.post("/generate", prompt)  # the second one hits the prefix cache (dense)
        status, _, body = server.post("/generate", prompt)
        assert status == 200
        data = json.loads(body)
        assert list(data["meta_info"]) == list(recorded["meta_info"])
        assert _keypaths(data) == _keypaths(recorded)
        assert len(data["output_ids"]) == data["meta_info"]["completion_tokens"] == 24
        assert data["meta_info"]["finish_reason"] == {"type": "length", "length": 24}


def _chunk_keys(chunks: list[Any]) -> list[set[str]]:
    return [_keypaths(c) for c in chunks if c != "[DONE]"]


def test_stream_completions_chunks(dense: Server, rec: Path) -> None:
    recorded = _sse((rec / "dense" / "stream_completions.txt").read_bytes())
    status, headers, raw = dense.post("/v1/completions", {
        "model": "x", "prompt": "Once upon a time", "max_tokens": 24, "stream": True,
        "ignore_eos": True, "stream_options": {"include_usage": True}})
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    chunks = _sse(raw)
    assert chunks[-1] == "[DONE]"
    keys, rec_keys = _chunk_keys(chunks), _chunk_keys(recorded)
    assert keys[0] == rec_keys[0] and keys[-1] == rec_keys[-1]
    assert all(k == rec_keys[0] for k in keys[:-1])
    usage = chunks[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 24
    token_chunks = [c for c in chunks[:-2]]
    assert len(token_chunks) == 24  # no speculative decoding: one token per chunk
    assert token_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert any(c["choices"][0]["text"] == "" for c in token_chunks)
    assert any(c["choices"][0]["text"] != "" for c in token_chunks)


def test_chat_non_stream_stops_at_modelled_eos(dense: Server) -> None:
    status, _, body = dense.post("/v1/chat/completions", {
        "model": "x", "messages": [{"role": "user", "content": "Tell me everything"}]})
    assert status == 200
    data = json.loads(body)
    assert data["object"] == "chat.completion"
    choice = data["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert (choice["finish_reason"], choice["matched_stop"]) == ("stop", 2)  # eos_token_id
    assert 64 <= data["usage"]["completion_tokens"] < 512


def test_stream_chat_chunks(dense: Server, rec: Path) -> None:
    recorded = _sse((rec / "dense" / "stream_chat.txt").read_bytes())
    status, _, raw = dense.post("/v1/chat/completions", {
        "model": "x", "messages": [{"role": "user", "content": "Say something"}],
        "max_tokens": 16, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200
    chunks = _sse(raw)
    keys, rec_keys = _chunk_keys(chunks), _chunk_keys(recorded)
    assert keys[0] == rec_keys[0]  # role chunk
    assert keys[-1] == rec_keys[-1]  # usage chunk
    assert keys[-2] == rec_keys[-2]  # finish chunk
    assert set(map(frozenset, keys[1:-2])) == set(map(frozenset, rec_keys[1:-2]))
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"]["completion_tokens"] == 16


def test_stream_generate_chunks(dense: Server, rec: Path) -> None:
    recorded = _sse((rec / "dense" / "stream_generate.txt").read_bytes())
    prompt = {"text": "Write a story", "sampling_params": {"max_new_tokens": 24}}
    dense.post("/generate", prompt)  # as recorded, the stream hits the radix cache
    status, _, raw = dense.post("/generate", dict(prompt, stream=True))
    assert status == 200
    chunks = _sse(raw)
    assert chunks[-1] == "[DONE]"
    keys, rec_keys = _chunk_keys(chunks), _chunk_keys(recorded)
    assert keys[0] == rec_keys[0] and keys[1] == rec_keys[1] and keys[-1] == rec_keys[-1]
    assert [c["meta_info"]["completion_tokens"] for c in chunks[:-1]] == list(range(1, 25))
    assert all(len(c["output_ids"]) == c["meta_info"]["completion_tokens"] for c in chunks[:-1])


def test_speculative_chunks_carry_several_tokens(hybrid: Server) -> None:
    status, _, raw = hybrid.post("/v1/completions", {
        "model": "x", "prompt": "Speculate", "max_tokens": 32, "stream": True,
        "ignore_eos": True, "stream_options": {"include_usage": True}})
    assert status == 200
    chunks = _sse(raw)
    content_chunks = [c for c in chunks[:-1] if c["choices"]]
    total = chunks[-2]["usage"]["completion_tokens"]
    assert total == 32
    assert len(content_chunks) < total
    status, _, raw = hybrid.post("/generate", {"text": "Speculate", "stream": True,
                                               "sampling_params": {"max_new_tokens": 32}})
    counts = [c["meta_info"]["completion_tokens"] for c in _sse(raw)[:-1]]
    steps = [b - a for a, b in zip([0] + counts[:-1], counts, strict=True)]
    assert max(steps) > 1 and counts[-1] == 32
    final = _sse(raw)[-2]["meta_info"]
    assert final["spec_verify_ct"] > 0 and final["spec_accept_length"] > 1.5


def test_requests_beyond_max_running_queue(rec: Path, tmp_path: Path) -> None:
    model = _model_dir(tmp_path, "qwen3-0.6b-dense", rec / "dense")
    server = Server(["--model-path", model, "--port", str(free_port()), "--enable-metrics",
                     "--max-running-requests", "2"], tmp_path, "queue",
                    LLMOPS_SIM_TIME_SCALE="0.01")
    try:
        server.wait_ready()
        assert json.loads(server.get("/server_info")[2])["max_running_requests"] == 2

        def one() -> None:
            try:
                server.post("/v1/completions", {"prompt": "q", "max_tokens": 20000,
                                                "ignore_eos": True})
            except OSError:
                pass  # cut by the shutdown below

        threads = [threading.Thread(target=one, daemon=True) for _ in range(5)]
        for thread in threads:
            thread.start()
        gauges: dict[str, float] = {}
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            text = server.get("/metrics")[2].decode()
            gauges = {m.group(1): float(m.group(2)) for m in re.finditer(
                r"^sglang:(num_running_reqs|num_queue_reqs)\{[^}]*\} (\S+)$", text, re.M)}
            # a request is admitted (front end, then its own prefill) a few ms after it is sent:
            # wait for the steady state, 2 running and 3 queued
            if gauges == {"num_running_reqs": 2.0, "num_queue_reqs": 3.0}:
                break
            time.sleep(0.02)
        assert gauges == {"num_running_reqs": 2.0, "num_queue_reqs": 3.0}
    finally:
        assert server.stop() == 0


# ------------------------------------------------------------------------------------------
# errors and auth
# ------------------------------------------------------------------------------------------
def test_bad_request_shape(dense: Server, rec: Path) -> None:
    recorded = _recorded_body(rec / "dense" / "bad_request.txt")
    status, _, body = dense.post("/v1/completions", {"model": "x", "prompt": "hi",
                                                     "max_tokens": "lots"})
    assert status == 400
    data = json.loads(body)
    assert list(data) == list(recorded)
    assert (data["object"], data["type"], data["code"]) == ("error", "Bad Request", 400)
    assert data["message"].startswith("1 validation error:\n  {'type': 'int_parsing', "
                                      "'loc': ('body', 'max_tokens')")


def test_metrics_names_and_labels(dense: Server, hybrid: Server, rec: Path) -> None:
    def families(text: str) -> dict[str, set[tuple[str, ...]]]:
        out: dict[str, set[tuple[str, ...]]] = {}
        kinds: dict[str, str] = {}
        for line in text.splitlines():
            if line.startswith("# TYPE"):
                _, _, name, kind = line.split()
                kinds[name] = kind
                out.setdefault(name, set())
            elif line and not line.startswith("#"):
                match = re.match(r"([^{ ]+)(?:\{(.*)\})? ", line)
                assert match, line
                name = re.sub(r"_(sum|count|bucket)$", "", match.group(1)) if re.sub(
                    r"_(sum|count|bucket)$", "", match.group(1)) in kinds else match.group(1)
                labels = tuple(sorted(k for k in re.findall(r'(\w+)="', match.group(2) or "")
                                      if k != "le" or kinds.get(name) != "histogram"))
                out.setdefault(name, set()).add(labels)
        return out

    recorded = {d: families((rec / d / "metrics.txt").read_text()) for d in ("dense", "hybrid")}
    union = set(recorded["dense"]) | set(recorded["hybrid"])
    for server, folder in ((dense, "dense"), (hybrid, "hybrid")):
        status, headers, body = server.get("/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        ours = families(body.decode())
        for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                     "sglang:gen_throughput", "sglang:cache_hit_rate",
                     "sglang:spec_accept_length", "sglang:spec_accept_rate",
                     "sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
                     "sglang:e2e_request_latency_seconds"):
            assert name in ours, name
        missing = set(recorded[folder]) - set(ours)
        assert not missing, sorted(missing)
        assert set(ours) <= union, sorted(set(ours) - union)
        for name, label_sets in ours.items():
            other = "dense" if folder == "hybrid" else "hybrid"
            want = recorded[folder].get(name) or recorded[other][name]
            assert label_sets <= want, (name, label_sets, want)
    hybrid_metrics = families(hybrid.get("/metrics")[2].decode())
    assert "sglang:hicache_host_total_tokens" in hybrid_metrics
    text = hybrid.get("/metrics")[2].decode()
    assert re.search(r'^sglang:hicache_host_total_tokens\{engine_type="unified",model_name="[^"]+",'
                     r'moe_ep_rank="0",pp_rank="0",tp_rank="0"\} [1-9]', text, re.M)


def test_api_key_and_no_metrics_without_flag(rec: Path, tmp_path: Path) -> None:
    model = _model_dir(tmp_path, "qwen3-0.6b-dense", rec / "dense")
    port = free_port()
    server = Server(["--model-path", model, "--port", str(port), "--api-key", "sekret"],
                    tmp_path, "auth")
    try:
        server.wait_ready()  # /health needs no key
        assert server.get("/metrics")[0] == 404
        status, _, body = server.get("/v1/models")
        assert (status, json.loads(body)) == (401, {"error": "Unauthorized"})
        assert server.get("/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert server.get("/v1/models", headers={"Authorization": "Bearer sekret"})[0] == 200
        status, _, _ = server.post("/v1/completions", {"prompt": "x", "max_tokens": 2},
                                   headers={"Authorization": "Bearer sekret"})
        assert status == 200
        assert server.get("/health_generate")[0] == 200
    finally:
        assert server.stop() == 0


# ------------------------------------------------------------------------------------------
# start-up failures
# ------------------------------------------------------------------------------------------
def test_unknown_flag_exits_2(tmp_path: Path) -> None:
    res = _run_engine(["--model-path", str(tmp_path), "--bogus-flag", "1"])
    assert res.returncode == 2
    assert "unrecognized arguments: --bogus-flag" in res.stderr
    assert "usage: launch_server.py" in res.stderr


def test_missing_config_json(tmp_path: Path) -> None:
    res = _run_engine(["--model-path", str(tmp_path / "nothing"), "--port", str(free_port())])
    assert res.returncode != 0
    assert "config.json" in res.stderr


def test_unknown_gpu(rec: Path, tmp_path: Path) -> None:
    model = _model_dir(tmp_path, "qwen3-0.6b-dense", rec / "dense")
    res = _run_engine(["--model-path", model, "--port", str(free_port())],
                      LLMOPS_SIM_GPUS="Imaginary GPU 9000")
    assert res.returncode != 0
    assert "Imaginary GPU 9000" in res.stderr


def test_port_in_use(rec: Path, tmp_path: Path) -> None:
    model = _model_dir(tmp_path, "qwen3-0.6b-dense", rec / "dense")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        res = _run_engine(["--model-path", model, "--port", str(port)])
    assert res.returncode != 0
    assert "address already in use" in res.stderr


def test_hicache_larger_than_host(rec: Path, tmp_path: Path) -> None:
    model = _model_dir(tmp_path, "qwen35-hybrid-small", rec / "hybrid")
    argv = _recorded_argv(rec / "hybrid", model, free_port())
    res = _run_engine(argv, LLMOPS_SIM_HOST_MEM_AVAILABLE_GB="12")
    assert res.returncode != 0
    assert "Not enough host memory" in res.stderr


# ------------------------------------------------------------------------------------------
# what a router asks (sglang-router 0.3.2, recorded in tests/fixtures/sglang-router-0.3.2)
# ------------------------------------------------------------------------------------------
def _router_requests(fixtures_dir: Path) -> list[dict[str, Any]]:
    path = fixtures_dir / "sglang-router-0.3.2" / "worker-requests.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_router_probes_and_forwarded_bodies(dense: Server, fixtures_dir: Path) -> None:
    """Every request the router sent its worker, replayed: registration probes, the load poll,
    and the bodies it forwards with fields of its own (which the real server ignores, or knows:
    pydantic models with the default ``extra="ignore"``, GenerateReqInput a dataclass)."""
    seen: set[str] = set()
    for req in _router_requests(fixtures_dir):
        body = json.loads(req["b"]) if req["b"] else None
        status, headers, raw = _http(req["m"], dense.base + req["p"], body)
        assert status == 200, (req["p"], raw[:300])
        seen.add(req["p"])
        if req["p"] in ("/server_info", "/model_info", "/get_load"):
            assert json.loads(raw)
        elif body is not None and body.get("stream"):
            chunks = _sse(raw)
            assert chunks[-1] == "[DONE]" and chunks[-2]["usage"]["completion_tokens"] == 2
        elif body is not None:
            data = json.loads(raw)
            usage = data["meta_info"] if req["p"] == "/generate" else data["usage"]
            assert usage["completion_tokens"] == 2  # max_tokens / max_completion_tokens honoured
    assert seen == {"/health", "/server_info", "/model_info", "/get_load", "/v1/completions",
                    "/v1/chat/completions", "/generate"}


def test_get_load_and_v1_loads_0517(dense: Server) -> None:
    """0.5.17: /get_load (deprecated shim over the load snapshot) and /v1/loads."""
    traits = json.loads((ROOT / "data" / "releases.json").read_text())[RELEASE]
    status, _, raw = dense.get("/get_load")
    assert status == 200
    (load,) = json.loads(raw)
    assert list(load) == traits["get_load"]["keys"]
    assert load["dp_rank"] == 0 and load["num_tokens"] >= load["num_pending_tokens"] >= 0
    assert ("Endpoint '/get_load' is deprecated and will be removed in a future version. "
            "Please use '/v1/loads' instead.") in dense.log()
    status, _, raw = dense.get("/v1/loads")
    doc = json.loads(raw)
    assert list(doc) == ["timestamp", "version", "accelerator", "num_accelerators", "loads"]
    assert (doc["version"], doc["accelerator"], doc["num_accelerators"]) == (
        RELEASE, "NVIDIA H200", 1)
    (entry,) = doc["loads"]
    assert list(entry)[:len(traits["v1_loads"]["core"])] == traits["v1_loads"]["core"]
    assert set(entry) - set(traits["v1_loads"]["core"]) == {"memory", "disaggregation", "queues"}
    assert entry["memory"]["token_capacity"] == entry["max_total_num_tokens"]
    assert entry["disaggregation"]["mode"] == "null"
    core = json.loads(dense.get("/v1/loads?include=core")[2])["loads"][0]
    assert list(core) == traits["v1_loads"]["core"]
    assert json.loads(dense.get("/v1/loads?dp_rank=1")[2])["loads"] == []
    status, _, raw = dense.get("/v1/loads?include=bogus")
    assert status == 400 and json.loads(raw)["detail"].startswith(
        "Invalid include sections: {'bogus'}. Valid options: ['all', 'core', ")
    status, headers, raw = dense.get("/v1/loads?format=prometheus")
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert '# TYPE sglang_num_running_reqs gauge\nsglang_num_running_reqs{dp_rank="0"} ' \
        in raw.decode()
    assert 'sglang_memory_token_capacity{dp_rank="0"} ' in raw.decode()


@pytest.mark.parametrize("release", ["0.5.10", "0.5.23"])
def test_loads_per_release(rec: Path, tmp_path: Path, release: str) -> None:
    """0.5.10: the scheduler's reply dataclasses (dp_rank null, BaseReq's fields, an aggregate);
    0.5.23: no /get_load, num_prealloc_ready_tokens in the snapshot."""
    traits = json.loads((ROOT / "data" / "releases.json").read_text())[release]
    model = _model_dir(tmp_path, "qwen3-0.6b-dense", rec / "dense")
    server = Server(["--model-path", model, "--port", str(free_port())], tmp_path, release,
                    LLMOPS_SGLANG_RELEASE=release)
    try:
        server.wait_ready()
        status, _, raw = server.get("/get_load")
        doc = json.loads(server.get("/v1/loads")[2])
        (entry,) = doc["loads"]
        if release == "0.5.10":
            (load,) = json.loads(raw)
            assert list(load) == traits["get_load"]["keys"]
            assert (load["rid"], load["http_worker_ipc"], load["dp_rank"]) == (None, None, None)
            assert list(doc) == ["timestamp", "version", "dp_rank_count", "loads", "aggregate"]
            assert "dp_rank" not in entry and "timestamp" not in entry
            assert list(entry)[-1] == "num_total_reqs"
            assert entry["disaggregation"]["prefill_prealloc_queue_reqs"] == 0
            text = server.get("/v1/loads?format=prometheus")[2].decode()
            assert ("# HELP sglang_num_running_reqs Number of running requests\n"
                    "# TYPE sglang_num_running_reqs gauge\n"
                    'sglang_num_running_reqs{dp_rank="None"} 0') in text
        else:
            assert (status, json.loads(raw)) == (404, {"detail": "Not Found"})
            assert "num_prealloc_ready_tokens" in entry
            assert list(entry)[:len(traits["v1_loads"]["core"])] == traits["v1_loads"]["core"]
    finally:
        assert server.stop() == 0


def test_health_503_while_draining(rec: Path, tmp_path: Path) -> None:
    """After SIGTERM /health answers 503 (with the real server's line) until the server is
    gone, so a router stops sending to it; in-flight requests still finish or are cut."""
    model = _model_dir(tmp_path, "qwen3-0.6b-dense", rec / "dense")
    server = Server(["--model-path", model, "--port", str(free_port())], tmp_path, "drain",
                    LLMOPS_SIM_TIME_SCALE="0.01")
    try:
        server.wait_ready()

        def long_request() -> None:
            try:
                # about 60 modelled seconds: longer than the 1 s drain at this time scale
                server.post("/v1/completions", {"prompt": "q", "max_tokens": 30000,
                                                "ignore_eos": True})
            except OSError:
                pass  # cut by the shutdown

        thread = threading.Thread(target=long_request, daemon=True)
        thread.start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the request is running
            if json.loads(server.get("/v1/loads")[2])["loads"][0]["num_running_reqs"]:
                break
            time.sleep(0.01)
        server.proc.send_signal(signal.SIGTERM)
        seen: list[int] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and server.proc.poll() is None:
            try:
                seen.append(server.get("/health")[0])
            except OSError:
                seen.append(0)  # refused: the server is gone
            time.sleep(0.01)
        assert 503 in seen and 200 not in seen[seen.index(503):], seen
        thread.join(timeout=5)
    finally:
        assert server.stop() == 0
    assert "Health check request received during shutdown. Returning 503." in server.log()


def test_startup_scale_sets_the_start_ups_pace_apart_from_the_requests(rec: Path, tmp_path: Path) -> None:
    """LLMOPS_SIM_STARTUP_SCALE (issue 27): a test that needs slow requests (long sweep levels)
    need not wait for a start-up at the same pace. At LLMOPS_SIM_TIME_SCALE=100 the recorded
    dense start-up (load, CUDA graphs, warm-up: tens of modelled seconds) would take hours; with
    the start-up at 0.001 the server is ready within the usual bound, and still says it runs at
    the requests' scale."""
    model = _model_dir(tmp_path, "qwen3-0.6b-dense", rec / "dense")
    server = Server(["--model-path", model, "--port", str(free_port())], tmp_path, "startup",
                    LLMOPS_SIM_TIME_SCALE="100", LLMOPS_SIM_STARTUP_SCALE="0.001")
    try:
        server.wait_ready()
        status, _, body = server.get("/get_server_info")
        assert status == 200 and json.loads(body)["llmops_sim"]["time_scale"] == 100.0
        assert "The server is fired up and ready to roll!" in server.log()
    finally:
        server.stop()
    bad = _run_engine(["--model-path", model, "--port", str(free_port())], LLMOPS_SIM_STARTUP_SCALE="fast")
    assert bad.returncode == 1 and "invalid LLMOPS_SIM_STARTUP_SCALE='fast'" in bad.stderr + bad.stdout
