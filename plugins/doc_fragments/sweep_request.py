# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Doc fragment llmops.sglang.sweep_request: what each request of throughput_sweep asks the server
beside its prompt (plugins/module_utils/_sweep/client.py builds the body from them)."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  max_tokens:
    description:
      - Output tokens asked for per request (C(max_tokens), or C(max_new_tokens) for native).
    type: int
    default: 1024
  temperature:
    description: Sampling temperature.
    type: float
    default: 0.6
  top_p:
    description: Nucleus sampling top_p.
    type: float
    default: 0.95
  ignore_eos:
    description:
      - Ask the server to ignore end-of-sequence so that every request produces O(max_tokens)
        tokens (C(finish_reason=length)). A response ending with another reason and fewer tokens
        is counted as a C(short) error.
    type: bool
    default: true
  extra_body:
    description:
      - >-
        More fields for every request's JSON body, as the server's API takes them beside the
        sweep's own, for what a deployment is served with and the sweep has no option for. With
        O(api=openai), top-level fields of C(/v1/completions), for example SGLang's extra sampling
        parameters C({top_k: 20, min_p: 0.05, repetition_penalty: 1.05}), a LoRA adapter
        C({lora_path: my-adapter}), or C({chat_template_kwargs: {enable_thinking: false}}). With
        O(api=native), top-level fields of C(/generate), and a C(sampling_params) mapping merged
        into the request's sampling parameters.
      - >-
        A field the sweep sets itself (C(model), C(prompt)/C(text), C(max_tokens)/C(max_new_tokens),
        C(temperature), C(top_p), C(ignore_eos), C(stream), C(stream_options)) is refused before
        any request is sent; set it with its option. Recorded in the facts' C(options).
    type: dict
    default: {}
"""
