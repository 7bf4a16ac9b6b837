# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Doc fragment llmops.sglang.sweep_pd: throughput_sweep's options for prefill/decode deployments
(docs/sweep.md "Each side through a PD router", "A PD host swept as the pair it is")."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  worker_metrics:
    description:
      - The instances behind the router at O(url), each C({name, url, side}), whose C(/metrics) the
        sweep reads around each level and samples while it runs, as it reads its own server's. Each
        point gets C(sides), one entry per C(side) (C(prefill), C(decode), or C(unified) for an empty
        one), with the instances' C(server_metrics) summed or maxed over the side (docs/sweep.md,
        "Each side through a PD router").
      - bench.yml passes the workers of a prefill/decode deployment when it sweeps through the
        router; omitted, nothing but O(url) is read.
    type: list
    elements: dict
  pd:
    description:
      - Pair each request as sglang-router 0.3.2 does in PD mode, with no router in between. The same
        body goes to a prefill instance and a decode instance, with C(bootstrap_host) (the prefill URL's
        host), C(bootstrap_port) (the prefill's) and a random C(bootstrap_room). The decode's stream is
        the one measured, and a prefill that answers with an error (or not at all) fails the request
        (an C(http) or C(connection) error that names the prefill). Requests go round-robin over O(pd.prefill) and over O(pd.decode).
      - The prefill/decode instances of one host swept as the pair they are (bench.yml sweeps a
        host's C(sglang_pd) instances so, one sweep for the set). O(url) is a decode, whose
        C(/server_info) and C(/metrics) the sweep reads as any server's; O(flush_cache) and
        O(clear_storage) go to every instance of the pair. Give O(worker_metrics) too for each side's
        table.
    type: dict
    suboptions:
      prefill:
        description: The prefill instances, each C({url, bootstrap_port}) (its C(--disaggregation-bootstrap-port)).
        type: list
        elements: dict
        required: true
      decode:
        description: The decode instances' URLs; O(url) must be one of them. Omitted, O(url) alone.
        type: list
        elements: str
"""
