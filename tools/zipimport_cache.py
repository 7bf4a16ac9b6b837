"""A bytecode cache for the modules Python imports out of zip files: the test venvs only.

Ansible runs each module as an AnsiballZ payload, a zip of the module and every module_utils
file it imports (ansible-core's `basic` and its imports, the collection's own). Python imports
them with zipimport, which never reads or writes .pyc files: every module run compiles all of it
again, and on Python 3.11 twice (zipimport compiles a module for `get_filename` and again for
`get_code`). That was about a quarter of each module process's CPU, and module processes are the
largest share of CI's (docs/DEVELOPING.md, issue 27).

`make setup` installs this file into the venv's site-packages as `_llmops_zipimport_cache` with a
`.pth` line that calls `install()` at every interpreter start. From then on the compiled code of a
zip member's source is kept in `<venv>/zipimport-cache/<cache tag>/`, named by the source's
SHA-256 (a changed source is a new entry, never a stale one), and loaded from there by every
later run; its file name (`co_filename`, in tracebacks and coverage) is set back to the path in
the zip the run imports from. Nothing else changes: the code is what `compile` made of the same
source. `LLMOPS_ZIPIMPORT_CACHE=0` turns it off. Not shipped (tools/ stays out of the build).
"""
from __future__ import annotations

import os
import sys

FOLDER = "zipimport-cache"
_ZIP = ".zip" + os.sep


def _refile(code, filename):
    """The code object and every code object in it, with `filename` as their file name."""
    kind = type(code)
    consts = tuple(_refile(c, filename) if isinstance(c, kind) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def cached_compiler(compile_source, folder: str):
    """`compile_source(pathname, source)` (zipimport's) through the cache in `folder`."""
    import hashlib
    import marshal

    seen: dict = {}  # this process's: zipimport asks twice for each module on Python 3.11

    def compile_cached(pathname, source):
        data = source if isinstance(source, bytes) else source.encode("utf-8", "surrogateescape")
        key = hashlib.sha256(data).hexdigest()
        known = seen.get((pathname, key))
        if known is not None:
            return known
        inner = pathname.rsplit(_ZIP, 1)[-1].replace(os.sep, "_")
        entry = os.path.join(folder, f"{key}-{inner}")
        code = None
        try:
            with open(entry, "rb") as handle:
                code = _refile(marshal.load(handle), pathname)
        except (OSError, EOFError, ValueError, TypeError):
            code = None
        if code is None:
            code = compile_source(pathname, source)
            try:
                os.makedirs(folder, exist_ok=True)
                part = f"{entry}.{os.getpid()}"
                with open(part, "wb") as handle:
                    marshal.dump(code, handle)
                os.replace(part, entry)  # whole or absent: runs side by side read the same folder
            except OSError:
                pass
        seen[(pathname, key)] = code
        return code

    return compile_cached


def install(folder: str | None = None) -> bool:
    """Route zipimport's compiling through the cache; False where it is turned off or where this
    Python's zipimport has no `_compile_source` to route (it then compiles as before)."""
    if os.environ.get("LLMOPS_ZIPIMPORT_CACHE", "1") == "0":
        return False
    import zipimport

    original = getattr(zipimport, "_compile_source", None)
    if original is None or getattr(original, "__wrapped__", None) is not None:
        return False
    folder = folder or os.path.join(sys.prefix, FOLDER, sys.implementation.cache_tag or "python")
    compile_cached = cached_compiler(original, folder)
    compile_cached.__wrapped__ = original
    zipimport._compile_source = compile_cached
    return True
