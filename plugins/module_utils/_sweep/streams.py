# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Stream parsers (pure: fed the arrival time and the payload of each SSE ``data:`` line) of the
OpenAI and native APIs, and the message of an HTTP error body.
"""
from __future__ import annotations

import json
import re
from typing import Any


def _error_text(err: Any) -> str:
    if isinstance(err, dict):
        msg = err.get("message") or err.get("msg") or json.dumps(err)[:300]
        code = err.get("code")
        return f"{msg} (code {code})" if code is not None else str(msg)
    return str(err)[:300]


class StreamParser:
    """Common state of one streamed response."""

    def __init__(self) -> None:
        self.first_token_t: float | None = None
        self.events: list[tuple[float, float]] = []  # (arrival time, tokens added)
        self.output_tokens: int | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.done = False  # data: [DONE] seen
        self.chunks = 0
        self.prompt_tokens: int | None = None  # as the server counted them
        self.cached_tokens: int | None = None  # of them served from its prefix cache
        self.keep_text = False  # collect the reply's text (multi-turn workloads)
        self.text_parts: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def feed(self, t: float, data: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Called once the body ended."""

    @property
    def complete(self) -> bool:
        return self.done or self.finish_reason is not None


class OpenAIStreamParser(StreamParser):
    """``/v1/completions`` and ``/v1/chat/completions`` streams.

    A chunk carries a token when it has a ``choices`` entry, unless it is the role-only chat chunk
    (``delta`` with a ``role`` and no content). The usage chunk (``choices: []``) is not a token.
    The stream has no per-chunk counts, so ``close`` spreads ``usage.completion_tokens`` evenly
    over the token chunks.
    """

    def __init__(self) -> None:
        super().__init__()
        self.token_chunk_times: list[float] = []
        self.usage_tokens: int | None = None

    def feed(self, t: float, data: str) -> None:
        if data == "[DONE]":
            self.done = True
            return
        if self.error is not None:
            return
        obj = json.loads(data)
        if not isinstance(obj, dict):
            return
        self.chunks += 1
        if obj.get("error") is not None:
            self.error = _error_text(obj["error"])
            return
        if obj.get("object") == "error":
            self.error = _error_text(obj)
            return
        usage = obj.get("usage")
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            self.usage_tokens = int(usage["completion_tokens"])
            self.prompt_tokens = usage.get("prompt_tokens")
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and details.get("cached_tokens") is not None:
                self.cached_tokens = int(details["cached_tokens"])
        choices = obj.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        delta = choice.get("delta")
        if isinstance(delta, dict) and delta.get("role") and not delta.get("content") and not delta.get(
            "reasoning_content"
        ):
            return  # role-only chat chunk: no token
        if self.keep_text:
            piece = choice.get("text") if not isinstance(delta, dict) else delta.get("content")
            self.text_parts.append(piece if isinstance(piece, str) else "")
        self.token_chunk_times.append(t)
        if self.first_token_t is None:
            self.first_token_t = t

    def close(self) -> None:
        self.output_tokens = self.usage_tokens
        if self.usage_tokens is None or not self.token_chunk_times:
            self.events = []
            return
        per_chunk = self.usage_tokens / len(self.token_chunk_times)
        self.events = [(t, per_chunk) for t in self.token_chunk_times]


_CT_RE = re.compile(r'"completion_tokens":\s*(\d+)')


class NativeStreamParser(StreamParser):
    """``/generate`` streams: ``meta_info.completion_tokens`` is cumulative, so each chunk's token
    count is exact; a chunk carries tokens when the count grows.

    Chunks repeat the whole output so far (text and output_ids); to keep the client cheap, a chunk
    that is not finished is read with a scan for its count instead of a full JSON parse.
    """

    def __init__(self) -> None:
        super().__init__()
        self._count = 0

    def feed(self, t: float, data: str) -> None:
        if data == "[DONE]":
            self.done = True
            return
        if self.error is not None:
            return
        self.chunks += 1
        count: int | None = None
        finish: Any = None
        fast = data.startswith('{"text"') and data.rfind('"finish_reason":null') >= 0
        if fast:
            pos = data.rfind('"completion_tokens":')
            match = _CT_RE.match(data, pos) if pos >= 0 else None
            if match is not None:
                count = int(match.group(1))
        if count is None:
            obj = json.loads(data)
            if not isinstance(obj, dict):
                return
            if obj.get("error") is not None:
                self.error = _error_text(obj["error"])
                return
            meta = obj.get("meta_info") or {}
            if meta.get("completion_tokens") is None:
                return
            count = int(meta["completion_tokens"])
            finish = meta.get("finish_reason")
            if meta.get("cached_tokens") is not None:
                self.cached_tokens = int(meta["cached_tokens"])
            self.prompt_tokens = meta.get("prompt_tokens", self.prompt_tokens)
            if self.keep_text and isinstance(obj.get("text"), str):
                self.text_parts = [obj["text"]]  # cumulative
        added = count - self._count
        if added > 0:
            self.events.append((t, float(added)))
            if self.first_token_t is None:
                self.first_token_t = t
            self._count = count
        self.output_tokens = self._count
        if finish:
            kind = finish.get("type") if isinstance(finish, dict) else str(finish)
            self.finish_reason = str(kind)
            if kind == "abort":
                message = finish.get("message") if isinstance(finish, dict) else None
                self.error = f"request aborted by the server: {message or finish}"

    def close(self) -> None:
        if self.output_tokens is None and self._count:
            self.output_tokens = self._count


def make_parser(api: str) -> StreamParser:
    return OpenAIStreamParser() if api == "openai" else NativeStreamParser()


def http_error_message(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return text[:200] or "(empty body)"
    if isinstance(obj, dict):
        if isinstance(obj.get("error"), (dict, str)):
            return _error_text(obj["error"])[:200]
        if obj.get("message"):
            return str(obj["message"]).splitlines()[0][:200]
    return text[:200]
