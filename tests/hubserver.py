"""A local stand-in for the Hugging Face Hub's file endpoints, for the model staging tests.

It answers what the pinned ``huggingface_hub`` (2.4.0) asks, with the headers it reads:

- ``GET /api/models/<org>/<name>/revision/<rev>``: ``{"id", "sha", "siblings"}`` (a branch
  name or the commit);
- ``GET /api/models/<org>/<name>/tree/<rev>``: the file list (``type``, ``path``, ``oid`` = the
  git blob sha1, ``size``, and for LFS files ``lfs: {oid: sha256, size, pointerSize}``);
- ``HEAD``/``GET /<org>/<name>/resolve/<rev>/<path>``: ``X-Repo-Commit``, ``ETag`` (blob sha1)
  or ``X-Linked-Etag`` (sha256, LFS), ``X-Linked-Size``/``Content-Length``; LFS files are
  redirected (302, ``Location``) to a second server on another port (another origin, as the
  Hub's CDN), which must never see the token; ``Range: bytes=N-`` answered with 206.

Faults a test can set: ``serve[path] = bytes`` (serve other content than the listing
describes: a wrong sha256), ``stall_after[path] = n`` (send n bytes of the body, then hold the
connection until ``release()``). Every request is logged (server, method, path, headers).
``python tests/hubserver.py`` serves the demo repository until interrupted (docs/models.md).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's definition


@dataclass
class Repo:
    """A model repository at one commit (branches name the commit)."""

    name: str
    files: dict[str, bytes]
    commit: str = ""
    branches: dict[str, str] = field(default_factory=dict)
    lfs_min: int = 64 * 1024  # files this big or more are LFS files (as the Hub does for weights)

    def __post_init__(self) -> None:
        if not self.commit:
            h = hashlib.sha1(self.name.encode())  # noqa: S324 - a made-up commit id
            for path in sorted(self.files):
                h.update(path.encode() + hashlib.sha256(self.files[path]).digest())
            self.commit = h.hexdigest()
        self.branches.setdefault("main", self.commit)

    def is_lfs(self, path: str) -> bool:
        return len(self.files[path]) >= self.lfs_min

    def tree(self) -> list[dict[str, Any]]:
        out = []
        for path, data in sorted(self.files.items()):
            entry: dict[str, Any] = {"type": "file", "path": path, "oid": git_blob_sha1(data), "size": len(data)}
            if self.is_lfs(path):
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            out.append(entry)
        return out


def demo_repo(name: str = "llmops-test/tiny-qwen", weights: int = 3, weight_mb: float = 2.0,
              seed: int = 7, config: Path | None = None) -> Repo:
    """config.json (a real model config shipped in data/models), a tokenizer, and ``weights``
    safetensors of ``weight_mb`` MB of seeded random bytes."""
    cfg = (config or ROOT / "data" / "models" / "qwen3-0.6b-dense" / "config.json").read_bytes()
    rng = random.Random(seed)
    files = {"config.json": cfg,
             "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE"}, "seed": seed}).encode(),
             "generation_config.json": b'{"do_sample": true}\n'}
    for i in range(1, weights + 1):
        files[f"model-{i:05d}-of-{weights:05d}.safetensors"] = rng.randbytes(int(weight_mb * MB))
    return Repo(name=name, files=files)


@dataclass
class Logged:
    server: str
    method: str
    path: str
    headers: dict[str, str]
    client: str = ""  # the address the request came from (which host of a fleet asked)


class HubServer:
    """The hub (API + resolve) and its CDN (LFS bytes), each a threaded HTTP server on loopback."""

    def __init__(self, repos: list[Repo], token: str | None = None, host: str = "127.0.0.1") -> None:
        self.repos = {r.name: r for r in repos}
        self.token = token  # when set, the hub answers 401 without it (gated repo)
        self.serve: dict[str, bytes] = {}
        self.stall_after: dict[str, int] = {}
        self.log: list[Logged] = []
        self._released = threading.Event()
        self._lock = threading.Lock()
        self.host = host  # a fleet's hosts reach it at their bridge's address
        self.hub = ThreadingHTTPServer((host, 0), self._handler("hub"))
        self.cdn = ThreadingHTTPServer((host, 0), self._handler("cdn"))
        self.hub.daemon_threads = self.cdn.daemon_threads = True
        self._threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (self.hub, self.cdn)]

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.hub.server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://{self.host}:{self.cdn.server_address[1]}"

    def start(self) -> HubServer:
        for t in self._threads:
            t.start()
        return self

    def release(self) -> None:
        self._released.set()

    def stop(self) -> None:
        self.release()
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def requests(self, server: str | None = None, method: str | None = None) -> list[Logged]:
        with self._lock:
            return [r for r in self.log if (server is None or r.server == server)
                    and (method is None or r.method == method)]

    def _find(self, name: str, rev: str) -> tuple[Repo, str] | None:
        repo = self.repos.get(name)
        if repo is None:
            return None
        commit = repo.branches.get(rev, rev if rev == repo.commit else None)
        return (repo, commit) if commit else None

    def _handler(self, server: str) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _record(self) -> None:
                with hub._lock:
                    hub.log.append(Logged(server, self.command, self.path, dict(self.headers.items()),
                                          self.client_address[0]))

            def _send(self, code: int, headers: dict[str, str], body: bytes = b"") -> None:
                self.send_response(code)
                for key, value in headers.items():
                    self.send_header(key, value)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD" and body:
                    self.wfile.write(body)

            def _json(self, doc: Any, code: int = 200, extra: dict[str, str] | None = None) -> None:
                self._send(code, {"Content-Type": "application/json", **(extra or {})}, json.dumps(doc).encode())

            def _authorized(self) -> bool:
                if hub.token is None or server == "cdn":
                    return True
                if self.headers.get("Authorization") == f"Bearer {hub.token}":
                    return True
                self._json({"error": "Access to this model is restricted"}, 401, {"X-Error-Code": "GatedRepo"})
                return False

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
                self._record()
                self._route()

            def do_GET(self) -> None:  # noqa: N802
                self._record()
                self._route()

            def _route(self) -> None:
                path = unquote(urlsplit(self.path).path)
                if server == "cdn":
                    m = re.match(r"^/blobs/(?P<repo>[^/]+/[^/]+)/(?P<path>.+)$", path)
                    found = hub._find(m["repo"], m["path"].split("/", 1)[0]) if m else None
                    if not m or found is None:
                        return self._json({"error": "not found"}, 404)
                    return self._body(found[0], m["path"].split("/", 1)[1])
                if not self._authorized():
                    return None
                m = re.match(r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<kind>revision|tree)/(?P<rev>[^/]+)$", path)
                if m:
                    found = hub._find(m["repo"], m["rev"])
                    if found is None:
                        return self._json({"error": "Revision Not Found"}, 404, {"X-Error-Code": "RevisionNotFound"})
                    repo, commit = found
                    if m["kind"] == "tree":
                        return self._json(repo.tree())
                    return self._json({"id": repo.name, "modelId": repo.name, "sha": commit, "private": False,
                                       "siblings": [{"rfilename": p} for p in sorted(repo.files)]})
                m = re.match(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$", path)
                if not m:
                    return self._json({"error": "not found"}, 404)
                found = hub._find(m["repo"], m["rev"])
                if found is None:
                    return self._json({"error": "Revision Not Found"}, 404, {"X-Error-Code": "RevisionNotFound"})
                repo, commit = found
                if m["path"] not in repo.files:
                    return self._json({"error": "Entry not found"}, 404, {"X-Error-Code": "EntryNotFound"})
                data = repo.files[m["path"]]
                if repo.is_lfs(m["path"]):
                    sha = hashlib.sha256(data).hexdigest()
                    return self._send(302, {"X-Repo-Commit": commit, "X-Linked-Etag": f'"{sha}"',
                                            "X-Linked-Size": str(len(data)),
                                            "Location": f"{hub.cdn_url}/blobs/{repo.name}/{commit}/{m['path']}"})
                return self._body(repo, m["path"], {"X-Repo-Commit": commit, "ETag": f'"{git_blob_sha1(data)}"'})

            def _body(self, repo: Repo, path: str, extra: dict[str, str] | None = None) -> None:
                data = hub.serve.get(path, repo.files.get(path))
                if data is None:
                    return self._json({"error": "not found"}, 404)
                start = 0
                rng = re.match(r"^bytes=(\d+)-$", self.headers.get("Range", ""))
                if rng and self.command == "GET":
                    start = int(rng[1])
                headers = {**(extra or {}), "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream",
                           "Content-Length": str(len(data) - start)}
                if rng and self.command == "GET":
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                self.send_response(206 if start else 200)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if self.command == "HEAD":
                    return None
                body = data[start:]
                stall = hub.stall_after.get(path)
                if stall is not None and stall - start < len(body):
                    self.wfile.write(body[:max(stall - start, 0)])
                    self.wfile.flush()
                    hub._released.wait(120)
                    self.close_connection = True
                    return None
                self.wfile.write(body)
                return None

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", type=int, default=3)
    parser.add_argument("--weight-mb", type=float, default=2.0)
    parser.add_argument("--name", default="llmops-test/tiny-qwen")
    args = parser.parse_args()
    repo = demo_repo(args.name, args.weights, args.weight_mb)
    with HubServer([repo]) as hub:
        print(f"HF_ENDPOINT={hub.endpoint} repo={repo.name} commit={repo.commit} cdn={hub.cdn_url}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
