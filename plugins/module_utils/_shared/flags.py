# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""SGLang server flags per release: schema loading, parsing and validation.

The schemas in ``data/flag_schemas/sglang-<release>.json`` are generated from each
release's real parser by ``tools/gen_flag_schema.py``. From them this module rebuilds an
``argparse`` parser that behaves like the release's own (same option strings, nargs,
choices, types, prefix abbreviations), and a validator that reports every problem in an
argv instead of stopping at the first.

Error messages are argparse's one-line messages, as the real server prints them after
``<prog>: error: ``, e.g. ``argument --port: invalid int value: 'abc'``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, NoReturn

from ansible_collections.llmops.sglang.plugins.module_utils._shared.paths import data_dir

SCHEMA_DIR = "flag_schemas"
_SCHEMA_RE = re.compile(r"^sglang-(?P<release>\d+(?:\.\d+)*)\.json$")
# argparse's own test for "this looks like a negative number, not an option"
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")

__all__ = [
    "FlagError",
    "FlagSchema",
    "FlagSpec",
    "UnknownReleaseError",
    "build_parser",
    "closest_flag",
    "load_schema",
    "parse_argv",
    "supported_releases",
    "validate_argv",
]


# --------------------------------------------------------------------------- errors


class UnknownReleaseError(ValueError):
    """A release with no flag schema in ``data/flag_schemas``."""

    def __init__(self, release: str, supported: list[str]) -> None:
        self.release = release
        self.supported = list(supported)
        super().__init__(
            f"unsupported SGLang release {release!r}; supported: {', '.join(supported) or 'none'}"
        )


class FlagError(ValueError):
    """One argv problem, worded like argparse.

    ``str(err)`` is the one-line argparse message (``argument --port: expected one
    argument``, ``unrecognized arguments: --bar``). ``message`` is the part after
    ``argument <flag>: `` when the problem belongs to a known flag, else the whole line.
    ``flag`` is the option as written (or its canonical spelling), ``suggestion`` the
    closest valid flag for an unknown one, ``kind`` a short machine-readable category:
    unrecognized, ambiguous, missing_value, invalid_choice, invalid_value,
    explicit_argument, required, other.
    """

    def __init__(
        self,
        message: str,
        flag: str | None = None,
        suggestion: str | None = None,
        kind: str = "other",
        line: str | None = None,
    ) -> None:
        self.message = message
        self.flag = flag
        self.suggestion = suggestion
        self.kind = kind
        self._line = (
            line
            if line is not None
            else (f"argument {flag}: {message}" if flag and kind not in _WHOLE_LINE_KINDS else message)
        )
        super().__init__(self._line)

    def __str__(self) -> str:
        return self._line

    def __repr__(self) -> str:
        return (
            f"FlagError({self._line!r}, flag={self.flag!r}, suggestion={self.suggestion!r}, "
            f"kind={self.kind!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FlagError):
            return NotImplemented
        return (self._line, self.flag, self.suggestion, self.kind) == (
            other._line,
            other.flag,
            other.suggestion,
            other.kind,
        )

    def __hash__(self) -> int:
        return hash((self._line, self.flag, self.suggestion, self.kind))


_WHOLE_LINE_KINDS = frozenset({"unrecognized", "ambiguous", "required"})


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class FlagSpec:
    """One action of the real parser, as recorded in the schema."""

    option_strings: tuple[str, ...]
    dest: str
    nargs: int | str | None
    choices: tuple[Any, ...] | None
    type: str | None
    action: str
    default: Any
    required: bool = False
    help: str = ""
    deprecated: bool = False
    new_flag: str | None = None
    const: Any = None
    has_const: bool = False
    action_class: str | None = None
    metavar: Any = None

    @property
    def name(self) -> str:
        """The canonical (longest ``--``) spelling."""
        longs = [o for o in self.option_strings if o.startswith("--")]
        return longs[0] if longs else self.option_strings[0]

    @property
    def takes_value(self) -> bool:
        return self.nargs != 0

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> FlagSpec:
        choices = raw.get("choices")
        return cls(
            option_strings=tuple(raw["option_strings"]),
            dest=str(raw["dest"]),
            nargs=raw.get("nargs"),
            choices=tuple(choices) if choices is not None else None,
            type=raw.get("type"),
            action=str(raw.get("action", "store")),
            default=raw.get("default"),
            required=bool(raw.get("required", False)),
            help=str(raw.get("help") or ""),
            deprecated=bool(raw.get("deprecated", False)),
            new_flag=raw.get("new_flag"),
            const=raw.get("const"),
            has_const="const" in raw,
            action_class=raw.get("action_class"),
            metavar=raw.get("metavar"),
        )


@dataclass(frozen=True, eq=False)
class FlagSchema:
    """All flags of one release."""

    release: str
    flags: tuple[FlagSpec, ...]
    generated_by: dict[str, Any] = field(default_factory=dict)

    @property
    def option_strings(self) -> list[str]:
        """Every option string, in parser order (``-h`` and ``--help`` included)."""
        return [o for f in self.flags for o in f.option_strings]

    @property
    def by_option(self) -> dict[str, FlagSpec]:
        return _index(self)

    def get(self, option: str) -> FlagSpec | None:
        """The flag with this exact option string, or None."""
        return _index(self).get(option)

    def has(self, option: str) -> bool:
        """Whether the exact option string exists (no abbreviation)."""
        return option in _index(self)

    def choices(self, option: str) -> list[Any] | None:
        spec = self.get(option)
        return list(spec.choices) if spec is not None and spec.choices is not None else None

    def defaults(self) -> dict[str, Any]:
        """dest -> default, first action of a dest wins (as argparse does)."""
        out: dict[str, Any] = {}
        for spec in self.flags:
            if spec.action in ("help", "version"):
                continue
            out.setdefault(spec.dest, spec.default)
        return out

    def __len__(self) -> int:
        return len(self.flags)


@cache
def _index(schema: FlagSchema) -> dict[str, FlagSpec]:
    return {o: f for f in schema.flags for o in f.option_strings}


def _version_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in release.split("."))


def supported_releases() -> list[str]:
    """Releases that have a schema file, oldest first."""
    folder = data_dir() / SCHEMA_DIR
    found: list[str] = []
    if folder.is_dir():
        for path in folder.iterdir():
            match = _SCHEMA_RE.match(path.name)
            if match:
                found.append(match.group("release"))
    return sorted(found, key=_version_key)


def load_schema(release: str) -> FlagSchema:
    """The schema of ``release`` (cached per data folder)."""
    return _load_schema(str(data_dir()), str(release))


@lru_cache(maxsize=32)
def _load_schema(folder: str, release: str) -> FlagSchema:
    path = Path(folder) / SCHEMA_DIR / f"sglang-{release}.json"
    if not _SCHEMA_RE.match(path.name) or not path.is_file():
        raise UnknownReleaseError(release, supported_releases())
    with open(path, encoding="utf-8") as handle:
        raw = json.load(handle)
    flags = tuple(FlagSpec.from_json(item) for item in raw["flags"])
    return FlagSchema(
        release=str(raw.get("release", release)),
        flags=flags,
        generated_by=dict(raw.get("generated_by") or {}),
    )


# --------------------------------------------------------------------------- value types
# Named like the real converters so argparse's "invalid <type> value" messages match.


def human_readable_int(value: str) -> int:
    """SGLang's ``human_readable_int`` (same results and messages in 0.5.10-0.5.23).

    Plain integers, SI suffixes (1k, 25.6k, 1M) and IEC suffixes (1Ki, 2Mi); case-sensitive.
    """
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        ) from None


def nullable_str(value: str) -> str | None:
    if not value or value == "None":
        return None
    return value


def loads(value: str) -> Any:
    return json.loads(value)


def json_list_type(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"Invalid JSON list: {value}. Please provide a valid JSON list."
        ) from exc


def _passthrough(name: str) -> Callable[[str], str]:
    def convert(value: str) -> str:
        return value

    convert.__name__ = name
    return convert


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "int": int,
    "float": float,
    "str": str,
    "json": loads,
    "json_list": json_list_type,
    "human_readable_int": human_readable_int,
    "nullable_str": nullable_str,
}


def _converter(spec: FlagSpec) -> Callable[[str], Any] | None:
    if spec.type in (None, "bool") and spec.nargs == 0:
        return None
    if spec.type is None:
        return None
    conv = _CONVERTERS.get(spec.type)
    return conv if conv is not None else _passthrough(spec.type)


# --------------------------------------------------------------------------- parser


class _RaisingParser(argparse.ArgumentParser):
    """An ArgumentParser whose ``error`` raises FlagError instead of exiting."""

    flag_release: str = ""

    def error(self, message: str) -> NoReturn:
        raise _error_from_line(message, self.flag_release)


class _NoOpAction(argparse.Action):
    """A deprecated flag that takes no value and stores nothing."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs["nargs"] = 0
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        return None


_HELP_PERCENT = re.compile(r"%(?!\((?:default|type|choices|dest|prog|metavar|required|nargs|const)\)[sdr])")


def _help(spec: FlagSpec) -> str | None:
    """The schema's short help, safe for argparse's %-formatting (it may be cut short)."""
    return _HELP_PERCENT.sub("%%", spec.help) if spec.help else None


def _add_flag(parser: argparse.ArgumentParser, spec: FlagSpec) -> None:
    # the default always travels: several store_true flags have default None, not False
    kwargs: dict[str, Any] = {"dest": spec.dest, "help": _help(spec), "default": spec.default}
    if spec.required:
        kwargs["required"] = True
    action = spec.action
    if action == "help":
        parser.add_argument(*spec.option_strings, action="help", help=_help(spec))
        return
    if action in ("store_true", "store_false"):
        parser.add_argument(*spec.option_strings, action=action, **kwargs)
        return
    if action == "boolean_optional":
        parser.add_argument(*spec.option_strings, action=argparse.BooleanOptionalAction, **kwargs)
        return
    if action == "count":
        parser.add_argument(*spec.option_strings, action="count", **kwargs)
        return
    if spec.nargs == 0:
        if action in ("store_const", "append_const", "custom") and spec.has_const:
            const_action = "append_const" if action == "append_const" else "store_const"
            parser.add_argument(*spec.option_strings, action=const_action, const=spec.const, **kwargs)
        else:
            parser.add_argument(*spec.option_strings, action=_NoOpAction, **kwargs)
        return
    if spec.metavar is not None:
        kwargs["metavar"] = tuple(spec.metavar) if isinstance(spec.metavar, list) else spec.metavar
    conv = _converter(spec)
    if conv is not None:
        kwargs["type"] = conv
    if spec.choices is not None:
        kwargs["choices"] = list(spec.choices)
    if spec.nargs is not None:
        kwargs["nargs"] = spec.nargs
    store = "append" if action == "append" else ("extend" if action == "extend" else "store")
    parser.add_argument(*spec.option_strings, action=store, **kwargs)


def _make_parser(cls: type[argparse.ArgumentParser], release: str, prog: str) -> argparse.ArgumentParser:
    schema = load_schema(release)
    parser = cls(prog=prog, add_help=False)
    for spec in schema.flags:
        _add_flag(parser, spec)
    return parser


def build_parser(release: str, prog: str = "launch_server.py") -> argparse.ArgumentParser:
    """A real argparse parser with the release's flags.

    ``parse_args`` on it behaves like the release's server: on a bad argv it prints
    ``usage: ...`` and ``<prog>: error: <message>`` on stderr and exits with status 2.
    (The real server's parser is ``argparse.ArgumentParser(prog="sglang serve")``.)
    """
    return _make_parser(argparse.ArgumentParser, release, prog)


@lru_cache(maxsize=16)
def _raising_parser(folder: str, release: str) -> argparse.ArgumentParser:
    parser = _make_parser(_RaisingParser, release, "launch_server.py")
    if not isinstance(parser, _RaisingParser):
        raise AssertionError(type(parser))
    parser.flag_release = release
    return parser


def parse_argv(argv: list[str], release: str) -> dict[str, Any]:
    """dest -> value for every flag of ``release`` (defaults included).

    Raises FlagError (the first problem, as the real parser would report it) or
    UnknownReleaseError; never exits.
    """
    parser = _raising_parser(str(data_dir()), str(release))
    namespace = parser.parse_args(list(argv))
    return dict(vars(namespace))


# --------------------------------------------------------------------------- validation


def closest_flag(name: str, release: str) -> str | None:
    """The valid option string closest to ``name`` (difflib), or None."""
    schema = load_schema(release)
    candidates = [o for o in schema.option_strings if o.startswith("--")]
    flag = name.split("=", 1)[0]
    if not flag.startswith("-"):
        flag = "--" + flag
    elif not flag.startswith("--"):
        flag = "-" + flag
    matches = difflib.get_close_matches(flag, candidates, n=1, cutoff=0.6)
    if matches:
        return matches[0]
    # A renamed flag often keeps its first and last words: try word overlap.
    words = set(flag.lstrip("-").split("-"))
    best: tuple[float, str] | None = None
    for cand in candidates:
        cwords = set(cand.lstrip("-").split("-"))
        score = len(words & cwords) / max(len(words | cwords), 1)
        if score >= 0.5 and (best is None or score > best[0]):
            best = (score, cand)
    return best[1] if best else None


def _renamed_to(flag: str, release: str) -> str | None:
    """The spelling of a renamed or aliased flag that ``release`` accepts.

    Another release's schema may record a deprecated alias (``new_flag``): the flag's
    new name when ``release`` is newer, or its old name when ``release`` is older; or
    list the flag as one spelling of an option that ``release`` knows by another.
    """
    schema = load_schema(release)
    for other in supported_releases():
        if other == release:
            continue
        try:
            other_schema = load_schema(other)
        except UnknownReleaseError:  # pragma: no cover - listed releases exist
            continue
        spec = other_schema.get(flag)
        if spec is not None and spec.new_flag and schema.has(spec.new_flag):
            return spec.new_flag
        if spec is not None:
            # an alias there (``--enable-hicache``) of a flag this release spells otherwise
            for option in spec.option_strings:
                if option != flag and option.startswith("--") and schema.has(option):
                    return option
        for alias in other_schema.flags:
            if alias.new_flag == flag and schema.has(alias.name):
                return alias.name
    return None


def _suggest(flag: str, release: str) -> str | None:
    return _renamed_to(flag, release) or closest_flag(flag, release)


_ARG_LINE = re.compile(r"^argument (?P<flag>[^:]+): (?P<msg>.*)$", re.S)


def _error_from_line(line: str, release: str) -> FlagError:
    """A FlagError from an argparse error line."""
    match = _ARG_LINE.match(line)
    if match:
        flags = match.group("flag").split("/")
        flag = next((f for f in flags if f.startswith("--")), flags[0])
        msg = match.group("msg")
        if msg.startswith("invalid choice"):
            kind = "invalid_choice"
        elif msg.startswith("expected"):
            kind = "missing_value"
        elif msg.startswith("ignored explicit argument"):
            kind = "explicit_argument"
        else:
            kind = "invalid_value"
        return FlagError(msg, flag=flag, kind=kind, line=line)
    if line.startswith("unrecognized arguments: "):
        rest = line[len("unrecognized arguments: ") :].split()
        flag = next((t for t in rest if t.startswith("-")), rest[0] if rest else None)
        suggestion = _suggest(flag, release) if flag and flag.startswith("-") and release else None
        return FlagError(line, flag=flag, suggestion=suggestion, kind="unrecognized", line=line)
    if line.startswith("ambiguous option: "):
        flag = line[len("ambiguous option: ") :].split()[0].split("=", 1)[0]
        suggestion = _renamed_to(flag, release) if release else None
        return FlagError(line, flag=flag, suggestion=suggestion, kind="ambiguous", line=line)
    if line.startswith("the following arguments are required: "):
        flag = line.split(": ", 1)[1].split(",")[0].split("/")[0].strip()
        return FlagError(line, flag=flag, kind="required", line=line)
    return FlagError(line, kind="other", line=line)


def _display(spec: FlagSpec) -> str:
    """How argparse names an option in ``argument X:`` (all spellings joined by '/')."""
    return "/".join(spec.option_strings)


def _arg_error(spec: FlagSpec, message: str, kind: str) -> FlagError:
    return FlagError(message, flag=spec.name, kind=kind, line=f"argument {_display(spec)}: {message}")


def _looks_like_flag(token: str, schema: FlagSchema) -> bool:
    """argparse's rule: starts with '-', is not a lone '-', is not a negative number."""
    if not token or token[0] != "-" or token == "-":
        return False
    if token in _index(schema):
        return True
    if _NEGATIVE_NUMBER.match(token):
        return False
    if " " in token and "=" not in token.split(" ", 1)[0]:
        return False
    return True


def _resolve(token: str, schema: FlagSchema) -> tuple[list[FlagSpec], str, str | None]:
    """(matching flags, option as written, explicit '=' value) for a flag-like token."""
    index = _index(schema)
    if token in index:
        return [index[token]], token, None
    option, explicit = token, None
    if "=" in token:
        option, explicit = token.split("=", 1)
        if option in index:
            return [index[option]], option, explicit
    if option.startswith("--"):
        # argparse's allow_abbrev: a unique prefix of a long option selects it. Like
        # Python 3.11's argparse, two spellings of one flag matching is ambiguous too.
        hits = [o for o in index if o.startswith(option)]
        return [index[o] for o in hits], option, explicit
    return [], option, explicit


def _check_value(spec: FlagSpec, value: str) -> FlagError | None:
    conv = _converter(spec)
    converted: Any = value
    if conv is not None:
        try:
            converted = conv(value)
        except argparse.ArgumentTypeError as exc:
            return _arg_error(spec, str(exc), "invalid_value")
        except (TypeError, ValueError):
            name = getattr(conv, "__name__", repr(conv))
            return _arg_error(spec, f"invalid {name} value: {value!r}", "invalid_value")
    if spec.choices is not None and converted not in spec.choices:
        choices = ", ".join(repr(c) for c in spec.choices)
        return _arg_error(spec, f"invalid choice: {converted!r} (choose from {choices})", "invalid_choice")
    return None


def validate_argv(argv: list[str], release: str) -> list[FlagError]:
    """Every problem in ``argv`` for ``release``; an empty list means it is valid.

    Follows argparse's rules (prefix abbreviations, ``--flag=value``, negative numbers as
    values) but goes on after a problem. Unknown flags carry ``suggestion``: the flag's
    new name when another release records it as a renamed alias, else the closest flag.
    Raises UnknownReleaseError for a release without a schema.
    """
    schema = load_schema(release)
    errors: list[FlagError] = []
    seen: set[str] = set()
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--":
            if i < len(tokens):
                rest = " ".join(tokens[i:])
                errors.append(FlagError(f"unrecognized arguments: {rest}", kind="unrecognized"))
            break
        if not _looks_like_flag(token, schema):
            errors.append(FlagError(f"unrecognized arguments: {token}", flag=None, kind="unrecognized"))
            continue
        specs, option, explicit = _resolve(token, schema)
        if not specs:
            extra = [token]
            if explicit is None:
                while i < len(tokens) and not _looks_like_flag(tokens[i], schema):
                    extra.append(tokens[i])
                    i += 1
            errors.append(
                FlagError(
                    f"unrecognized arguments: {' '.join(extra)}",
                    flag=option,
                    suggestion=_suggest(option, release),
                    kind="unrecognized",
                )
            )
            continue
        if len(specs) > 1:
            names = ", ".join(o for o in _index(schema) if o.startswith(option))
            errors.append(
                FlagError(
                    f"ambiguous option: {token} could match {names}",
                    flag=option,
                    suggestion=_renamed_to(option, release),
                    kind="ambiguous",
                )
            )
            if explicit is None:
                while i < len(tokens) and not _looks_like_flag(tokens[i], schema):
                    i += 1
            continue
        spec = specs[0]
        seen.add(spec.dest)
        i = _take_values(spec, explicit, tokens, i, schema, errors)
    missing = [s for s in schema.flags if s.required and s.dest not in seen]
    if missing:
        names = ", ".join("/".join(s.option_strings) for s in missing)
        errors.append(
            FlagError(
                f"the following arguments are required: {names}",
                flag=missing[0].name,
                kind="required",
            )
        )
    return errors


def _take_values(spec: FlagSpec, explicit: str | None, tokens: list[str], i: int, schema: FlagSchema,
                 errors: list[FlagError]) -> int:
    """Check the values of one known flag (``tokens[i:]`` up to the next flag, or ``explicit``),
    adding its problems to ``errors``; returns the index after the values it took."""
    values: list[str]
    if spec.nargs == 0:
        if explicit is not None:
            errors.append(
                _arg_error(spec, f"ignored explicit argument {explicit!r}", "explicit_argument")
            )
        return i
    if explicit is not None:
        values = [explicit]
    else:
        values = []
        while i < len(tokens) and not _looks_like_flag(tokens[i], schema):
            values.append(tokens[i])
            i += 1
    problem, used = _arity(spec, values)
    if problem is not None:
        errors.append(problem)
    if explicit is None and used < len(values):
        # argparse leaves surplus values over, and reports them as unrecognized
        errors.append(
            FlagError(
                f"unrecognized arguments: {' '.join(values[used:])}",
                flag=None,
                kind="unrecognized",
            )
        )
    for value in values[:used]:
        bad = _check_value(spec, value)
        if bad is not None:
            errors.append(bad)
    return i


def _arity(spec: FlagSpec, values: list[str]) -> tuple[FlagError | None, int]:
    """(problem, how many of ``values`` the flag consumes) by argparse's nargs rules."""
    nargs = spec.nargs
    if nargs is None:
        if not values:
            return _arg_error(spec, "expected one argument", "missing_value"), 0
        return None, 1
    if nargs == "?":
        return None, min(1, len(values))
    if nargs == "*":
        return None, len(values)
    if nargs == "+":
        if not values:
            return (
                _arg_error(spec, "expected at least one argument", "missing_value"),
                0,
            )
        return None, len(values)
    if isinstance(nargs, int):
        if len(values) < nargs:
            word = "argument" if nargs == 1 else "arguments"
            return _arg_error(spec, f"expected {nargs} {word}", "missing_value"), 0
        return None, nargs
    return None, len(values)  # argparse.REMAINDER and friends


def _main(argv: list[str]) -> int:  # pragma: no cover - manual helper
    """``python -m ...._flags RELEASE ARGV...``: print the problems, exit 2 if any."""
    release, rest = argv[0], argv[1:]
    problems = validate_argv(rest, release)
    for err in problems:
        hint = f" (did you mean {err.suggestion}?)" if err.suggestion else ""
        print(f"{err}{hint}", file=sys.stderr)
    return 2 if problems else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main(sys.argv[1:]))
