# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The model's config.json, read on the host and parsed on the controller.

A file that is not a JSON object fails here with a message naming the variable
(``sglang_model_path``), the file, where the JSON breaks (line, column) and the fix, instead of
a templating error naming neither (issue 16 #6).
"""
from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import PlanError

FIX = ("put the model's own config.json there (as its repository ships it), or point sglang_model_path at the "
       "model's folder")


def config_path(model_path: str) -> str:
    """Where the role reads the model's config: ``<sglang_model_path>/config.json``."""
    return str(model_path).rstrip("/") + "/config.json"


def load_model_config(raw: bytes | str, path: str, model_path: str | None = None) -> dict[str, Any]:
    """The config as a dict, from the file's bytes (or text); PlanError when it is not a JSON
    object, naming ``sglang_model_path``, ``path``, the line and column of the error and the fix."""
    where = f"sglang_model_path={model_path!r}: " if model_path is not None else "sglang_model_path: "
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise PlanError(f"{where}{path} is not UTF-8 text (byte {exc.start}: {exc.reason}): "
                            f"it is not a config.json; {FIX}") from None
    else:
        text = str(raw)
    if not text.strip():
        raise PlanError(f"{where}{path} is empty: {FIX}")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{where}{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}): "
                        f"{FIX}") from None
    if not isinstance(config, dict):
        raise PlanError(f"{where}{path} holds a JSON {type(config).__name__}, not an object of the model's "
                        f"settings: {FIX}")
    return config


def load_slurped_config(content: str, model_path: str) -> dict[str, Any]:
    """``load_model_config`` of what ``ansible.builtin.slurp`` read (base64) from
    ``<model_path>/config.json``."""
    path = config_path(model_path)
    try:
        raw = base64.b64decode(str(content), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PlanError(f"sglang_model_path={model_path!r}: the content read from {path} is not base64 ({exc}): "
                        "pass slurp's content") from None
    return load_model_config(raw, path, model_path)
