# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The modelled tokenizer: how many tokens a prompt has (about four characters a token; chat:
5 a message + 3) and the text of a token id (a small vocabulary; every third id decodes to "",
as the recording shows empty pieces)."""
from __future__ import annotations

import json
from collections.abc import Iterable
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


def estimate_tokens(text: str) -> int:
    """Deterministic prompt-length estimate: about four characters per token."""
    return max(1, (len(text) + 3) // 4)


def prompt_list(value: Any) -> list[tuple[int, str]] | None:
    """(token count, cache key) for each prompt of an OpenAI/native prompt value; None when the
    value is no prompt (a string, a list of strings, token ids or lists of token ids)."""
    if isinstance(value, str):
        return [(estimate_tokens(value), value)]
    if isinstance(value, list) and value:
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [(len(value), json.dumps(value))]
        if all(isinstance(v, str) for v in value):
            return [(estimate_tokens(v), v) for v in value]
        if all(isinstance(v, list) and v and all(isinstance(i, int) for i in v) for v in value):
            return [(len(v), json.dumps(v)) for v in value]
    return None


def chat_prompt(messages: list[Any]) -> tuple[int, str]:
    """Token estimate of a chat prompt after a ChatML-like template (5 tokens a message + 3)."""
    tokens = 3
    parts: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        text = str(content or "")
        parts.append(f"{message.get('role') if isinstance(message, dict) else ''}:{text}")
        tokens += 5 + (len(text) + 3) // 4
    return tokens, "\n".join(parts)


def piece(token_id: int) -> str:
    if token_id % EMPTY_TEXT_EVERY == 0:
        return ""
    return VOCAB[(token_id // EMPTY_TEXT_EVERY) % len(VOCAB)]


def detok(ids: Iterable[int]) -> str:
    return "".join(piece(i) for i in ids)
