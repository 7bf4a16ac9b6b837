# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The OpenAI API: ``/v1/completions`` and ``/v1/chat/completions``, streamed or not, with the
recorded response and chunk shapes (docs/engine-api.md "Streams")."""
from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.disagg import Prepared, prepare
from ansible_collections.llmops.sglang.plugins.module_utils._engine.replies import (
    Reply,
    Stream,
    bad_request,
    internal_error,
    not_ready,
    serving_error,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.requests import (
    ApiRequest,
    ServingError,
    ValidationError,
    check_context,
    err,
    get_bool,
    get_int,
    missing,
    parse_body,
)
from ansible_collections.llmops.sglang.plugins.module_utils._engine.scheduler import Req, Submission
from ansible_collections.llmops.sglang.plugins.module_utils._engine.tokens import (
    chat_prompt,
    detok,
    prompt_list,
)

if TYPE_CHECKING:
    from ansible_collections.llmops.sglang.plugins.module_utils._engine.engine import Engine

Prompts = list[tuple[int, str]]


@dataclass(frozen=True)
class _Call:
    """An admitted OpenAI request: the ids of its answer and its submission."""

    model: str
    cid: str
    created: int
    include_usage: bool
    sub: Submission
    cache_report: bool = False  # --enable-cache-report

    @property
    def reqs(self) -> list[Req]:
        return self.sub.reqs

    def head(self, kind: str) -> dict[str, Any]:
        return {"id": self.cid, "object": kind, "created": self.created, "model": self.model}


def _common(body: dict[str, Any], errors: list[dict[str, Any]],
            default_max: int | None) -> tuple[int, bool, bool, int]:
    """(max tokens, -1 when unset; stream; ignore_eos; n)."""
    max_tokens = get_int(body, "max_tokens", default_max, errors)
    if "max_completion_tokens" in body and body.get("max_completion_tokens") is not None:
        max_tokens = get_int(body, "max_completion_tokens", max_tokens, errors)
    stream = get_bool(body, "stream", False, errors)
    ignore_eos = get_bool(body, "ignore_eos", False, errors)
    n = get_int(body, "n", 1, errors) or 1
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        errors.append(err("model_type", "stream_options", "Input should be a valid "
                          "dictionary or instance of StreamOptions", options))
    return (max_tokens if max_tokens is not None else -1), stream, ignore_eos, n


def _injected_failure(engine: Engine) -> Reply | None:
    """``LLMOPS_SIM_FAIL_SHARE``: this request's 500 (before any token), or None."""
    message = engine.fail_gate.fail_next(engine.log)
    return None if message is None else internal_error(message)


def _admit(engine: Engine, body: dict[str, Any], prompts: Prompts, prep: Prepared, stream: bool) -> _Call:
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    sub = engine.scheduler.submit(prompts, prep.max_new, stream, seed=body.get("seed"), transferred=prep.transferred,
                                  on_done=prep.on_done)
    return _Call(str(body.get("model") or "default"), uuid.uuid4().hex, int(time.time()),
                 include_usage, sub, bool(engine.config.args.get("enable_cache_report")))


def usage(reqs: list[Req], details: bool, cache_report: bool = False) -> dict[str, Any]:
    """The usage block; ``prompt_tokens_details`` (where the recording has it) is null unless
    the server runs with ``--enable-cache-report``: then ``{"cached_tokens": N}``."""
    prompt = sum(r.prompt_tokens for r in reqs)
    completion = sum(len(r.output_ids) for r in reqs)
    out: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                           "completion_tokens": completion}
    if details:
        out["prompt_tokens_details"] = ({"cached_tokens": sum(r.cached_tokens for r in reqs)}
                                        if cache_report else None)
    out["reasoning_tokens"] = 0
    return out


# -- /v1/completions ----------------------------------------------------------------------
def _completion_params(engine: Engine, body: dict[str, Any]) -> tuple[Prompts, int, bool]:
    errors: list[dict[str, Any]] = []
    if "prompt" not in body:
        errors.append(missing("prompt", body))
    prompts = prompt_list(body.get("prompt")) if "prompt" in body else []
    if prompts is None:
        errors.append(err("string_type", "prompt", "Input should be a valid string", body.get("prompt")))
    max_tokens, stream, _ignore_eos, n = _common(body, errors, 16)
    if errors:
        raise ValidationError(errors)
    if prompts is None:  # validated above; narrows the type
        raise AssertionError("prompts")
    prompts = [p for p in prompts for _ in range(max(1, n))]
    if max_tokens < 0:
        max_tokens = max(1, engine.config.context_len - max(t for t, _ in prompts))
    check_context(prompts, max_tokens, engine.config.context_len)
    return prompts, max_tokens, stream


def _completion(call: _Call) -> dict[str, Any]:
    return {**call.head("text_completion"),
            "choices": [{"index": r.index, "text": detok(r.output_ids), "logprobs": None,
                         "finish_reason": r.finish_reason, "matched_stop": r.matched_stop}
                        for r in call.reqs],
            "usage": usage(call.reqs, details=True, cache_report=call.cache_report),
            "metadata": {"weight_version": "default"}}


async def _completion_chunks(call: _Call) -> AsyncIterator[dict[str, Any]]:
    async for index, ids, done in call.sub.events():
        if not ids and not done:
            continue
        req = call.reqs[index]
        yield {**call.head("text_completion"),
               "choices": [{"index": index, "text": detok(ids), "logprobs": None,
                            "finish_reason": req.finish_reason if done else None,
                            "matched_stop": req.matched_stop if done else None}],
               "usage": None}
    if call.include_usage:
        yield {**call.head("text_completion"), "choices": [], "usage": usage(call.reqs, details=False)}


async def completions(engine: Engine, request: ApiRequest) -> Reply | Stream:
    """POST /v1/completions."""
    try:
        body = parse_body(request.body)
        prompts, max_tokens, stream = _completion_params(engine, body)
    except ValidationError as exc:
        return bad_request(request, exc)
    except ServingError as exc:
        return serving_error(str(exc))
    busy = not_ready(engine.state) or _injected_failure(engine)
    if busy is not None:
        return busy
    prep = await prepare(engine, body, max_tokens)  # prefill/decode disaggregation (disagg.py)
    if prep.error is not None:
        return internal_error(prep.error)
    call = _admit(engine, body, prompts, prep, stream)
    if not stream:
        await call.sub.drain()
        return Reply(_completion(call))
    return Stream(_completion_chunks(call), call.sub.cancel)


# -- /v1/chat/completions -----------------------------------------------------------------
def _chat_params(engine: Engine, body: dict[str, Any]) -> tuple[Prompts, int, bool, int | None]:
    """(prompts, max tokens, stream, the token the model "samples EOS" at, if any)."""
    errors: list[dict[str, Any]] = []
    messages = body.get("messages")
    if "messages" not in body:
        errors.append(missing("messages", body))
    elif not isinstance(messages, list):
        errors.append(err("list_type", "messages", "Input should be a valid list", messages))
    max_tokens, stream, ignore_eos, n = _common(body, errors, None)
    if errors:
        raise ValidationError(errors)
    if not isinstance(messages, list):  # validated above; narrows the type
        raise AssertionError("messages")
    prompts = [chat_prompt(messages)] * max(1, n)
    eos_at: int | None = None
    if max_tokens < 0:
        max_tokens = max(1, engine.config.context_len - prompts[0][0])
        if not ignore_eos:  # no limit: the model "samples EOS" after 64-511 tokens
            eos_at = 64 + int(hashlib.sha256(prompts[0][1].encode()).hexdigest(), 16) % 448
            max_tokens = min(max_tokens, eos_at)
    check_context(prompts, max_tokens, engine.config.context_len)
    return prompts, max_tokens, stream, eos_at


def _eos_token(model_config: dict[str, Any]) -> int:
    eos = model_config.get("eos_token_id")
    return int(eos[0]) if isinstance(eos, list) else int(eos or 2)


def _chat(call: _Call) -> dict[str, Any]:
    return {**call.head("chat.completion"),
            "choices": [{"index": r.index, "message": {
                "role": "assistant", "content": detok(r.output_ids),
                "reasoning_content": None, "tool_calls": None},
                "logprobs": None, "finish_reason": r.finish_reason,
                "matched_stop": r.matched_stop} for r in call.reqs],
            "usage": usage(call.reqs, details=True, cache_report=call.cache_report),
            "metadata": {"weight_version": "default"}}


def _chat_chunk(call: _Call, index: int, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {**call.head("chat.completion.chunk"), "choices": [{
        "index": index, "delta": delta, "logprobs": None, "finish_reason": finish,
        "matched_stop": call.reqs[index].matched_stop if finish else None}]}


async def _chat_chunks(call: _Call) -> AsyncIterator[dict[str, Any]]:
    """A role chunk, content chunks for non-empty text, a finish chunk; then the usage."""
    started: set[int] = set()
    async for index, ids, done in call.sub.events():
        if index not in started:
            started.add(index)
            yield _chat_chunk(call, index, {"reasoning_content": None, "role": "assistant",
                                            "content": ""}, None)
        text = detok(ids)
        if text:
            yield _chat_chunk(call, index, {"reasoning_content": None, "content": text}, None)
        if done:
            yield _chat_chunk(call, index, {"reasoning_content": None}, call.reqs[index].finish_reason)
    if call.include_usage:
        yield {**call.head("chat.completion.chunk"), "choices": [],
               "usage": usage(call.reqs, details=True, cache_report=call.cache_report)}


async def chat(engine: Engine, request: ApiRequest) -> Reply | Stream:
    """POST /v1/chat/completions."""
    try:
        body = parse_body(request.body)
        prompts, max_tokens, stream, eos_at = _chat_params(engine, body)
    except ValidationError as exc:
        return bad_request(request, exc)
    except ServingError as exc:
        return serving_error(str(exc))
    busy = not_ready(engine.state) or _injected_failure(engine)
    if busy is not None:
        return busy
    prep = await prepare(engine, body, max_tokens)  # prefill/decode disaggregation (disagg.py)
    if prep.error is not None:
        return internal_error(prep.error)
    call = _admit(engine, body, prompts, prep, stream)
    if eos_at is not None and eos_at == max_tokens:
        for req in call.reqs:
            req.finish_reason = "stop"
            req.matched_stop = _eos_token(engine.config.model_config)
    if not stream:
        await call.sub.drain()
        return Reply(_chat(call))
    return Stream(_chat_chunks(call), call.sub.cancel)
