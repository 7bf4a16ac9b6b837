# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What an API handler gets (``ApiRequest``) and how it reads the body: the JSON object, typed
fields coerced and rejected as the real server's pydantic models do (``ValidationError`` with
pydantic's error dicts), and the context-length check of SGLang's serving layer."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_TRUE_WORDS = ("true", "1", "yes", "on", "t", "y")
_BOOL_WORDS = _TRUE_WORDS + ("false", "0", "no", "off", "f", "n")


@dataclass(frozen=True)
class ApiRequest:
    method: str
    path: str
    body: bytes


class ValidationError(Exception):
    """A request body that the real server's pydantic models would reject."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(repr(errors))
        self.errors = errors


class ServingError(Exception):
    """An error the real OpenAI serving layer returns as a 400 ``BadRequestError``."""


def err(kind: str, loc: str, msg: str, value: Any) -> dict[str, Any]:
    return {"type": kind, "loc": ("body", loc), "msg": msg, "input": value}


def missing(loc: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"type": "missing", "loc": ("body", loc), "msg": "Field required", "input": body}


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a request body; ValidationError as pydantic words it otherwise."""
    try:
        body = json.loads(raw or b"null")
    except ValueError as exc:
        raise ValidationError([{"type": "json_invalid", "loc": ("body", 0),
                                "msg": "JSON decode error", "input": {},
                                "ctx": {"error": str(exc).split(":")[0]}}]) from exc
    if not isinstance(body, dict):
        raise ValidationError([{"type": "model_attributes_type", "loc": ("body",),
                                "msg": "Input should be a valid dictionary or object to "
                                       "extract fields from", "input": body}])
    return body


def get_int(body: dict[str, Any], key: str, default: int | None,
            errors: list[dict[str, Any]]) -> int | None:
    """An integer field (pydantic's lax mode: integral floats and numeric strings pass)."""
    value = body.get(key, default)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        errors.append(err("int_from_float", key, "Input should be a valid integer, got a "
                          "number with a fractional part", value))
        return default
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            errors.append(err("int_parsing", key, "Input should be a valid integer, unable to "
                              "parse string as an integer", value))
            return default
    errors.append(err("int_type", key, "Input should be a valid integer", value))
    return default


def get_bool(body: dict[str, Any], key: str, default: bool,
             errors: list[dict[str, Any]]) -> bool:
    """A boolean field (pydantic's lax mode: 0/1 and words like "yes" pass)."""
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _BOOL_WORDS:
        return value.lower() in _TRUE_WORDS
    errors.append(err("bool_parsing", key, "Input should be a valid boolean, unable to "
                      "interpret input", value))
    return default


def context_error(tokens: int, max_new: int, context_len: int) -> str | None:
    """SGLang's message when a prompt and its max new tokens exceed the context length."""
    if tokens + max_new <= context_len:
        return None
    return (f"Requested token count exceeds the model's maximum context length of "
            f"{context_len} tokens. You requested a total of {tokens + max_new} "
            f"tokens: {tokens} tokens from the input messages and {max_new} tokens "
            f"for the completion. Please reduce the number of tokens in the input "
            f"messages or the completion to fit within the limit.")


def check_context(prompts: list[tuple[int, str]], max_new: int, context_len: int) -> None:
    """ServingError for the first prompt that does not fit the context."""
    for tokens, _ in prompts:
        message = context_error(tokens, max_new, context_len)
        if message is not None:
            raise ServingError(message)
