# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The HTTP client of a sweep: one session (``open_session``), the request payload and ``Client``,
which sends one streamed request and returns its ``Trace``. The only file of the package that
needs aiohttp (optional: ``HAS_AIOHTTP``).
"""
from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import (
    AUTH_STATUSES,
    DEFAULT_PROMPTS,
    READ_BUFSIZE,
    TIMEOUTS,
    SweepError,
    auth_message,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.options import SweepOptions
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.pair import Pairs
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.streams import (
    http_error_message,
    make_parser,
)
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.trace import Trace, finalize_trace
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.workloads import parse_workload

try:
    import aiohttp

    HAS_AIOHTTP = True
    AIOHTTP_IMPORT_ERROR: str | None = None
except ImportError as _exc:  # pragma: no cover - depends on the interpreter
    aiohttp = None  # type: ignore[assignment]
    HAS_AIOHTTP = False
    AIOHTTP_IMPORT_ERROR = str(_exc)


def missing_aiohttp_message(python: str) -> str:
    """The message a module fails with when its interpreter lacks aiohttp."""
    return (
        f"the Python running this module ({python}) cannot import aiohttp ({AIOHTTP_IMPORT_ERROR}). "
        "Run the sweep with the SGLang engine venv's Python (set ansible_python_interpreter to it), "
        "or on the controller (delegate_to: localhost), or install aiohttp for this interpreter."
    )


def build_payload(
    opts: SweepOptions, model: str | None, prompt: str, max_tokens: int | None = None
) -> tuple[str, dict[str, Any]]:
    """Path and JSON body of one streamed generation request (``max_tokens``: the option's
    unless given, as for the level warm-up)."""
    tokens = opts.max_tokens if max_tokens is None else int(max_tokens)
    if opts.api == "openai":
        body: dict[str, Any] = {
            "model": model,
            "prompt": prompt,
            "max_tokens": tokens,
            "temperature": opts.temperature,
            "top_p": opts.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if opts.ignore_eos:
            body["ignore_eos"] = True
        return "/v1/completions", with_extra_body(body, opts.extra_body, OPENAI_FIELDS)
    sampling: dict[str, Any] = {
        "max_new_tokens": tokens,
        "temperature": opts.temperature,
        "top_p": opts.top_p,
        "ignore_eos": opts.ignore_eos,
    }
    extra = dict(opts.extra_body or {})
    sampling = with_extra_body(sampling, extra.pop("sampling_params", None), NATIVE_SAMPLING_FIELDS, "sampling_params.")
    body = {"text": prompt, "sampling_params": sampling, "stream": True}
    if model:
        body["model"] = model
    return "/generate", with_extra_body(body, extra, NATIVE_FIELDS)


# The fields each API's body gets from the sweep's own options (extra_body may not set them).
OPENAI_FIELDS = ("model", "prompt", "max_tokens", "temperature", "top_p", "ignore_eos", "stream", "stream_options")
NATIVE_FIELDS = ("model", "text", "stream")
NATIVE_SAMPLING_FIELDS = ("max_new_tokens", "temperature", "top_p", "ignore_eos")
_FIELD_OPTIONS = {"prompt": "prompts or workload", "text": "prompts or workload", "max_new_tokens": "max_tokens",
                  "stream": "none: the sweep measures streamed replies", "stream_options": "none: the sweep reads usage"}


def with_extra_body(body: dict[str, Any], extra: Any, own: tuple[str, ...], where: str = "") -> dict[str, Any]:
    """``body`` with the fields of the ``extra_body`` option (``extra``) added; raises SweepError
    naming a field the sweep sets itself (``own``) and the option that sets it."""
    if extra is None:
        return body
    if not isinstance(extra, dict):
        raise SweepError(f"extra_body{' ' + where.rstrip('.') if where else ''} must be a mapping of fields, got {extra!r}: "
                         "give it as name: value pairs (for example {top_k: 20}). Nothing was sent.")
    taken = [name for name in own if name in extra]
    if taken:
        raise SweepError(
            f"extra_body sets {', '.join(where + name for name in taken)}, which the sweep sets from its own options: "
            + "; ".join(f"{name}: {_FIELD_OPTIONS.get(name, 'option ' + name)}" for name in taken)
            + ". Remove it from extra_body (set the option instead). Nothing was sent."
        )
    return {**body, **copy.deepcopy(extra)}


class Client:
    """The shared session and what every request needs."""

    def __init__(self, opts: SweepOptions, session: Any, model: str | None) -> None:
        self.opts = opts
        self.session = session
        self.model = model
        self.timeout = aiohttp.ClientTimeout(total=opts.timeout)
        self.path, _ = build_payload(opts, model, "")
        self.workload = parse_workload(opts.workload, opts.seed, list(opts.prompts or DEFAULT_PROMPTS))
        self.pairs = Pairs(opts.pd) if opts.pd else None

    async def send(self, trace: Trace, prompt: str, max_tokens: int | None = None, keep_text: bool = False) -> str:
        """Send one request and fill ``trace``; never raises except CancelledError. Returns the
        reply's text with ``keep_text`` (multi-turn conversations), else "". With the ``pd``
        option the same body, with its bootstrap fields, goes to a prefill too (``pair.Pairs``):
        the decode's stream is measured, and the prefill's failure is the request's."""
        opts = self.opts
        _, body = build_payload(opts, self.model, prompt, max_tokens)
        want = opts.max_tokens if max_tokens is None else int(max_tokens)
        if self.pairs is None:
            return await self._stream(opts.url, body, trace, want, keep_text)
        pairing = self.pairs.next()
        body = {**body, **pairing.fields}
        decode = asyncio.ensure_future(self._stream(pairing.decode, body, trace, want, keep_text))
        prefill = asyncio.ensure_future(self._prefill(pairing.prefill, body))
        try:
            await asyncio.wait((decode, prefill), return_when=asyncio.FIRST_COMPLETED)
            problem = await prefill if prefill.done() else None
            if problem is not None and not decode.done():  # as the router does: the decode is not waited for
                trace.fail(*problem)
                decode.cancel()
            try:
                text = await decode
            except asyncio.CancelledError:
                if problem is None:
                    raise
                text = ""
            problem = problem or await prefill
        except asyncio.CancelledError:
            for task in (decode, prefill):
                task.cancel()
            raise
        if problem is not None:
            trace.fail(*problem)
        return text

    async def _prefill(self, url: str, body: dict[str, Any]) -> tuple[str, str] | None:
        """The prefill's half of a paired request (its answer read and dropped, as the router does):
        None when it answered 200, else the trace's (kind, message) naming the prefill."""
        try:
            async with self.session.post(url + self.path, json=body, timeout=self.timeout) as resp:
                if resp.status != 200:
                    raw = await resp.content.read(2048)
                    return "http", f"prefill {url}: HTTP {resp.status}: {http_error_message(raw)}"
                async for _ in resp.content.iter_any():
                    pass
        except TIMEOUTS:
            return "timeout", f"prefill {url}: no complete response within timeout={self.opts.timeout:g}s"
        except (aiohttp.ClientError, OSError) as exc:
            return "connection", f"prefill {url}: {type(exc).__name__}: {exc}"
        return None

    async def _stream(self, url: str, body: dict[str, Any], trace: Trace, want: int, keep_text: bool) -> str:
        """POST ``body`` to ``url`` and read its stream into ``trace``."""
        opts = self.opts
        parser = make_parser(opts.api)
        parser.keep_text = keep_text
        headers_seen = False
        trace.start = time.perf_counter()
        try:
            async with self.session.post(url + self.path, json=body, timeout=self.timeout) as resp:
                trace.http_status = resp.status
                if resp.status != 200:
                    raw = await resp.content.read(2048)
                    message = f"HTTP {resp.status}: {http_error_message(raw)}"
                    if resp.status in AUTH_STATUSES:
                        message = auth_message(url, resp.status, bool(opts.api_key))
                    trace.fail("http", message)
                    return
                headers_seen = True
                async for line in resp.content:
                    now = time.perf_counter()
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    parser.feed(now, line[5:].strip().decode("utf-8"))
        except asyncio.CancelledError:
            trace.end = time.perf_counter()
            trace.fail("timeout", "level or sweep time limit reached while the request was in flight")
            finalize_trace(trace, parser, want)
            raise
        except TIMEOUTS:
            if not parser.done:
                trace.fail("timeout", f"no complete response within timeout={opts.timeout:g}s")
        except (ValueError, UnicodeDecodeError) as exc:
            trace.fail("stream", f"unreadable stream data: {exc}")
        except aiohttp.ClientError as exc:
            if headers_seen:
                trace.fail("stream", f"stream broken: {type(exc).__name__}: {exc}")
            else:
                trace.fail("connection", f"{type(exc).__name__}: {exc}")
        except OSError as exc:
            trace.fail("connection", f"{type(exc).__name__}: {exc}")
        finally:
            if not trace.end:
                trace.end = time.perf_counter()
        finalize_trace(trace, parser, want)
        return parser.text


def open_session(opts: SweepOptions) -> Any:
    """The sweep's one session: no connection cap, keep-alive, a large read buffer, the key."""
    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ssl=True if opts.validate_certs else False)
    return aiohttp.ClientSession(connector=connector, headers=headers, read_bufsize=READ_BUFSIZE)
