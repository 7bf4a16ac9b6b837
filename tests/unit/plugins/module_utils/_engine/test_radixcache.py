"""The embedded engine's prefix cache (radix tree, device and HiCache host tiers) and
/flush_cache, driven in-process on the virtual clock (time scale 0: no sleeping, no timing)."""
from __future__ import annotations

import asyncio
import dataclasses
import random
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from ansible_collections.llmops.sglang.plugins.module_utils._engine import perfmodel
from ansible_collections.llmops.sglang.plugins.module_utils._engine.engine import Engine, EngineConfig
from ansible_collections.llmops.sglang.plugins.module_utils._engine.log import Log
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.batching import Scheduler
from ansible_collections.llmops.sglang.plugins.module_utils._engine.perfmodel.steps import (
    load_back_seconds,
    prefill_seconds,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.prometheus import render_metrics
from ansible_collections.llmops.sglang.plugins.module_utils._engine.radixcache import PrefixCache
from ansible_collections.llmops.sglang.plugins.module_utils._engine.scheduler import Req
from ansible_collections.llmops.sglang.plugins.module_utils._engine.server import HttpServer
from ansible_collections.llmops.sglang.plugins.module_utils._engine.tokens import chat_prompt, prompt_list
from ansible_collections.llmops.sglang.plugins.module_utils._shared import flags as _flags
from ansible_collections.llmops.sglang.plugins.module_utils._shared import releases as _releases

ROOT = Path(__file__).resolve().parents[5]
DENSE, HYBRID = "qwen3-0.6b-dense", "qwen35-hybrid-small"
MTP = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
       "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
       "--mamba-radix-cache-strategy", "extra_buffer", "--max-running-requests", "16"]
HICACHE = ["--enable-hierarchical-cache", "--hicache-size", "8"]


def make_engine(argv: list[str], model: str = DENSE, release: str = "0.5.17",
                device: int | None = None, host: int | None = None) -> Engine:
    path = ROOT / "data" / "models" / model
    args = vars(_flags.build_parser(release).parse_args(["--model-path", str(path), *argv]))
    model_config = perfmodel.load_model_config(str(path))
    plan = perfmodel.plan_engine(args, model_config, perfmodel.find_gpu("NVIDIA H200"), release,
                                 200 * 10**9)
    config = EngineConfig.build(args=args, plan=plan, gpu_name="NVIDIA H200", release=release,
                                traits=_releases.release_traits(release),
                                model_config=model_config, time_scale=0.0)
    changes: dict[str, Any] = {}
    if device is not None:
        changes["max_total_tokens"] = device
    if host is not None:
        changes["host_kv_tokens"] = host
    engine = Engine(dataclasses.replace(config, **changes), Log("error"))
    engine.state = "ready"
    return engine


def run(engine: Engine, body: Callable[[], Awaitable[Any]]) -> Any:
    """``body`` with the engine's scheduler loop running."""
    async def main() -> Any:
        loop_task = asyncio.create_task(engine.scheduler.run())
        try:
            return await asyncio.wait_for(body(), timeout=60)
        finally:
            loop_task.cancel()
            await asyncio.gather(loop_task, return_exceptions=True)
    return asyncio.run(main())


async def send(engine: Engine, texts: list[str], max_new: int = 4) -> list[Req]:
    """One request per text, all at once; their answers."""
    prompts = [p for t in texts for p in (prompt_list(t) or [])]
    sub = engine.scheduler.submit(prompts, max_new, False)
    await sub.drain()
    return sub.reqs


def text(rng: random.Random, tokens: int) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(4 * tokens))


def shared_prefix(groups: int, per_group: int, prefix: int, suffix: int,
                  seed: int = 1) -> list[list[str]]:
    """groups x per_group prompts: a group's prompts share ``prefix`` tokens, then differ."""
    rng = random.Random(seed)
    out = []
    for _ in range(groups):
        system = text(rng, prefix)
        out.append([system + f"{i:04d}" + text(rng, suffix - 1) for i in range(per_group)])
    return out


def metric(engine: Engine, name: str, **labels: str) -> float | None:
    want = "".join(f'.*{k}="{v}"' for k, v in labels.items())
    for line in render_metrics(engine).splitlines():
        if re.match(rf"sglang:{name}(\{{{want}.*\}})? ", line):
            return float(line.rsplit(" ", 1)[1])
    return None


# -- the tree on its own ------------------------------------------------------------------
def test_tree_hits_prefix_all_but_last_token_and_evicts_lru() -> None:
    cache = PrefixCache(device_tokens=10)
    a = list(range(6))
    assert cache.match(a).total == 0
    cache.release(cache.admit(a, cache.match(a)))
    assert cache.match(a).device == 5  # all but the last token
    assert cache.match([0, 1, 2, 9]).device == 3
    b = [7, 8, 9, 10, 11, 12]
    cache.release(cache.admit(b, cache.match(b)))  # 12 > 10 tokens: the LRU leaf goes
    assert cache.device_used == 9
    assert cache.match(a).total == 3 and cache.match(b).device == 5  # a's tail (3, 4, 5) went


def test_tree_locked_prompts_are_not_evicted() -> None:
    cache = PrefixCache(device_tokens=4)
    a, b = [1, 2, 3, 4], [5, 6, 7, 8]
    handle = cache.admit(a, cache.match(a))
    cache.release(cache.admit(b, cache.match(b)))
    assert cache.match(a).device == 3  # still there: a running request holds it
    cache.release(handle)
    cache.fit()
    assert cache.device_used <= 4


def test_tree_host_tier_write_policies() -> None:
    for policy, backed_at_insert in (("write_through", True), ("write_back", False),
                                     ("write_through_selective", False)):
        cache = PrefixCache(device_tokens=6, host_tokens=100, write_policy=policy)
        a = [1, 2, 3, 4, 5, 6]
        cache.release(cache.admit(a, cache.match(a)))
        assert (cache.host_used > 0) is backed_at_insert, policy
        b = [9, 8, 7, 6, 5, 4]
        cache.release(cache.admit(b, cache.match(b)))
        hit = cache.match(a)
        if policy == "write_through_selective":  # evicted before it was hit twice: gone
            assert hit.total == 0
        else:
            assert (hit.device, hit.host) == (0, 5), policy


def test_tree_selective_write_through_backs_up_a_prefix_hit_twice() -> None:
    cache = PrefixCache(device_tokens=6, host_tokens=100, write_policy="write_through_selective")
    a = [1, 2, 3, 4, 5, 6]
    for _ in range(3):  # inserted, then hit twice
        cache.release(cache.admit(a, cache.match(a)))
    assert cache.host_used == 5
    b = [9, 8, 7, 6, 5, 4]
    cache.release(cache.admit(b, cache.match(b)))
    hit = cache.match(a)
    assert (hit.device, hit.host) == (0, 5)


def test_tree_hybrid_hits_end_at_kept_mamba_states() -> None:
    cache = PrefixCache(device_tokens=10_000, mamba_chunk=64)
    short = list(range(9))
    cache.release(cache.admit(short, cache.match(short)))
    assert cache.match(short).total == 0  # the recording: repeated 9-token prompts hit 0
    system = list(range(1000, 1200))
    first = system + [1, 2, 3] * 10
    cache.release(cache.admit(first, cache.match(first)))
    second = system + [4, 5, 6] * 10
    hit = cache.match(second)
    assert hit.total == 192 and hit.total % 64 == 0  # first's state at 192 (230 aligned)
    cache.release(cache.admit(second, hit))
    assert cache.match(system + [7] * 30).total == 192


def _check(cache: PrefixCache) -> None:
    """The tree's invariants: counts match the nodes, device copies hang under device copies,
    every node is somewhere, capacities hold when nothing is locked."""
    device = host = 0
    stack = list(cache.root.children.values())
    seen = set()
    while stack:
        node = stack.pop()
        seen.add(node)
        assert node.key and node.parent is not None
        assert node.parent.children[node.key[0]] is node
        assert node.device or node.host
        if node.device and node.parent is not cache.root:
            assert node.parent.device
        device += len(node.key) * node.device
        host += len(node.key) * node.host
        stack.extend(node.children.values())
    assert seen == cache.nodes
    assert (device, host) == (cache.device_used, cache.host_used)
    assert host <= cache.host_capacity
    if all(n.lock == 0 for n in cache.nodes):
        assert device <= cache.device_capacity


@pytest.mark.parametrize("policy", ["write_through", "write_back", "write_through_selective"])
@pytest.mark.parametrize("host,chunk", [(0, 0), (300, 0), (300, 8)])
def test_tree_invariants_under_random_batches(policy: str, host: int, chunk: int) -> None:
    """Batches of requests drawn from a few shared prefixes, admitted together (held, then
    inserted) and finished later, on a tree far smaller than their working set."""
    rng = random.Random(f"{policy}{host}{chunk}")
    cache = PrefixCache(device_tokens=120, host_tokens=host, write_policy=policy,
                        mamba_chunk=chunk)
    prefixes = [[(p, i) for i in range(rng.randint(5, 40))] for p in range(6)]
    running: list[tuple[list[Any], Any]] = []
    hits = 0
    for _ in range(300):
        batch = []
        for _ in range(rng.randint(1, 3)):
            ids = rng.choice(prefixes) + [rng.randint(0, 3) for _ in range(rng.randint(1, 6))]
            batch.append((ids, cache.match(ids)))
        holds = [cache.hold(m) for _, m in batch]
        for ids, m in batch:
            assert m.total <= len(ids) - 1
            hits += m.total
            running.append((ids, cache.admit(ids, m)))
        for h in holds:
            cache.release(h)
        _check(cache)
        while len(running) > 4 or (running and rng.random() < 0.5):
            ids, handle = running.pop(rng.randrange(len(running)))
            cache.release(handle, ids + [("out", rng.randint(0, 9)) for _ in range(3)])
            _check(cache)
    for _ids, handle in running:
        cache.release(handle)
    cache.fit()
    _check(cache)
    assert hits > 0
    cache.reset(clear_host=False)
    _check(cache)
    assert cache.device_used == 0 and all(not n.device for n in cache.nodes)
    cache.reset(clear_host=True)
    assert not cache.nodes and cache.host_used == 0


# -- the scheduler's timing ---------------------------------------------------------------
class _Hook:
    def __init__(self, hits: tuple[int, int]) -> None:
        self.hits = hits

    def match(self, req_id: str) -> tuple[int, int]:
        return self.hits

    def admitted(self, req_ids: list[str]) -> None:
        pass

    def io_seconds(self) -> float:
        return 0.0


def _prefill_dt(plan: perfmodel.EnginePlan, hook: _Hook | None) -> float:
    sched = Scheduler(plan, prefix=hook)
    sched.submit("r", 4096, 8)
    res = sched.step()
    assert res is not None and res.kind == "prefill"
    return res.dt


@pytest.mark.parametrize("model,argv", [(DENSE, HICACHE), (HYBRID, MTP + HICACHE),
                                        ("qwen3.6-27b", HICACHE)])
def test_prefill_pays_only_uncached_tokens_host_hits_cost_load_back(model: str,
                                                                    argv: list[str]) -> None:
    plan = make_engine(argv, model=model).config.plan
    none, zero = _prefill_dt(plan, None), _prefill_dt(plan, _Hook((0, 0)))
    device, host = _prefill_dt(plan, _Hook((4000, 0))), _prefill_dt(plan, _Hook((0, 4000)))
    assert none == zero  # no hit: exactly as without a cache
    assert device < host < none
    assert host == pytest.approx(device + load_back_seconds(plan, 4000))
    assert load_back_seconds(plan, 4000) < prefill_seconds(plan, 4000)


# -- the engine ---------------------------------------------------------------------------
def test_shared_prefix_hits_on_device() -> None:
    engine = make_engine([])
    prompts = shared_prefix(groups=4, per_group=4, prefix=256, suffix=32)

    async def body() -> list[list[Req]]:
        return [await send(engine, [p]) for group in prompts for p in group]

    answers = run(engine, body)
    cached = [reqs[0].cached_tokens for reqs in answers]
    assert cached == [0, 256, 256, 256] * 4
    assert all(r[0].cached_host == 0 for r in answers)
    m = engine.metrics
    assert m.cached_device == 256 * 12 and m.cached_host == 0
    assert metric(engine, "cached_tokens_total", cache_source="device") == 256 * 12
    assert metric(engine, "prompt_tokens_total") == sum(r[0].prompt_tokens for r in answers)
    assert metric(engine, "cache_hit_rate") == pytest.approx(256 / 288)  # the last prefill: 256 of 288 tokens


def _two_rounds(engine: Engine) -> list[Req]:
    """8 groups of 512-token prefixes (more than the device holds), twice."""
    prompts = shared_prefix(groups=8, per_group=2, prefix=512, suffix=32, seed=7)

    async def body() -> list[Req]:
        for group in prompts:
            await send(engine, [group[0]])
        return [(await send(engine, [group[1]]))[0] for group in prompts]

    return run(engine, body)


def test_working_set_beyond_device_hits_host_with_hicache_only() -> None:
    with_host = make_engine(HICACHE, device=2000, host=20_000)
    second = _two_rounds(with_host)
    assert [r.cached_host for r in second] == [512] * 8
    assert all(r.cached_device == 0 for r in second)
    assert with_host.scheduler.cache is not None
    assert with_host.scheduler.cache.device_used <= 2000
    assert metric(with_host, "cached_tokens_total", cache_source="host") == 512 * 8
    assert metric(with_host, "load_back_tokens_total") == 512 * 8
    used = metric(with_host, "hicache_host_used_tokens")
    assert used is not None and 0 < used <= 20_000
    assert metric(with_host, "hicache_host_total_tokens") == 20_000

    without = make_engine([], device=2000)
    assert [r.cached_tokens for r in _two_rounds(without)] == [0] * 8
    assert without.metrics.cached_host == 0
    assert metric(without, "load_back_tokens_total") is None


def test_random_prompts_hit_nothing_and_run_as_without_a_cache() -> None:
    rng = random.Random(3)
    texts = [text(rng, rng.randint(50, 400)) for _ in range(24)]
    clocks = []
    for argv in ([], ["--disable-radix-cache"]):
        engine = make_engine(argv)

        async def body(engine: Engine = engine) -> list[Req]:
            reqs = await send(engine, texts[:12], max_new=16)
            return reqs + await send(engine, texts[12:], max_new=16)

        reqs = run(engine, body)
        assert all(r.cached_tokens == 0 for r in reqs)
        clocks.append(engine.scheduler.sched.clock)
    assert clocks[0] == clocks[1]


def test_chat_turns_share_their_history() -> None:
    engine = make_engine([])
    history = [{"role": "system", "content": "You are terse. " * 40},
               {"role": "user", "content": "First question about radix trees?"}]
    first_tokens, first = chat_prompt(history)
    second_tokens, second = chat_prompt(history + [
        {"role": "assistant", "content": "An answer."}, {"role": "user", "content": "More?"}])

    async def body() -> list[Req]:
        a = engine.scheduler.submit([(first_tokens, first)], 4, False)
        await a.drain()
        b = engine.scheduler.submit([(second_tokens, second)], 4, False)
        await b.drain()
        return [a.reqs[0], b.reqs[0]]

    a, b = run(engine, body)
    assert a.cached_tokens == 0
    assert b.cached_tokens == first_tokens  # the history and the assistant header


# -- /flush_cache ---------------------------------------------------------------------------
def _flush_scenario(engine: Engine) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        client = TestClient(TestServer(HttpServer(engine).build_app()))
        await client.start_server()
        out: dict[str, Any] = {}
        try:
            prompts = prompt_list("hello " * 100) or []
            sub = engine.scheduler.submit(prompts, 8, False)  # queued: the loop is not running
            for timeout in ("0", "0.05"):
                resp = await client.post(f"/flush_cache?timeout={timeout}")
                out[f"busy {timeout}"] = (resp.status, await resp.text())
            loop_task = asyncio.create_task(engine.scheduler.run())
            await sub.drain()
            out["accept before"] = engine.scheduler.avg_accept_length()
            cache = engine.scheduler.cache
            out["host before"] = cache.host_used if cache else 0
            busy = engine.scheduler.submit(prompts, 64, False)
            resp = await client.get("/flush_cache", params={"timeout": "30"})
            out["wait"] = (resp.status, await resp.text(), busy.reqs[0].done)
            out["accept after"] = engine.scheduler.avg_accept_length()
            out["host after"] = cache.host_used if cache else 0
            out["device after"] = cache.device_used if cache else 0
            loop_task.cancel()
            await asyncio.gather(loop_task, return_exceptions=True)
        finally:
            await client.close()
        return out

    return asyncio.run(asyncio.wait_for(main(), timeout=60))


@pytest.mark.parametrize("release,host_cleared", [("0.5.17", False), ("0.5.23", True)])
def test_flush_cache_refuses_busy_waits_for_idle_and_resets(release: str,
                                                            host_cleared: bool) -> None:
    engine = make_engine(MTP + HICACHE, model=HYBRID, release=release)
    out = _flush_scenario(engine)
    assert out["busy 0"][0] == 400
    assert out["busy 0.05"] == (400, "Timed out waiting for idle state.")
    status, body, done = out["wait"]
    assert status == 200 and body.startswith("Cache flushed.") and done
    assert out["accept before"] > 1.0 and out["accept after"] == 1.0
    assert out["device after"] == 0
    assert out["host before"] > 0
    assert (out["host after"] == 0) is host_cleared


# -- what a client reads ----------------------------------------------------------------------
def test_cached_tokens_in_responses() -> None:
    async def scenario(engine: Engine) -> list[Any]:
        client = TestClient(TestServer(HttpServer(engine).build_app()))
        await client.start_server()
        loop_task = asyncio.create_task(engine.scheduler.run())
        answers = []
        try:
            prompt = "The same system prompt, then a question. " * 8
            for _ in range(2):
                resp = await client.post("/generate", json={
                    "text": prompt, "sampling_params": {"max_new_tokens": 4}})
                answers.append((await resp.json())["meta_info"])
            for _ in range(2):
                resp = await client.post("/v1/completions", json={
                    "model": "x", "prompt": prompt + "Other.", "max_tokens": 4})
                answers.append((await resp.json())["usage"])
        finally:
            loop_task.cancel()
            await asyncio.gather(loop_task, return_exceptions=True)
            await client.close()
        return answers

    tokens = (len("The same system prompt, then a question. " * 8) + 3) // 4
    for argv, report in (([], False), (["--enable-cache-report"], True)):
        engine = make_engine(argv)
        first, second, oai_first, oai_second = asyncio.run(
            asyncio.wait_for(scenario(engine), timeout=60))
        assert (first["cached_tokens"], first["cached_tokens_details"]) == (0, None)
        assert second["cached_tokens"] == tokens - 1
        assert second["cached_tokens_details"] == {"device": tokens - 1, "host": 0}
        if report:
            assert oai_first["prompt_tokens_details"] == {"cached_tokens": tokens}
            assert oai_second["prompt_tokens_details"] == {
                "cached_tokens": oai_second["prompt_tokens"] - 1}
        else:
            assert oai_first["prompt_tokens_details"] is None
            assert oai_second["prompt_tokens_details"] is None


def test_hicache_wins_on_shared_prefix_beyond_the_device_not_on_random() -> None:
    """The demo's 27B MTP on a device pool smaller than the shared prefixes' working set: with
    HiCache the rounds after the first hit the host and finish sooner (modelled clock); random
    prompts only pay HiCache's overhead."""
    groups = shared_prefix(groups=16, per_group=6, prefix=2048, suffix=128, seed=11)
    shared = [g[i] for i in range(6) for g in groups]  # round robin: LRU alone seldom hits
    rng = random.Random(11)
    rand = [text(rng, 2176) for _ in shared]
    clocks: dict[tuple[str, str], float] = {}
    hits: dict[tuple[str, str], int] = {}
    for name, argv, host in (("hicache", MTP + HICACHE, 400_000), ("plain", MTP, None)):
        for kind, prompts in (("shared", shared), ("random", rand)):
            engine = make_engine(argv, model="qwen3.6-27b", release="0.5.23", device=30_000,
                                 host=host)

            async def body(engine: Engine = engine, prompts: list[str] = prompts) -> list[Req]:
                sem = asyncio.Semaphore(8)

                async def one(prompt: str) -> Req:
                    async with sem:
                        return (await send(engine, [prompt], max_new=32))[0]
                return list(await asyncio.gather(*(one(p) for p in prompts)))

            reqs = run(engine, body)
            clocks[(name, kind)] = engine.scheduler.sched.clock
            hits[(name, kind)] = sum(r.cached_host for r in reqs)
    assert hits[("hicache", "shared")] > 0 and hits[("plain", "shared")] == 0  # host hits
    assert hits[("hicache", "random")] == hits[("plain", "random")] == 0
    assert clocks[("hicache", "shared")] < clocks[("plain", "shared")]
    assert clocks[("hicache", "random")] > clocks[("plain", "random")]
