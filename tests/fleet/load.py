"""A bounded load client for the fleet scenarios: steady requests through the router, every one
recorded (start, end, HTTP status, completion tokens, error), and per-second buckets of them.

Why our own: until `bench.yml -e sglang_bench_target=router` exists (branch benchrouter), the
scenarios need traffic *during* a playbook run, counted request by request, so that a rolling
update can be shown to fail none. Threads and urllib (stdlib only); bounded in count
(`max_requests`) and time (`max_seconds`), paced (`pause`) so that two shared cores still have
room for the rollout it runs against.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Record:
    start: float          # seconds since the client started
    end: float
    status: int           # HTTP status; 0 when there was no HTTP answer
    tokens: int           # completion tokens of a 200
    error: str = ""       # why it failed ("" for a 200 with a completion)

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass
class LoadClient:
    """`concurrency` threads, each POSTing `/v1/completions` to `url`, one after the other with
    `pause` seconds between, until stop(), `max_requests` in all or `max_seconds` have passed."""

    url: str
    concurrency: int = 2
    max_tokens: int = 8
    pause: float = 0.1
    max_requests: int = 20000
    max_seconds: float = 600.0
    timeout: float = 30.0
    # a prompt of its own per request (as real traffic has), else one per thread: a cache-aware
    # router sends repeated prompts to the workers that cached them, never to a fresh worker
    distinct: bool = False
    records: list[Record] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._t0 = 0.0
        self._sent = 0

    def start(self) -> LoadClient:
        self._t0 = time.monotonic()
        for n in range(self.concurrency):
            thread = threading.Thread(target=self._loop, args=(n,), name=f"load-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def now(self) -> float:
        return time.monotonic() - self._t0

    def mark(self, name: str) -> None:
        """Note a moment (the playbook started, ended) on the client's clock."""
        self.marks[name] = round(self.now(), 3)

    def stop(self) -> LoadClient:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout + 5)
        return self

    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def _take_slot(self) -> bool:
        with self._lock:
            if self._sent >= self.max_requests or self.now() >= self.max_seconds:
                return False
            self._sent += 1
            return True

    def _loop(self, n: int) -> None:
        while not self._stop.is_set() and self._take_slot():
            record = self._one(n)
            with self._lock:
                self.records.append(record)
            self._stop.wait(self.pause)

    def _one(self, n: int) -> Record:
        with self._lock:
            serial = self._sent
        # distinct: a hash first, so that no two prompts share a prefix a cache-aware router could match
        prompt = (f"{hashlib.sha1(str(serial).encode()).hexdigest()} client {n}: count to ten" if self.distinct
                  else f"client {n}: count to ten")
        body = json.dumps({"model": "default", "prompt": prompt, "max_tokens": self.max_tokens,
                           "temperature": 0}).encode()
        request = urllib.request.Request(self.url.rstrip("/") + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        start = self.now()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                answer = json.loads(resp.read())
                tokens = int((answer.get("usage") or {}).get("completion_tokens") or 0)
                error = "" if answer.get("choices") else f"no choices: {str(answer)[:200]}"
                return Record(start, self.now(), resp.status, tokens, error)
        except urllib.error.HTTPError as exc:
            return Record(start, self.now(), exc.code, 0, f"HTTP {exc.code}: {exc.read()[:200]!r}")
        except (OSError, ValueError) as exc:
            return Record(start, self.now(), 0, 0, repr(exc)[:200])

    # ---- results

    def failures(self) -> list[Record]:
        return [r for r in self.records if not r.ok]

    def buckets(self, width: float = 1.0) -> list[dict[str, Any]]:
        """Per `width` seconds (by completion time): requests ok, failed, tokens, req/s, tok/s."""
        if not self.records:
            return []
        last = int(max(r.end for r in self.records) // width)
        rows = [{"t": round(i * width, 3), "ok": 0, "failed": 0, "tokens": 0} for i in range(last + 1)]
        for rec in self.records:
            row = rows[int(rec.end // width)]
            row["ok" if rec.ok else "failed"] += 1
            row["tokens"] += rec.tokens
        for row in rows:
            row["req_s"] = round(row["ok"] / width, 2)
            row["tok_s"] = round(row["tokens"] / width, 1)
        return rows

    def phases(self, start_mark: str, end_mark: str) -> dict[str, dict[str, Any]]:
        """ok, failed, req/s and tok/s before `start_mark`, between the marks, and after."""
        t1, t2 = self.marks[start_mark], self.marks[end_mark]
        end = max([t2, *(r.end for r in self.records)])
        spans = {"before": (0.0, t1), "during": (t1, t2), "after": (t2, end)}
        out: dict[str, dict[str, Any]] = {}
        for name, (lo, hi) in spans.items():
            recs = [r for r in self.records if lo <= r.end < hi or (name == "after" and r.end == hi)]
            ok = [r for r in recs if r.ok]
            span = max(hi - lo, 1e-9)
            out[name] = {"seconds": round(hi - lo, 1), "ok": len(ok), "failed": len(recs) - len(ok),
                         "req_s": round(len(ok) / span, 2), "tok_s": round(sum(r.tokens for r in ok) / span, 1)}
        return out

    def longest_gap(self) -> float:
        """The longest stretch without a completed request (load ran the whole time when small)."""
        ends = sorted(r.end for r in self.records)
        return max((b - a for a, b in zip(ends, ends[1:], strict=False)), default=0.0)

    def dump(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {"url": self.url, "concurrency": self.concurrency, "max_tokens": self.max_tokens,
                "pause": self.pause, "marks": self.marks, "total": len(self.records),
                "failed": len(self.failures()), **(extra or {}),
                "buckets": self.buckets(), "failures": [asdict(r) for r in self.failures()[:50]]}
