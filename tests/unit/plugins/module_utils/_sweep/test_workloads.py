"""The sweep's workloads (``_sweep/workloads.py``): each kind's prompts have the stated shape and
are the same from the same seed; cache control (``_sweep/cachestate.py``) against the embedded
engine: /flush_cache refused busy and done idle, and on the demo 27B ``shared_prefix`` hits the
HiCache host tier only with HiCache, random prompts never."""
from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[5]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._sweep import cachestate  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.workloads import (  # noqa: E402
    CHARS_PER_TOKEN,
    parse_length,
    parse_workload,
    render_chat,
    rng_for,
)

PROMPTS = ["alpha", "beta", "gamma"]


def tokens(text: str) -> int:
    assert len(text) % CHARS_PER_TOKEN == 0
    return len(text) // CHARS_PER_TOKEN


def test_random_default_is_the_prompts_round_robin_with_the_options_max_tokens() -> None:
    work = parse_workload(None, None, PROMPTS)
    assert work.kind == "random" and work.seed == 42
    assert [(r.prompt, r.max_tokens) for r in map(work.request, range(4))] == [
        ("alpha", None), ("beta", None), ("gamma", None), ("alpha", None)]
    assert work.describe() == {"kind": "random", "seed": 42, "chars_per_token": 4}


def test_random_lengths_from_distributions_and_reproducible() -> None:
    spec = {"kind": "random", "input_len": {"dist": "uniform", "min": 10, "max": 20},
            "output_len": {"dist": "lognormal", "mean": 100, "std": 50, "min": 8, "max": 400}}
    a, b, c = (parse_workload(spec, s, PROMPTS) for s in (1, 1, 2))
    reqs = [a.request(i) for i in range(200)]
    assert all(10 <= tokens(r.prompt) <= 20 for r in reqs)
    outs = [r.max_tokens for r in reqs]
    assert all(isinstance(o, int) and 8 <= o <= 400 for o in outs)
    assert 80 < statistics.mean(outs) < 120
    assert [b.request(i) for i in range(200)] == reqs  # same seed, same requests
    assert [c.request(i) for i in range(20)] != reqs[:20]
    # request i does not depend on which requests were made before (client processes)
    assert parse_workload(spec, 1, PROMPTS).request(150) == reqs[150]


def test_length_distributions_fixed_normal_clipped_and_bad_specs_named() -> None:
    rng = rng_for(1, "t")
    assert parse_length("x", 7).draw(rng) == 7
    normal = parse_length("x", {"dist": "normal", "mean": 50, "std": 30, "min": 40, "max": 60})
    draws = [normal.draw(rng) for _ in range(500)]
    assert min(draws) == 40 and max(draws) == 60
    for bad in (0, True, "10", {"dist": "zipf"}, {"dist": "uniform", "min": 5, "max": 2},
                {"dist": "normal", "mean": 10}):
        with pytest.raises(sw.SweepError, match=r"workload\.x must be"):
            parse_length("x", bad)


def test_shared_prefix_groups_share_exactly_their_prefix() -> None:
    spec = {"kind": "shared_prefix", "groups": 4, "prompts_per_group": 3, "prefix_len": 64,
            "suffix_len": {"dist": "uniform", "min": 4, "max": 8}, "output_len": 16, "order": "grouped"}
    work = parse_workload(spec, 7, PROMPTS)
    reqs = [work.request(i) for i in range(12)]
    prefixes = [work.prefix(g) for g in range(4)]
    assert len(set(prefixes)) == 4 and all(tokens(p) == 64 for p in prefixes)
    for i, req in enumerate(reqs):
        group = i // 3
        assert req.prompt.startswith(prefixes[group]) and req.max_tokens == 16
        assert 4 <= tokens(req.prompt) - 64 <= 8
        others = [p for g, p in enumerate(prefixes) if g != group]
        assert not any(req.prompt.startswith(p[:8]) for p in others)
    assert len({r.prompt for r in reqs}) == 12
    assert work.warm_prompts() == prefixes
    assert work.request(12) == reqs[0]  # the sequence repeats
    # round robin: every group once, then every group again; shuffled: the same pairs, seeded
    rr = parse_workload({**spec, "order": "round_robin"}, 7, PROMPTS)
    assert [rr.order[i][0] for i in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    shuffled = parse_workload({**spec, "order": "shuffled"}, 7, PROMPTS)
    assert sorted(shuffled.order) == sorted(rr.order) and shuffled.order != rr.order
    assert parse_workload({**spec, "order": "shuffled"}, 7, PROMPTS).order == shuffled.order
    assert work.describe()["suffix_len"] == {"dist": "uniform", "min": 4.0, "max": 8.0}


def test_multi_turn_conversations_and_think_time() -> None:
    spec = {"kind": "multi_turn", "conversations": 5, "turns": 3, "input_len": 32, "output_len": 8,
            "think_time_s": {"dist": "uniform", "min": 0.5, "max": 1.5}}
    work = parse_workload(spec, 3, PROMPTS)
    assert work.conversational
    conv = work.conversation(1)
    assert len(conv) == 3 and all(tokens(t.prompt) == 32 and t.max_tokens == 8 for t in conv)
    assert conv == parse_workload(spec, 3, PROMPTS).conversation(1) == work.conversation(6)
    assert conv != work.conversation(2)
    assert work.think(1, 0) == 0.0 and all(0.5 <= work.think(1, t) <= 1.5 for t in (1, 2))


def test_multi_turn_context_grows_with_the_replies() -> None:
    """Against a fake client: turn k's prompt is turn k-1's prompt, its reply and the new turn."""
    from ansible_collections.llmops.sglang.plugins.module_utils._sweep.level import converse

    class Fake:
        def __init__(self) -> None:
            self.prompts: list[str] = []

        async def send(self, trace: Any, prompt: str, max_tokens: Any, keep_text: bool = False) -> str:
            self.prompts.append(prompt)
            trace.ok = True
            return f"reply {len(self.prompts)}"

    work = parse_workload({"kind": "multi_turn", "turns": 3, "input_len": 8}, 1, PROMPTS)
    fake = Fake()
    traces: list[Any] = []
    asyncio.run(converse(fake, work, 0, 1, 0, 0, traces))  # type: ignore[arg-type]
    assert len(traces) == 3
    p = fake.prompts
    assert p[1].startswith(p[0]) and "reply 1" in p[1] and p[2].startswith(p[1]) and "reply 2" in p[2]
    assert len(p[0]) < len(p[1]) < len(p[2])


def test_file_prompts_chat_sharegpt_and_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    rows = [{"prompt": "plain", "max_tokens": 5},
            {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "drop me"}]},
            {"conversations": [{"from": "human", "value": "q?"}, {"from": "gpt", "value": "x" * 40}]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    work = parse_workload({"kind": "file", "path": str(path), "output_len": 9}, 1, PROMPTS)
    reqs = [work.request(i) for i in range(4)]
    assert reqs[0].prompt == "plain" and reqs[0].max_tokens == 5
    assert reqs[1].prompt == "<|system|>\nsys\n<|user|>\nhi\n<|assistant|>\n" and reqs[1].max_tokens == 9
    assert reqs[2].prompt == "q?" and reqs[2].max_tokens == 10  # the reply's length
    assert reqs[3] == reqs[0]
    assert work.describe()["rows"] == 3
    for bad, what in (('{"prompt": "ok"}\nnot json', "line 2"), ('{"prompt": ""}', "line 1: 'no prompt"),
                      ('[1]', "line 1: a JSON object"), ('{"prompt": "a", "max_tokens": 0}', "line 1: max_tokens")):
        path.write_text(bad)
        with pytest.raises(sw.SweepError, match=f"workload file {path} {what}"):
            parse_workload({"kind": "file", "path": str(path)}, 1, PROMPTS)
    with pytest.raises(sw.SweepError, match="cannot read workload file"):
        parse_workload({"kind": "file", "path": str(tmp_path / "missing")}, 1, PROMPTS)


def test_bad_workload_options_are_named() -> None:
    with pytest.raises(sw.SweepError, match="workload.kind must be one of random, shared_prefix"):
        sw.SweepOptions(url="http://x", workload={"kind": "trace"}).normalized()
    with pytest.raises(sw.SweepError, match="does not take prefix_len"):
        sw.SweepOptions(url="http://x", workload={"kind": "random", "prefix_len": 3}).normalized()
    with pytest.raises(sw.SweepError, match="seed must be an integer"):
        sw.SweepOptions(url="http://x", seed="x").normalized()  # type: ignore[arg-type]
    opts = sw.SweepOptions(url="http://x", workload={"kind": "shared_prefix", "groups": 2}, seed=5).normalized()
    eff = opts.effective("m")
    assert eff["seed"] == 5 and eff["workload"]["kind"] == "shared_prefix" and eff["workload"]["seed"] == 5
    assert eff["flush_cache"] is False and eff["warm"] is False


# ------------------------------------------------------------------------------------------------
# Against the embedded engine
# ------------------------------------------------------------------------------------------------
HICACHE_FLAGS = ("--enable-hierarchical-cache", "--hicache-size", "4", "--hicache-write-policy", "write_through",
                 "--hicache-io-backend", "direct", "--hicache-mem-layout", "page_first_direct")


def test_flush_refused_busy_done_idle(tmp_path: Path) -> None:
    from .helpers import engine_process

    async def scenario(base: str) -> list[dict[str, Any]]:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            # a long request (seconds of wall time at this scale), streaming: running once a chunk came
            resp = await session.post(base + "/v1/completions", json={
                "model": "qwen3.6-27b", "prompt": "x" * 400, "stream": True, "max_tokens": 8000,
                "ignore_eos": True}, timeout=aiohttp.ClientTimeout(total=120))
            await resp.content.readline()
            refused = await cachestate.flush(session, base, 0)
            idle_after_wait = await cachestate.flush(session, base, 120)
            await resp.read()
            resp.release()
            idle = await cachestate.flush(session, base, 0)
        return [refused, idle_after_wait, idle]

    with engine_process(tmp_path / "engine.log", scale=0.01) as base:
        refused, waited, idle = asyncio.run(scenario(base))
    assert refused["ok"] is False and refused["status"] == 400
    assert "HTTP 400" in cachestate.flush_warning(8, refused, 0) and "flush_timeout" in cachestate.flush_warning(
        8, refused, 0)
    assert waited["ok"] and waited["status"] == 200 and waited["message"].startswith("Cache flushed")
    assert idle["ok"] and idle["status"] == 200


def _shared_prefix_sweep(tmp_path: Path, workload: dict[str, Any], hicache: bool) -> dict[str, Any]:
    from . import helpers as ts

    argv = [a for a in ts.ENGINE_ARGV]
    if not hicache:
        start = argv.index("--enable-hierarchical-cache")
        del argv[start:start + len(HICACHE_FLAGS)]
    else:  # a host pool that holds every prefix: 80 GB, ~735k tokens of the 27B (KV and draft KV)
        assert tuple(argv[argv.index("--enable-hierarchical-cache"):][:len(HICACHE_FLAGS)]) == HICACHE_FLAGS
        argv[argv.index("--hicache-size") + 1] = "80"
    saved = ts.ENGINE_ARGV
    ts.ENGINE_ARGV = argv
    try:
        with ts.engine_process(tmp_path / f"engine-{hicache}.log", scale=0.01) as base:
            return sw.run_sweep(sw.SweepOptions(
                url=base, api="native", concurrency=[32], requests=512, max_tokens=4, warmup=0,
                level_warmup=False, workload=workload, seed=1, flush_cache=True, return_records=False))
    finally:
        ts.ENGINE_ARGV = saved


@pytest.mark.skipif(os.environ.get("LLMOPS_SKIP_SLOW") == "1", reason="slow engine test")
def test_shared_prefix_hits_host_tier_with_hicache_only_random_never(tmp_path: Path) -> None:
    """256 groups x 2048-token prefixes (524k tokens) exceed the demo 27B's device pool (436k
    tokens at --mem-fraction-static 0.8) but fit an 80 GB HiCache host pool: in round-robin order
    the device has evicted a group's prefix by its second prompt, which then hits the host tier."""
    shared = {"kind": "shared_prefix", "groups": 256, "prompts_per_group": 2, "prefix_len": 2048,
              "suffix_len": 32, "order": "round_robin"}
    with_hicache = _shared_prefix_sweep(tmp_path, shared, True)["points"][0]
    without = _shared_prefix_sweep(tmp_path, shared, False)["points"][0]
    rand = _shared_prefix_sweep(tmp_path, {"kind": "random", "input_len": 2080}, True)["points"][0]
    for point in (with_hicache, without, rand):
        assert point["status"] == "ok" and point["cache_state"]["flush"]["ok"]
    host = with_hicache["server_metrics"]["cache_hit_rate_host"]
    assert host > 0.2, (with_hicache["server_metrics"], with_hicache["client_cache"], without["server_metrics"])
    assert with_hicache["client_cache"]["cache_hit_rate"] >= host
    assert without["server_metrics"]["cache_hit_rate_host"] == 0
    assert rand["server_metrics"]["cache_hit_rate"] == 0 and rand["client_cache"]["cache_hit_rate"] == 0


def test_multi_turn_and_warm_against_the_engine(tmp_path: Path) -> None:
    """Each later turn of a conversation hits the cache for the whole history (the reply was
    appended as the server wrote it); ``warm`` caches each group's prefix before the level, so
    even a group's first prompt hits it."""
    from .helpers import engine_process

    turns = {"kind": "multi_turn", "conversations": 4, "turns": 3, "input_len": 64, "output_len": 8}
    shared = {"kind": "shared_prefix", "groups": 4, "prompts_per_group": 2, "prefix_len": 512, "suffix_len": 16,
              "order": "grouped", "output_len": 4}
    with engine_process(tmp_path / "engine.log", scale=0.01) as base:
        chats = [sw.run_sweep(sw.SweepOptions(url=base, api=api, concurrency=[2], requests=4, warmup=0,
                                              level_warmup=False, workload=turns, seed=3, flush_cache=True))
                 for api in ("native", "openai")]
        warmed = sw.run_sweep(sw.SweepOptions(url=base, api="openai", concurrency=[2], requests=8, warmup=0,
                                              level_warmup=False, workload=shared, seed=3, flush_cache=True,
                                              warm=True))
    _check_chat(chats[0], turns)
    # OpenAI streams carry no cached_tokens (SGLang's neither): the server's counters say it
    assert chats[1]["points"][0]["ok"] == 12 and chats[1]["points"][0]["client_cache"]["requests"] == 0
    assert chats[1]["points"][0]["server_metrics"]["cache_hit_rate"] > 0.3
    wpoint = warmed["points"][0]
    assert wpoint["cache_state"]["warm"] == {"requests": 4, "ok": 4, "seconds": wpoint["cache_state"]["warm"]["seconds"]}
    assert wpoint["ok"] == 8
    # every prompt found its group's prefix (all but its last token may hit: 511 or more of 528)
    assert wpoint["server_metrics"]["cache_hit_rate"] >= 0.9 * 512 / 528


def _check_chat(chat: dict[str, Any], turns: dict[str, Any]) -> None:
    point = chat["points"][0]
    assert point["requests"] == 12 and point["ok"] == 12  # 4 conversations x 3 turns
    by_conv: dict[int, list[dict[str, Any]]] = {}
    for rec in sorted(chat["records"], key=lambda r: r["start_s"]):
        by_conv.setdefault(rec["index"], []).append(rec)
    assert sorted(by_conv) == [0, 1, 2, 3]
    for recs in by_conv.values():
        cached = [r["cached_tokens"] for r in recs]
        assert cached[0] == 0 < cached[1] < cached[2], cached  # the history hits (page-aligned)
    # the server's replies are in the later turns' prompts: more tokens than the user turns alone
    work = parse_workload(turns, 3, PROMPTS)

    def empty_replies(conv: int, upto: int) -> str:  # the prompt had every reply been ""
        history: list[dict[str, str]] = []
        for t in work.conversation(conv)[:upto + 1]:
            history += [{"role": "assistant", "content": ""}] if history else []
            history.append({"role": "user", "content": t.prompt})
        return render_chat(history)

    bare = sum(-(-len(empty_replies(c, k)) // CHARS_PER_TOKEN) for c in range(4) for k in range(3))
    assert point["client_cache"]["prompt_tokens"] > bare + 4 * 3 * 2  # 3 replies a conversation in prompts
    assert chat["options"]["workload"]["turns"] == 3


def test_flush_warning_names_the_answer_and_the_fix() -> None:
    router = cachestate.flush_warning(4, {"status": 404, "message": "Not Found"}, 60)
    assert router.startswith("C=4: POST /flush_cache failed (HTTP 404: Not Found)") and "router" in router
    gone = cachestate.flush_warning(4, {"status": None, "message": "ClientConnectorError: refused"}, 60)
    assert "(no answer: ClientConnectorError: refused)" in gone and "is the server up?" in gone
    busy = cachestate.flush_warning(8, {"status": 400, "message": "Timed out waiting for idle state."}, 5)
    assert "flush_timeout=5s" in busy and "previous level left it" in busy


def test_client_cache_counts_only_requests_that_reported_both() -> None:
    from ansible_collections.llmops.sglang.plugins.module_utils._sweep.trace import Trace

    traces = [Trace(0, 1, i, 0, prompt_tokens=p, cached_tokens=c)
              for i, (p, c) in enumerate([(100, 60), (100, None), (None, 5), (300, 0)])]
    assert cachestate.client_cache(traces) == {"requests": 2, "prompt_tokens": 400, "cached_tokens": 60,
                                               "cache_hit_rate": 0.15}
    assert cachestate.client_cache([])["cache_hit_rate"] is None


def test_a_restarted_engine_serves_the_prefixes_from_its_storage_tier_until_clear_storage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm restart the storage tier buys, as the sweep reports it: a level writes each prefix's
    pages to the tier; a restarted server (empty device and host pools, the same folder) reads them
    back (the storage share of the hits, the tokens prefetched); ``clear_storage`` empties the tier
    before a level, so that level reads nothing from it; a server without HiCache refuses (400)."""
    from .helpers import engine_process

    monkeypatch.setenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", str(tmp_path / "gpu0"))
    shared = {"kind": "shared_prefix", "groups": 4, "prompts_per_group": 1, "prefix_len": 1024, "suffix_len": 16,
              "order": "grouped", "output_len": 4}

    def sweep(base: str, **options: Any) -> dict[str, Any]:
        return sw.run_sweep(sw.SweepOptions(url=base, api="native", concurrency=[2], requests=4, warmup=0,
                                            level_warmup=False, workload=shared, seed=5, flush_cache=True,
                                            return_records=False, **options))

    tier = ("--hicache-storage-backend", "file")
    with engine_process(tmp_path / "first.log", *tier, scale=0.01) as base:
        cold = sweep(base)["points"][0]
    with engine_process(tmp_path / "restarted.log", *tier, scale=0.01) as base:
        warm = sweep(base)["points"][0]
        cleared = sweep(base, clear_storage=True)
    for point in (cold, warm):
        assert point["status"] == "ok" and point["cache_state"]["clear_storage"] is None
    assert cold["server_metrics"]["cache_hit_rate_storage"] == 0
    assert cold["server_metrics"]["storage_backuped_tokens"] >= 4 * 1024
    assert warm["server_metrics"]["cache_hit_rate_storage"] > 0.5, warm["server_metrics"]
    assert warm["server_metrics"]["storage_prefetched_tokens"] >= 4 * 1024
    assert warm["client_cache"]["cache_hit_rate"] >= warm["server_metrics"]["cache_hit_rate_storage"] - 0.01
    point = cleared["points"][0]
    assert point["cache_state"]["clear_storage"]["ok"] and point["cache_state"]["clear_storage"]["status"] == 200
    assert point["server_metrics"]["cache_hit_rate_storage"] == 0
    assert not [w for w in cleared["warnings"] if "storage-backend/clear" in w]
    assert cleared["options"]["clear_storage"] is True
    # the report's "Prefix cache" table: the restart's storage hits, the cleared level's none
    from ansible_collections.llmops.sglang.plugins.module_utils._report.cache import render_cache_table

    rows = [[c.strip() for c in line.strip("|").split("|")] for line in render_cache_table({"points": [warm]}).splitlines()]
    assert float(rows[2][rows[0].index("storage hit")].rstrip("%")) > 50
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in render_cache_table(cleared).splitlines()]
    assert rows[2][rows[0].index("storage cleared")] == "yes" and rows[2][rows[0].index("storage hit")] == "0.0%"

    from . import helpers as ts

    start = ts.ENGINE_ARGV.index("--enable-hierarchical-cache")
    monkeypatch.setattr(ts, "ENGINE_ARGV", ts.ENGINE_ARGV[:start] + ts.ENGINE_ARGV[start + len(HICACHE_FLAGS):])
    with engine_process(tmp_path / "plain.log", scale=0.01) as base:
        refused = sweep(base, clear_storage=True)
    assert refused["points"][0]["cache_state"]["clear_storage"]["status"] == 400
    assert any("runs without HiCache" in w for w in refused["warnings"]), refused["warnings"]


def test_the_storage_clear_path_is_every_pinned_releases_current_one() -> None:
    """The sweep runs on a host that does not know the release: its CLEAR_STORAGE_PATH must be the
    path the plan would pick (_plan/storage.clear_path) for every release with a storage tier."""
    from ansible_collections.llmops.sglang.plugins.module_utils._shared.releases import release_traits
    from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.storage import clear_path

    data = json.loads((ROOT / "data" / "releases.json").read_text())
    releases = [r for r in data if not r.startswith("_") and release_traits(r).get("hicache_storage_clear")]
    assert releases
    for release in releases:
        assert clear_path(release, release_traits(release)) == cachestate.CLEAR_STORAGE_PATH, release
