# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The job's results on disk, each written exactly once (docs/generate.md "Exactly once").

In the job's folder:

- ``results-00000.jsonl``, ``results-00001.jsonl``, ...: the shards, ``shard_lines`` results each,
  one line per request in OpenAI's batch output format, in the order the results came;
- ``errors.jsonl``: the requests that failed for good, the same format with ``error`` set;
- ``journal.jsonl``: one line per done id: ``{"c": custom_id, "f": file, "e": end offset, "ok",
  "i": prompt tokens, "o": completion tokens}``.

A batch of results is written as: its lines appended to their files, those files fsync'ed, then
its journal lines appended and the journal fsync'ed. So the output files are ahead of the journal
or level with it, never behind, and recovery (``Store.open``) makes them level:

- a journal line that is not whole (the last one, torn by a kill or a crash) is cut off, and so is
  everything after a line that does not parse;
- an output file is read from the end of its last journaled line: each whole line there is a
  result that was written but not journaled, and is journaled now; the first line that is not whole
  or does not parse (torn, or zeros a crash left) is cut off with all after it: its request was not
  done and is sent again;
- journal lines that point past the end of their file (results a crash lost after the journal was
  written, which the write order prevents on a sane filesystem) are dropped, so their requests are
  sent again.

The done ids are the journal's; a result whose id is done is never written again (``write``
drops it), so a request answered twice is written once.
"""
from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

JOURNAL = "journal.jsonl"
ERRORS = "errors.jsonl"
SHARD = "results-{:05d}.jsonl"
_SHARD_RE = re.compile(r"^results-(\d{5,})\.jsonl$")


@dataclass(frozen=True)
class Result:
    """One finished request, ready to be written: ``ok`` (the results) or not (the errors file)."""

    custom_id: str
    ok: bool
    line: dict[str, Any]
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Totals:
    """What the journal counts: done ids, of them failed, and their tokens."""

    done: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, ok: bool, prompt: int, completion: int) -> None:
        self.done += 1
        self.errors += 0 if ok else 1
        self.prompt_tokens += prompt
        self.completion_tokens += completion


@dataclass
class Recovery:
    """What ``Store.open`` mended: results found past the journal, bytes cut off, entries dropped."""

    journal_cut: int = 0
    rejournaled: int = 0
    output_cut: dict[str, int] = field(default_factory=dict)
    dropped: int = 0

    def describe(self) -> str:
        parts = []
        if self.journal_cut:
            parts.append(f"cut a torn journal line ({self.journal_cut} bytes)")
        if self.rejournaled:
            parts.append(f"journaled {self.rejournaled} result(s) written after the last journal line")
        for name, cut in sorted(self.output_cut.items()):
            parts.append(f"cut a torn line off {name} ({cut} bytes)")
        if self.dropped:
            parts.append(f"dropped {self.dropped} journal line(s) past their file's end (sent again)")
        return "; ".join(parts)


def output_line(custom_id: str, status: int | None, body: Any, error: Mapping[str, Any] | None,
                **extra: Any) -> dict[str, Any]:
    """A line of OpenAI's batch output format (``extra``: this job's ``attempts``, ``instance``)."""
    response = None
    if status is not None:
        request_id = body.get("id") if isinstance(body, dict) else None
        response = {"status_code": status, "request_id": request_id, "body": body}
    return {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": custom_id, "response": response,
            "error": dict(error) if error else None, **extra}


def usage_of(line: Mapping[str, Any]) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of an output line's response body (0, 0 without usage)."""
    body = (line.get("response") or {}).get("body")
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _whole_lines(path: str, start: int) -> tuple[list[tuple[int, bytes]], int]:
    """The whole lines of ``path`` from byte ``start`` as (end offset, line), up to the first line
    without its newline or that is not a JSON object with a string ``custom_id`` (or ``c``);
    and the offset where the good part ends."""
    good: list[tuple[int, bytes]] = []
    end = start
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read()
    pos = 0
    while True:
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        raw = data[pos:nl]
        try:
            obj = json.loads(raw.decode("utf-8"))
            ident = obj.get("custom_id", obj.get("c")) if isinstance(obj, dict) else None
        except ValueError:
            ident = None
        if not isinstance(ident, str):
            break
        pos = nl + 1
        end = start + pos
        good.append((end, raw))
    return good, end


def journaled(folder: str) -> tuple[set[str], set[str]]:
    """(done ids, of them failed) from the folder's journal, read only (a torn last line ignored;
    results written past the journal are not counted: ``Store.open`` journals them)."""
    done: set[str] = set()
    failed: set[str] = set()
    path = os.path.join(folder, JOURNAL)
    if not os.path.exists(path):
        return done, failed
    for _, raw in _whole_lines(path, 0)[0]:
        entry = json.loads(raw)
        done.add(entry["c"])
        if not entry.get("ok"):
            failed.add(entry["c"])
    return done, failed


def retry_errors(folder: str) -> int:
    """Make the requests in the errors file not done, so that the next run sends them again: the
    errors file is kept as ``errors-retried-<n>.jsonl`` (not an output any more) and its journal
    lines are dropped. The number of journal lines dropped. Crash-safe in this order: a journal
    still naming the moved file has lines past that file's end, which ``Store.open`` drops."""
    errors = os.path.join(folder, ERRORS)
    if not os.path.exists(errors):
        return 0
    n = 1
    while os.path.exists(os.path.join(folder, f"errors-retried-{n}.jsonl")):
        n += 1
    os.replace(errors, os.path.join(folder, f"errors-retried-{n}.jsonl"))
    journal = os.path.join(folder, JOURNAL)
    if not os.path.exists(journal):
        return 0
    entries = [json.loads(raw) for _, raw in _whole_lines(journal, 0)[0]]
    kept = [e for e in entries if e.get("f") != ERRORS]
    _rewrite_journal(folder, kept)
    return len(entries) - len(kept)


class Store:
    """A job folder's results: recover it with ``open``, then ``write`` batches of results."""

    def __init__(self, folder: str, shard_lines: int) -> None:
        if shard_lines < 1:
            raise ValueError(f"shard_lines must be >= 1, got {shard_lines}")
        self.folder = folder
        self.shard_lines = shard_lines
        self.done: set[str] = set()
        self.failed: set[str] = set()  # of the done ids, those in the errors file
        self.totals = Totals()
        self.recovery = Recovery()
        self._ends: dict[str, int] = {}  # file name -> end of its last journaled line
        self._shard = 0
        self._shard_count = 0  # results journaled in the current shard

    # -- recovery ---------------------------------------------------------------------------

    def open(self) -> Store:
        """Read the journal, make the files level with it (the module's docstring), and be ready
        to write. Creates the folder's journal when there is none."""
        journal = os.path.join(self.folder, JOURNAL)
        entries: list[dict[str, Any]] = []
        if os.path.exists(journal):
            lines, end = _whole_lines(journal, 0)
            size = os.path.getsize(journal)
            if end < size:
                self.recovery.journal_cut = size - end
                os.truncate(journal, end)
            entries = [json.loads(raw) for _, raw in lines]
        sizes = {name: os.path.getsize(os.path.join(self.folder, name)) for name in self._output_files()}
        kept = [e for e in entries if e.get("e", 0) <= sizes.get(e.get("f"), -1)]
        if len(kept) < len(entries):
            self.recovery.dropped = len(entries) - len(kept)
            _rewrite_journal(self.folder, kept)
        for entry in kept:
            self._count(entry)
        found: list[dict[str, Any]] = []
        for name in sorted(sizes, key=self._file_order):
            start = self._ends.get(name, 0)
            good, end = _whole_lines(os.path.join(self.folder, name), start)
            if end < sizes[name]:
                self.recovery.output_cut[name] = sizes[name] - end
                os.truncate(os.path.join(self.folder, name), end)
            for offset, raw in good:
                line = json.loads(raw)
                if line["custom_id"] in self.done:
                    continue  # written twice by a writer before this one's guard: counted once
                prompt, completion = usage_of(line)
                entry = {"c": line["custom_id"], "f": name, "e": offset, "ok": name != ERRORS,
                         "i": prompt, "o": completion}
                found.append(entry)
                self._count(entry)
        if found:
            self.recovery.rejournaled = len(found)
            self._append_journal(found)
        elif not os.path.exists(journal):
            with open(journal, "ab"):
                pass
        shards = [self._file_order(n)[1] for n in sizes if n != ERRORS]
        self._shard = max(shards) if shards else 0
        current = SHARD.format(self._shard)
        self._shard_count = sum(1 for e in kept + found if e["f"] == current)
        return self

    def _output_files(self) -> list[str]:
        return [n for n in os.listdir(self.folder) if _SHARD_RE.match(n) or n == ERRORS]

    @staticmethod
    def _file_order(name: str) -> tuple[int, int]:
        match = _SHARD_RE.match(name)
        return (0, int(match.group(1))) if match else (1, 0)

    def _count(self, entry: Mapping[str, Any]) -> None:
        self.done.add(str(entry["c"]))
        if not entry.get("ok"):
            self.failed.add(str(entry["c"]))
        self.totals.add(bool(entry.get("ok")), int(entry.get("i") or 0), int(entry.get("o") or 0))
        name = str(entry["f"])
        self._ends[name] = max(self._ends.get(name, 0), int(entry["e"]))

    def _append_journal(self, entries: Iterable[dict[str, Any]]) -> None:
        fd = os.open(os.path.join(self.folder, JOURNAL), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            _write_all(fd, b"".join(_journal_bytes(e) for e in entries))
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- writing ----------------------------------------------------------------------------

    def write(self, results: Iterable[Result]) -> list[Result]:
        """Write a batch (the module's docstring: files, fsync, journal, fsync); the results
        written, those whose id was done already left out."""
        batch: list[Result] = []
        for result in results:
            if result.custom_id in self.done:
                continue
            self.done.add(result.custom_id)
            batch.append(result)
        if not batch:
            return []
        by_file: dict[str, list[bytes]] = {}
        entries = []
        for result in batch:
            if result.ok:
                if self._shard_count >= self.shard_lines:
                    self._shard += 1
                    self._shard_count = 0
                self._shard_count += 1
                name = SHARD.format(self._shard)
            else:
                name = ERRORS
            data = json.dumps(result.line, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
            by_file.setdefault(name, []).append(data)
            end = self._ends.get(name)
            if end is None:
                end = os.path.getsize(os.path.join(self.folder, name)) if os.path.exists(os.path.join(self.folder, name)) else 0
            end += len(data)
            self._ends[name] = end
            entries.append({"c": result.custom_id, "f": name, "e": end, "ok": result.ok,
                            "i": result.prompt_tokens, "o": result.completion_tokens})
        created = False
        for name, chunks in by_file.items():
            path = os.path.join(self.folder, name)
            created |= not os.path.exists(path)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                _write_all(fd, b"".join(chunks))
                os.fsync(fd)
            finally:
                os.close(fd)
        if created:
            _fsync_dir(self.folder)
        self._append_journal(entries)
        for result in batch:
            self.totals.add(result.ok, result.prompt_tokens, result.completion_tokens)
            if not result.ok:
                self.failed.add(result.custom_id)
        return batch

    def files(self) -> dict[str, list[str]]:
        """The output files, by kind: ``results`` (the shards, in order) and ``errors``."""
        names = self._output_files()
        return {"results": sorted((n for n in names if n != ERRORS), key=self._file_order),
                "errors": [n for n in names if n == ERRORS]}


def _rewrite_journal(folder: str, entries: list[dict[str, Any]]) -> None:
    """The journal replaced, whole, by ``entries`` (a temporary file, fsync, rename, the folder's fsync)."""
    path = os.path.join(folder, JOURNAL)
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(b"".join(_journal_bytes(e) for e in entries))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(folder)


def _journal_bytes(entry: Mapping[str, Any]) -> bytes:
    return json.dumps(entry, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
