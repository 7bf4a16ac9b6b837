# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""SGLang's native API: ``/generate`` (``text`` or ``input_ids``, single or batch, streamed or
not) with the recorded ``meta_info`` keys in their order (docs/engine-api.md "Streams")."""
from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.disagg import prepare
from ansible_collections.llmops.sglang.plugins.module_utils._engine.replies import (
    Reply,
    Stream,
    not_ready,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.requests import (
    ApiRequest,
    ValidationError,
    context_error,
    err,
    get_bool,
    get_int,
    parse_body,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.scheduler import Req, Submission
from ansible_collections.llmops.sglang.plugins.module_utils._engine.tokens import detok, prompt_list

if TYPE_CHECKING:
    from ansible_collections.llmops.sglang.plugins.module_utils._engine.engine import Engine

DEFAULT_MAX_NEW_TOKENS = 128


def _error(message: str) -> Reply:
    return Reply({"error": {"message": message}}, 400)


def cached_details(engine: Engine, req: Req) -> dict[str, Any] | None:
    """meta_info.cached_tokens_details (SGLang 0.5.17's output streamer): None without a hit;
    device and host, and with a storage tier its tokens and the backend's class."""
    if not req.cached_tokens:
        return None
    details: dict[str, Any] = {"device": req.cached_device, "host": req.cached_host}
    store = engine.scheduler.cache.storage if engine.scheduler.cache is not None else None
    if req.cached_storage or store is not None:
        details["storage"] = req.cached_storage
    if store is not None:
        details["storage_backend"] = store.backend_class
    return details


def _meta(engine: Engine, req: Req) -> dict[str, Any]:
    """The meta_info every chunk carries."""
    return {
        "id": req.rid,
        "finish_reason": None,
        "prompt_tokens": req.prompt_tokens,
        "weight_version": "default",
        "num_retractions": 0,
        "forward_entry_time": req.forward_entry_ts or req.dispatch_ts,
        "prefill_finished_time": req.prefill_finished_ts or req.dispatch_ts,
        "queue_time": max(0.0, (req.forward_entry_ts or req.dispatch_ts) - req.dispatch_ts),
        "reasoning_tokens": 0,
        "completion_tokens": len(req.output_ids),
        "cached_tokens": req.cached_tokens,
        "cached_tokens_details": cached_details(engine, req),
        "dp_rank": None,
    }


def _spec_meta(engine: Engine, req: Req) -> dict[str, Any]:
    drafts = int(engine.config.args.get("speculative_num_draft_tokens") or 1) - 1
    proposed = req.verify_ct * max(drafts, 0)
    return {
        "spec_accept_rate": (req.accepted_drafts / proposed) if proposed else 0.0,
        "spec_accept_length": (len(req.output_ids) / req.verify_ct if req.verify_ct else 1.0),
        "spec_num_correct_drafts": req.accepted_drafts,
        "spec_num_proposed_drafts": proposed,
        "spec_verify_ct": req.verify_ct,
        "spec_accepted_drafts": req.accepted_drafts,
        "spec_proposed_drafts": proposed,
        "spec_correct_drafts_histogram": list(req.accept_hist),
        "spec_accept_histogram": list(req.accept_hist),
    }


def _final_meta(engine: Engine, req: Req, meta: dict[str, Any], now: float) -> None:
    """The last chunk: finish reason, latencies, speculative statistics, timestamps."""
    meta["finish_reason"] = {"type": "length", "length": len(req.output_ids)}
    meta["e2e_latency"] = max(0.0, (req.finished_at or 0.0) - req.submitted_at)
    if engine.config.spec:
        meta.update(_spec_meta(engine, req))
    decode_time = (req.finished_at or 0.0) - (req.first_token_at or 0.0)
    meta["request_received_ts"] = req.received_ts
    meta["api_server_dispatch_finish_ts"] = req.dispatch_ts
    if req.stream:
        meta["response_sent_to_client_ts"] = now
    meta["request_finished_ts"] = now
    meta["decode_throughput"] = ((len(req.output_ids) - 1) / decode_time
                                 if decode_time > 0 else 0.0)
    if not req.stream:
        meta["response_sent_to_client_ts"] = now


def result(engine: Engine, req: Req, final: bool, first: bool) -> dict[str, Any]:
    """One /generate result (or stream chunk): the cumulative text and ids, and meta_info."""
    meta = _meta(engine, req)
    now = time.time()
    if final:
        _final_meta(engine, req, meta, now)
    elif first:
        meta["response_sent_to_client_ts"] = now
    return {"text": detok(req.output_ids), "output_ids": list(req.output_ids), "meta_info": meta}


async def _chunks(engine: Engine, sub: Submission) -> AsyncIterator[dict[str, Any]]:
    sent: set[int] = set()
    async for index, ids, done in sub.events():
        if not ids and not done:
            continue
        first = index not in sent
        sent.add(index)
        yield result(engine, sub.reqs[index], final=done, first=first)


def _is_batch(text: Any, input_ids: Any) -> bool:
    return isinstance(text, list) and not all(isinstance(t, int) for t in text) or (
        isinstance(input_ids, list) and bool(input_ids) and isinstance(input_ids[0], list))


async def generate(engine: Engine, request: ApiRequest) -> Reply | Stream:
    """POST|PUT /generate; errors are ``{"error": {"message": ...}}`` with status 400."""
    try:
        body = parse_body(request.body)
    except ValidationError as exc:
        return _error(repr(exc.errors))
    text, input_ids = body.get("text"), body.get("input_ids")
    prompts = prompt_list(text if text is not None else input_ids)
    params = body.get("sampling_params") or {}
    errors: list[dict[str, Any]] = []
    if not isinstance(params, dict):
        params = {}
        errors.append(err("dict_type", "sampling_params", "Input should be a valid "
                          "dictionary", body.get("sampling_params")))
    max_new = get_int(params, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS, errors)
    stream = get_bool(body, "stream", False, errors)
    if prompts is None:
        return _error("Either text or input_ids should be provided.")
    if errors:
        return _error(repr(errors))
    max_new = DEFAULT_MAX_NEW_TOKENS if max_new is None else max_new
    for tokens, _ in prompts:
        message = context_error(tokens, max_new, engine.config.context_len)
        if message is not None:
            return _error(message)
    busy = not_ready(engine.state)
    if busy is not None:
        return busy
    failure = engine.fail_gate.fail_next(engine.log)  # LLMOPS_SIM_FAIL_SHARE: before any token
    if failure is not None:
        return Reply({"error": {"message": failure}}, 500)
    prep = await prepare(engine, body, max_new)  # prefill/decode disaggregation (disagg.py)
    if prep.error is not None:
        return Reply({"error": {"message": prep.error}}, 500)
    sub = engine.scheduler.submit(prompts, prep.max_new, stream, seed=params.get("seed"),
                                  transferred=prep.transferred, on_done=prep.on_done)
    if stream:
        return Stream(_chunks(engine, sub), sub.cancel)
    await sub.drain()
    results = [result(engine, r, final=True, first=False) for r in sub.reqs]
    return Reply(results if _is_batch(text, input_ids) else results[0])
