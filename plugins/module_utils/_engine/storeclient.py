# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""HiCache's storage tier with ``--hicache-storage-backend mooncake``, as SGLang 0.5.17's
``MooncakeStore`` uses it (``mem_cache/storage/mooncake_store/mooncake_store.py``): the extra
config's ``master_server_address``, ``global_segment_size`` (split over the TP ranks: each rank
mounts ``global_segment_size // tp_size``), ``local_hostname``, ``protocol`` and
``extra_backend_tag``; keys ``<tag>_<model>_<page hash>_<rank>_<size>`` (an MLA model's ranks
share rank 0's keys), so every instance of the same model and layout finds the pages any other
put. The store is the embedded engine's stand-in master (kvstore.py) over HTTP; a master that
cannot be reached at start is a failed setup (the server dies, as SGLang's does), later a miss.
Same interface as storagetier.PageStore. Stdlib only, Python >= 3.10.
"""
from __future__ import annotations

import http.client
import json
import os
import threading
import uuid
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.storagetier import (
    PREFETCH_THRESHOLD,
    page_hashes,
)

DEFAULT_SEGMENT = 4 * 2**30  # SGLang's MOONCAKE_GLOBAL_SEGMENT_SIZE default, "4gb"
PING_S = 2.0  # the real client's heartbeat is faster than the master's client_ttl (10 s)
TIMEOUT_S = 5.0


class StoreError(RuntimeError):
    pass


def parse_segment(value: object) -> int:
    """mooncake_store.py _parse_global_segment_size: an int, or "<n>gb" (GiB), or digits."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text.endswith("gb"):
        return int(text[:-2].strip()) * 2**30
    return int(text)


class StoreClient:
    """One rank's view of the shared store: its mounted segment, lookup, put, clear."""

    backend_class = "MooncakeStore"
    backend_name = "mooncake"

    def __init__(self, extra: Mapping[str, Any], model_name: str, page_tokens: int, page_bytes: int, *,
                 tp_rank: int = 0, tp_size: int = 1, mla: bool = False) -> None:
        master = extra.get("master_server_address")
        if not master:
            raise StoreError("Either master_server_address or client_server_address is required in extra_config")
        host, _, port = str(master).rpartition(":")
        self.master = (host.strip("[]"), int(port))
        self.page_tokens = max(1, int(page_tokens))
        self.page_bytes = max(1, int(page_bytes))
        threshold = extra.get("prefetch_threshold", PREFETCH_THRESHOLD)
        self.prefetch_threshold = int(threshold) if isinstance(threshold, int) else PREFETCH_THRESHOLD
        parts = [str(extra["extra_backend_tag"])] if extra.get("extra_backend_tag") is not None else []
        parts.append("-".join(model_name.split("/")))
        self.prefix = "_".join(parts)
        self.suffix = "" if mla else f"_{tp_rank}_{tp_size}"
        self.segment = parse_segment(extra.get("global_segment_size", DEFAULT_SEGMENT)) // max(int(tp_size), 1)
        self.host = str(extra.get("local_hostname") or "localhost")
        self.client = f"{self.host}:{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.bytes = 0  # bytes this rank put (the store's own total is the master's)
        self.backuped_tokens = 0
        self.prefetched_tokens = 0
        self.evicted_pages = 0
        try:
            self._call("mount", {"client": self.client, "capacity": self.segment, "host": self.host})
        except StoreError as exc:
            raise StoreError(f"Failed to setup Mooncake store, error code: -1 ({exc})") from None
        self._stop = threading.Event()
        threading.Thread(target=self._heartbeat, daemon=True).start()

    # -- the master ---------------------------------------------------------------------------
    def _call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        conn = http.client.HTTPConnection(*self.master, timeout=TIMEOUT_S)
        try:
            conn.request("POST", f"/{method}", json.dumps(body), {"Content-Type": "application/json"})
            reply = conn.getresponse()
            data = reply.read()
        except (OSError, http.client.HTTPException) as exc:
            raise StoreError(f"master {self.master[0]}:{self.master[1]}: {exc}") from None
        finally:
            conn.close()
        if reply.status != 200:
            raise StoreError(f"master {method}: HTTP {reply.status}")
        return json.loads(data)

    def _heartbeat(self) -> None:
        while not self._stop.wait(PING_S):
            try:
                if not self._call("ping", {"client": self.client}).get("ok"):  # the master restarted
                    self._call("mount", {"client": self.client, "capacity": self.segment, "host": self.host})
            except StoreError:
                continue

    def close(self) -> None:
        self._stop.set()
        try:
            self._call("unmount", {"client": self.client})
        except StoreError:
            pass

    def _keys(self, ids: Sequence[Hashable], pages: int) -> list[str]:
        return [f"{self.prefix}_{h}{self.suffix}" for h in page_hashes(ids, self.page_tokens, pages)]

    # -- the tier's work (storagetier.PageStore's interface) ----------------------------------
    def lookup(self, ids: Sequence[Hashable], start: int, limit: int) -> int:
        first = -(-start // self.page_tokens)
        last = limit // self.page_tokens
        if last <= first:
            return 0
        keys = self._keys(ids, last)[first:]
        try:
            found_list = self._call("exist", {"keys": keys})["found"]
        except StoreError:
            return 0
        found = 0
        for hit in found_list:
            if not hit:
                break
            found += 1
        tokens = first * self.page_tokens + found * self.page_tokens - start
        if found == 0 or tokens < self.prefetch_threshold:
            return 0
        try:
            self._call("get", {"keys": keys[:found]})
        except StoreError:
            return 0
        return tokens

    def prefetched(self, tokens: int) -> None:
        self.prefetched_tokens += max(0, int(tokens))

    def backup(self, ids: Sequence[Hashable], upto: int) -> int:
        keys = self._keys(ids, upto // self.page_tokens)
        if not keys:
            return 0
        try:
            missing = [k for k, hit in zip(keys, self._call("exist", {"keys": keys})["found"], strict=True) if not hit]
            stored = int(self._call("put", {"client": self.client, "keys": missing, "size": self.page_bytes})["stored"]) \
                if missing else 0
        except StoreError:
            return 0
        self.bytes += stored * self.page_bytes
        written = stored * self.page_tokens
        self.backuped_tokens += written
        return written

    def clear(self) -> int:
        try:
            return int(self._call("remove_all", {})["removed"])
        except StoreError:
            return 0
