# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Lookup llmops.sglang.controller_pid: the process id of the ansible command running the play."""
from __future__ import annotations

DOCUMENTATION = r"""
name: controller_pid
author: llmops.sglang contributors (@llmops)
version_added: "0.1.0"
short_description: The process id of the ansible-playbook (or ansible) command running the play
description:
  - Returns, as a one-item list, the process id of the main C(ansible-playbook) or C(ansible)
    process on the controller, not that of the worker process that templates the task.
  - For M(llmops.sglang.throughput_sweep)'s O(llmops.sglang.throughput_sweep#module:watch_pid) when the
    sweep runs on the controller's machine with C(async) and C(poll=0) - such a job is a daemon that
    neither Ctrl-C nor the end of the play reaches; watching this process, it stops with the play.
  - Meaningful only to processes on the controller's machine (C(delegate_to=localhost), or a host
    with the local connection).
options: {}
"""

EXAMPLES = r"""
- name: A sweep in the background that stops when the play is interrupted
  llmops.sglang.throughput_sweep:
    url: http://127.0.0.1:30000
    watch_pid: "{{ lookup('llmops.sglang.controller_pid') }}"
  delegate_to: localhost
  async: 7320
  poll: 0
"""

RETURN = r"""
_raw:
  description: One item, the process id (an integer).
  type: list
  elements: int
"""

import multiprocessing
import os
from typing import Any

from ansible.plugins.lookup import LookupBase


def controller_pid() -> int:
    """The main ansible process: the parent of a worker (ansible forks one per task and host
    through multiprocessing), or this process when it is the main one."""
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid:
        return int(parent.pid)
    return os.getpid()


class LookupModule(LookupBase):
    """controller_pid lookup."""

    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[int]:
        return [controller_pid()]
