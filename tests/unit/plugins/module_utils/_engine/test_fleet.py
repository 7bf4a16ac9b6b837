"""Multi-node tensor parallelism in the embedded engine (module_utils/_engine/fleet.py,
follower.py): two engines on loopback as node rank 0 and node rank 1 of one TP-2 group
(``--tp 2 --nnodes 2``, one simulated GPU each) meeting at rank 0's ``--dist-init-addr``.

Every engine runs in a session of its own; whatever is left of each group is SIGKILLed at
teardown. Every wait is bounded. Ports are free loopback ports.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _detached as d
from ansible_collections.llmops.sglang.plugins.module_utils._engine import fleet

from .....ports import free_port

ROOT = Path(__file__).resolve().parents[5]
ENGINE_MODULE = "ansible_collections.llmops.sglang.plugins.module_utils._engine"
DENSE = str(ROOT / "data" / "models" / "qwen3-0.6b-dense")
START_TIMEOUT = 30.0
GONE_TIMEOUT = 15.0
PEER_LOST = "Connection closed by peer [127.0.0.1]:"


def _wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def _http(method: str, url: str, body: Any = None) -> tuple[int, dict[str, str], bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()
    except OSError:
        return 0, {}, b""


class Node:
    """One engine process: node ``rank`` of a TP-2 group over two nodes."""

    def __init__(self, tmp: Path, rank: int, dist_port: int, release: str = "0.5.17",
                 extra: tuple[str, ...] = ()) -> None:
        self.rank = rank
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        argv = ["--model-path", DENSE, "--host", "127.0.0.1", "--port", str(self.port),
                "--tp", "2", "--nnodes", "2", "--node-rank", str(rank),
                "--dist-init-addr", f"127.0.0.1:{dist_port}", *extra]
        env = dict(os.environ)
        env.update({
            "PYTHONPATH": os.pathsep.join([str(ROOT / "collections"), env.get("PYTHONPATH", "")]),
            "LLMOPS_SGLANG_RELEASE": release, "LLMOPS_SIM_GPUS": "NVIDIA H200",
            "CUDA_VISIBLE_DEVICES": "0", "LLMOPS_SIM_TIME_SCALE": "0.01",
            "LLMOPS_SIM_HOST_MEM_AVAILABLE_GB": "200"})
        self.err_path = tmp / f"rank{rank}.stderr"
        self.out_path = tmp / f"rank{rank}.stdout"
        with open(self.err_path, "w") as err, open(self.out_path, "w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", ENGINE_MODULE, *argv], env=env,
                                         stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def log(self) -> str:
        return self.err_path.read_text()

    def get(self, path: str) -> tuple[int, dict[str, str], bytes]:
        return _http("GET", self.base + path)

    def wait_health(self, timeout: float = START_TIMEOUT) -> list[int]:
        """/health until 200 (the statuses seen, 0 = refused); fails if the engine exits."""
        seen: list[int] = []

        def ready() -> bool:
            assert self.proc.poll() is None, f"rank {self.rank} exited: {self.log()[-2000:]}"
            status = self.get("/health")[0]
            if not seen or seen[-1] != status:
                seen.append(status)
            return status == 200

        assert _wait_for(ready, timeout), (seen, self.log()[-2000:])
        return seen

    def wait_exit(self, timeout: float = GONE_TIMEOUT) -> int:
        return int(self.proc.wait(timeout=timeout))

    def children(self) -> list[str]:
        titles = []
        for stat in d.all_stats():
            if stat.ppid == self.proc.pid and stat.alive:
                raw = Path(f"/proc/{stat.pid}/cmdline").read_bytes()
                titles.append(raw.rstrip(b"\0").decode())
        return sorted(titles)

    def kill_group(self) -> None:
        for _ in range(100):
            left = d.group_members(self.proc.pid)
            if not left:
                return
            for member in left:
                try:
                    os.kill(member.pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.05)


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for node in started:
        node.kill_group()
        if node.proc.poll() is None:
            node.proc.kill()
        node.proc.wait(timeout=10)


def _pair(tmp: Path, nodes: list[Node], release: str = "0.5.17") -> tuple[Node, Node]:
    """Rank 1 first, rank 0 a moment later: both ready (rank 0's /health 200, rank 1's
    placeholder up)."""
    dist_port = free_port()
    rank1 = Node(tmp, 1, dist_port, release)
    nodes.append(rank1)
    time.sleep(0.5)
    rank0 = Node(tmp, 0, dist_port, release)
    nodes.append(rank0)
    rank0.wait_health()
    rank1.wait_health(10.0)
    return rank0, rank1


def _stamp(log: str, message: str) -> str:
    """The ``[YYYY-mm-dd HH:MM:SS]`` stamp of the first line of ``log`` with ``message``."""
    line = next(line for line in log.splitlines() if message in line)
    return line[1:20]


# ------------------------------------------------------------------------------------------
# the topology (pure)
# ------------------------------------------------------------------------------------------
def test_topology_from_args() -> None:
    assert fleet.Topology.from_args({"nnodes": 1, "tp_size": 2}) is None
    topo = fleet.Topology.from_args({"nnodes": 2, "node_rank": 1, "tp_size": 4,
                                     "dist_init_addr": "10.0.0.1:25000"})
    assert topo == fleet.Topology(nnodes=2, node_rank=1, world=4, ranks_here=2, host="10.0.0.1",
                                  port=25000, timeout_s=fleet.DEFAULT_TIMEOUT_S)
    assert fleet.DEFAULT_TIMEOUT_S == 600.0  # torch's NCCL default when --dist-timeout is None
    topo = fleet.Topology.from_args({"nnodes": 2, "tensor_parallel_size": 2,
                                     "pipeline_parallel_size": 2, "dist_timeout": 30,
                                     "dist_init_addr": "[fd00::1]:25000"})
    assert topo is not None and (topo.world, topo.ranks_here, topo.host, topo.timeout_s) == (
        4, 2, "fd00::1", 30.0)
    # no --dist-init-addr: tcp://<--host or 127.0.0.1>:<--nccl-port or random> on every node
    topo = fleet.Topology.from_args({"nnodes": 2, "tp_size": 2, "host": "10.0.0.2"})
    assert topo is not None and (topo.host, topo.port) == ("10.0.0.2", 0)
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        fleet.split_address("10.0.0.1")


# ------------------------------------------------------------------------------------------
# two nodes on loopback
# ------------------------------------------------------------------------------------------
def test_rank1_first_then_rank0_serves_and_losing_rank1_takes_rank0_down(
        tmp_path: Path, nodes: list[Node]) -> None:
    dist_port = free_port()
    rank1 = Node(tmp_path, 1, dist_port)
    nodes.append(rank1)
    time.sleep(1.0)
    assert rank1.get("/health")[0] == 0  # its placeholder starts once its schedulers are ready
    rank0 = Node(tmp_path, 0, dist_port)
    nodes.append(rank0)
    seen = rank0.wait_health()
    assert 503 in seen, seen  # while the nodes meet and load
    rank1.wait_health(10.0)
    assert rank0.children() == ["sglang::detokenizer", "sglang::scheduler_TP0"]
    assert rank1.children() == ["sglang::scheduler_TP1"]
    log1 = rank1.log()
    assert "Init torch distributed ends. elapsed=" in log1
    waited = float(log1.split("Init torch distributed ends. elapsed=")[1].split(" s")[0])
    assert waited > 0
    # it waited for rank 0: its rendezvous ended no earlier than rank 0 began its own (the logs'
    # second stamps; how long it waited is the machine's load, not the engine's behaviour)
    assert _stamp(log1, "Init torch distributed ends.") >= _stamp(rank0.log(), "Init torch distributed begin.")
    assert f"Dummy health check server started in background thread at 127.0.0.1:{rank1.port}" \
        in log1

    # rank 1: the placeholder routes, nothing of the API
    for path in ("/health", "/health_generate", "/ping"):
        status, headers, body = rank1.get(path)
        assert (status, body, headers.get("server")) == (200, b"", "uvicorn"), path
    for method, path in (("GET", "/v1/models"), ("GET", "/server_info"), ("GET", "/get_load"),
                         ("POST", "/generate"), ("POST", "/v1/completions"), ("GET", "/metrics")):
        status, _, body = _http(method, rank1.base + path, {} if method == "POST" else None)
        assert (status, json.loads(body)) == (404, {"detail": "Not Found"}), path
    status, headers, body = _http("POST", rank1.base + "/health", {})
    assert (status, headers.get("allow"), json.loads(body)) == (
        405, "GET", {"detail": "Method Not Allowed"})
    assert rank1.out_path.read_text() == ""  # uvicorn at log level warning: no access lines

    # a generation through rank 0
    status, _, raw = _http("POST", rank0.base + "/generate",
                           {"text": "hello", "sampling_params": {"max_new_tokens": 8}})
    assert status == 200 and json.loads(raw)["meta_info"]["completion_tokens"] == 8

    # 0.5.17: SIGTERM kills a rank > 0 (no handler); rank 0's gloo group breaks
    rank1.proc.send_signal(signal.SIGTERM)
    assert rank1.wait_exit() == -signal.SIGTERM
    assert rank0.wait_exit() == -signal.SIGKILL
    log0 = rank0.log()
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log0
    assert PEER_LOST in log0
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in log0
    assert f"kill_process_tree called: parent_pid={rank0.proc.pid}, include_parent=True" in log0


def test_rank0_alone_fails_at_its_dist_timeout(tmp_path: Path, nodes: list[Node]) -> None:
    rank0 = Node(tmp_path, 0, free_port(), extra=("--dist-timeout", "1"))
    nodes.append(rank0)
    started = time.monotonic()
    assert _wait_for(lambda: rank0.get("/health")[0] == 503, 10.0)
    assert rank0.wait_exit() == -signal.SIGKILL
    assert time.monotonic() - started >= 1.5  # torch gives up after timeout + 1 s
    log = rank0.log()
    assert ("torch.distributed.DistStoreError: Timed out after 2 seconds waiting for clients. "
            "1/2 clients joined.") in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    assert "The server is fired up" not in log


def test_rank1_alone_fails_at_its_dist_timeout(tmp_path: Path, nodes: list[Node]) -> None:
    dist_port = free_port()
    rank1 = Node(tmp_path, 1, dist_port, extra=("--dist-timeout", "1"))
    nodes.append(rank1)
    assert rank1.wait_exit() == -signal.SIGKILL
    assert ("torch.distributed.DistNetworkError: The client socket has timed out after 1000ms "
            f"while trying to connect to (127.0.0.1, {dist_port}).") in rank1.log()
    assert rank1.get("/health")[0] == 0  # never served


def test_rank0_dist_port_in_use(tmp_path: Path, nodes: list[Node]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("0.0.0.0", 0))  # noqa: S104 - the TCPStore listens on every address
        busy.listen(1)
        rank0 = Node(tmp_path, 0, int(busy.getsockname()[1]))
        nodes.append(rank0)
        assert rank0.wait_exit() == -signal.SIGKILL
    assert "useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use" \
        in rank0.log()


@pytest.mark.parametrize("release", ["0.5.10", "0.5.17", "0.5.23"])
def test_rank0_stops_first(tmp_path: Path, nodes: list[Node], release: str) -> None:
    """0.5.17+: rank 0's ShutdownReq stops every TP rank (rank 1 exits 0); 0.5.10 has none (rank
    1's group breaks). 0.5.23: a SIGTERM to rank 1 first only logs that it waits."""
    rank0, rank1 = _pair(tmp_path, nodes, release)
    if release == "0.5.23":
        rank1.proc.send_signal(signal.SIGTERM)
        assert _wait_for(lambda: "SIGTERM received on node_rank 1; waiting for the rank-0 "
                         "ShutdownReq broadcast to stop the schedulers." in rank1.log(), 5.0)
        assert rank1.proc.poll() is None and rank1.get("/health")[0] == 200
    rank0.proc.send_signal(signal.SIGTERM)
    assert rank0.wait_exit() == 0
    if release == "0.5.10":
        assert rank1.wait_exit() == -signal.SIGKILL
        log1 = rank1.log()
        assert PEER_LOST in log1
        assert "Received sigquit from a child process. It usually means the child failed." in log1
    else:
        assert rank1.wait_exit() == 0
        log1 = rank1.log()
        assert " terminated with 0" in log1
        assert f"kill_process_tree called: parent_pid={rank1.proc.pid}, include_parent=False" \
            in log1
    assert _wait_for(lambda: not d.group_members(rank1.proc.pid), 5.0)  # its schedulers too
