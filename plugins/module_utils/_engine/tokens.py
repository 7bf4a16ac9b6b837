# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The modelled tokenizer: how many tokens a prompt has (about four characters a token; chat:
5 a message + 3), the prompt's token sequence the prefix cache is keyed by (``PromptKey.ids``:
text in runs of four characters, token ids as given, chat messages between template tokens), and
the text of a token id (a small vocabulary; every third id decodes to "", as the recording shows
empty pieces)."""
from __future__ import annotations

import json
from collections.abc import Hashable, Iterable
from typing import Any

EMPTY_TEXT_EVERY = 3

VOCAB = (
    " the", " of", " and", " to", " in", " a", " is", " that", " for", " it", " as", " with",
    " was", " on", " be", " by", " this", " are", " at", " from", " or", " an", " which",
    " script", " manage", " Parameter", " objects", " Form", " second", " fall", " entries",
    " week", " general", " exists", " those", " uid", " Raw", " attemp", "ing", "ed", "er",
    "tion", "ly", "s", "es", "al", "ment", "ness", "able", "ize", "Finder", "pressed", "dt",
    "plication", "uting", "mportError", "coeff", "heap", "replace", "group", "NAMES", "reg",
    "ground", "mix", "tail", "Generic", "surrogate", "welcome", "pro", "tle", "set", "poses",
    ".", ",", ":", ";", "(", ")", "=", "_", "'", "\n", " 1", " 2", "0", "87", "600",
)


CHAT_START, CHAT_END = "<|im_start|>", "<|im_end|>"


class PromptKey(str):
    """A prompt's key (the text the engine seeds its sampling with) carrying its modelled token
    sequence, ``ids``: as many tokens as the prompt counts, two prompts sharing a prefix of
    text (or of token ids, or of chat messages) share a prefix of ``ids``."""

    ids: tuple[Hashable, ...]

    def __new__(cls, text: str, ids: Iterable[Hashable]) -> PromptKey:
        obj = super().__new__(cls, text)
        obj.ids = tuple(ids)
        return obj


def estimate_tokens(text: str) -> int:
    """Deterministic prompt-length estimate: about four characters per token."""
    return max(1, (len(text) + 3) // 4)


def text_ids(text: str) -> list[Hashable]:
    """A text's modelled tokens: its runs of four characters (one empty token for "")."""
    return [text[i:i + 4] for i in range(0, len(text), 4)] or [""]


def prompt_ids(key: str, tokens: int) -> tuple[Hashable, ...]:
    """The token sequence of a prompt: ``key.ids`` of a ``PromptKey``, else the text's."""
    ids = getattr(key, "ids", None)
    if ids is None:
        ids = tuple(text_ids(key))
    return tuple(ids[:tokens]) if len(ids) > tokens else tuple(ids)


def prompt_list(value: Any) -> list[tuple[int, str]] | None:
    """(token count, cache key) for each prompt of an OpenAI/native prompt value; None when the
    value is no prompt (a string, a list of strings, token ids or lists of token ids)."""
    if isinstance(value, str):
        return [(estimate_tokens(value), PromptKey(value, text_ids(value)))]
    if isinstance(value, list) and value:
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [(len(value), PromptKey(json.dumps(value), value))]
        if all(isinstance(v, str) for v in value):
            return [(estimate_tokens(v), PromptKey(v, text_ids(v))) for v in value]
        if all(isinstance(v, list) and v and all(isinstance(i, int) for i in v) for v in value):
            return [(len(v), PromptKey(json.dumps(v), v)) for v in value]
    return None


def chat_prompt(messages: list[Any]) -> tuple[int, str]:
    """Token estimate of a chat prompt after a ChatML-like template (5 tokens a message + 3)."""
    tokens = 3
    parts: list[str] = []
    ids: list[Hashable] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        text = str(content or "")
        role = message.get('role') if isinstance(message, dict) else ''
        parts.append(f"{role}:{text}")
        tokens += 5 + (len(text) + 3) // 4
        ids += [CHAT_START, str(role), "\n"]
        ids += text_ids(text) if text else []
        ids += [CHAT_END, "\n"]
    ids += [CHAT_START, "assistant", "\n"]
    return tokens, PromptKey("\n".join(parts), ids)


def piece(token_id: int) -> str:
    if token_id % EMPTY_TEXT_EVERY == 0:
        return ""
    return VOCAB[(token_id // EMPTY_TEXT_EVERY) % len(VOCAB)]


def detok(ids: Iterable[int]) -> str:
    return "".join(piece(i) for i in ids)
