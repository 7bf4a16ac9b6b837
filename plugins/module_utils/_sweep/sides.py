# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Each side of a prefill/decode deployment during a level swept through its router
(``worker_metrics``; docs/sweep.md "Each side through a PD router"): the router's own /metrics
says nothing of the engines (sglang-router 0.3.2 has no PD-transfer metrics), so the sweep reads each
worker's /metrics around the level and samples it while the level runs, as it reads its own
server's, and sums each side (``servermetrics.side_metrics``): the prefill's queue and KV
hand-overs, the decode's requests waiting for their KV, the failures of both."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._shared import servermetrics as _servermetrics

Fetch = Callable[[str], Awaitable[tuple[str | None, str | None]]]  # url -> (/metrics text, why not)
SIDES = ("prefill", "decode", "unified")


class WorkerScrapes:
    """The workers' /metrics around one level: ``before()``, ``sample()`` (a task, cancelled when
    the level ends), ``after()`` -> the point's ``sides``."""

    def __init__(self, workers: Sequence[dict[str, Any]], fetch: Fetch) -> None:
        self.workers = [{"name": str(w.get("name") or w["url"]), "url": str(w["url"]).rstrip("/"),
                         "side": str(w.get("side") or "unified")} for w in workers]
        self.fetch = fetch
        self.before_scrapes: list[dict[str, Any] | None] = []
        self.samples = [_servermetrics.GaugeSamples() for _ in self.workers]

    async def _read(self) -> list[dict[str, Any] | None]:
        texts = await asyncio.gather(*(self.fetch(w["url"]) for w in self.workers))
        return [_servermetrics.parse(text) if text is not None else None for text, _ in texts]

    async def before(self) -> None:
        self.before_scrapes = await self._read()
        self.samples = [_servermetrics.GaugeSamples() for _ in self.workers]

    async def sample(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            for samples, scrape in zip(self.samples, await self._read(), strict=True):
                if scrape is not None:
                    samples.add(scrape)

    async def after(self) -> dict[str, Any]:
        """Each side's level (``side_metrics``) with its instances' own, by name."""
        ends = await self._read()
        per = [_servermetrics.level_metrics(b, e, s)
               for b, e, s in zip(self.before_scrapes, ends, self.samples, strict=True)]
        out: dict[str, Any] = {}
        for side in SIDES:
            mine = [i for i, w in enumerate(self.workers) if w["side"] == side]
            if mine:
                out[side] = {**_servermetrics.side_metrics([per[i] for i in mine]),
                             "by_instance": {self.workers[i]["name"]: per[i] for i in mine}}
        return out
