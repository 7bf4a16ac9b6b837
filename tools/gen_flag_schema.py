#!/usr/bin/env python
"""Generate data/flag_schemas/sglang-<release>.json from a real SGLang release.

The schema is read from the release's own argument parser: this script builds
``argparse.ArgumentParser()``, calls the real ``ServerArgs.add_cli_args(parser)``
and walks ``parser._actions``. Nothing here is hand-typed.

How to run it (a CPU-only machine is enough). Use one scratch venv per release, never the
project venv; pin ``transformers`` to the release's own pin (``Requires-Dist:
transformers==...`` in the wheel's METADATA): newer ones refuse to import older releases'
config registrations. These exact commands produced the committed schemas::

    deps="triton numpy orjson psutil pybase64 requests packaging pillow starlette pydantic \
          pyzmq tqdm ipython aiohttp msgspec safetensors openai partial_json_parser \
          huggingface_hub dill sentencepiece fastapi uvicorn httpx"
    for pair in 0.5.10:5.3.0 0.5.17:5.12.1 0.5.23:5.19.0; do
        v=${pair%%:*}; tf=${pair##*:}
        python3 -m venv /tmp/sgschema-venv-$v
        /tmp/sgschema-venv-$v/bin/pip install torch==2.13.0 transformers==$tf $deps
        [ $v = 0.5.17 ] && /tmp/sgschema-venv-$v/bin/pip install xgrammar==0.2.1
        /tmp/sgschema-venv-$v/bin/pip install --no-deps sglang==$v
        /tmp/sgschema-venv-$v/bin/python tools/gen_flag_schema.py --release $v \
            --stub torchvision --out data/flag_schemas/sglang-$v.json
    done

(torch 2.13.0 is the local CPU wheel on the project machines; the torch version a release
pins does not matter to its parser.)

``--stub MODULE`` (repeatable) installs an explicit import hook that serves an
empty placeholder module for MODULE and its submodules. It is meant only for
modules that are imported at import time of ``sglang.srt.server_args`` but are
not used by ``add_cli_args``. The one needed on a CPU machine is ``torchvision``:
the PyPI torchvision wheel is a CUDA build whose C extension does not load
against the CPU torch wheel (``operator torchvision::nms does not exist``);
SGLang only imports ``torchvision.io.decode_jpeg`` for image inputs. The stubs
used are recorded in the output under ``generated_by.stubbed_modules``. A module
is stubbed only when its real import fails first; the stub's top level carries
``__version__ = "0.0.0"`` so that transformers' version probe sees an old, present
package and takes no new code paths.

The release written is the importable package's version; ``--release X`` makes the
script refuse to run against any other version.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import types
from typing import Any

SCHEMA_FORMAT = 1

_ACTION_KINDS: dict[str, str] = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "_HelpAction": "help",
    "_VersionAction": "version",
    "_ExtendAction": "extend",
    "BooleanOptionalAction": "boolean_optional",
}

_TYPE_NAMES: dict[str, str] = {
    "int": "int",
    "float": "float",
    "str": "str",
    "loads": "json",  # json.loads / orjson.loads
    "json_list_type": "json_list",
    "human_readable_int": "human_readable_int",
    "nullable_str": "nullable_str",
    "str2bool": "bool",
    "bool": "bool",
}


class _StubModule(types.ModuleType):
    """Placeholder: any attribute is another placeholder (callable, subclassable)."""

    __path__: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubModule(f"{self.__name__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _StubModule(f"{self.__name__}()")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves placeholder modules for the named top-level packages."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = set(roots)
        self.used: set[str] = set()

    def _covers(self, fullname: str) -> bool:
        return fullname.split(".")[0] in self.roots

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not self._covers(fullname):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        self.used.add(spec.name)
        mod = _StubModule(spec.name)
        mod.__path__ = []
        if "." not in spec.name:
            # Libraries that probe for the package (transformers reads
            # ``__version__``) see an old, present version and take no new paths.
            mod.__version__ = "0.0.0"  # type: ignore[attr-defined]
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _install_stubs(roots: list[str]) -> _StubFinder | None:
    if not roots:
        return None
    really_missing: list[str] = []
    for root in roots:
        try:
            importlib.import_module(root)
        except Exception:  # noqa: BLE001 - any failure means: stub it
            for name in [m for m in sys.modules if m == root or m.startswith(root + ".")]:
                del sys.modules[name]
            really_missing.append(root)
    if not really_missing:
        return None
    finder = _StubFinder(really_missing)
    sys.meta_path.insert(0, finder)
    return finder


def _json_safe(value: Any) -> Any:
    if value is argparse.SUPPRESS:
        return None
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        pass
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if hasattr(value, "value") and isinstance(value.value, (str, int, float)):
        return value.value  # enums
    return repr(value)


def _type_name(action: argparse.Action) -> str | None:
    kind = _ACTION_KINDS.get(type(action).__name__)
    if action.nargs == 0 or kind in ("store_true", "store_false", "boolean_optional"):
        return "bool"
    t = action.type
    if t is None:
        return "str"
    name = getattr(t, "__name__", None) or type(t).__name__
    return _TYPE_NAMES.get(name, name)


def _short_help(text: str | None) -> str:
    if not text or text is argparse.SUPPRESS:
        return ""
    flat = " ".join(str(text).split())
    end = flat.find(". ")
    if 0 < end < 200:
        flat = flat[: end + 1]
    return flat if len(flat) <= 200 else flat[:197] + "..."


def describe_action(action: argparse.Action) -> dict[str, Any]:
    cls = type(action).__name__
    kind = _ACTION_KINDS.get(cls)
    entry: dict[str, Any] = {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "nargs": action.nargs if action.nargs != argparse.SUPPRESS else None,
        "choices": _json_safe(list(action.choices)) if action.choices is not None else None,
        "type": _type_name(action),
        "action": kind or "custom",
        "default": _json_safe(action.default),
        "required": bool(action.required),
        "help": _short_help(action.help),
    }
    if kind is None:
        entry["action_class"] = cls
    if cls.startswith("Deprecated"):
        entry["deprecated"] = True
        new_flag = getattr(action, "new_flag", None)
        if new_flag:
            entry["new_flag"] = new_flag
    if kind in ("store_const", "append_const") or (
        kind is None and action.nargs == 0 and action.const is not None
    ):
        entry["const"] = _json_safe(action.const)
    const_value = getattr(action, "const_value", None)
    if const_value is not None:
        entry["const"] = _json_safe(const_value)
    if action.metavar is not None:
        entry["metavar"] = _json_safe(action.metavar)
    return entry


def _release_of_installed() -> str:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:  # noqa: BLE001
        import sglang  # type: ignore[import-not-found]

        return str(sglang.__version__)


def build_schema(release: str | None, stubs: list[str]) -> dict[str, Any]:
    finder = _install_stubs(stubs)
    import sglang  # type: ignore[import-not-found]
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]

    installed = str(getattr(sglang, "__version__", "")) or _release_of_installed()
    if release is not None and release != installed:
        raise SystemExit(f"asked for release {release} but sglang {installed} is importable")
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    flags = [describe_action(a) for a in parser._actions]
    return {
        "format": SCHEMA_FORMAT,
        "release": installed,
        "generated_by": {
            "tool": "tools/gen_flag_schema.py",
            "method": "argparse.ArgumentParser() + sglang.srt.server_args.ServerArgs.add_cli_args(parser); walk parser._actions",
            "python": sys.version.split()[0],
            "stubbed_modules": sorted(finder.roots) if finder else [],
        },
        "flag_count": len(flags),
        "flags": flags,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--release", help="expected sglang version (checked against the import)")
    ap.add_argument("--out", help="output JSON path (default: stdout)")
    ap.add_argument(
        "--stub",
        action="append",
        default=[],
        metavar="MODULE",
        help="serve a placeholder for MODULE if it cannot be imported (repeatable)",
    )
    args = ap.parse_args(argv)
    schema = build_schema(args.release, args.stub)
    text = json.dumps(schema, indent=1, sort_keys=False) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"wrote {args.out}: {schema['flag_count']} flags for sglang {schema['release']}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
