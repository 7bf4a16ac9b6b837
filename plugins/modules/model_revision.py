#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.model_revision: a thin shell over module_utils/_staging/hub.py."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_revision
short_description: Resolve a Hub model revision (branch, tag or commit) to its commit
version_added: "0.3.0"
description:
  - Asks the Hub (one metadata request) which commit O(revision) of O(repo) names now. A
    40-hex-digit commit is returned as it is, without a request.
  - The model role runs it once, on the controller, so that every host stages the same commit even
    when the branch moves during the rollout.
author:
  - llmops.sglang contributors (@llmops)
requirements:
  - huggingface_hub == 2.4.0
options:
  repo:
    description: The Hub repository id, C(org/name).
    type: str
    required: true
  revision:
    description: A branch, tag or commit.
    type: str
    default: main
  endpoint:
    description: The Hub or mirror base URL; default C(HF_ENDPOINT), else C(https://huggingface.co).
    type: str
  token:
    description: A Hub token.
    type: str
  token_file:
    description: A file holding the token, mode 0600.
    type: path
  offline:
    description: Make no request (a branch or tag then fails; pin a commit).
    type: bool
    default: false
attributes:
  check_mode:
    description: Only reads; runs in check mode too.
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
"""

EXAMPLES = r"""
- name: Resolve the branch once, on the controller
  llmops.sglang.model_revision:
    repo: Qwen/Qwen3-8B
    revision: main
  delegate_to: localhost
  run_once: true
  register: resolved
"""

RETURN = r"""
commit:
  description: The commit (40 hex digits).
  returned: success
  type: str
requested:
  description: The revision asked for.
  returned: success
  type: str
unreachable:
  description:
    - On failure, whether the Hub did not answer (refused, reset, timed out, a 5xx from it or a
      proxy) rather than answering (a revision or repository that is not there, a refused token).
      M(llmops.sglang.model_plan) may go on with what the hosts serve only in the first case.
  returned: failure
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec
from ansible_collections.llmops.sglang.plugins.module_utils._staging.credentials import read_token
from ansible_collections.llmops.sglang.plugins.module_utils._staging.errors import StageError
from ansible_collections.llmops.sglang.plugins.module_utils._staging.hub import DEFAULT_ENDPOINT, resolve
from ansible_collections.llmops.sglang.plugins.module_utils._staging.layout import REPO_ID, is_commit


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("model_revision"),
        mutually_exclusive=[("token", "token_file")],
        supports_check_mode=True,
    )
    p = module.params
    if not REPO_ID.match(p["repo"]):
        module.fail_json(msg=f"repo {p['repo']!r} is not a Hub repository id (org/name)")
    if is_commit(p["revision"]):
        module.exit_json(changed=False, commit=p["revision"], requested=p["revision"])
    offline = p["offline"] or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    if offline:
        module.fail_json(msg=f"offline, and revision {p['revision']!r} of {p['repo']} is not a commit: pin the "
                             "40-hex-digit commit in sglang_model.revision to stage offline")
    token = None
    try:
        token = read_token(p["token"], p["token_file"])
        if token:
            module.no_log_values.add(token)
        commit = resolve((p["endpoint"] or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
                         p["repo"], p["revision"], token)
    except StageError as exc:
        module.fail_json(msg=str(exc).replace(token, "***") if token else str(exc), **exc.details)
    else:
        module.exit_json(changed=False, commit=commit, requested=p["revision"])


if __name__ == "__main__":
    main()
