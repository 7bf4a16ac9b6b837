# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Everything that talks to the Hub, through the pinned ``huggingface_hub`` (2.4.0).

What the client does and what it leaves to us (its facts are in docs/models.md):
- the revision -> commit (``HfApi.model_info(...).sha``) and the tree listing
  (``HfApi.list_repo_tree``: size, git blob id, LFS sha256 per file) are the client's;
- a file's metadata (``get_hf_file_metadata``: HEAD on the resolve URL, X-Repo-Commit, the
  linked size, the download location, redirects kept on the Hub) is the client's;
- the bytes are streamed by the client's ``http_get`` (its retries, its Range handling, its
  size check) into a file of ours under ``partial/`` that outlives the process: the client's own
  temp file is per process and deleted on any error, so a killed download would start again at
  byte 0. We hand ``http_get`` the bytes already there as ``resume_size``;
- the content hashes are not checked by the client: ``verify.py`` does.

``huggingface_hub`` is imported in ``client()`` only, after the environment it reads at import
time is set (endpoint, no telemetry, no Xet, no progress bars, no implicit token).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.llmops.sglang.plugins.module_utils._staging.errors import StageError
from ansible_collections.llmops.sglang.plugins.module_utils._staging.listing import Listing, file_from_tree

DEFAULT_ENDPOINT = "https://huggingface.co"
PINNED = "2.4.0"
# Bytes per streamed chunk: what a killed download loses at most (the client's default is 10 MiB).
CHUNK_BYTES = 1024 * 1024
_ENV = {
    "HF_HUB_DISABLE_TELEMETRY": "1",  # no agent-harness request, nothing but the files
    "HF_HUB_DISABLE_XET": "1",  # plain HTTP: resumable by Range, verifiable here
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # the progress file is ours; stderr stays clean
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",  # the token is the one we pass, never a stray one
}


def client(endpoint: str) -> Any:
    """The ``huggingface_hub`` module, imported with our environment set first."""
    for key, value in _ENV.items():
        os.environ.setdefault(key, value)
    os.environ["HF_ENDPOINT"] = endpoint
    try:
        import huggingface_hub  # noqa: PLC0415 - optional dependency, imported where needed
        from huggingface_hub import constants  # noqa: PLC0415
    except ImportError as exc:
        raise StageError(f"the Python that runs model staging has no huggingface_hub ({exc}): install "
                         f"huggingface_hub=={PINNED} there (the model role does, with sglang_model_stage_install)") from exc
    constants.DOWNLOAD_CHUNK_SIZE = CHUNK_BYTES
    return huggingface_hub


def unreachable(exc: BaseException) -> bool:
    """Whether the Hub did not answer (refused, reset, timed out, a 5xx from it or its proxy), as
    opposed to an answer (404 for a revision that is not there, 401/403): a deploy of what is
    staged may go on without it (``model_plan``), a wrong revision must not."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "HfHubHTTPError" in names:  # the Hub (or a proxy in front of it) answered with a status
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return isinstance(status, int) and status >= 500
    return bool(names & {"TransportError", "ConnectionError", "TimeoutError"})


def _hub_error(what: str, exc: Exception, token: str | None) -> StageError:
    text = f"{type(exc).__name__}: {exc}"
    if token:
        text = text.replace(token, "***")
    return StageError(f"{what}: {text}", unreachable=unreachable(exc))


def resolve(endpoint: str, repo: str, revision: str, token: str | None) -> str:
    """The commit a branch or tag names now (one metadata request)."""
    hf = client(endpoint)
    try:
        info = hf.HfApi(endpoint=endpoint, token=token or False).model_info(repo, revision=revision)
    except Exception as exc:  # noqa: BLE001 - every client error becomes the operator's message
        raise _hub_error(f"could not resolve {repo}@{revision} at {endpoint}", exc, token) from exc
    if not info.sha:
        raise StageError(f"{endpoint} answered no commit for {repo}@{revision}")
    return str(info.sha)


def list_files(endpoint: str, repo: str, commit: str, token: str | None) -> Listing:
    """The revision's files with sizes and hashes (the tree listing, paged by the client)."""
    hf = client(endpoint)
    try:
        entries = list(hf.HfApi(endpoint=endpoint, token=token or False).list_repo_tree(
            repo, revision=commit, recursive=True, expand=False))
    except Exception as exc:  # noqa: BLE001
        raise _hub_error(f"could not list the files of {repo}@{commit} at {endpoint}", exc, token) from exc
    files = [f for f in (file_from_tree(e) for e in entries) if f is not None]
    listing = Listing(repo=repo, commit=commit, files=sorted(files, key=lambda f: f.path))
    listing.check()
    return listing


class _Counting:
    """The partial file as ``http_get`` sees it, counting the bytes written for the progress."""

    def __init__(self, fh: Any, on_bytes: Callable[[int], None]) -> None:
        self._fh = fh
        self._on_bytes = on_bytes

    def write(self, data: bytes) -> int:
        written = self._fh.write(data)
        self._on_bytes(len(data))
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc


def download(endpoint: str, repo: str, commit: str, path: str, size: int, dest: str, token: str | None,
             on_bytes: Callable[[int], None]) -> int:
    """Append the missing bytes of ``path`` to ``dest`` (resuming at its current size); returns
    the bytes received. The HEAD must name ``commit`` and ``size``; the authorization header is
    sent only to the endpoint's origin (a CDN location gets none)."""
    hf = client(endpoint)
    from huggingface_hub import file_download  # noqa: PLC0415

    url = hf.hf_hub_url(repo, path, revision=commit, endpoint=endpoint)
    try:
        meta = hf.get_hf_file_metadata(url, token=token or False, endpoint=endpoint)
    except Exception as exc:  # noqa: BLE001
        raise _hub_error(f"could not read the metadata of {path} ({repo}@{commit})", exc, token) from exc
    if meta.commit_hash and meta.commit_hash != commit:
        raise StageError(f"{endpoint} served {path} of commit {meta.commit_hash} for {commit}: refusing it")
    if meta.size is not None and meta.size != size:
        raise StageError(f"{endpoint} gives {path} a size of {meta.size} bytes, the revision's listing {size}: "
                         "refusing it (the mirror and the listing disagree)")
    same_origin = _origin(meta.location) == _origin(endpoint)
    headers = hf.utils.build_hf_headers(token=(token or False) if same_origin else False)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    have = os.path.getsize(dest) if os.path.exists(dest) else 0
    if have > size:
        os.unlink(dest)
        have = 0
    received = [0]

    def count(n: int) -> None:
        received[0] += n
        on_bytes(n)

    with open(dest, "ab", buffering=0) as raw:
        try:
            file_download.http_get(meta.location, _Counting(raw, count), resume_size=have, headers=headers,
                                   expected_size=size, displayed_filename=path)
        except Exception as exc:  # noqa: BLE001
            raise _hub_error(f"download of {path} ({repo}@{commit}) failed after {have + received[0]} of "
                             f"{size} bytes (kept: the next run continues there)", exc, token) from exc
    return received[0]
