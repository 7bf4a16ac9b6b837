# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Doc fragment llmops.sglang.server_api: options of every module that calls an SGLang server's
or router's HTTP API (throughput_sweep, wait_ready, wait_idle, server_status, router_workers)."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  api_key:
    description:
      - The key the server (SGLang's C(--api-key)) or router (the router's C(--api-key)) requires,
        sent as a bearer token in the C(Authorization) header of every request. The server
        role's and router role's C(sglang_api_key).
      - Without it no C(Authorization) header is sent; a server or router started with a key then
        answers HTTP 401.
      - Never logged (C(no_log)) and never returned.
    type: str
"""
