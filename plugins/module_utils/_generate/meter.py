# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Each instance's share of a job sent through a router (docs/generate.md "Progress"): the job sees
one target, the router; the instances behind it count what they served in their own ``/metrics``
(``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total``). The meter reads them when the
job starts and at each progress write, and gives each instance the tokens it served since the start
and its share of all of them.

A counter that goes down is a server that restarted: what it had counted before is kept (an
offset) and its new count is added. An instance that does not answer is ``up: false`` and keeps
what it had. Other clients' requests to the same instances count too: the shares are the
instances', not the job's alone, when the fleet serves others at the same time.
"""
from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._shared import servermetrics

COUNTERS = ("prompt_tokens_total", "generation_tokens_total")
READ_TIMEOUT_S = 5.0


class Meter:
    """The instances' token counters since the job started."""

    def __init__(self, instances: Sequence[Mapping[str, Any]]) -> None:
        self.instances = [(str(i["name"]), str(i["url"]).rstrip("/")) for i in instances]
        self._base: dict[str, list[float]] = {}
        self._last: dict[str, list[float]] = {}
        self._offset: dict[str, list[float]] = {}
        self.up: dict[str, bool] = {}
        self.restarts: dict[str, int] = {}

    def add(self, name: str, text: str | None) -> None:
        """One reading of ``name``'s /metrics text (None: it did not answer)."""
        if text is None:
            self.up[name] = False
            return
        scrape = servermetrics.parse(text)
        values = [servermetrics.total(scrape, counter) or 0.0 for counter in COUNTERS]
        self.up[name] = True
        if name not in self._base:
            self._base[name], self._last[name], self._offset[name] = list(values), list(values), [0.0] * len(values)
            return
        if any(now < before for now, before in zip(values, self._last[name], strict=True)):
            self._offset[name] = [o + before for o, before in zip(self._offset[name], self._last[name], strict=True)]
            self.restarts[name] = self.restarts.get(name, 0) + 1
        self._last[name] = list(values)

    async def read(self, session: Any) -> None:
        """Read every instance's /metrics at once (each at most READ_TIMEOUT_S)."""
        async def one(name: str, url: str) -> None:
            try:
                async with session.get(url + "/metrics", timeout=_timeout()) as resp:
                    text = await resp.text() if resp.status == 200 else None
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception:  # noqa: BLE001 - any failure to read is an instance not answering
                text = None
            self.add(name, text)

        await asyncio.gather(*(one(name, url) for name, url in self.instances))

    def shares(self) -> dict[str, dict[str, Any]]:
        """name -> prompt_tokens, completion_tokens (since the start), share (of all the
        completion tokens), up, restarts."""
        served = {}
        for name, _ in self.instances:
            if name not in self._base:
                served[name] = [0.0, 0.0]
                continue
            served[name] = [last + off - base for last, off, base in zip(self._last[name], self._offset[name], self._base[name], strict=True)]
        out_total = sum(v[1] for v in served.values())
        return {name: {"prompt_tokens": int(v[0]), "completion_tokens": int(v[1]),
                       "share": round(v[1] / out_total, 4) if out_total else 0.0,
                       "up": self.up.get(name, False), "restarts": self.restarts.get(name, 0)}
                for name, v in served.items()}


def _timeout() -> Any:
    import aiohttp

    return aiohttp.ClientTimeout(total=READ_TIMEOUT_S)
