"""The embedded engine's storage tier (``_engine/storagetier.py``) and the prefix cache behind it:
SGLang 0.5.17's file backend (page names, chained page hashes, the cap's LRU eviction, the
prefetch threshold, clear) and what survives a restart."""
from __future__ import annotations

import asyncio
import hashlib
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from ansible_collections.llmops.sglang.plugins.module_utils._engine.radixcache import PrefixCache
from ansible_collections.llmops.sglang.plugins.module_utils._engine.scheduler import clear_storage
from ansible_collections.llmops.sglang.plugins.module_utils._engine.server import HttpServer
from ansible_collections.llmops.sglang.plugins.module_utils._engine.storagetier import (
    PREFETCH_THRESHOLD,
    PageStore,
    page_hashes,
    parse_size,
)

from .test_radixcache import DENSE, HICACHE, HYBRID, make_engine, metric, run, send, shared_prefix

PAGE = 64


def _store(folder: Path, **kw: object) -> PageStore:
    kw.setdefault("page_tokens", PAGE)
    kw.setdefault("page_bytes", 1_000_000)
    return PageStore(str(folder), "org/model", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "expected"), [
    ("0", 0), ("", 0), (None, 0), ("bad", 0), (1234, 1234), ("1048576", 1048576),
    ("200G", 200 * 10**9), ("1Gi", 2**30), ("1.5M", 1_500_000), ("2T", 2 * 10**12),
])
def test_sizes_read_as_the_file_backend_reads_them(text: object, expected: int) -> None:
    assert parse_size(text) == expected


def test_page_hashes_chain_sha256_over_uint32_token_ids() -> None:
    """SGLang's scheme (mem_cache/utils.py, hash_binding.cpp): page i's digest is SHA-256 of page
    i-1's digest followed by its token ids as uint32 little-endian."""
    ids = list(range(10))
    first = hashlib.sha256(struct.pack("<4I", 0, 1, 2, 3))
    second = hashlib.sha256(first.digest() + struct.pack("<4I", 4, 5, 6, 7))
    assert page_hashes(ids, 4, 5) == [first.hexdigest(), second.hexdigest()]  # whole pages only
    # a page's hash depends on everything before it: another first page changes the second
    assert page_hashes([9, 1, 2, 3, 4, 5, 6, 7], 4, 2)[1] != second.hexdigest()


def test_pages_are_files_named_as_the_release_names_them_and_survive_a_restart(tmp_path: Path) -> None:
    ids = [f"t{i}" for i in range(700)]
    store = _store(tmp_path, tp_rank=1, tp_size=2)
    assert store.backup(ids, 700) == 640  # ten whole pages of 64
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 10 and all(n.endswith("_org-model_1_2.bin") for n in names)
    assert {os.path.getsize(tmp_path / n) for n in names} == {1_000_000}  # sparse, the page's modelled size
    assert store.backup(ids, 700) == 0 and store.backuped_tokens == 640  # written once

    again = _store(tmp_path, tp_rank=1, tp_size=2)  # a restarted server: the folder seeds its index
    assert again.bytes == 10_000_000
    assert again.lookup(ids, 0, 699) == 640
    assert again.lookup(ids, 128, 699) == 512  # after a device/host hit of two pages
    assert _store(tmp_path, tp_rank=0, tp_size=2).lookup(ids, 0, 699) == 0  # another rank's files
    # MLA: every rank shares rank 0's files, named without the TP part
    mla = _store(tmp_path / "mla", mla=True, tp_rank=3, tp_size=4)
    mla.backup(ids, 128)
    assert sorted(os.listdir(tmp_path / "mla"))[0].endswith("_org-model.bin")


def test_a_hit_below_the_prefetch_threshold_is_no_hit(tmp_path: Path) -> None:
    ids = list(range(1000))
    store = _store(tmp_path)
    store.backup(ids, 320)  # five pages
    assert store.lookup(ids, 0, 999) == 320
    assert 192 < PREFETCH_THRESHOLD
    assert store.lookup(ids, 128, 999) == 0  # 192 tokens found: fewer than 256, revoked
    assert _store(tmp_path, prefetch_threshold=64).lookup(ids, 128, 999) == 192


def test_the_cap_evicts_least_recently_used_pages_down_to_ninety_percent(tmp_path: Path) -> None:
    store = _store(tmp_path, cap_bytes=10_000_000)
    old, new = [f"a{i}" for i in range(640)], [f"b{i}" for i in range(640)]
    store.backup(old, 640)
    assert store.bytes == 10_000_000 and store.evicted_pages == 0  # at the cap, not over it
    store.lookup(old, 0, 640)  # old's pages touched in order: the first is the least recently used
    store.backup(new, 64)  # one page more: over the cap, evict down to 9 MB
    assert store.bytes == 9_000_000 and store.evicted_pages == 2
    assert len(os.listdir(tmp_path)) == 9
    # the two least recently used went: old's first two pages, so old no longer hits from 0
    assert store.lookup(old, 0, 639) == 0
    # without a cap nothing is evicted
    free = _store(tmp_path / "free")
    free.backup([f"c{i}" for i in range(6400)], 6400)
    assert free.evicted_pages == 0 and len(os.listdir(tmp_path / "free")) == 100


def test_clear_removes_every_file_of_the_folder(tmp_path: Path) -> None:
    store = _store(tmp_path)
    ids = list(range(640))
    store.backup(ids, 640)
    (tmp_path / "other_rank_0_2.bin").write_bytes(b"x")
    assert store.clear() == 11 and os.listdir(tmp_path) == []
    assert store.lookup(ids, 0, 639) == 0 and store.bytes == 0


def test_behind_the_host_pool_a_restart_finds_the_prompt_in_storage(tmp_path: Path) -> None:
    """write_through: a prompt inserted goes to the host pool and, page by page, to storage; a new
    cache (the restarted server: empty device and host pools) finds it there, reads it in, and
    loads it back; its I/O is handed to the step."""
    prompt = tuple(f"p{i}" for i in range(1000))
    cache = PrefixCache(device_tokens=10_000, host_tokens=20_000, page_size=1, storage=_store(tmp_path))
    handle = cache.admit(prompt, cache.match(prompt))
    cache.release(handle, prompt)
    assert cache.storage is not None and cache.storage.backuped_tokens == 960  # 15 whole pages
    assert cache.io_seconds() == pytest.approx(15 * 1_000_000 / 2e9) and cache.io_seconds() == 0.0

    restarted = PrefixCache(device_tokens=10_000, host_tokens=20_000, page_size=1, storage=_store(tmp_path))
    match = restarted.match(prompt)
    assert (match.device, match.host, match.storage) == (0, 0, 960)
    restarted.release(restarted.admit(prompt, match), prompt)
    assert restarted.storage is not None and restarted.storage.prefetched_tokens == 960
    assert restarted.io_seconds() == pytest.approx(15 * 1_000_000 / 2e9)  # read; nothing new written
    again = restarted.match(prompt)  # now on the device
    assert (again.device, again.storage) == (999, 0)

    # without a host pool there is no storage tier (it sits behind the host pool)
    assert PrefixCache(device_tokens=10_000, storage=_store(tmp_path)).storage is None
    # /flush_cache clears the device (and, from 0.5.23, the host) pool, never storage
    restarted.reset(clear_host=True)
    assert restarted.match(prompt).storage == 960


# -- the engine with the tier: a restart serves the prompts from storage -------------------------
STORAGE = ["--enable-hierarchical-cache", "--hicache-size", "8", "--hicache-storage-backend", "file"]


def _serve(engine: Any, prompts: list[str]) -> list[Any]:
    async def body() -> list[Any]:
        return [(await send(engine, [p]))[0] for p in prompts]
    return run(engine, body)


@pytest.mark.parametrize("model", [DENSE, HYBRID])
def test_a_restarted_engine_serves_the_same_prefixes_from_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  model: str) -> None:
    folder = tmp_path / "gpu0"
    monkeypatch.setenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", str(folder))
    monkeypatch.setenv("SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE", str(10**12))
    prompts = [group[0] for group in shared_prefix(4, 1, 1024, 32)]
    first = make_engine(STORAGE, model)
    assert [r.cached_tokens for r in _serve(first, prompts)] == [0] * 4
    written = metric(first, "backuped_tokens_total", storage_backend="file")
    assert written is not None and written >= 4 * 1024 and len(os.listdir(folder)) * 64 == written

    restarted = make_engine(STORAGE, model)  # empty device and host pools, the same folder
    again = _serve(restarted, prompts)
    assert all(r.cached_device == r.cached_host == 0 and r.cached_storage >= 1024 for r in again)
    hits = sum(r.cached_storage for r in again)
    assert metric(restarted, "cached_tokens_total", cache_source="storage_HiCacheFile") == hits
    assert metric(restarted, "prefetched_tokens_total", storage_backend="file") == hits
    assert metric(restarted, "backuped_tokens_total", storage_backend="file") == 0  # nothing new to write

    # cleared (the endpoint's work): the next engine finds nothing there
    cleared = make_engine(STORAGE, model)
    assert clear_storage(cleared.scheduler) and os.listdir(folder) == []
    assert [r.cached_tokens for r in _serve(cleared, prompts)] == [0] * 4

    # without the tier: no storage source, nothing written
    monkeypatch.delenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR")
    plain = make_engine(HICACHE, model)
    _serve(plain, prompts)
    assert plain.scheduler.cache is not None and plain.scheduler.cache.storage is None
    assert metric(plain, "cached_tokens_total", cache_source="storage_HiCacheFile") is None
    assert metric(plain, "backuped_tokens_total") is None


def test_clear_and_the_cached_tokens_details_over_http(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a client reads: meta_info.cached_tokens_details with storage and its backend's class,
    POST /hicache/storage-backend/clear (and 0.5.17's deprecated path) answering as the release does."""
    monkeypatch.setenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", str(tmp_path / "gpu0"))
    prompt = shared_prefix(1, 1, 600, 8)[0][0]

    async def scenario(engine: Any, clear: bool = True) -> list[Any]:
        client = TestClient(TestServer(HttpServer(engine).build_app()))
        await client.start_server()
        loop_task = asyncio.create_task(engine.scheduler.run())
        out: list[Any] = []
        try:
            resp = await client.post("/generate", json={"text": prompt, "sampling_params": {"max_new_tokens": 4}})
            out.append((await resp.json())["meta_info"]["cached_tokens_details"])
            for method, path in (("POST", "/hicache/storage-backend/clear"), ("GET", "/clear_hicache_storage_backend"))[
                    :2 if clear else 0]:
                resp = await client.request(method, path)
                out.append((resp.status, await resp.text()))
        finally:
            loop_task.cancel()
            await asyncio.gather(loop_task, return_exceptions=True)
            await client.close()
        return out

    first = make_engine(STORAGE)
    asyncio.run(asyncio.wait_for(scenario(first, clear=False), timeout=60))
    restarted = make_engine(STORAGE)
    details, cleared, deprecated = asyncio.run(asyncio.wait_for(scenario(restarted), timeout=60))
    assert details == {"device": 0, "host": 0, "storage": 576, "storage_backend": "HiCacheFile"}  # 9 pages
    assert cleared == (200, "Hierarchical cache storage backend cleared.\n")
    assert deprecated == (200, "Deprecated endpoint. Use POST /hicache/storage-backend/clear.\n"
                               "Hierarchical cache storage backend cleared.\n")
    assert os.listdir(tmp_path / "gpu0") == []
    # without HiCache: 400 (the release's "Hierarchical cache is not enabled.")
    status, _ = asyncio.run(asyncio.wait_for(scenario(make_engine([])), timeout=60))[1]
    assert status == 400


def test_each_page_read_or_written_is_an_operation_so_page_size_1_costs_a_file_per_token(tmp_path: Path) -> None:
    """Device runs 10 and 12 (an H100): the release writes a file per --page-size page, so at page
    size 1 a 1,536-token prefix is 1,536 files to write and read back (TTFT p99 2.3 s), at 64 it is
    24 (0.22 s). The model charges each page's operation on top of the bytes."""
    prompt = tuple(f"p{i}" for i in range(1536))
    costs = {}
    for page in (1, 64):
        folder = tmp_path / f"page{page}"
        cache = PrefixCache(device_tokens=10_000, host_tokens=20_000, page_size=page, storage=_store(folder),
                            storage_op_s=0.001)
        cache.release(cache.admit(prompt, cache.match(prompt)), prompt)
        written = cache.io_seconds()
        again = PrefixCache(device_tokens=10_000, host_tokens=20_000, page_size=page, storage=_store(folder),
                            storage_op_s=0.001)
        match = again.match(prompt)
        again.release(again.admit(prompt, match), prompt)
        costs[page] = (written, again.io_seconds(), match.storage)
    # the same bytes either way (the modelled files hold 64 tokens: 24 written, 23 read back, as
    # the match stops before the prompt's last token and counts whole pages)
    wrote, read = 24 * 1_000_000 / 2e9, 23 * 1_000_000 / 2e9
    assert costs[1] == pytest.approx((wrote + 1536 * 0.001, read + 1472 * 0.001, 1472))
    assert costs[64] == pytest.approx((wrote + 24 * 0.001, read + 23 * 0.001, 1472))
    assert costs[1][1] > 30 * costs[64][1]
