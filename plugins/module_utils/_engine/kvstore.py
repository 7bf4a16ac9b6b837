# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The embedded engine's stand-in for ``mooncake_master`` (mooncake-transfer-engine 0.3.13.post1):
the index of a store whose bytes live in segments its clients mount (each SGLang instance's
``global_segment_size``), so a page one instance put is found by every other (docs/engine.md
"Storage tier").

    python -m ansible_collections.llmops.sglang.plugins.module_utils._engine.kvstore \\
        --rpc_port=50051 --rpc_address=127.0.0.1 --metrics_port=9003 --metrics_host=127.0.0.1

Same flags as the real master (gflags ``--name=value`` or ``--name value``; an unknown flag is
refused as gflags refuses it), the same ``/health`` and ``/metrics`` (the ``master_*`` gauges and
counters the real one serves) on the metrics port. On the RPC port it speaks JSON over HTTP to
the engine's client (storeclient.py), not the real RPC: mount/unmount a segment, ping (a client
not heard from for ``client_ttl`` seconds is gone, with the objects in its segment, as the real
master unmounts it), exist, get (touch), put (into the putter's segment while it has room, else
any), remove_all. Objects are evicted least recently used first once the allocated bytes pass
``eviction_high_watermark_ratio`` of the capacity, ``eviction_ratio`` of the objects at a time.
Stdlib only, Python >= 3.10.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# the real master's flags this stand-in reads, with its defaults (mooncake_master --helpfull)
FLAGS: dict[str, Any] = {
    "rpc_port": 50051, "port": 50051, "rpc_address": "0.0.0.0", "metrics_port": 9003, "metrics_host": "0.0.0.0",
    "eviction_high_watermark_ratio": 0.9, "eviction_ratio": 0.05, "client_ttl": 10,
    "default_kv_lease_ttl": "10000", "enable_metric_reporting": True, "rpc_thread_num": 0,
}


def parse_flags(argv: list[str]) -> dict[str, Any]:
    """gflags' forms: ``--name=value``, ``--name value``, ``--name`` (a bool) and ``-name``."""
    values = dict(FLAGS)
    words = list(argv)
    while words:
        word = words.pop(0)
        if not word.startswith("-"):
            raise SystemExit(f"ERROR: unexpected argument '{word}'")
        name, sep, value = word.lstrip("-").partition("=")
        if name not in FLAGS:
            raise SystemExit(f"ERROR: unknown command line flag '{name}'")
        default = FLAGS[name]
        if not sep:
            if isinstance(default, bool):
                value = "true"
            elif not words:
                raise SystemExit(f"ERROR: flag '{name}' is missing its argument")
            else:
                value = words.pop(0)
        try:
            values[name] = (value.lower() in ("true", "1", "yes")) if isinstance(default, bool) \
                else type(default)(value)
        except ValueError:
            raise SystemExit(f"ERROR: illegal value '{value}' specified for flag '{name}'") from None
    return values


@dataclass
class Segment:
    capacity: int
    host: str
    seen: float
    used: int = 0


@dataclass
class Store:
    """The master's state: segments, objects (key -> segment, bytes; least recently used first)."""

    high_watermark: float = 0.9
    eviction_ratio: float = 0.05
    client_ttl: float = 10.0
    segments: dict[str, Segment] = field(default_factory=dict)
    objects: OrderedDict[str, tuple[str, int]] = field(default_factory=OrderedDict)
    counters: dict[str, int] = field(default_factory=lambda: {"exist": 0, "get": 0, "put": 0, "evicted": 0})
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def capacity(self) -> int:
        return sum(s.capacity for s in self.segments.values())

    @property
    def allocated(self) -> int:
        return sum(s.used for s in self.segments.values())

    def mount(self, client: str, capacity: int, host: str, now: float) -> None:
        with self.lock:
            self.segments[client] = Segment(max(int(capacity), 0), host, now)

    def unmount(self, client: str) -> int:
        with self.lock:
            return self._drop_client(client)

    def _drop_client(self, client: str) -> int:
        self.segments.pop(client, None)
        gone = [key for key, (owner, _) in self.objects.items() if owner == client]
        for key in gone:
            del self.objects[key]
        return len(gone)

    def ping(self, client: str, now: float) -> bool:
        with self.lock:
            seg = self.segments.get(client)
            if seg is None:
                return False
            seg.seen = now
            return True

    def reap(self, now: float) -> list[str]:
        """Clients not heard from for client_ttl: unmounted, their objects gone."""
        with self.lock:
            late = [c for c, s in self.segments.items() if now - s.seen > self.client_ttl]
            for client in late:
                self._drop_client(client)
            return late

    def exist(self, keys: list[str], touch: bool = False) -> list[bool]:
        with self.lock:
            self.counters["get" if touch else "exist"] += 1
            found = [key in self.objects for key in keys]
            if touch:
                for key, hit in zip(keys, found, strict=True):
                    if hit:
                        self.objects.move_to_end(key)
            return found

    def put(self, client: str, keys: list[str], size: int) -> int:
        """Objects of ``size`` bytes, each into the putter's segment while it has room, else the
        emptiest; evicting first when over the high watermark. Returns how many were stored."""
        stored = 0
        with self.lock:
            self.counters["put"] += 1
            for key in keys:
                if key in self.objects:
                    self.objects.move_to_end(key)
                    continue
                self._evict_for(size)
                owner = self._segment_for(client, size)
                if owner is None:
                    continue
                self.segments[owner].used += size
                self.objects[key] = (owner, size)
                stored += 1
        return stored

    def _segment_for(self, client: str, size: int) -> str | None:
        own = self.segments.get(client)
        if own is not None and own.capacity - own.used >= size:
            return client
        room = [(s.capacity - s.used, c) for c, s in self.segments.items() if s.capacity - s.used >= size]
        return max(room)[1] if room else None

    def _evict_for(self, size: int) -> None:
        capacity = self.capacity
        if not capacity or self.allocated + size <= capacity * self.high_watermark:
            return
        count = max(1, int(len(self.objects) * self.eviction_ratio))
        for _ in range(min(count, len(self.objects))):
            key, (owner, bytes_) = self.objects.popitem(last=False)
            if owner in self.segments:
                self.segments[owner].used -= bytes_
            self.counters["evicted"] += 1

    def remove_all(self) -> int:
        with self.lock:
            count = len(self.objects)
            self.objects.clear()
            for seg in self.segments.values():
                seg.used = 0
            return count

    def metrics(self) -> str:
        with self.lock:
            values = [
                ("master_allocated_bytes", "gauge", "Total memory bytes currently allocated across all segments",
                 self.allocated),
                ("master_total_capacity_bytes", "gauge", "Total memory capacity across all mounted segments",
                 self.capacity),
                ("master_key_count", "gauge", "Total number of keys managed by the master", len(self.objects)),
                ("master_active_clients", "gauge", "Total number of active clients", len(self.segments)),
                ("master_exist_key_requests_total", "counter", "Total number of ExistKey requests received",
                 self.counters["exist"]),
                ("master_get_replica_list_requests_total", "counter", "Total number of GetReplicaList requests "
                 "received", self.counters["get"]),
                ("master_put_start_requests_total", "counter", "Total number of PutStart requests received",
                 self.counters["put"]),
                ("master_successful_evictions_total", "counter", "Total number of successful eviction operations",
                 self.counters["evicted"]),
            ]
        return "".join(f"# HELP {n} {h}\n# TYPE {n} {t}\n{n} {v}\n" for n, t, h, v in values)


def _handler(store: Store, rpc: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            return

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if rpc:
                self._send(404, b"404 Not Found", "text/plain")
            elif self.path == "/health":
                self._send(200, json.dumps({"status": "ok", "role": "leader", "ha_state": "serving",
                                            "service_ready": True, "leader_address": None,
                                            "view_version": None}).encode())
            elif self.path == "/metrics":
                self._send(200, store.metrics().encode(), "text/plain; version=0.0.4")
            else:
                self._send(404, b"404 Not Found", "text/plain")

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if not rpc:
                self._send(404, b"404 Not Found", "text/plain")
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                out = self._rpc(self.path.strip("/"), body)
            except (ValueError, KeyError, TypeError) as exc:
                self._send(400, json.dumps({"error": str(exc)}).encode())
                return
            if out is None:
                self._send(404, json.dumps({"error": f"no method {self.path}"}).encode())
            else:
                self._send(200, json.dumps(out).encode())

        def _rpc(self, method: str, body: dict[str, Any]) -> dict[str, Any] | None:
            now = time.monotonic()
            if method == "mount":
                store.mount(str(body["client"]), int(body["capacity"]), str(body.get("host") or ""), now)
                return {"ok": True}
            if method == "unmount":
                return {"removed": store.unmount(str(body["client"]))}
            if method == "ping":
                return {"ok": store.ping(str(body["client"]), now)}
            if method in ("exist", "get"):
                return {"found": store.exist([str(k) for k in body["keys"]], touch=method == "get")}
            if method == "put":
                return {"stored": store.put(str(body["client"]), [str(k) for k in body["keys"]], int(body["size"]))}
            if method == "remove_all":
                return {"removed": store.remove_all()}
            return None

    return Handler


def serve(flags: dict[str, Any]) -> None:
    store = Store(high_watermark=float(flags["eviction_high_watermark_ratio"]),
                  eviction_ratio=float(flags["eviction_ratio"]), client_ttl=float(flags["client_ttl"]))
    port = int(flags["rpc_port"] or flags["port"])
    servers = [ThreadingHTTPServer((str(flags["rpc_address"]), port), _handler(store, rpc=True)),
               ThreadingHTTPServer((str(flags["metrics_host"]), int(flags["metrics_port"])), _handler(store, rpc=False))]
    for server in servers:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"Master service started on port {port}, metrics_port={flags['metrics_port']} (llmops embedded engine's "
          "stand-in for mooncake_master)", flush=True)
    while True:
        time.sleep(1.0)
        for client in store.reap(time.monotonic()):
            print(f"client {client} not heard from for {store.client_ttl:g} s: its segment is unmounted", flush=True)


def main(argv: list[str] | None = None) -> int:
    serve(parse_flags(list(sys.argv[1:] if argv is None else argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
