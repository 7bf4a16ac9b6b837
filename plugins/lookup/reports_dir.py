# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Lookup llmops.sglang.reports_dir: why a report folder on the controller cannot be written."""
from __future__ import annotations

DOCUMENTATION = r"""
name: reports_dir
author: llmops.sglang contributors (@llmops)
version_added: "0.1.0"
short_description: Check, before anything is measured, that a report folder can be written on the controller
description:
  - Returns, as a one-item list, an empty string when the folder can hold reports, else a message
    naming the variable, the folder, the operating system's reason and the fix.
  - With O(create) (the default) the folder and its parents are created and a probe file is
    written and removed there, as the report will do; without it (check mode) nothing is created
    and the folder, or its nearest existing ancestor, must be a writable directory.
  - Lookups run on the controller, where the bench role writes its reports and progress lines.
options:
  _terms:
    description: The folder (one).
    required: true
  variable:
    description: The variable the folder came from, named in the message.
    type: str
    default: sglang_bench_reports_dir
  create:
    description: Create the folder and probe it with a file (false in check mode).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Check that the report folder can be written, before anything is measured
  ansible.builtin.fail:
    msg: "{{ problem }}"
  vars:
    problem: "{{ lookup('llmops.sglang.reports_dir', sglang_bench_reports_dir, create=not ansible_check_mode) }}"
  when: problem | length > 0
  run_once: true
"""

RETURN = r"""
_raw:
  description: One item, the problem ("" when there is none).
  type: list
  elements: str
"""

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.lookup import LookupBase

from ansible_collections.llmops.sglang.plugins.module_utils._bench.reportsdir import VARIABLE, problem


class LookupModule(LookupBase):
    """reports_dir lookup."""

    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[str]:
        if len(terms) != 1:
            raise AnsibleLookupError(f"llmops.sglang.reports_dir takes one folder, got {len(terms)}")
        variable = str(kwargs.get("variable") or VARIABLE)
        create = boolean(kwargs.get("create", True), strict=False)
        return [problem(str(terms[0]), variable, create=create) or ""]
