# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The SGLang router's worker API, and reconciling a router's workers with a wanted list.

What it relies on was measured on ``sglang-router`` 0.3.2 (docs/fleet.md, "The router"):

- ``GET /workers`` -> 200 ``{"workers": [{"id", "url", "is_healthy", "load", ...}], ...}``:
  the workers the router has registered. A worker whose registration is still being retried
  (its ``/health`` does not answer yet) is not listed.
- ``POST /workers {"url", "api_key"}`` -> 202 ``{"worker_id", ...}``: registration runs in the
  background (``/health``, then ``/server_info`` and ``/model_info``); the router retries it
  while the worker does not answer. Posting a URL again returns the same id. ``api_key`` is the
  key the router sends to that worker. A URL ending in ``/`` is taken literally
  (``http://h:p//health`` -> 404 for ever), hence ``normalize_url``.
- ``GET /workers/{id}`` -> the worker, or its registration job (``job_status``) while pending.
- ``DELETE /workers/{id}`` -> 202: the worker leaves at once (requests running on it finish);
  404 when the router does not know the id. Workers are found by URL in the list, to get the id.
- ``/add_worker``, ``/remove_worker``, ``/list_workers`` answer 404 in 0.3.2.
- With ``--api-key`` every ``/workers`` call needs ``Authorization: Bearer <key>`` (401 without);
  ``/health``, ``/liveness`` and ``/readiness`` stay public.

Stdlib only (urllib): the module ``router_workers`` ships this file to hosts (Python >= 3.10).
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

STATES = ("present", "absent", "exact")
POLL_S = 0.5
REQUEST_TIMEOUT_S = 10.0
# What the messages call the keys (the roles' variable), so that a person knows what to set.
API_KEY_HINT = "api_key (sglang_api_key in the roles)"


class RouterError(Exception):
    """A failure with a message a person can act on; ``unreachable`` when no router answered."""

    def __init__(self, msg: str, unreachable: bool = False) -> None:
        super().__init__(msg)
        self.unreachable = unreachable


def normalize_url(url: str) -> str:
    """A worker's base URL as the router must be given it: ``http(s)://host:port`` with no
    trailing slash (the router appends ``/health`` to the URL as given)."""
    text = str(url or "").strip()
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise RouterError(f"worker URL {url!r} is not an http(s)://host:port URL")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise RouterError(f"worker URL {url!r} has a path, query or fragment; give the server's base URL "
                          "(http://host:port)")
    return f"{parts.scheme}://{parts.netloc}"


@dataclass
class Worker:
    """One worker as the router lists it."""

    id: str
    url: str
    is_healthy: bool
    load: int | None
    worker_type: str = "regular"  # prefill, decode (a PD router) or regular

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "id": self.id, "is_healthy": self.is_healthy, "load": self.load,
                "worker_type": self.worker_type}


Opener = Callable[..., Any]


class RouterClient:
    """The router's worker API over urllib. Every call raises RouterError with a message that
    names the router, the request and what to do."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = REQUEST_TIMEOUT_S,
                 opener: Opener = urllib.request.urlopen) -> None:
        self.base_url = str(base_url).rstrip("/")
        self.api_key = api_key or None
        self.timeout = timeout
        self._open = opener

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(status, parsed JSON or the text) of a 2xx answer; RouterError for anything else."""
        url = self.base_url + path
        data = json.dumps(body).encode("utf-8") if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with self._open(req, timeout=self.timeout) as resp:
                status, raw = int(resp.status), resp.read()
        except urllib.error.HTTPError as err:
            status, raw = int(err.code), (err.read() if err.fp else b"")
            raise RouterError(self._http_error(method, path, status, raw)) from err
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise RouterError(f"cannot reach the router at {self.base_url} ({method} {path}: {reason}); is it "
                              "running and listening there? (role llmops.sglang.router: sglang_router_host, "
                              "sglang_router_port)", unreachable=True) from err
        text = raw.decode("utf-8", errors="replace")
        try:
            return status, json.loads(text) if text.strip() else None
        except ValueError:
            return status, text

    def _http_error(self, method: str, path: str, status: int, raw: bytes) -> str:
        body = raw.decode("utf-8", errors="replace").strip()[:300]
        where = f"the router at {self.base_url} answered {status} to {method} {path}"
        if status == 401:
            if self.api_key:
                return f"{where}: it refused the key given as {API_KEY_HINT}; give the key the router was started with"
            return f"{where}: it requires an API key; set {API_KEY_HINT} to the router's key"
        if status == 404 and path == "/workers":
            return (f"{where}: it has no worker API; is it sglang-router >= 0.3 (the role installs 0.3.2)? "
                    "(/add_worker and /list_workers of older routers are not used)")
        return f"{where}: {body or '(empty body)'}"

    def list_workers(self) -> list[Worker]:
        _, data = self.request("GET", "/workers")
        if not isinstance(data, dict) or not isinstance(data.get("workers"), list):
            raise RouterError(f"the router at {self.base_url} answered GET /workers with something that is not "
                              f"a worker list: {str(data)[:300]}")
        workers = []
        for item in data["workers"]:
            if not isinstance(item, dict) or "url" not in item or "id" not in item:
                continue
            load = item.get("load")
            workers.append(Worker(id=str(item["id"]), url=str(item["url"]), is_healthy=bool(item.get("is_healthy")),
                                  load=int(load) if isinstance(load, (int, float)) else None,
                                  worker_type=str(item.get("worker_type") or "regular")))
        return workers

    def add_worker(self, url: str, worker_api_key: str | None = None,
                   kind: Mapping[str, Any] | None = None) -> str | None:
        """POST /workers; ``kind``: a PD worker's ``worker_type`` and (a prefill) ``bootstrap_port``
        (sglang-router 0.3.2 in PD mode pairs them and sends a prefill's port with each request)."""
        body: dict[str, Any] = {"url": url}
        if worker_api_key:
            body["api_key"] = worker_api_key
        for key in ("worker_type", "bootstrap_port"):
            if (kind or {}).get(key) is not None:
                body[key] = kind[key]
        _, data = self.request("POST", "/workers", body)
        return str(data["worker_id"]) if isinstance(data, dict) and data.get("worker_id") else None

    def remove_worker(self, worker_id: str) -> None:
        self.request("DELETE", "/workers/" + urllib.parse.quote(worker_id, safe=""))

    def worker(self, worker_id: str) -> dict[str, Any] | None:
        """The router's record of a worker or of its pending registration (``job_status``)."""
        try:
            _, data = self.request("GET", "/workers/" + urllib.parse.quote(worker_id, safe=""))
        except RouterError:
            return None
        return data if isinstance(data, dict) else None


# --------------------------------------------------------------------------------------------
# reconcile


@dataclass
class Result:
    changed: bool
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    workers: list[dict[str, Any]] = field(default_factory=list)
    before: list[str] = field(default_factory=list)
    msg: str = ""


def changes(listed: list[str], wanted: list[str], state: str) -> tuple[list[str], list[str]]:
    """(URLs to add, URLs to remove) to bring ``listed`` to ``wanted`` under ``state``:
    present adds the missing ones, absent removes the listed ones among ``wanted``, exact does
    both and removes every other. Both lists keep the order of their source."""
    if state not in STATES:
        raise RouterError(f"state must be one of {', '.join(STATES)}, not {state!r}")
    have = set(listed)
    want = list(dict.fromkeys(wanted))
    if state == "absent":
        return [], [u for u in want if u in have]
    add = [u for u in want if u not in have]
    remove = [u for u in listed if u not in set(want)] if state == "exact" else []
    return add, remove


def _by_url(workers: list[Worker]) -> dict[str, Worker]:
    """Listed workers by normalized URL (a worker registered as ``.../`` by someone else
    still matches its base URL)."""
    found: dict[str, Worker] = {}
    for worker in workers:
        try:
            found.setdefault(normalize_url(worker.url), worker)
        except RouterError:
            found.setdefault(worker.url, worker)
    return found


def reconcile(client: RouterClient, workers: list[str], state: str = "present", *,
              types: Mapping[str, Mapping[str, Any]] | None = None,
              worker_api_key: str | None = None, wait_healthy: bool = False, timeout: float = 60.0,
              check_mode: bool = False, interval: float = POLL_S,
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> Result:
    """Bring the router's workers to ``workers`` under ``state``; see ``changes``.

    Removals are waited for (the router drops a worker within moments of the 202) and, with
    ``wait_healthy``, additions too: each added URL must be listed and healthy. Both waits
    share ``timeout``. Returns the router's list after the change (in check mode: as it is)."""
    wanted = [normalize_url(u) for u in workers]
    try:
        current = client.list_workers()
    except RouterError as err:
        if not (check_mode and err.unreachable):
            raise
        # check mode before the router's first start (the role would start it): it has no worker
        add, _ = changes([], wanted, state)
        note = f"{err}; in check mode that is taken as a router with no worker yet (one the role would start)"
        return Result(changed=bool(add), added=add, msg=note)
    by_url = _by_url(current)
    add, remove = changes(list(by_url), wanted, state)
    kinds = {normalize_url(u): dict(k) for u, k in (types or {}).items()}
    # a worker listed with another side than its deployment's (a host turned from prefill to
    # decode): removed and added again with its side
    for url in [u for u in wanted if u in by_url and u not in remove and u in kinds
                and by_url[u].worker_type != kinds[u].get("worker_type", "regular")]:
        remove.append(url)
        add.append(url)
    result = Result(changed=bool(add or remove), added=add, removed=remove, before=sorted(by_url))
    if check_mode or not result.changed:
        result.workers = [w.to_dict() for w in current]
        return result
    deadline = clock() + max(float(timeout), 0.0)
    removed_ids = {by_url[u].id: u for u in remove}
    for worker_id in removed_ids:
        client.remove_worker(worker_id)
    added_ids: dict[str, str | None] = {}
    for url in add:
        added_ids[url] = client.add_worker(url, worker_api_key, kinds.get(url))
    listed = _wait(client, removed_ids, added_ids if wait_healthy else {}, deadline, float(timeout), interval,
                   clock, sleep)
    result.workers = [w.to_dict() for w in listed]
    return result


def _wait(client: RouterClient, removed_ids: dict[str, str], added: dict[str, str | None], deadline: float,
          timeout: float, interval: float, clock: Callable[[], float], sleep: Callable[[float], None],
          ) -> list[Worker]:
    """Poll GET /workers until no removed id is listed and every added URL is listed healthy."""
    while True:
        listed = client.list_workers()
        by_url = _by_url(listed)
        lingering = [u for i, u in removed_ids.items() if any(w.id == i for w in listed)]
        unhealthy = [u for u in added if not (u in by_url and by_url[u].is_healthy)]
        if not lingering and not unhealthy:
            return listed
        if clock() >= deadline:
            raise RouterError(_wait_failure(client, lingering, unhealthy, by_url, added, timeout))
        sleep(interval)


def _wait_failure(client: RouterClient, lingering: list[str], unhealthy: list[str], by_url: dict[str, Worker],
                  added: dict[str, str | None], timeout: float) -> str:
    problems = []
    for url in lingering:
        problems.append(f"{url} is still listed by the router after DELETE")
    for url in unhealthy:
        if url in by_url:
            problems.append(f"{url} never became healthy; the router lists it as {json.dumps(by_url[url].to_dict())}")
            continue
        record = client.worker(added[url]) if added.get(url) else None
        job = (record or {}).get("job_status") or {}
        if job:
            view = f"its registration is {job.get('status', '?')}" + (f" ({job['message']})" if job.get("message") else "")
            if job.get("status") == "processing":  # a DELETE does not stop it (sglang-router 0.3.2)
                view += (" (the router goes on retrying it for its --worker-startup-timeout-secs and lists it"
                         " once it answers)")
        else:
            view = "the router does not list it"
        problems.append(f"{url} never became healthy: {view}; can the router's host reach {url}/health?")
    return f"the router at {client.base_url} did not settle within {timeout:g} s: " + "; ".join(problems)
