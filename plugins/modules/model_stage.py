#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.model_stage: a thin shell over module_utils/_staging."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_stage
short_description: Stage one pinned revision of a Hugging Face Hub model onto the host, verified
version_added: "0.3.0"
description:
  - Lists the files of O(repo) at commit O(revision) (size, git blob id, LFS sha256) with the
    pinned C(huggingface_hub) client, checks that the bytes still missing fit on the file system of
    O(cache_dir) before the first byte, downloads each missing file (resuming a file a killed run
    left half done, by HTTP range), checks every file's size and hash (sha256 for LFS files, the
    git blob sha1 for the others), fetches a bad file once more, and writes a completion marker
    only when every file checked.
  - 'Layout: C(<cache_dir>/models--<org>--<name>/snapshots/<commit>/) holds the model folder (real
    files), C(partial/<commit>/) the bytes of unfinished files, C(complete/<commit>.json) the marker.'
  - A re-run for a revision whose marker is complete, and whose files have the sizes and times the
    marker recorded, makes no request and changes nothing. A file changed since is hashed again;
    when it no longer matches, the marker is removed and the file fetched again.
  - The token is read from O(token) (no_log), O(token_file) (mode 0600) or the task's
    environment (C(HF_TOKEN)); it is sent only to the endpoint's origin, never to a CDN the Hub
    redirects to, and appears in no result or message.
author:
  - llmops.sglang contributors (@llmops)
requirements:
  - huggingface_hub == 2.4.0 on the Python that runs the module (the model role installs it)
options:
  repo:
    description: The Hub repository id, C(org/name).
    type: str
    required: true
  revision:
    description:
      - The commit to stage, 40 hex digits. A branch or tag is resolved on the controller first
        (M(llmops.sglang.model_revision)), so that every host stages the same commit.
    type: str
    required: true
  cache_dir:
    description: The folder that holds staged models (created when missing).
    type: path
    required: true
  endpoint:
    description:
      - The Hub or mirror base URL (exported to the client as C(HF_ENDPOINT)); default the task
        environment's C(HF_ENDPOINT), else C(https://huggingface.co).
    type: str
  token:
    description: A Hub token (gated or private repositories). Prefer O(token_file).
    type: str
  token_file:
    description: A file holding the token; refused unless only its owner may read it.
    type: path
  offline:
    description:
      - Make no request; succeed only when the revision is completely staged already. Also on
        when the task environment has C(HF_HUB_OFFLINE=1).
    type: bool
    default: false
  verify:
    description:
      - V(quick) trusts a complete marker for files whose size and modification time are as it
        recorded; V(full) hashes every file again.
    type: str
    choices: [quick, full]
    default: quick
  reserve_gib:
    description: Space to leave free on the cache dir's file system after the download (GiB).
    type: float
    default: 1.0
  progress_file:
    description: Append JSON lines of progress here (bytes, files, rate), 0600.
    type: path
  lock_wait:
    description:
      - "Seconds to wait while another staging of the same repository into O(cache_dir) writes
        (its lock, C(models--org--name/.stage.lock)) - the re-run of an interrupted C(stage.yml)
        whose job still downloads waits for it, then finds its marker; after this it fails naming the pid."
    type: float
    default: 3600
  labels:
    description: Added to every progress line (for example the host name).
    type: dict
    default: {}
  keep_revisions:
    description:
      - After a successful staging, remove this repo's other revisions under O(cache_dir) down to
        this many in all, newest first; the staged revision and every revision named in the
        O(in_use_files) are always kept. V(0) keeps everything.
    type: int
    default: 0
  in_use_files:
    description:
      - Files whose text names the revisions in use (the host's deployment manifest); a revision
        whose commit appears in one is never removed. Missing files are skipped.
    type: list
    elements: path
    default: []
attributes:
  check_mode:
    description: Lists and checks the room; reports what it would download, writes nothing.
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
notes:
  - Files over 50 GB are refused by the client's plain-HTTP path (Xet is off, to keep resume and
    verification ours).
"""

EXAMPLES = r"""
- name: Stage the model the plan starts
  llmops.sglang.model_stage:
    repo: Qwen/Qwen3-8B
    revision: 9c925d64d72725edaf899c6cb9c377fd0709d9c5
    cache_dir: /data/models
    token_file: /etc/sglang/hf_token
  register: staged

- name: The snapshot folder, for sglang_model_path
  ansible.builtin.debug:
    msg: "{{ staged.path }}"
"""

RETURN = r"""
waited_for:
  description:
    - Another staging of the repository held its lock first - its C(pid) and the C(seconds) this one
      waited; null when none did. After the wait a complete marker of the commit ends this one
      (nothing fetched, not changed).
  returned: success
  type: dict
path:
  description: The snapshot folder (holds config.json), the model path SGLang starts with.
  returned: always
  type: str
  sample: /data/models/models--Qwen--Qwen3-8B/snapshots/9c925d64d72725edaf899c6cb9c377fd0709d9c5
commit:
  description: The staged commit.
  returned: always
  type: str
files:
  description: The revision's number of files.
  returned: success
  type: int
total_bytes:
  description: The revision's size.
  returned: success
  type: int
downloaded_bytes:
  description: Bytes of the files downloaded by this run.
  returned: success
  type: int
downloaded_files:
  description: The files this run downloaded (in check mode, those it would).
  returned: success
  type: list
  elements: str
refetched:
  description: Files found bad (on disk, or as downloaded) and fetched again, with the problem.
  returned: success
  type: list
  elements: dict
need_bytes:
  description: Bytes still missing when the room was checked.
  returned: success
  type: int
free_bytes:
  description: Free bytes on the file system of the cache dir at that check (null when none was needed).
  returned: success
  type: int
requests:
  description: C(none) when the complete marker answered, C(listing) when the Hub was asked.
  returned: success
  type: str
marker:
  description: The completion marker's path.
  returned: always
  type: str
pruned:
  description: The commits of this repo removed (with O(keep_revisions); in check mode, those that would be).
  returned: success
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec
from ansible_collections.llmops.sglang.plugins.module_utils._staging import prune
from ansible_collections.llmops.sglang.plugins.module_utils._staging.credentials import read_token
from ansible_collections.llmops.sglang.plugins.module_utils._staging.errors import StageError
from ansible_collections.llmops.sglang.plugins.module_utils._staging.hub import DEFAULT_ENDPOINT
from ansible_collections.llmops.sglang.plugins.module_utils._staging.stage import Request, stage


def _texts(paths: list[str]) -> list[str]:
    out = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                out.append(fh.read())
        except OSError:
            continue
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("model_stage"),
        mutually_exclusive=[("token", "token_file")],
        supports_check_mode=True,
    )
    p = module.params
    offline = p["offline"] or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    token = None
    try:
        token = read_token(p["token"], p["token_file"])
        if token:
            module.no_log_values.add(token)
        result = stage(Request(
            repo=p["repo"], commit=p["revision"], cache_dir=p["cache_dir"],
            endpoint=(p["endpoint"] or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            token=token, offline=offline, verify=p["verify"], reserve_bytes=int(p["reserve_gib"] * 1024 ** 3),
            progress_file=p["progress_file"], labels=p["labels"], check_mode=module.check_mode,
            lock_wait=p["lock_wait"]))
    except StageError as exc:
        msg = str(exc).replace(token, "***") if token else str(exc)
        module.fail_json(msg=msg, **exc.details)
    else:
        pruned = prune.plan(p["cache_dir"], p["repo"], p["keep_revisions"], p["revision"], _texts(p["in_use_files"]))
        if not module.check_mode:
            for commit in pruned:
                prune.remove(p["cache_dir"], p["repo"], commit)
        out = result.to_json()
        module.exit_json(**{**out, "changed": out["changed"] or bool(pruned), "pruned": pruned})


if __name__ == "__main__":
    main()
