"""Ports for the tests that hand one to a process they start (an engine, a router, a sweep's
server): never from the kernel's ephemeral range, where bind(0)-then-close races every other
program's connections (CI run Z: another process's server took the port a test had picked; the
stop-44 run: a dead worker's URL, still polled by a router, came alive as another stage's engine).

Two spans below that range, each split into shares for the runs .ci/run puts side by side and
each share into one slice per pytest-xdist worker, so no two of them ever hand out the same port:

- ``free_port_block`` (the integration harness, e2e, integration-newcore): 10000 up to the
  ephemeral range, shared by ``LLMOPS_TEST_PORT_SHARE=K/N``; a block's NCCL ports (base + 1000 ...)
  stay in the slice too;
- ``free_port`` (unit tests, unit-newcore): 2000 to 10000, shared by ``LLMOPS_UNIT_PORT_SHARE``.

Within a slice a process never hands out a port twice, and probes each with SO_REUSEADDR, as the
servers bind (another program may hold it)."""
from __future__ import annotations

import os
import random
import socket
from pathlib import Path

HARNESS = "LLMOPS_TEST_PORT_SHARE"
UNIT = "LLMOPS_UNIT_PORT_SHARE"
UNIT_SPAN = (2000, 10000)
NCCL_OFFSET = 1000

_GIVEN: set[int] = set()  # every port this test process handed out
_CURSOR: dict[str, int] = {}  # per span: where this process's next port is looked for


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def share(variable: str = HARNESS) -> tuple[int, int]:
    """This pytest run's share of a span, from ``variable``=K/N (the K-th of N, from 0): runs side
    by side each take their own share. 0/1 (all of it) without it."""
    text = os.environ.get(variable, "") or "0/1"
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise RuntimeError(f"{variable}={text!r}: expected K/N, e.g. 1/2") from None
    if not 0 <= index < count:
        raise RuntimeError(f"{variable}={text!r}: K must be 0 to N - 1")
    return index, count


def span(variable: str = HARNESS) -> tuple[int, int]:
    """The whole span that ``variable`` shares."""
    if variable == UNIT:
        return UNIT_SPAN
    low, _ = ephemeral_range()
    return 10000, max(low - 1, 10001)


def worker_span(variable: str = HARNESS) -> tuple[int, int]:
    """This pytest-xdist worker's own slice of the span, within this run's share."""
    bottom, top = span(variable)
    index, shares = share(variable)
    share_size = max((top - bottom) // shares, 1)
    bottom += index * share_size
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    slot = int(worker[2:]) if worker[2:].isdigit() else 0
    size = max(share_size // count, 1)
    return bottom + slot * size, bottom + (slot + 1) * size


def _take(variable: str, count: int, nccl: bool) -> int:
    start, end = worker_span(variable)
    last = end - count - (NCCL_OFFSET if nccl else 0)
    if last <= start:
        raise RuntimeError(f"no room for a block of {count} ports in {start}..{end}")
    if variable not in _CURSOR:  # a random start, so two runs side by side seldom probe the same ports
        _CURSOR[variable] = random.randrange(start, start + max((last - start) // 2, 1))
    for _ in range(last - start):
        base = _CURSOR[variable]
        _CURSOR[variable] = base + 1 if base + 1 < last else start
        ports = list(range(base, base + count))
        if nccl:
            ports += list(range(base + NCCL_OFFSET, base + NCCL_OFFSET + count))
        if _GIVEN.intersection(ports) or not all(bindable(port) for port in ports):
            continue
        _GIVEN.update(ports)
        _CURSOR[variable] = base + count if base + count < last else start
        return base
    raise RuntimeError(f"no free block of {count} ports in {start}..{end}")


def free_port_block(count: int) -> int:
    """A base port with ``count`` consecutive free ports (and base + 1000 ... for NCCL) from the
    harness's span: a sweep's thousands of client connections (and their TIME-WAIT) live in the
    ephemeral range and would make a port there unbindable at random."""
    return _take(HARNESS, count, nccl=True)


def free_port() -> int:
    """One free port for a unit test's process, from the unit span (never handed out twice by
    this process, never in the ephemeral range)."""
    return _take(UNIT, 1, nccl=False)


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
