"""The embedded engine's mooncake tier: the stand-in master (``_engine/kvstore.py``, the real
``mooncake_master``'s flags, /health and /metrics) and the client an instance's HiCache talks to
it with (``_engine/storeclient.py``): a store shared by instances, segments that go with their
client, eviction at the watermark, and two engines where a page one wrote is the other's hit."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._engine import kvstore
from ansible_collections.llmops.sglang.plugins.module_utils._engine.scheduler import clear_storage
from ansible_collections.llmops.sglang.plugins.module_utils._engine.storeclient import (
    StoreClient,
    StoreError,
    parse_segment,
)

from .....ports import free_port
from .test_radixcache import DENSE, make_engine, metric, run, send, shared_prefix

ROOT = Path(__file__).resolve().parents[5]


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return reply.status, reply.read().decode()


@pytest.fixture(name="master")
def fixture_master(request: pytest.FixtureRequest) -> Any:
    """The stand-in run as the role runs it: ``python -m ..._engine.kvstore`` with the real flags;
    the real master's client_ttl (10 s) unless a test asks for another (``@pytest.mark.parametrize``
    of ``master`` with ``indirect=True``)."""
    ttl = getattr(request, "param", 10)
    rpc, metrics = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ansible_collections.llmops.sglang.plugins.module_utils._engine.kvstore",
         f"--rpc_port={rpc}", "--rpc_address=127.0.0.1", f"--metrics_port={metrics}", "--metrics_host", "127.0.0.1",
         f"--client_ttl={ttl}"],
        cwd=ROOT / "collections", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            _get(f"http://127.0.0.1:{metrics}/health")
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the stand-in master did not start: {proc.stdout.read() if proc.stdout else ''}") from None
            time.sleep(0.1)
    try:
        yield {"address": f"127.0.0.1:{rpc}", "metrics": f"http://127.0.0.1:{metrics}"}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _metrics(master: dict[str, str]) -> dict[str, float]:
    text = _get(master["metrics"] + "/metrics")[1]
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line and not line.startswith("#")}


def _client(master: dict[str, str], **extra: Any) -> StoreClient:
    config = {"master_server_address": master["address"], "local_hostname": "127.0.0.1",
              "global_segment_size": 64 * 10**6, "extra_backend_tag": "llmops-abc", **extra}
    return StoreClient(config, "org/model", 64, 1_000_000)


@pytest.mark.parametrize(("argv", "message"), [
    (["--rpc_port=x"], "illegal value 'x' specified for flag 'rpc_port'"),
    (["--no_such_flag=1"], "unknown command line flag 'no_such_flag'"),
    (["--metrics_port"], "flag 'metrics_port' is missing its argument"),
    (["stray"], "unexpected argument 'stray'"),
])
def test_the_flags_are_the_real_masters_and_anything_else_is_refused_as_gflags_refuses_it(
        argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        kvstore.parse_flags(argv)
    flags = kvstore.parse_flags(["--rpc_port=7001", "--rpc_address", "10.0.0.5", "-metrics_port=7002",
                                 "--enable_metric_reporting"])
    assert (flags["rpc_port"], flags["rpc_address"], flags["metrics_port"], flags["client_ttl"]) == \
        (7001, "10.0.0.5", 7002, 10)


def test_segments_hold_the_objects_and_go_with_their_client_and_lru_evicts_at_the_watermark() -> None:
    store = kvstore.Store(high_watermark=0.9, eviction_ratio=0.25, client_ttl=10)
    store.mount("a", 1000, "h1", now=0.0)
    store.mount("b", 1000, "h2", now=0.0)
    assert store.put("a", ["k1", "k2", "k3"], 300) == 3  # a's segment first
    assert store.put("a", ["k4"], 300) == 1  # a has 100 left: the emptiest other segment takes it
    assert store.objects["k4"][0] == "b" and store.allocated == 1200
    assert store.exist(["k1", "x"], touch=True) == [True, False]  # k1 is now the most recent
    assert store.put("b", ["k5", "k6", "k7"], 300) == 3  # over 0.9 x 2000: the least recent go first
    # k7 would pass 1,800 bytes: one object (a quarter of six) goes, the least recent (k2, not the
    # touched k1), and k7 lands in a's freed room
    assert list(store.objects) == ["k3", "k4", "k1", "k5", "k6", "k7"] and store.counters["evicted"] == 1
    assert store.objects["k7"][0] == "a" and store.allocated == 1800
    assert store.ping("a", now=5.0) and not store.ping("nobody", now=5.0)
    assert store.reap(now=12.0) == ["b"]  # b not heard from for > 10 s: unmounted with its objects
    assert all(owner == "a" for owner, _ in store.objects.values()) and store.capacity == 1000
    assert sorted(store.objects) == ["k1", "k3", "k7"]
    assert store.remove_all() == 3 and store.allocated == 0


def test_a_page_one_client_put_is_found_by_another_and_the_tag_keeps_layouts_apart(master: dict[str, str]) -> None:
    ids = [f"t{i}" for i in range(700)]
    writer, reader = _client(master), _client(master)
    assert writer.backup(ids, 700) == 640 and writer.backuped_tokens == 640
    assert writer.backup(ids, 700) == 0  # already there: nothing written twice
    assert reader.lookup(ids, 0, 700) == 640  # another instance's pages: a hit
    assert reader.lookup(ids, 64, 700) == 576  # from a page boundary after its device and host hit
    assert reader.lookup(ids[:200], 0, 200) == 0  # 3 pages = 192 tokens < the prefetch threshold
    other_layout = _client(master, extra_backend_tag="llmops-def")
    assert other_layout.lookup(ids, 0, 700) == 0
    seen = _metrics(master)
    assert seen["master_key_count"] == 10 and seen["master_active_clients"] == 3
    assert seen["master_allocated_bytes"] == 10 * 1_000_000 and seen["master_total_capacity_bytes"] == 3 * 64 * 10**6
    assert reader.clear() == 10 and reader.lookup(ids, 0, 700) == 0
    writer.close()
    assert _metrics(master)["master_active_clients"] == 2


@pytest.mark.parametrize("master", [3], indirect=True)  # client_ttl 3 s, clients pinging every 0.2 s
def test_a_client_that_stops_pinging_loses_its_segment_and_a_master_out_of_reach_is_a_failed_setup(
        master: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible_collections.llmops.sglang.plugins.module_utils._engine import storeclient

    monkeypatch.setattr(storeclient, "PING_S", 0.2)  # well inside the TTL however busy the machine
    ids = [f"t{i}" for i in range(640)]
    gone, stays = _client(master), _client(master, global_segment_size=1)
    gone.backup(ids, 640)  # into its own segment (the other has no room)
    gone._stop.set()  # no heartbeat any more: the master unmounts it after client_ttl (3 s)
    deadline = time.monotonic() + 60
    while _metrics(master)["master_active_clients"] > 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    seen = _metrics(master)
    assert seen["master_active_clients"] == 1 and seen["master_key_count"] == 0  # the other one stayed
    assert stays.lookup(ids, 0, 640) == 0
    with pytest.raises(StoreError, match="Failed to setup Mooncake store"):
        StoreClient({"master_server_address": f"127.0.0.1:{free_port()}"}, "m", 64, 1)
    with pytest.raises(StoreError, match="master_server_address or client_server_address is required"):
        StoreClient({}, "m", 64, 1)
    assert parse_segment("4gb") == 4 * 2**30 and parse_segment(123) == 123 and parse_segment("77") == 77


MOONCAKE = ["--enable-hierarchical-cache", "--hicache-size", "8", "--hicache-storage-backend", "mooncake"]


def test_two_engines_share_the_store_a_prefix_one_served_is_the_others_storage_hit(master: dict[str, str]) -> None:
    extra = json.dumps({"master_server_address": master["address"], "local_hostname": "127.0.0.1",
                        "global_segment_size": 2 * 2**30, "protocol": "tcp", "extra_backend_tag": "llmops-x"})
    argv = [*MOONCAKE, "--hicache-storage-backend-extra-config", extra]
    prompts = [group[0] for group in shared_prefix(3, 1, 1024, 32)]

    def serve(engine: Any) -> list[Any]:
        async def body() -> list[Any]:
            return [(await send(engine, [p]))[0] for p in prompts]
        return run(engine, body)

    first = make_engine(argv, DENSE)
    assert [r.cached_tokens for r in serve(first)] == [0, 0, 0]
    assert metric(first, "backuped_tokens_total", storage_backend="mooncake") >= 3 * 1024
    second = make_engine(argv, DENSE)  # another instance of the same model and layout
    again = serve(second)
    assert all(r.cached_device == r.cached_host == 0 and r.cached_storage >= 1024 for r in again)
    assert metric(second, "cached_tokens_total", cache_source="storage_MooncakeStore") == \
        sum(r.cached_storage for r in again)
    assert clear_storage(second.scheduler)
    third = make_engine(argv, DENSE)
    assert [r.cached_tokens for r in serve(third)] == [0, 0, 0]  # the store was cleared for everyone
