"""Each side of a PD deployment swept through its router (_sweep/sides.py): the workers' /metrics
read around the level and sampled during it, summed per side; a worker that does not answer is
counted, not guessed."""
from __future__ import annotations

import asyncio

from ansible_collections.llmops.sglang.plugins.module_utils._sweep.sides import WorkerScrapes

from .....pdmetrics import pd_metrics


def _text(transfers: int, waiting: int = 0) -> str:
    return pd_metrics(latencies_ms=[4.0] * transfers, decode_waiting=waiting)


def test_the_workers_are_read_around_the_level_and_sampled_during_it() -> None:
    state = {"transfers": 0, "waiting": 0}

    async def fetch(url: str) -> tuple[str | None, str | None]:
        if url.endswith(":3"):
            return None, "ClientConnectorError"
        if url.endswith(":1"):  # the prefill
            return _text(state["transfers"]), None
        return _text(0, state["waiting"]), None

    async def level() -> dict:
        scrapes = WorkerScrapes([{"name": "h/p", "url": "http://h:1/", "side": "prefill"},
                                 {"name": "h/d", "url": "http://h:2", "side": "decode"},
                                 {"name": "h/x", "url": "http://h:3", "side": "decode"}], fetch)
        await scrapes.before()
        sampler = asyncio.ensure_future(scrapes.sample(0.01))
        state.update(transfers=5, waiting=4)
        await asyncio.sleep(0.1)
        state["waiting"] = 0
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        return await scrapes.after()

    sides = asyncio.run(level())
    assert sorted(sides) == ["decode", "prefill"]
    prefill, decode = sides["prefill"], sides["decode"]
    assert (prefill["pd_kv_transfers"], prefill["pd_kv_transfer_ms_mean"]) == (5, 4.0)
    assert decode["pd_decode_transfer_max"] == 4 and (decode["instances"], decode["read"]) == (2, 1)
    assert decode["by_instance"]["h/x"] is None and decode["by_instance"]["h/d"]["pd_kv_transfers"] == 0
