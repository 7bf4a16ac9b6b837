#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.model_receive: a thin shell over module_utils/_staging/fanout.py."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_receive
short_description: The ends of a model copy fanned out between hosts, verified at the far end
version_added: "0.3.0"
description:
  - One copy of a staged Hub revision (or of a model folder) goes from one origin (the controller,
    a seed host, or a peer named by C(from_host)) to other hosts with M(ansible.builtin.copy); this
    module is run at both ends, around the copy.
  - V(manifest) (at the origin) returns the files to send with their size and hash. For a staged
    revision (O(repo), O(revision)) it is the origin's completion marker, its files checked first
    (size and modification time as recorded, else hashed); for a folder (O(path)) every file's
    sha256, computed there and kept under O(cache_dir)C(/manifests/) with each file's size and
    modification time, so that a re-run hashes only the files that changed.
  - V(check) (at a receiver, before the copy) says whether the receiver has this copy complete
    already (its own completion marker names exactly the O(manifest), every file as recorded), and
    then nothing is sent. Otherwise the room for the bytes still missing is checked before the first
    byte (need, have, where).
  - V(verify) (at a receiver, after the copy) checks every file's size and sha256 (or git blob id)
    against the O(manifest), deletes a bad or missing one (the next copy sends it again) and writes
    the receiver's completion marker, atomically and last, only when every file checked. With
    O(fail_on_bad), a bad file fails the task naming it.
  - 'A received Hub revision gets the marker a download would have written
    (C(<cache_dir>/models--<org>--<name>/complete/<commit>.json)): M(llmops.sglang.model_stage)
    trusts it as its own. A received folder gets C(<cache_dir>/copies/<sha1 of the folder>.json).'
author:
  - llmops.sglang contributors (@llmops)
options:
  action:
    description: Which end and which step.
    type: str
    choices: [manifest, check, verify]
    required: true
  cache_dir:
    description: The host's model cache dir (C(sglang_model_cache_dir)); holds the markers.
    type: path
    required: true
  repo:
    description: A staged Hub revision's repository, C(org/name). Not with O(path).
    type: str
  revision:
    description: The staged commit (40 hex digits), with O(repo).
    type: str
  path:
    description: A model folder (a C({from_host, path}) source; the same path at both ends). Not with O(repo).
    type: path
  manifest:
    description: The V(manifest) step's C(files) (C(path), C(size), C(sha256) or C(blob_id)); for V(check) and V(verify).
    type: list
    elements: dict
  verify:
    description: V(quick) trusts a marker's files whose size and modification time are as recorded; V(full) hashes them all.
    type: str
    choices: [quick, full]
    default: quick
  reserve_gib:
    description: Space to leave free after the copy (GiB), for V(check).
    type: float
    default: 1.0
  fail_on_bad:
    description: With V(verify), fail when a file does not check (after deleting it).
    type: bool
    default: false
  keep_revisions:
    description:
      - For a staged revision, once this host has it complete (V(check) or V(verify)), remove this
        repo's other revisions under O(cache_dir) down to this many in all, as
        M(llmops.sglang.model_stage) does; the revision and those named in O(in_use_files) are always
        kept. V(0) keeps everything.
    type: int
    default: 0
  in_use_files:
    description: Files whose text names the revisions in use (the host's deployment manifest).
    type: list
    elements: path
    default: []
  origin_dir:
    description:
      - With V(check) of a relay copy on the controller, the folder of the origin host the copy
        comes from - then a copy that is not complete returns RV(fetches), what to fetch from
        there (the model role's C(fanout.yml) loops M(ansible.builtin.fetch) over them).
    type: str
attributes:
  check_mode:
    description: V(manifest) and V(check) run; V(verify) reports and deletes or writes nothing.
    support: full
  diff_mode:
    description: Nothing to show a difference of.
    support: none
notes:
  - The model role runs it (C(sglang_model_stage_from), C({from_host, path}) sources); see docs/models.md "Fan-out".
"""

EXAMPLES = r"""
- name: What the seed would send
  llmops.sglang.model_receive:
    action: manifest
    repo: Qwen/Qwen3-8B
    revision: 9c925d64d72725edaf899c6cb9c377fd0709d9c5
    cache_dir: /data/models
  register: sent

- name: After ansible.builtin.copy sent the snapshot, verify it here and mark it complete
  llmops.sglang.model_receive:
    action: verify
    repo: Qwen/Qwen3-8B
    revision: 9c925d64d72725edaf899c6cb9c377fd0709d9c5
    cache_dir: /data/models
    manifest: "{{ sent.files }}"
    fail_on_bad: true
"""

RETURN = r"""
folder:
  description: The copy's folder on this host (the revision's snapshot, or O(path)).
  returned: success
  type: str
marker:
  description: The completion marker of the copy on this host.
  returned: success
  type: str
files:
  description: V(manifest) - the files (path, size, sha256, blob_id); V(check) - their number.
  returned: success
  type: raw
total_bytes:
  description: The copy's size.
  returned: V(manifest), V(check)
  type: int
hashed:
  description: V(manifest) of a folder - files hashed by this run (the others were unchanged since the last).
  returned: V(manifest)
  type: int
complete:
  description: V(check) - complete already, send nothing; V(verify) - every file checked and the marker is written.
  returned: V(check), V(verify)
  type: bool
need_bytes:
  description: V(check) - bytes still missing.
  returned: V(check)
  type: int
free_bytes:
  description: V(check) - free bytes at the folder's file system (null when complete).
  returned: V(check)
  type: int
missing:
  description: V(check) - the files absent or of another size.
  returned: V(check)
  type: list
  elements: str
bad:
  description: V(verify) - the files that did not check (deleted), with the problem.
  returned: V(verify)
  type: list
  elements: dict
fetches:
  description:
    - V(check) with O(origin_dir), when not complete - one per file of O(manifest), C(path),
      C(size), C(src) (the file in O(origin_dir)) and C(dest) (the file in this copy's folder).
  returned: V(check)
  type: list
  elements: dict
  sample: [{path: config.json, size: 1024, src: /data/hf/models--org--m/snapshots/abc/config.json,
            dest: /home/me/.cache/llmops-sglang/models--org--m/snapshots/abc/config.json}]
pruned:
  description: The commits of this repo removed (O(keep_revisions)); in check mode, those that would be.
  returned: V(check), V(verify)
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec
from ansible_collections.llmops.sglang.plugins.module_utils._staging import fanout, prune
from ansible_collections.llmops.sglang.plugins.module_utils._staging.errors import StageError


def _texts(paths: list[str]) -> list[str]:
    out = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                out.append(fh.read())
        except OSError:
            continue
    return out


def _prune(module: AnsibleModule, target: fanout.Target, complete: bool) -> list[str]:
    """Old revisions of a complete staged revision's repo, removed as model_stage does."""
    p = module.params
    if not target.repo or not complete:
        return []
    pruned = prune.plan(target.cache_dir, target.repo, p["keep_revisions"], target.commit, _texts(p["in_use_files"]))
    if not module.check_mode:
        for commit in pruned:
            prune.remove(target.cache_dir, target.repo, commit)
    return pruned


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("model_receive"),
        mutually_exclusive=[("repo", "path")],
        required_one_of=[("repo", "path")],
        required_together=[("repo", "revision")],
        required_if=[("action", "check", ("manifest",)), ("action", "verify", ("manifest",))],
        supports_check_mode=True,
    )
    p = module.params
    full = p["verify"] == "full"
    try:
        target = fanout.Target(cache_dir=p["cache_dir"], repo=p["repo"] or "", commit=p["revision"] or "",
                               path=p["path"] or "")
        if p["action"] == "manifest":
            hashed = 0
            if target.repo:
                manifest = fanout.revision_manifest(target, full=full)
            else:
                manifest, hashed = fanout.folder_manifest(target, full=full, write_cache=not module.check_mode)
            module.exit_json(changed=False, folder=target.folder, marker=target.marker, files=manifest.to_json(),
                             total_bytes=manifest.total_bytes, hashed=hashed)
        manifest = fanout.Manifest.from_json(p["manifest"])
        if p["action"] == "check":
            out = fanout.check(target, manifest, reserve_bytes=int(p["reserve_gib"] * 1024 ** 3), full=full)
            pruned = _prune(module, target, out.complete)
            fetch = fanout.fetches(manifest, p["origin_dir"], target.folder) if p["origin_dir"] and not out.complete else []
            module.exit_json(changed=bool(pruned), pruned=pruned, fetches=fetch, **out.to_json())
        received = fanout.receive(target, manifest, check_mode=module.check_mode)
        if received.bad and p["fail_on_bad"]:
            listed = "; ".join(f"{b['path']}: {b['problem']}" for b in received.bad)
            module.fail_json(msg=f"the copy of {target.folder} does not match what the origin sent, after it was "
                                 f"sent again: {listed}. No completion marker written; the bad files were deleted "
                                 "(a re-run sends them again)", **received.to_json())
        pruned = _prune(module, target, received.complete)
        result = received.to_json()
        module.exit_json(**{**result, "changed": result["changed"] or bool(pruned), "pruned": pruned})
    except StageError as exc:
        module.fail_json(msg=str(exc), **exc.details)


if __name__ == "__main__":
    main()
