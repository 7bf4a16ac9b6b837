# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The prefix cache's hook into the scheduling model (``perfmodel.batching.PrefixHook``): what a
request about to be admitted finds cached, and what its prompt and output leave in the tree."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ansible_collections.llmops.sglang.plugins.module_utils._engine.metrics import EngineMetrics
    from ansible_collections.llmops.sglang.plugins.module_utils._engine.radixcache import PrefixCache


class PrefixHook:
    """Matches, admits and releases the requests of one scheduler in its prefix cache."""

    def __init__(self, cache: PrefixCache | None, reqs: dict[str, Any], metrics: EngineMetrics) -> None:
        self.cache = cache
        self.reqs = reqs  # the scheduler's requests in flight (its Req objects: shared, not copied)
        self.metrics = metrics

    def match(self, req_id: str) -> tuple[int, int]:
        """The cached prefix of a request about to be admitted: (device, host) tokens, the host
        part with what the storage tier holds (read into the host pool, then loaded back)."""
        req = self.reqs.get(req_id)
        if req is not None and req.transferred:  # its KV came from a prefill instance: no prefill here
            return max(int(req.prompt_tokens) - 1, 0), 0
        if self.cache is None or req is None or req.internal or not req.token_ids:
            return 0, 0
        req.match = self.cache.match(req.token_ids)
        return req.match.device, req.match.host + req.match.storage

    def io_seconds(self) -> float:
        return self.cache.io_seconds() if self.cache is not None else 0.0

    def admitted(self, req_ids: list[str]) -> None:
        """Admitted to a prefill: host hits are loaded back, the prompts inserted and locked."""
        cache = self.cache
        if cache is None:
            return
        reqs = [r for r in (self.reqs.get(i) for i in req_ids) if r is not None and r.match]
        for req in reqs:  # a retracted request comes back: it lets go of its old prompt
            if req.handle is not None:
                cache.release(req.handle)
        outside = self.outside_tokens()
        holds = [cache.hold(r.match) for r in reqs if r.match is not None]
        prompt = cached = 0
        for req in reqs:
            match = req.match
            if match is None:
                continue
            req.cached_device, req.cached_host, req.cached_storage = match.device, match.host, match.storage
            req.cached_tokens = match.total
            req.handle = cache.admit(req.token_ids, match, outside)
            req.match = None
            prompt += req.prompt_tokens
            cached += match.total
        for hold in holds:
            cache.release(hold, outside=outside)
        if prompt:
            self.metrics.cache_hit_rate = cached / prompt
        self.metrics.load_back_total = cache.load_back_tokens

    def outside_tokens(self) -> int:
        """Device KV in use outside the tree: the generated tokens of the requests in flight."""
        return sum(len(r.output_ids) for r in self.reqs.values())

    def release(self, req: Any, finished: bool) -> None:
        if self.cache is None or req.handle is None:
            return
        ids = req.token_ids + tuple(req.output_ids) if finished else None
        self.cache.release(req.handle, ids, self.outside_tokens())
        req.handle = None
