#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Documentation of the action llmops.sglang.model_plan (plugins/action/model_plan.py does the
work on the controller, plugins/plugin_utils/_modelsource.py holds the rules; nothing of this
file runs)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_plan
short_description: Plan the model sources of every host of the play, once, on the controller
version_added: "0.3.0"
description:
  - Checks every host's model sources at once (C(sglang_model), C(sglang_draft_model), or the
    older C(sglang_model_path) / C(sglang_draft_model_path)) and fails naming each host and
    what is wrong, before any host changes.
  - Resolves each Hub reference (C(repo@revision)) of the play to one commit, once, with
    M(llmops.sglang.model_revision) where the task runs (the controller - delegated to
    C(localhost), C(run_once)).
  - When the Hub does not answer for a reference (refused, timed out, a 5xx; RV(llmops.sglang.model_revision#module:unreachable)),
    as opposed to answering that the revision is not there, the commit the play's hosts serve
    now (the snapshot folder of the C(--model-path) in each host's C(deployment.json), which
    the model role reads first as C(__sglang_model_deployed)) is used when they all serve the same
    one, with a warning saying so; otherwise the task fails naming the fixes (pin a staged commit,
    C(sglang_hf_offline), a mirror in C(sglang_hf_endpoint)).
  - Returns per host its sources pinned to those commits, what it receives by copy and from
    where (C(sglang_model_stage_from) V(controller) or a seed host, and C({from_host, path})
    sources) and the folders its plan starts.
  - The model role (C(roles/model/tasks/main.yml)) runs it; see C(docs/models.md).
author:
  - llmops.sglang contributors (@llmops)
options:
  requests:
    description:
      - Each host of the play (inventory name) with its variables - C(model), C(draft),
        C(model_path), C(draft_model_path) (its C(sglang_model), C(sglang_draft_model),
        C(sglang_model_path), C(sglang_draft_model_path)), C(cache_dir) (C(sglang_model_cache_dir))
        and C(stage_from) (C(sglang_model_stage_from) - V(hub), V(controller) or a host of the play).
    type: dict
    required: true
  hosts:
    description: The inventory's hosts, that a C({from_host, path}) source may name; defaults to the hosts of O(requests).
    type: list
    elements: str
  controller_cache_dir:
    description: The controller's model cache (C(sglang_model_controller_cache_dir)), through which copies go.
    type: str
    required: true
  endpoint:
    description: The Hub endpoint for the resolution (C(sglang_hf_endpoint)); the default is the Hub's.
    type: str
  token_file:
    description: A file on the controller holding the Hub token (C(sglang_hf_controller_token_file)).
    type: path
  offline:
    description: Resolve from the controller's cache only (C(sglang_hf_offline)).
    type: bool
    default: false
attributes:
  check_mode:
    description: Changes nothing in any mode; run it with C(check_mode=false) so that C(--check) resolves the revisions as a real run does.
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
notes:
  - An action - it runs on the controller; its only host work is M(llmops.sglang.model_revision) where the task runs.
seealso:
  - module: llmops.sglang.model_revision
  - module: llmops.sglang.model_stage
  - module: llmops.sglang.model_receive
"""

EXAMPLES = r"""
- name: Share this host's model variables with the play
  ansible.builtin.set_fact:
    __model_request:
      model: "{{ sglang_model }}"
      draft: "{{ sglang_draft_model }}"
      model_path: "{{ sglang_model_path }}"
      draft_model_path: "{{ sglang_draft_model_path }}"
      cache_dir: "{{ sglang_model_cache_dir }}"
      stage_from: "{{ sglang_model_stage_from }}"

- name: Plan every host's model sources once
  llmops.sglang.model_plan:
    requests: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, '__model_request'))) }}"
    hosts: "{{ groups['all'] }}"
    controller_cache_dir: "{{ sglang_model_controller_cache_dir }}"
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  delegate_to: localhost
  run_once: true
  check_mode: false
  register: __model_plan
"""

RETURN = r"""
resolved:
  description: Each Hub reference of the play (C(repo@revision)) and the commit it resolved to.
  returned: always
  type: dict
  sample: {"Qwen/Qwen3-0.6B@main": "c1899de289a04d12100db370d81485cdf75e47ca"}
hosts:
  description: Per host of O(requests), its plan.
  returned: success
  type: dict
  contains:
    sources:
      description: Its sources, checked - C(role) (V(model) or V(draft)), C(kind) (V(hub), V(path) or V(peer)) and their fields.
      type: list
      elements: dict
    pinned:
      description: The sources with each Hub revision's C(commit) and its snapshot folder (C(path)) on the host.
      type: list
      elements: dict
    transfers:
      description:
        - What it receives by copy, one per copy - C(id), C(origin) (C(localhost) for the
          controller), C(origin_args), C(origin_dir), C(relay), C(relay_args), C(relay_dir),
          C(dest_args), C(dest_dir).
      type: list
      elements: dict
    paths:
      description: The folders its plan starts - C(model) and, with a draft, C(draft).
      type: dict
"""
