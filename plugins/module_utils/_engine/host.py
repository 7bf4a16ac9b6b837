# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The simulated host the engine starts on, from its environment (never SGLang flags): which GPU
the instance gets (``LLMOPS_SIM_GPUS`` by physical id, ``CUDA_VISIBLE_DEVICES``, ``--base-gpu-id``),
the host's MemAvailable (``LLMOPS_SIM_HOST_MEM_AVAILABLE_GB`` or /proc/meminfo), the accept length
override (``LLMOPS_SIM_ACCEPT_LENGTH``), and the listening socket. Failures are ``StartupError``
with the line the real server prints."""
from __future__ import annotations

import dataclasses
import errno
import os
import socket
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel import EnginePlan

DEFAULT_GPU = "NVIDIA H200"


class StartupError(Exception):
    """Startup failed; the message is what the real server would print."""


def _gpu_names() -> list[str]:
    return [n.strip() for n in os.environ.get("LLMOPS_SIM_GPUS", DEFAULT_GPU).split(",")
            if n.strip()] or [DEFAULT_GPU]


def _visible_ids(count: int) -> list[int]:
    visible_env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible_env is None or not visible_env.strip():
        return list(range(count))
    try:
        visible = [int(v) for v in visible_env.split(",") if v.strip()]
    except ValueError as exc:
        raise StartupError("RuntimeError: No CUDA GPUs are available") from exc
    if not visible:
        raise StartupError("RuntimeError: No CUDA GPUs are available")
    return visible


def visible_gpu(args: dict[str, Any]) -> tuple[str, int]:
    """(name of the instance's first GPU, GPUs it needs on this node)."""
    names = _gpu_names()
    visible = _visible_ids(len(names))
    base = int(args.get("base_gpu_id") or 0)
    needed = (int(args.get("tp_size") or 1) * int(args.get("pp_size") or 1)
              * int(args.get("dp_size") or 1)) // max(int(args.get("nnodes") or 1), 1)
    needed = max(needed, 1)
    if base + needed > len(visible) or any(v >= len(names) or v < 0 for v in visible):
        raise StartupError(
            f"RuntimeError: CUDA error: invalid device ordinal (the instance needs {needed} "
            f"GPU(s) from base_gpu_id {base}; visible: {os.environ.get('CUDA_VISIBLE_DEVICES') or 'all'}; "
            f"simulated GPUs: {', '.join(names)})")
    return names[visible[base]], needed


def host_available_bytes() -> int | None:
    env = os.environ.get("LLMOPS_SIM_HOST_MEM_AVAILABLE_GB")
    if env:
        try:
            return int(float(env) * 1e9)
        except ValueError as exc:
            raise StartupError(f"invalid LLMOPS_SIM_HOST_MEM_AVAILABLE_GB={env!r}") from exc
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def apply_accept_length(plan: EnginePlan) -> EnginePlan:
    """The plan with ``LLMOPS_SIM_ACCEPT_LENGTH`` as its accept length (speculative decoding
    only): the engine cannot know how good the draft weights are."""
    env = os.environ.get("LLMOPS_SIM_ACCEPT_LENGTH")
    if not env or not plan.spec_algorithm:
        return plan
    try:
        value = float(env)
    except ValueError as exc:
        raise StartupError(f"invalid LLMOPS_SIM_ACCEPT_LENGTH={env!r}") from exc
    return dataclasses.replace(plan, accept_length=value)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the model loads (uvicorn's errors when it cannot)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(
                f"ERROR:    [Errno 98] error while attempting to bind on address "
                f"('{host}', {port}): [errno 98] address already in use") from exc
        raise StartupError(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on "
                           f"address ('{host}', {port}): {exc.strerror}") from exc
    sock.setblocking(False)
    return sock
