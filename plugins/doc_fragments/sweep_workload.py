# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Doc fragment llmops.sglang.sweep_workload: the workload and prefix-cache options of
throughput_sweep (plugins/module_utils/_sweep/workloads.py and cachestate.py own them)."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  workload:
    description:
      - What each measured request asks (docs/sweep.md "Workloads"). A mapping whose C(kind) is
        C(random) (the default, the O(prompts) round-robin, or with C(input_len) random text of that
        length), C(shared_prefix) (C(groups) x C(prompts_per_group) prompts, each group's
        C(prefix_len)-token prefix followed by a C(suffix_len)-token suffix; C(order)
        C(shuffled), C(round_robin) or C(grouped); like SGLang's generated-shared-prefix),
        C(multi_turn) (C(conversations) of C(turns) user turns of C(input_len) tokens, each turn
        sent with the conversation so far and the server's replies, C(think_time_s) before each
        later turn; a level's requests and clients count conversations) or C(file) (C(path), a
        JSONL file on the host running the sweep, each line an object with a C(prompt) string,
        C(messages) (OpenAI chat) or C(conversations) (ShareGPT), and optionally C(max_tokens);
        C(order) C(sequential) or C(shuffled)).
      - Lengths (C(input_len), C(output_len), C(prefix_len), C(suffix_len), C(think_time_s)) are a
        number or a distribution, a mapping with C(dist) C(uniform) (C(min), C(max)), C(normal) or
        C(lognormal) (C(mean), C(std), optional C(min), C(max) to clip to). C(output_len) sets each
        request's max_tokens (default O(max_tokens)). Generated text has 4 characters a token (exact on the embedded engine).
      - The level warm-up keeps sending O(prompts), so it does not fill the prefix cache.
      - Recorded, with the seed, in the result's C(options.workload).
    type: dict
  flush_cache:
    description:
      - Before each measured level (after its warm-up round), C(POST /flush_cache?timeout=)
        O(flush_timeout), so the server's prefix cache (device, and the HiCache host pool from
        SGLang 0.5.23) starts empty. SGLang refuses (400) while requests run; a failed flush is a
        warning and the point's C(cache_state.flush) says what the server answered.
    type: bool
    default: false
  flush_timeout:
    description:
      - Seconds the server may wait for idle before it flushes (its C(timeout) query).
    type: float
    default: 60.0
  clear_storage:
    description:
      - Before each measured level (after the flush), C(POST /hicache/storage-backend/clear), the
        endpoint every pinned release has (its trait C(hicache_storage_clear)), so HiCache's storage
        tier (the server role's C(sglang_hicache_storage)) starts empty too; without it a level reads
        the pages earlier levels and runs wrote. A server without HiCache answers 400 (a warning, as
        a failed flush; one with HiCache and no storage tier has nothing to clear and answers 200);
        the point's C(cache_state.clear_storage) says what it answered.
    type: bool
    default: false
  warm:
    description:
      - Before each measured level (after the flush), send each shared prefix of a
        C(shared_prefix) workload once (max_tokens 1, not measured), so the level starts with the
        prefixes cached. The point's C(cache_state.warm) counts them.
    type: bool
    default: false
"""
