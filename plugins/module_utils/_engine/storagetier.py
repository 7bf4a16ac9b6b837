# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""HiCache's storage tier (L3, ``--hicache-storage-backend file``) as SGLang 0.5.17's
``HiCacheFile`` keeps it (docs/engine.md "Prefix cache"; reference: the release's
``mem_cache/hicache_storage.py`` and ``storage/file/lru_file_evictor.py``):

- one file per page of ``page_tokens`` tokens in the folder ``SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR``
  (default ``/tmp/hicache``), named ``<page hash>_<model>[_<tp rank>_<tp size>].bin`` (an MLA
  model's ranks share rank 0's files, without the TP part); the page hash chains SHA-256 over
  the page's token ids as uint32 little-endian, after the previous page's digest;
- files are written whole (a temporary name, then ``os.replace``) and survive a restart: at
  start-up the folder's ``.bin`` files of this model and rank seed the index, oldest first;
- ``SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE`` caps the folder's bytes (LRU, evicting down to 90% of
  the cap), ``..._MIN_FREE_SPACE`` keeps that much free on the file system; without a cap nothing
  is evicted;
- a prompt's pages after its device and host hit are looked up in order; fewer than
  ``prefetch_threshold`` tokens (256) found is no hit (SGLang revokes such a prefetch).

Modelled: a page file holds no KV, it is a sparse file of the page's modelled size (the KV
bytes per token x its tokens), so the folder's apparent size is what the real one would be and the
disk stays free; token ids that are not integers (the engine's text tokens) are hashed to
uint32 first. Stdlib only, Python >= 3.10.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence

DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
MAX_SIZE_ENV = "SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"
MIN_FREE_ENV = "SGLANG_HICACHE_FILE_BACKEND_MIN_FREE_SPACE"
DEFAULT_DIR = "/tmp/hicache"
EVICTION_RATIO = 0.9  # evict down to this share of the cap
PREFETCH_THRESHOLD = 256  # tokens: a smaller storage hit is revoked
# --hicache-storage-backend -> the class SGLang names it by (the cache_source label of
# sglang:cached_tokens_total) and the module its factory logs
BACKEND_CLASSES = {"file": ("sglang.srt.mem_cache.hicache_storage", "HiCacheFile"),
                   "mooncake": ("sglang.srt.mem_cache.storage.mooncake_store.mooncake_store", "MooncakeStore")}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)b?\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_size(value: object) -> int:
    """Bytes of a size as the file backend reads it ('200G', '1Gi', '1048576'); 0 (no cap) for
    none, empty, '0' or a value it cannot read."""
    if value is None:
        return 0
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(0, int(value))
    found = _SIZE.match(str(value))
    if not found:
        return 0
    number, unit, binary = found.groups()
    return max(0, int(float(number) * (1024 if binary else 1000) ** _POWERS[unit.lower()]))


def token_word(token: Hashable) -> int:
    """A token id as the uint32 the page hash reads (text tokens of the engine: their CRC-32)."""
    if isinstance(token, int) and not isinstance(token, bool):
        return token & 0xFFFFFFFF
    return zlib.crc32(str(token).encode("utf-8"))


def page_hashes(ids: Sequence[Hashable], page_tokens: int, pages: int) -> list[str]:
    """The chained SHA-256 hex digests of the first ``pages`` whole pages of ``ids``."""
    out: list[str] = []
    prior = b""
    for index in range(min(pages, len(ids) // page_tokens)):
        page = ids[index * page_tokens:(index + 1) * page_tokens]
        digest = hashlib.sha256(prior + struct.pack(f"<{len(page)}I", *(token_word(t) for t in page)))
        prior = digest.digest()
        out.append(digest.hexdigest())
    return out


class PageStore:
    """One rank's pages in its folder: lookup, backup, LRU eviction at the cap, clear."""

    def __init__(self, folder: str, model_name: str, page_tokens: int, page_bytes: int, *, tp_rank: int = 0,
                 tp_size: int = 1, mla: bool = False, cap_bytes: int = 0, min_free_bytes: int = 0,
                 prefetch_threshold: int = PREFETCH_THRESHOLD) -> None:
        self.folder = folder
        self.suffix = "_" + "-".join(model_name.split("/")) + ("" if mla else f"_{tp_rank}_{tp_size}")
        self.page_tokens = max(1, int(page_tokens))
        self.page_bytes = max(1, int(page_bytes))
        self.cap_bytes = max(0, int(cap_bytes))
        self.min_free_bytes = max(0, int(min_free_bytes))
        self.prefetch_threshold = max(0, int(prefetch_threshold))
        self.index: OrderedDict[str, int] = OrderedDict()  # page hash -> bytes, least recently used first
        self.bytes = 0
        self.backuped_tokens = 0  # host -> storage, cumulative
        self.prefetched_tokens = 0  # storage -> host, cumulative
        self.evicted_pages = 0
        self.backend_class = BACKEND_CLASSES["file"][1]
        self.backend_name = "file"
        os.makedirs(folder, exist_ok=True)
        self._load()

    @classmethod
    def from_env(cls, env: Mapping[str, str], model_name: str, page_tokens: int, page_bytes: int, *,
                 mla: bool = False, extra_config: Mapping[str, object] | None = None) -> PageStore:
        """The file backend of one server, from its environment (and extra config's keys, which win)."""
        extra = extra_config or {}
        threshold = extra.get("prefetch_threshold", PREFETCH_THRESHOLD)
        return cls(env.get(DIR_ENV) or DEFAULT_DIR, model_name, page_tokens, page_bytes, mla=mla,
                   cap_bytes=parse_size(extra.get("max_size", env.get(MAX_SIZE_ENV))),
                   min_free_bytes=parse_size(extra.get("min_free_space", env.get(MIN_FREE_ENV))),
                   prefetch_threshold=int(threshold) if isinstance(threshold, int) else PREFETCH_THRESHOLD)

    # -- the folder --------------------------------------------------------------------------
    def _path(self, key: str) -> str:
        return os.path.join(self.folder, f"{key}{self.suffix}.bin")

    def _load(self) -> None:
        """The pages a previous server left (oldest first), as the evictor's start-up scan."""
        tail = f"{self.suffix}.bin"
        found: list[tuple[float, str, int]] = []
        with os.scandir(self.folder) as entries:
            for entry in entries:
                if entry.name.endswith(tail) and entry.is_file():
                    stat = entry.stat()
                    found.append((stat.st_mtime, entry.name[:-len(tail)], stat.st_size))
        for _, key, size in sorted(found):
            self.index[key] = size
            self.bytes += size
        self._evict()

    def _write(self, key: str) -> None:
        path = self._path(key)
        tmp = f"{path}.tmp.{os.getpid()}.{uuid.uuid4().hex}"
        with open(tmp, "wb") as handle:
            handle.truncate(self.page_bytes)  # sparse: the page's size, no blocks
        os.replace(tmp, path)
        self.index[key] = self.page_bytes
        self.bytes += self.page_bytes

    def _free_bytes(self) -> int | None:
        try:
            return shutil.disk_usage(self.folder).free
        except OSError:
            return None

    def _evict(self) -> None:
        """Least recently used pages go: down to 90% of the cap when over it, and while the file
        system has less than the free-space floor (only with a cap: without one nothing goes)."""
        if not self.cap_bytes:
            return
        target = int(self.cap_bytes * EVICTION_RATIO) if self.bytes > self.cap_bytes else self.bytes
        while self.index and self.bytes > target:
            self._drop_oldest()
        if self.min_free_bytes:
            free = self._free_bytes()
            while self.index and free is not None and free < self.min_free_bytes:
                freed = self._drop_oldest()
                free += freed

    def _drop_oldest(self) -> int:
        key, size = self.index.popitem(last=False)
        self.bytes -= size
        self.evicted_pages += 1
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass
        return size

    # -- the tier's work ---------------------------------------------------------------------
    def lookup(self, ids: Sequence[Hashable], start: int, limit: int) -> int:
        """Tokens of ``ids`` found in storage from ``start`` (page-aligned) on, whole pages in a row
        up to ``limit``; 0 below the prefetch threshold. Found pages become the most recent."""
        first = -(-start // self.page_tokens)
        last = limit // self.page_tokens
        if last <= first or not self.index:
            return 0
        keys = page_hashes(ids, self.page_tokens, last)
        found = 0
        for key in keys[first:]:
            if key not in self.index:
                break
            found += 1
        tokens = first * self.page_tokens + found * self.page_tokens - start
        if found == 0 or tokens < self.prefetch_threshold:
            return 0
        for key in keys[first:first + found]:
            self.index.move_to_end(key)
        return tokens

    def prefetched(self, tokens: int) -> None:
        """A storage hit was read into the host pool."""
        self.prefetched_tokens += max(0, int(tokens))

    def backup(self, ids: Sequence[Hashable], upto: int) -> int:
        """The whole pages of ``ids[:upto]`` written where missing (host -> storage); the tokens
        written. The cap is kept after each write."""
        keys = page_hashes(ids, self.page_tokens, upto // self.page_tokens)
        written = 0
        for key in keys:
            if key in self.index:
                self.index.move_to_end(key)
                continue
            self._write(key)
            written += self.page_tokens
            self._evict()
        self.backuped_tokens += written
        return written

    def clear(self) -> int:
        """``POST /hicache/storage-backend/clear``: every file of the folder goes (the release
        deletes them all, not only this rank's); the files removed."""
        removed = 0
        with os.scandir(self.folder) as entries:
            for entry in entries:
                if entry.is_file():
                    try:
                        os.unlink(entry.path)
                        removed += 1
                    except FileNotFoundError:
                        pass
        self.index.clear()
        self.bytes = 0
        return removed
