# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The ``pd`` option: a sweep that pairs each request with a prefill and a decode instance itself,
as sglang-router 0.3.2 does in PD mode (docs/sweep.md "A PD host swept on its own"): the same
body to both, with ``bootstrap_host`` (the prefill URL's host, which the decode reaches),
``bootstrap_port`` (the prefill's) and a random ``bootstrap_room``; the decode's stream is the
answer. Without it a prefill or a decode swept alone runs unpaired (each standalone, no KV
hand-over). Stdlib only; the requests themselves are ``client.Client``'s.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import SweepError

ROOM_BITS = 63  # SGLang's bootstrap_room is a (signed) 64-bit int


def _base(url: Any, what: str) -> str:
    text = str(url or "").strip().rstrip("/")
    if text.endswith("/v1"):
        text = text[: -len("/v1")]
    if not text.startswith(("http://", "https://")) or not urlsplit(text).hostname:
        raise SweepError(f"pd.{what}: {url!r} is not an http(s) URL of an instance, e.g. http://10.0.0.5:30000")
    return text


def normalized(pd: Any, url: str) -> dict[str, Any] | None:
    """The checked ``pd`` option (None when not given): prefill ``[{url, bootstrap_port}]`` with base
    URLs, decode the URLs with ``url`` among them. Raises SweepError naming the value and the fix."""
    if not pd:
        return None
    if not isinstance(pd, dict) or not isinstance(pd.get("prefill"), list) or not pd["prefill"]:
        raise SweepError(f"pd: {pd!r} needs prefill, a non-empty list of {{url, bootstrap_port}} (each prefill "
                         "instance's URL and --disaggregation-bootstrap-port)")
    prefills = []
    for entry in pd["prefill"]:
        port = entry.get("bootstrap_port") if isinstance(entry, dict) else None
        if isinstance(port, str) and port.isdigit():
            port = int(port)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise SweepError(f"pd.prefill: {entry!r} must be {{url, bootstrap_port}} with the prefill's "
                             "--disaggregation-bootstrap-port (1-65535), e.g. {url: http://10.0.0.5:30000, "
                             "bootstrap_port: 8998}")
        prefills.append({"url": _base(entry.get("url"), "prefill"), "bootstrap_port": port})
    decodes = [_base(u, "decode") for u in (pd.get("decode") or [url])]
    if url not in decodes:
        raise SweepError(f"pd.decode: {', '.join(decodes)} does not list url ({url}), the decode whose /server_info "
                         "and /metrics the sweep reads: add it, or set url to one of them")
    return {"prefill": prefills, "decode": list(dict.fromkeys(decodes))}


@dataclass(frozen=True)
class Pairing:
    """Where one request goes: its decode URL, its prefill URL and the fields both bodies get."""

    decode: str
    prefill: str
    fields: dict[str, Any]


class Pairs:
    """Round-robin over the prefills and over the decodes, a fresh room per request."""

    def __init__(self, pd: dict[str, Any]) -> None:
        self._prefills = itertools.cycle(pd["prefill"])
        self._decodes = itertools.cycle(pd["decode"])
        self._random = random.SystemRandom()  # rooms never repeat across sweeps or client processes
        self.urls = [p["url"] for p in pd["prefill"]] + list(pd["decode"])

    def next(self) -> Pairing:
        prefill = next(self._prefills)
        fields = {"bootstrap_host": urlsplit(prefill["url"]).hostname,
                  "bootstrap_port": prefill["bootstrap_port"],
                  "bootstrap_room": self._random.getrandbits(ROOM_BITS)}
        return Pairing(decode=next(self._decodes), prefill=prefill["url"], fields=fields)
