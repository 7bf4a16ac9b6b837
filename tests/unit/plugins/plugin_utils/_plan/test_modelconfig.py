"""Tests of plugins/plugin_utils/_plan/modelconfig.py: the model's config.json as the host read
it, parsed on the controller with a message naming the variable, the file, the place and the fix
(issue 16 #6: a raw from_json error named neither the file nor the variable)."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import (
    PlanError,
    load_model_config,
    load_slurped_config,
)

ROOT = Path(__file__).resolve().parents[5]
SHIPPED = ROOT / "data" / "models" / "qwen3.6-27b" / "config.json"


def test_a_real_config_loads_as_shipped() -> None:
    raw = SHIPPED.read_bytes()
    assert load_model_config(raw, str(SHIPPED), str(SHIPPED.parent)) == json.loads(raw)
    assert load_model_config(b"\xef\xbb\xbf" + raw, "c.json") == json.loads(raw)  # a BOM is tolerated
    content = base64.b64encode(raw).decode()
    assert load_slurped_config(content, str(SHIPPED.parent) + "/") == json.loads(raw)


@pytest.mark.parametrize(("raw", "expected"), [
    (b'{"architectures": ["Qwen3ForCausalLM"],\n  "hidden_size": 1024,,\n}\n',
     "/m/config.json is not valid JSON (line 2, column 23: Expecting property name enclosed in double quotes)"),
    (b'{"hidden_size": 1024', "/m/config.json is not valid JSON (line 1, column 21: Expecting ',' delimiter)"),
    (b"", "/m/config.json is empty"),
    (b"  \n", "/m/config.json is empty"),
    (b"[1, 2]", "/m/config.json holds a JSON list, not an object of the model's settings"),
    (b"\x89PNG\r\n\x1a\n\x00", "/m/config.json is not UTF-8 text (byte 0: invalid start byte)"),
])
def test_a_malformed_config_names_the_variable_the_file_the_place_and_the_fix(raw: bytes, expected: str) -> None:
    with pytest.raises(PlanError) as err:
        load_slurped_config(base64.b64encode(raw).decode(), "/m")
    message = str(err.value)
    assert message.startswith(f"sglang_model_path='/m': {expected}"), message
    assert message.endswith("put the model's own config.json there (as its repository ships it), or point "
                            "sglang_model_path at the model's folder")
