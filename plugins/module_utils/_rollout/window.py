# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""One rollout guard window, measured where the router stands (module llmops.sglang.rollout_window).

Every instance's ``/metrics`` is read at the start and at the end of the window, and its
``sglang:num_running_reqs`` gauge is sampled in between (the guard's throughput per running
request needs the window's mean, which two scrapes cannot give). The router's own ``/metrics``
(its per-worker circuit-breaker outcomes) is read at both ends when asked. Every instance is
read in the same pass, so canary and baseline cover the same seconds of the fleet's traffic.

The texts are returned as read: the decision (plugins/plugin_utils/_guard.py) is made on the
controller. SGLang serves ``/metrics`` without an API key; a key is sent when given (a proxy
in front may ask for one). A scrape that fails is reported with its error, never guessed.

Stdlib only; runs on the host (Python >= 3.10).
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server.deploy import http_get
from ansible_collections.llmops.sglang.plugins.module_utils._shared.servermetrics import parse, total

Getter = Callable[[str, float, "str | None"], tuple[int, bytes]]


def _scrape(url: str, timeout: float, api_key: str | None, getter: Getter) -> tuple[str | None, str | None]:
    """(text, None) or (None, why)."""
    status, body = getter(url.rstrip("/") + "/metrics", timeout, api_key)
    if status == 200:
        return body.decode("utf-8", "replace"), None
    if status == 0:
        return None, body.decode("utf-8", "replace") or "no answer"
    return None, f"HTTP {status} from {url}/metrics (is --enable-metrics set?)"


def _post_completion(url: str, prompt: str, max_tokens: int, timeout: float, api_key: str | None) -> str:
    """One probe request; "" when it got a completion, else why not."""
    body = json.dumps({"model": "default", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(url.rstrip("/") + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return "" if json.loads(response.read()).get("choices") else "no choices"
    except urllib.error.HTTPError as err:
        return f"HTTP {err.code}"
    except (OSError, ValueError) as err:
        return repr(err)[:120]


class Probe:
    """A short synthetic load while the window runs, for when the routers' traffic is too low to
    judge: ``rate`` requests per second to every watched instance alike (its own prompts, so
    that no cache favours a side), each at most ``timeout`` seconds, none after the window.
    Bounded: at most rate x seconds requests per instance."""

    def __init__(self, urls: list[str], rate: float, seconds: float, *, max_tokens: int = 16, timeout: float = 30.0,
                 api_key: str | None = None, post: Callable[..., str] = _post_completion) -> None:
        self.urls, self.rate, self.seconds = urls, rate, seconds
        self.max_tokens, self.timeout, self.api_key, self.post = max_tokens, timeout, api_key, post
        self.results: dict[str, dict[str, Any]] = {u: {"sent": 0, "failed": 0, "errors": []} for u in urls}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self) -> Probe:
        if self.rate > 0:
            for url in self.urls:
                thread = threading.Thread(target=self._run, args=(url,), daemon=True)
                thread.start()
                self._threads.append(thread)
        return self

    def _run(self, url: str) -> None:
        gap = 1.0 / self.rate
        for n in range(max(0, int(self.rate * self.seconds))):
            if self._stop.wait(gap):
                return
            error = self.post(url, f"rollout guard probe {n} of {url}: count to ten", self.max_tokens,
                              self.timeout, self.api_key)
            with self._lock:
                self.results[url]["sent"] += 1
                if error:
                    self.results[url]["failed"] += 1
                    if len(self.results[url]["errors"]) < 3:
                        self.results[url]["errors"].append(error)

    def stop(self) -> dict[str, dict[str, Any]]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout + 1)
        return self.results


def measure(urls: list[str], seconds: float, *, interval: float = 1.0, router_metrics_url: str | None = None,
            api_key: str | None = None, timeout: float = 10.0, getter: Getter = http_get,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
            probe_rate: float = 0.0) -> dict[str, Any]:
    """``{seconds, instances: {url: {start, end, running_mean, running_samples, error}}, router:
    {start, end, error} | None, probe}``: start and end texts of each URL's /metrics over
    ``seconds`` (measured with the monotonic clock), running requests sampled every
    ``interval`` seconds; with ``probe_rate`` > 0, a Probe runs during the window."""
    urls = list(dict.fromkeys(u.rstrip("/") for u in urls))
    out: dict[str, dict[str, Any]] = {u: {"start": None, "end": None, "running_mean": None,
                                          "running_samples": 0, "error": None} for u in urls}
    router: dict[str, Any] | None = None
    if router_metrics_url:
        text, error = _scrape(router_metrics_url, timeout, None, getter)
        router = {"start": text, "end": None, "error": error}
    begin = clock()
    running: dict[str, list[float]] = {u: [] for u in urls}
    for url in urls:
        out[url]["start"], out[url]["error"] = _scrape(url, timeout, api_key, getter)
    probe = Probe(urls, probe_rate, seconds, api_key=api_key).start() if probe_rate > 0 else None
    while clock() - begin < seconds:
        sleep(max(0.0, min(interval, seconds - (clock() - begin))))
        if clock() - begin >= seconds:
            break
        for url in urls:
            text, _error = _scrape(url, timeout, api_key, getter)
            value = total(parse(text), "num_running_reqs") if text else None
            if value is not None:
                running[url].append(value)
    probed = probe.stop() if probe is not None else None
    for url in urls:
        text, error = _scrape(url, timeout, api_key, getter)
        out[url]["end"] = text
        out[url]["error"] = out[url]["error"] or error
        if running[url]:
            out[url]["running_mean"] = sum(running[url]) / len(running[url])
            out[url]["running_samples"] = len(running[url])
    elapsed = clock() - begin
    if router is not None and router_metrics_url:
        text, error = _scrape(router_metrics_url, timeout, None, getter)
        router["end"], router["error"] = text, router["error"] or error
    return {"seconds": round(elapsed, 3), "instances": out, "router": router,
            "probe": {"rate": probe_rate, "instances": probed} if probed is not None else None}
