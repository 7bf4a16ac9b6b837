# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Doc fragment llmops.sglang.service_log: options of the modules that start or wait for a service
and show the end of its log when it fails (detached_service, wait_ready)."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  log_tail_lines:
    description:
      - How many lines of the end of the service's log to show, in the result and the message,
        when it fails to start or to become ready. The server role's C(sglang_log_tail_lines).
    type: int
    default: 50
"""
