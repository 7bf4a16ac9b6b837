# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The job's input: one request per line, checked before anything is sent (docs/generate.md
"Input").

Two line formats, mixed freely:

- OpenAI's batch input: ``{"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
  "body": {...}}`` (``url`` one of ``ENDPOINTS``; ``method`` POST);
- plain: ``{"id": "r1", "prompt": "..."}`` (``/v1/completions``) or ``{"id": "r1", "messages":
  [...]}`` (``/v1/chat/completions``); every other key is a body parameter (``max_tokens``,
  ``temperature``, ...). ``custom_id`` may stand for ``id``.

The job's ``defaults`` (``sglang_generate_defaults``) fill body parameters a line does not give;
what a line gives is sent as given. Blank lines are skipped (they count as lines for the line
numbers). Refused, with the line number and the reason: a line that is not a JSON object, a
missing or empty id, an id seen before, an unknown endpoint or method, a body that is not an
object or lacks its ``messages``/``prompt``, ``stream: true`` (the job keeps whole responses), and
keys of a batch line that the format does not have.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
ENDPOINTS = (CHAT, COMPLETIONS)
BATCH_KEYS = ("custom_id", "method", "url", "body")
# the keys that make a line a batch line (a plain line has none of them but custom_id)
BATCH_MARKERS = ("method", "url", "body")
# how many problems a refusal lists (the count says how many there are in all)
MAX_LISTED = 20
_READ = 1 << 20


class InputError(ValueError):
    """One line that cannot be sent; the message is the reason (the caller adds the line)."""


@dataclass(frozen=True)
class Request:
    """One request of the input: its id, endpoint, body (defaults filled) and line number."""

    custom_id: str
    url: str
    body: dict[str, Any]
    line: int


@dataclass
class Scan:
    """What a pass over the input found: the requests, the file's digest, the problems."""

    path: str
    lines: int = 0
    requests: int = 0
    digest: str = ""
    size: int = 0
    endpoints: dict[str, int] = field(default_factory=dict)
    problems: list[tuple[int, str]] = field(default_factory=list)
    problem_count: int = 0

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    def message(self) -> str:
        """The refusal: how many lines are bad, each listed one with its number and reason, the fix."""
        listed = "; ".join(f"line {n}: {why}" for n, why in self.problems)
        more = f" (and {self.problem_count - len(self.problems)} more)" if self.problem_count > len(self.problems) else ""
        return (f"{self.path}: {self.problem_count} of {self.lines} line(s) cannot be sent, nothing was sent: {listed}{more}. "
                "Each line is a JSON object: OpenAI's batch input ({\"custom_id\", \"method\": \"POST\", \"url\": "
                f"\"{CHAT}\" or \"{COMPLETIONS}\", \"body\"}}) or {{\"id\", \"prompt\"}} / {{\"id\", \"messages\"}} "
                "(docs/generate.md \"Input\")")


def _custom_id(obj: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    for key in keys:
        if key in obj:
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise InputError(f"{key} must be a string, got {type(value).__name__} {value!r}")
            text = str(value)
            if not text.strip():
                raise InputError(f"{key} is empty")
            return text
    raise InputError(f"no {' or '.join(keys)}: each line needs an id, unique in the file")


def _check_body(url: str, body: Mapping[str, Any]) -> None:
    if url == CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InputError(f"a {CHAT} body needs messages, a non-empty list")
    elif "prompt" not in body or body["prompt"] in ("", [], None):
        raise InputError(f"a {COMPLETIONS} body needs a prompt")
    if body.get("stream"):
        raise InputError("stream is true: the job keeps whole responses, remove stream (or set it false)")


def parse_line(text: str, line: int, defaults: Mapping[str, Any] | None = None) -> Request:
    """The request of one line (``text`` without its newline); InputError with the reason when
    it cannot be sent."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise InputError(f"not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise InputError(f"a JSON object is expected, got {type(obj).__name__}")
    if any(key in obj for key in BATCH_MARKERS):
        unknown = sorted(set(obj) - set(BATCH_KEYS))
        if unknown:
            raise InputError(f"a batch line has only {', '.join(BATCH_KEYS)}; unknown: {', '.join(unknown)}")
        custom_id = _custom_id(obj, ("custom_id",))
        method = obj.get("method", "POST")
        if method != "POST":
            raise InputError(f"method {method!r}: only POST")
        url = obj.get("url")
        if url not in ENDPOINTS:
            raise InputError(f"url {url!r}: one of {', '.join(ENDPOINTS)}")
        given = obj.get("body")
        if not isinstance(given, dict):
            raise InputError(f"body must be an object, got {type(given).__name__}")
    else:
        custom_id = _custom_id(obj, ("id", "custom_id"))
        has_prompt, has_messages = "prompt" in obj, "messages" in obj
        if has_prompt == has_messages:
            raise InputError("a plain line has either prompt or messages" + (", not both" if has_prompt else ""))
        url = CHAT if has_messages else COMPLETIONS
        given = {k: v for k, v in obj.items() if k not in ("id", "custom_id")}
    body = {**dict(defaults or {}), **given}
    _check_body(url, body)
    return Request(custom_id=custom_id, url=url, body=body, line=line)


def _lines(path: str, digest: Any = None) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line without its newline) of the file, hashing every byte read."""
    number = 0
    rest = b""
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(_READ)
            if digest is not None and chunk:
                digest.update(chunk)
            if not chunk:
                break
            parts = (rest + chunk).split(b"\n")
            rest = parts.pop()
            for raw in parts:
                number += 1
                yield number, raw
    if rest:
        yield number + 1, rest


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None


def scan(path: str, defaults: Mapping[str, Any] | None = None, ids: set[str] | None = None) -> Scan:
    """One pass over the file: every line checked, ids unique, the sha256 of the whole file;
    ``ids``, when given, gets every request's id. OSError when it cannot be read."""
    result = Scan(path=path)
    digest = hashlib.sha256()
    seen: dict[str, int] = {}
    for number, raw in _lines(path, digest):
        result.lines = number
        if not raw.strip():
            continue
        try:
            request = parse_line(_decode(raw), number, defaults)
            first = seen.get(request.custom_id)
            if first is not None:
                raise InputError(f"id {request.custom_id!r} is on line {first} too: ids are unique")
        except InputError as exc:
            result.problem_count += 1
            if len(result.problems) < MAX_LISTED:
                result.problems.append((number, str(exc)))
            continue
        seen[request.custom_id] = number
        if ids is not None:
            ids.add(request.custom_id)
        result.requests += 1
        result.endpoints[request.url] = result.endpoints.get(request.url, 0) + 1
    result.digest = digest.hexdigest()
    result.size = os.path.getsize(path)
    return result


def requests(path: str, defaults: Mapping[str, Any] | None = None,
             skip: Any = frozenset()) -> Iterator[Request]:
    """The requests of a checked file in file order, those whose id is in ``skip`` left out.
    InputError (with its line) for a line that does not parse: the file changed since its scan."""
    for number, raw in _lines(path):
        if not raw.strip():
            continue
        try:
            request = parse_line(_decode(raw), number, defaults)
        except InputError as exc:
            raise InputError(f"{path} line {number}: {exc} (the file changed after it was checked)") from None
        if request.custom_id not in skip:
            yield request
