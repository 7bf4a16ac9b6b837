# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The bench's report folder on the controller: checked before anything is measured, and a
fallback for a report that cannot be written there after all (issue 16 #9: a reports dir that
could not be written was found after the sweep, which failed on a raw errno and lost its result).

``problem(path)`` says, before the first request, why ``path`` cannot hold reports (or None);
``fallback_root()`` is where a finished report goes when its folder fails anyway. Plain Python
(it runs in the sweep_report module and the reports_dir lookup, both on the controller; kept to
Python 3.10 as every module_utils file).
"""
from __future__ import annotations

import os
import tempfile

VARIABLE = "sglang_bench_reports_dir"
FALLBACK_PARTS = (".ansible", "llmops.sglang", "reports")


def _nearest_existing(path: str) -> str:
    current = path
    while current and not os.path.lexists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current or "/"


def problem(path: str, variable: str = VARIABLE, create: bool = True) -> str | None:
    """Why ``path`` cannot hold the reports, naming the variable and the fix; None when it can.

    With ``create`` the folder (and its parents) is created and a probe file written and
    removed there: what the report will do, so ``/proc/x``, a read-only mount or a file in the
    way fail here. Without (check mode) nothing is created: the folder, or its nearest existing
    ancestor, must be a writable directory."""
    fix = f"set {variable} to a folder this user can create and write on the controller"
    if not path or not str(path).strip():
        return f"{variable} is empty: {fix}"
    path = os.path.abspath(os.path.expanduser(str(path)))
    if not create:
        existing = _nearest_existing(path)
        if not os.path.isdir(existing):
            return f"{variable}={path!r}: {existing} is not a folder: {fix}"
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"{variable}={path!r}: {existing} is not writable by this user: {fix}"
        return None
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".llmops-sglang-probe-", dir=path)
        try:
            os.write(fd, b"probe\n")
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != path else ""
        return f"{variable}={path!r}: cannot create and write a report there: {reason}{where}: {fix}"
    return None


def fallback_root(home: str | None = None) -> str:
    """A folder for a report whose own folder failed: ``~/.ansible/llmops.sglang/reports`` when
    it can be written, else a new folder under the system's temporary directory."""
    base = home if home is not None else os.path.expanduser("~")
    root = os.path.join(base, *FALLBACK_PARTS)
    if problem(root, "the fallback") is None:
        return root
    return tempfile.mkdtemp(prefix="llmops-sglang-reports-")
