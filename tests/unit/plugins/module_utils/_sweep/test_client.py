"""The request payload (module_utils/_sweep/client.py): the ``extra_body`` option merged into each
API's body, a field the sweep sets itself refused before anything is sent, and what the server
received on a whole sweep (tests/unit/knownrate_server.py records each request's body)."""
from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.client import build_payload

from .helpers import configure

EXTRA = {"top_k": 20, "min_p": 0.05, "chat_template_kwargs": {"enable_thinking": False}}


def served(base: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(base + "/_served", timeout=5) as resp:
        return json.loads(resp.read())


def test_openai_extra_fields_join_the_sweeps_own() -> None:
    opts = sw.SweepOptions(url="http://x", max_tokens=7, extra_body=EXTRA).normalized()
    path, body = build_payload(opts, "m", "hello")
    assert path == "/v1/completions"
    assert body == {"model": "m", "prompt": "hello", "max_tokens": 7, "temperature": 0.6, "top_p": 0.95,
                    "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True, **EXTRA}
    body["chat_template_kwargs"]["enable_thinking"] = True  # each body its own copy
    assert build_payload(opts, "m", "again")[1]["chat_template_kwargs"] == {"enable_thinking": False}


def test_native_sampling_params_merge_into_the_sampling_parameters() -> None:
    opts = sw.SweepOptions(url="http://x", api="native", max_tokens=9,
                           extra_body={"lora_path": "my-adapter", "sampling_params": {"top_k": 5}}).normalized()
    path, body = build_payload(opts, None, "hi")
    assert path == "/generate"
    assert body == {"text": "hi", "stream": True, "lora_path": "my-adapter",
                    "sampling_params": {"max_new_tokens": 9, "temperature": 0.6, "top_p": 0.95, "ignore_eos": True,
                                        "top_k": 5}}


def test_no_extra_body_is_the_body_of_before() -> None:
    for extra in ({}, None):
        _, body = build_payload(sw.SweepOptions(url="http://x", extra_body=extra).normalized(), "m", "p")
        assert set(body) == {"model", "prompt", "max_tokens", "temperature", "top_p", "stream", "stream_options",
                             "ignore_eos"}


@pytest.mark.parametrize(("api", "extra", "named"), [
    ("openai", {"max_tokens": 5, "top_k": 1}, "extra_body sets max_tokens, which the sweep sets from its own options: "
                                              "max_tokens: option max_tokens."),
    ("openai", {"stream": False}, "stream: none: the sweep measures streamed replies"),
    ("openai", {"ignore_eos": False}, "ignore_eos: option ignore_eos"),  # even where the sweep leaves it out
    ("native", {"text": "x"}, "text: prompts or workload"),
    ("native", {"sampling_params": {"max_new_tokens": 3}}, "extra_body sets sampling_params.max_new_tokens"),
    ("native", {"sampling_params": [1]}, "extra_body sampling_params must be a mapping of fields, got [1]"),
])
def test_a_field_the_sweep_sets_is_refused_with_its_option(api: str, extra: dict[str, Any], named: str) -> None:
    opts = sw.SweepOptions(url="http://x", api=api, ignore_eos=False, extra_body=extra).normalized()
    with pytest.raises(sw.SweepError) as err:
        build_payload(opts, "m", "p")
    assert named in str(err.value) and "Nothing was sent" in str(err.value)


def test_every_request_of_a_sweep_carries_the_extra_fields_and_the_facts_record_them(server: str) -> None:
    configure(server, rate=4000.0, prefill_s=0.0, slots=4)
    facts = sw.run_sweep(sw.SweepOptions(url=server, concurrency=[2], requests=4, max_tokens=8, warmup=1,
                                         extra_body=EXTRA))
    rows = served(server)
    assert len(rows) >= 1 + 4 and all(row["body"][k] == v for row in rows for k, v in EXTRA.items())  # warm-ups too
    assert facts["points"][0]["ok"] == 4 and facts["options"]["extra_body"] == EXTRA


def test_a_refused_field_sends_no_request(server: str) -> None:
    configure(server, rate=4000.0, prefill_s=0.0, slots=4)
    with pytest.raises(sw.SweepError, match="extra_body sets temperature"):
        sw.run_sweep(sw.SweepOptions(url=server, concurrency=[1], requests=2, extra_body={"temperature": 0}))
    assert served(server) == []
