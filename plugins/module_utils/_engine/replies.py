# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What an API handler gives back, free of the HTTP framework: a JSON ``Reply`` or an SSE
``Stream`` of JSON objects (the server writes ``data: [DONE]`` after the last one), and the
recorded error bodies: pydantic's 400, the serving layer's 400 and 500, and the 503 while not
ready."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._engine.requests import (
    ApiRequest,
    ValidationError,
)


@dataclass(frozen=True)
class Reply:
    body: Any
    status: int = 200


@dataclass(frozen=True)
class Stream:
    """Server-sent events: each object of ``events`` as one ``data:`` line; ``abort`` cancels
    the requests behind it when the client goes away."""

    events: AsyncIterator[Any]
    abort: Callable[[], None]


def json_dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def bad_request(request: ApiRequest, exc: ValidationError) -> Reply:
    """The 400 of a body the pydantic models reject (FastAPI's handler as SGLang words it)."""
    count = len(exc.errors)
    summary = f"{count} validation error{'s' if count != 1 else ''}:\n" + "\n".join(
        f"  {e!r}" for e in exc.errors)
    message = f"{summary}\n\n    {request.method} {request.path} {exc.errors!r}"
    return Reply({"object": "error", "message": message, "type": "Bad Request",
                  "param": None, "code": 400}, 400)


def serving_error(message: str) -> Reply:
    return Reply({"object": "error", "message": message, "type": "BadRequestError",
                  "param": None, "code": 400}, 400)


def internal_error(message: str) -> Reply:
    """The 500 of the OpenAI serving layer when handling a request raised
    (``OpenAIServingBase.handle_request``: ``Internal server error: <exception>``)."""
    return Reply({"object": "error", "message": f"Internal server error: {message}",
                  "type": "InternalServerError", "param": None, "code": 500}, 500)


def not_ready(state: str) -> Reply | None:
    """The 503 the real server answers while it loads or stops (None when it serves)."""
    if state in ("loading", "stopping"):
        return Reply({"object": "error", "message": "The server is not ready.",
                      "type": "Service Unavailable", "param": None, "code": 503}, 503)
    return None
