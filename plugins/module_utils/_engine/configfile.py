# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""``--config FILE``: SGLang's configuration file, merged into the command line as the real
server does (``sglang/srt/server_args_config_parser.py`` ``ConfigArgumentMerger``, the same in
0.5.10, 0.5.17 and 0.5.23): the file must be ``.yaml``/``.yml`` and hold a mapping; each key
becomes ``--key``; a boolean of a store_true flag adds the bare flag when true, other booleans
``--key true|false``; a list ``--key v1 v2``; a mapping its JSON; anything else ``--key str``.
The file's arguments go before the command line's, so the command line wins.

The server role passes the API key this way (never in argv, where ``ps`` shows it). The real
server reads the file with PyYAML; the embedded engine needs no YAML library for what the
collection writes, JSON (which is YAML), and reads flat ``key: value`` lines otherwise.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

CONFIG_FLAG = "--config"


class ConfigFileError(ValueError):
    """What the real server raises (a ValueError) for a bad --config."""


def _scalar(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "~", ""):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load(path: str) -> dict[str, Any]:
    """The mapping in a config file (JSON, or flat ``key: value`` YAML)."""
    file = Path(path)
    if file.suffix.lower() not in (".yaml", ".yml"):
        raise ConfigFileError(f"Config file must be YAML format, got: {file.suffix}")
    if not file.exists():
        raise ConfigFileError(f"Config file not found: {path}")
    text = file.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if text.strip() else None
    except ValueError:
        data = {}
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, sep, value = line.partition(":")
            if not sep or line[:1].isspace():
                raise ConfigFileError(f"cannot read {path}: the embedded engine reads JSON or flat 'key: value' "
                                      "lines") from None
            data[key.strip()] = _scalar(value)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigFileError("Config file must contain a dictionary at root level")
    return data


def _to_args(config: dict[str, Any], store_true: set[str]) -> list[str]:
    args: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            if key.replace("-", "_") in store_true:
                if value:
                    args.append(f"--{key}")
            else:
                args.extend([f"--{key}", str(value).lower()])
        elif isinstance(value, list):
            if value:
                args.append(f"--{key}")
                args.extend(str(item) for item in value)
        elif isinstance(value, dict):
            args.extend([f"--{key}", json.dumps(value)])
        else:
            args.extend([f"--{key}", str(value)])
    return args


def merge(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """argv with its ``--config FILE`` replaced by the file's arguments, put first."""
    if CONFIG_FLAG not in argv:
        return argv
    indices = [i for i, arg in enumerate(argv) if arg == CONFIG_FLAG]
    if len(indices) > 1:
        raise ConfigFileError("Multiple config files specified! Only one allowed.")
    index = indices[0]
    if index == len(argv) - 1:
        raise ConfigFileError("No config file specified after --config flag!")
    store_true = {a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction)}
    return _to_args(load(argv[index + 1]), store_true) + argv[:index] + argv[index + 2:]
