# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The nodes of a multi-node tensor-parallel engine meeting, and watching each other.

SGLang (0.5.x) runs ``--tp`` ranks over ``--nnodes`` nodes; every rank's scheduler calls
``torch.distributed.init_process_group(init_method="tcp://<--dist-init-addr>",
timeout=--dist-timeout)``: rank 0 hosts torch's TCPStore on the dist-init port (listening on
every address) and waits for all ranks; the others connect, retrying until the timeout. Then
every scheduler step broadcasts the new requests from TP rank 0 over a gloo group, so a rank that
goes away fails the others at once.

The engine's nodes do the same over a real TCP connection (a protocol of its own, one JSON
object a line; not torch's): rank 0 (``Rendezvous``) listens on the dist-init port when its
start-up reaches ``Init torch distributed begin.`` and waits until every rank has joined or
the timeout has passed; a node of rank > 0 (``Joiner``) connects, retrying until its timeout,
says how many ranks it carries, and waits for rank 0's go. The connections stay open while they
serve: one that ends is a lost peer, unless rank 0 said it was shutting down (0.5.17+ stop
every TP rank with a ``ShutdownReq`` broadcast). Waiting is wall time (real processes waiting
for each other), never scaled by ``LLMOPS_SIM_TIME_SCALE``. The failures carry the line torch
raises (checked with torch 2.13 on CPU: gloo backend, the same TCPStore rendezvous).

Sources: sglang 0.5.17 ``srt/distributed/bootstrap.py`` ``init_torch_distributed`` (51-135),
``_init_parallel_groups`` (``timeout=server_args.dist_timeout``, 217),
``_resolve_dist_init_method`` (145-160), ``srt/managers/scheduler_components/request_receiver.py``
``_broadcast_reqs_across_ranks``; torch ``distributed/rendezvous.py`` ``_create_c10d_store``
and ``ProcessGroupNCCL.hpp`` ``kProcessGroupNCCLDefaultTimeout`` (10 minutes: the timeout when
``--dist-timeout`` is not given). docs/engine-api.md "Multi-node".
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import signal
import socket
import sys
from dataclasses import dataclass, field
from typing import Any, Protocol

# torch's default process-group timeout for the NCCL backend SGLang uses on GPUs (SGLang passes
# --dist-timeout, None by default)
DEFAULT_TIMEOUT_S = 600.0
CONNECT_RETRY_S = 0.2
HELLO_TIMEOUT_S = 5.0
GO = {"event": "go"}
SHUTDOWN = {"event": "shutdown"}

# the exception lines torch raises (torch 2.13.0+cpu, recorded on this machine)
_STORE_TIMEOUT = ("torch.distributed.DistStoreError: Timed out after {seconds} seconds waiting "
                  "for clients. {joined}/{world} clients joined.")
_CLIENT_TIMEOUT = ("torch.distributed.DistNetworkError: The client socket has timed out after "
                   "{ms}ms while trying to connect to ({host}, {port}).")
_LISTEN_FAILED = ("torch.distributed.DistNetworkError: The server socket has failed to listen on "
                  "any local network address. port: {port}, useIpv6: false, code: -{errno}, name: "
                  "{name}, message: {message}")
_PEER_LOST = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:"
              "553] Connection closed by peer [{host}]:{port}. This is typically caused by a "
              "remote worker crashing. Check the logs of the remote worker before reporting an "
              "error. GLHF! \U0001f3d6\ufe0f")


class MeetingError(Exception):
    """The nodes did not meet; the message is the exception line torch raises."""


class _ErrorLog(Protocol):
    def error(self, msg: str) -> None: ...


def _size(args: dict[str, Any], *dests: str) -> int:
    for dest in dests:
        value = args.get(dest)
        if value is not None:
            return max(int(value), 1)
    return 1


def split_address(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPv6]:PORT`` (NetworkAddress.parse) as (host, port)."""
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"invalid --dist-init-addr {addr!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class Topology:
    """Where this node stands in its group: node rank, ranks (GPUs) in all and here, rank 0's
    dist-init address and the timeout."""

    nnodes: int
    node_rank: int
    world: int
    ranks_here: int
    host: str
    port: int
    timeout_s: float

    @classmethod
    def from_args(cls, args: dict[str, Any]) -> Topology | None:
        """None for a single node. Without ``--dist-init-addr`` SGLang uses
        ``tcp://<--host or 127.0.0.1>:<--nccl-port or a random free port>`` on every node (so
        nodes > 0 never reach rank 0: port 0 here stands for the random one)."""
        nnodes = _size(args, "nnodes")
        if nnodes <= 1:
            return None
        world = (_size(args, "tp_size", "tensor_parallel_size")
                 * _size(args, "pp_size", "pipeline_parallel_size"))
        if args.get("dist_init_addr"):
            host, port = split_address(str(args["dist_init_addr"]))
        else:
            host, port = str(args.get("host") or "127.0.0.1"), int(args.get("nccl_port") or 0)
        timeout = args.get("dist_timeout")
        return cls(nnodes=nnodes, node_rank=max(int(args.get("node_rank") or 0), 0),
                   world=world, ranks_here=max(world // nnodes, 1), host=host, port=port,
                   timeout_s=float(timeout) if timeout else DEFAULT_TIMEOUT_S)


def scheduler_exception(log: _ErrorLog, line: str) -> None:
    """run_scheduler_process's ``except``: the traceback's last line, then SIGQUIT to the main
    process (whose handler ends it: procs.EngineProcs._on_sigquit)."""
    log.error("Scheduler hit an exception: Traceback (most recent call last):")
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"{line}\n")
        sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGQUIT)


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def _peer_lost(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    host, port = (str(peer[0]), peer[1]) if isinstance(peer, tuple) else ("?", 0)
    if host.startswith("::ffff:"):  # an IPv4 peer on the dual-stack socket
        host = host[len("::ffff:"):]
    return _PEER_LOST.format(host=host, port=port)


def _listen_socket(port: int) -> socket.socket:
    """The TCPStore's socket: every address (IPv6 dual stack where there is one), ``port``."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        address: tuple[Any, ...] = ("::", port)
    except OSError:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        address = ("0.0.0.0", port)  # noqa: S104 - torch's TCPStore listens on every address
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


@dataclass
class _Peer:
    node_rank: int
    ranks: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


@dataclass
class Rendezvous:
    """Rank 0: hosts the meeting on the dist-init port, then watches the other nodes."""

    topo: Topology
    peers: dict[int, _Peer] = field(default_factory=dict)
    _complete: asyncio.Event = field(default_factory=asyncio.Event)
    _server: asyncio.AbstractServer | None = None
    met: bool = False

    def joined(self) -> int:
        """Ranks that have joined, this node's included (torch counts every rank's client)."""
        return self.topo.ranks_here + sum(p.ranks for p in self.peers.values())

    async def meet(self) -> float:
        """Wall seconds until every rank joined; MeetingError on a listen failure or when the
        timeout passes first (torch checks whole seconds: it gives up after timeout + 1 s)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            sock = _listen_socket(self.topo.port)
        except OSError as exc:
            name = errno.errorcode.get(exc.errno or 0, "UNKNOWN")
            raise MeetingError(_LISTEN_FAILED.format(
                port=self.topo.port, errno=exc.errno or 0, name=name,
                message=(exc.strerror or str(exc)).lower())) from exc
        self._server = await asyncio.start_server(self._on_node, sock=sock)
        if self.joined() < self.topo.world:
            try:
                await asyncio.wait_for(self._complete.wait(), self.topo.timeout_s + 1.0)
            except (asyncio.TimeoutError, TimeoutError) as exc:  # noqa: UP041 - 3.10
                raise MeetingError(_STORE_TIMEOUT.format(
                    seconds=int(self.topo.timeout_s) + 1, joined=self.joined(),
                    world=self.topo.world)) from exc
        self._server.close()  # the meeting is over; the connections stay
        for peer in self.peers.values():
            peer.writer.write(_line(GO))
            with contextlib.suppress(ConnectionError):
                await peer.writer.drain()
        self.met = True
        return loop.time() - start

    async def _on_node(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A node says who it is (``{"node_rank": R, "ranks": K}``); anything else is dropped."""
        try:
            hello = json.loads(await asyncio.wait_for(reader.readline(), HELLO_TIMEOUT_S))
            rank, ranks = int(hello["node_rank"]), int(hello["ranks"])
        except Exception:  # not one of ours: a port scan, a stray client
            await _close(writer)
            return
        if not 0 < rank < self.topo.nnodes or rank in self.peers or self.met:
            await _close(writer)
            return
        self.peers[rank] = _Peer(rank, max(ranks, 1), reader, writer)
        if self.joined() >= self.topo.world:
            self._complete.set()

    async def watch(self) -> str:
        """Until a node's connection ends: the line rank 0's scheduler fails with."""
        reads = {asyncio.ensure_future(p.reader.read()): p for p in self.peers.values()}
        if not reads:
            await asyncio.Event().wait()
        try:
            done, _ = await asyncio.wait(reads, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in reads:
                task.cancel()
        return _peer_lost(reads[next(iter(done))].writer)

    async def close(self, shutdown: bool) -> None:
        """Rank 0 stops: tell the nodes (``shutdown``: the ShutdownReq broadcast of 0.5.17+),
        then drop the connections (without it the nodes see a lost peer, as 0.5.10's do)."""
        if self._server is not None:
            self._server.close()
        for peer in self.peers.values():
            if shutdown and self.met:
                peer.writer.write(_line(SHUTDOWN))
                with contextlib.suppress(ConnectionError):
                    await peer.writer.drain()
            await _close(peer.writer)


@dataclass
class Joiner:
    """A node of rank > 0: joins rank 0's meeting, then watches rank 0."""

    topo: Topology
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None

    async def _connect(self, deadline: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        while True:
            left = deadline - loop.time()
            try:
                self.reader, self.writer = await asyncio.wait_for(
                    asyncio.open_connection(self.topo.host, self.topo.port), max(left, 0.05))
                return self.reader, self.writer
            except (OSError, asyncio.TimeoutError, TimeoutError) as exc:  # noqa: UP041 - 3.10
                if loop.time() + CONNECT_RETRY_S >= deadline:
                    raise MeetingError(_CLIENT_TIMEOUT.format(
                        ms=int(self.topo.timeout_s * 1000), host=self.topo.host,
                        port=self.topo.port)) from exc
            await asyncio.sleep(CONNECT_RETRY_S)

    async def meet(self) -> float:
        """Wall seconds until rank 0 said go. Connecting is retried until the timeout
        (MeetingError: torch's client timeout; torch itself retries once more after a back-off);
        once connected the node waits for rank 0, whose own timeout decides (a connection that
        ends first: MeetingError with the lost-peer line)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        _, writer = await self._connect(start + self.topo.timeout_s)
        writer.write(_line({"node_rank": self.topo.node_rank, "ranks": self.topo.ranks_here}))
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        if await self._next() != GO:
            raise MeetingError(_peer_lost(writer))
        return loop.time() - start

    async def _next(self) -> dict[str, Any] | None:
        """rank 0's next message; None when the connection ended (or never was)."""
        if self.reader is None:
            return None
        try:
            raw = await self.reader.readline()
            return json.loads(raw) if raw else None
        except (ConnectionError, ValueError):
            return None

    async def watch(self) -> str | None:
        """Until rank 0 goes: None when it said it was shutting down, else the line this node's
        scheduler fails with."""
        message = await self._next()
        if message == SHUTDOWN:
            return None
        if self.writer is None:
            return _PEER_LOST.format(host=self.topo.host, port=self.topo.port)
        return _peer_lost(self.writer)

    async def close(self) -> None:
        if self.writer is not None:
            await _close(self.writer)
