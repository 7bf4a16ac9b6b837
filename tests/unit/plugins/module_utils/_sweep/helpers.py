"""Shared by the tests of the sweep (the module_utils/_sweep package): the known-rate server
(tests/unit/knownrate_server.py, whose throughput is known analytically) in a subprocess on a free
loopback port, the module through ``ansible``, and the time-scaled embedded engine."""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .....ports import free_port
from .....procs import client_pids

UNIT = Path(__file__).resolve().parents[3]  # tests/unit: knownrate_server.py
ROOT = UNIT.parents[1]
sys.path.insert(0, str(UNIT))
import knownrate_server as krs  # noqa: E402


@contextlib.contextmanager
def knownrate_process() -> Iterator[str]:
    """A known-rate server in a subprocess on a free loopback port; its base URL."""
    proc = subprocess.Popen(
        [sys.executable, str(UNIT / "knownrate_server.py"), "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 20.0)
        line = proc.stdout.readline() if ready else ""
        if not line.startswith("PORT "):
            pytest.fail(f"known-rate server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def configure(base: str, **fields: Any) -> krs.ServerConfig:
    req = urllib.request.Request(
        base + "/_config", data=json.dumps(fields).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return krs.ServerConfig(**json.loads(resp.read()))


# Interrupts: a sweep of requests that would take 100 s each (10 tokens/s, 1000 tokens).
SLOW_CFG = {"slots": 8, "rate": 10.0, "prefill_s": 0.01}
SLOW_OPTIONS = {"concurrency": [4], "max_tokens": 1000, "warmup": 0, "level_warmup": False}


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _wait_for(predicate: Any, seconds: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def _kill_clients(url: str) -> None:
    """SIGKILL whatever still talks to the server (never this test process)."""
    for pid in client_pids(_port(url)):
        if pid != os.getpid():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _stats(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(base + "/_stats", timeout=5) as resp:
        return json.loads(resp.read())


def _ansible(args: list[str], tree: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_CACHE_PLUGIN="memory",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_NOCOLOR="1",
    )
    cmd = [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "llmops.sglang.throughput_sweep", *args]
    if tree:
        cmd += ["-t", tree]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def parse_cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


ENGINE_SCALE = 0.02  # the local inventory's scale before this check existed: 50x the GPU
ENGINE_ARGV = [
    "--model-path", str(ROOT / "data" / "models" / "qwen3.6-27b"), "--served-model-name", "qwen3.6-27b",
    "--host", "127.0.0.1", "--mem-fraction-static", "0.8", "--max-running-requests", "32",
    "--cuda-graph-max-bs-decode", "32", "--enable-metrics", "--speculative-algorithm", "NEXTN",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    "--mamba-radix-cache-strategy", "extra_buffer", "--enable-hierarchical-cache", "--hicache-size", "4",
    "--hicache-write-policy", "write_through", "--hicache-io-backend", "direct",
    "--hicache-mem-layout", "page_first_direct",
]
# a PD pair's instances: no HiCache (SGLang 0.5.17 refuses it on a decode)
PD_ENGINE_ARGV = ENGINE_ARGV[:ENGINE_ARGV.index("--enable-hierarchical-cache")]
ENGINE_ENV = {
    "LLMOPS_SGLANG_RELEASE": "0.5.23", "LLMOPS_SIM_GPUS": "NVIDIA H200", "CUDA_VISIBLE_DEVICES": "0",
    "LLMOPS_SIM_TIME_SCALE": str(ENGINE_SCALE), "LLMOPS_SIM_HOST_MEM_AVAILABLE_GB": "200",
}


@contextlib.contextmanager
def engine_process(log: Path, *extra_argv: str, scale: float = ENGINE_SCALE,
                   argv: list[str] | None = None) -> Iterator[str]:
    """The embedded engine (``argv``, ENGINE_ARGV as it is at the call by default, and ``extra_argv``)
    on a free loopback port; its URL."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "collections"), **dict(ENGINE_ENV, LLMOPS_SIM_TIME_SCALE=str(scale)))
    env.pop("LLMOPS_SIM_ACCEPT_LENGTH", None)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ansible_collections.llmops.sglang.plugins.module_utils._engine",
             *(ENGINE_ARGV if argv is None else argv), *extra_argv, "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60.0
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"engine not ready: {log.read_text()[-3000:]}")
            time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
