"""Process helpers for tests that must prove a client stopped: who still talks to a port."""
from __future__ import annotations

import os
import re

_SOCKET = re.compile(r"socket:\[(\d+)\]")


def _connected_inodes(port: int) -> set[str]:
    """Socket inodes of established TCP connections to ``port`` (the client ends, IPv4 and IPv6)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01":  # remote port, ESTABLISHED
                inodes.add(fields[9])
    return inodes


def client_pids(port: int) -> list[int]:
    """Processes holding a connection to 127.0.0.1:``port`` (requests in flight or kept alive)."""
    inodes = _connected_inodes(port)
    if not inodes:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                match = _SOCKET.match(os.readlink(f"/proc/{entry}/fd/{fd}"))
            except OSError:
                continue
            if match and match.group(1) in inodes:
                pids.append(int(entry))
                break
    return sorted(pids)
