#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.server_files: a thin shell over module_utils/_server/files.py."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: server_files
short_description: Write every file of a host's SGLang instances in one pass, from the plan
version_added: "0.3.0"
description:
  - Renders and writes, for every instance of the plan, its folder (0750), its log file (0600,
    created empty, content and times kept), its environment file (0600), its launch script
    (0750, checked with C(bash -n) first) and SGLang's C(--config) file with the API key (0600;
    removed from instances without a key). Creates O(base_dir) (0755).
  - Each file is compared with the host's first and written only when its content, mode or
    owner differ, atomically. Returns the instances whose environment, launch script or
    C(--config) file changed (O(instances) to restart).
  - With O(engine_stamp), also says whether the embedded engine's root holds the files of
    the given digest (the stamp written after the last unpack, and the shim); with
    O(engine_archive) too, unpacks the engine's files into its root and writes the stamp where it
    does not (module_utils/_server/engineroot.py).
  - With O(manifest), writes only the deployment manifest instead (C(deployment.json), 0644).
  - The files are rendered here from the plan's fields (argv, environment, paths); the plan
    decides, this module renders (action M(llmops.sglang.server_plan)).
author:
  - llmops.sglang contributors (@llmops)
options:
  instances:
    description:
      - One per instance, from the plan - name, gpu_ids, argv, env, env_secrets (names of the
        variables of O(secret_env) it gets), secrets (whether it gets the API key), and paths
        (dir, log_file, env_file, launch_script, secrets_file), and storage_dir (the folder of its
        HiCache storage tier's pages, created with the owner and mode 0750 when the plan has one) - the
        plan's instances as they are.
    type: list
    elements: dict
    default: []
  base_dir:
    description: The deployment's base folder, created when missing.
    type: path
  profile:
    description: The profile, for the launch script's header.
    type: str
    default: ""
  release:
    description: The SGLang release, for the launch script's header.
    type: str
    default: ""
  engine:
    description: The engine (sglang or sim), for the launch script's header.
    type: str
    default: sglang
  python:
    description: The Python that runs the server (the launch script execs it).
    type: str
    default: python3
  secret_env:
    description: Secret environment variables (name -> value) that only the env files get.
    type: dict
    default: {}
  api_key:
    description: The API key written to the C(--config) file of instances with secrets.
    type: str
    default: ""
  owner:
    description: The files' owner (empty - the connection's user).
    type: str
    default: ""
  group:
    description: The files' group (empty - the connection's user's).
    type: str
    default: ""
  engine_stamp:
    description: The embedded engine's stamp file, the digest of its files and its shim's path.
    type: dict
  engine_archive:
    description:
      - The embedded engine's files as one gzip tar (the plan's C(engine_files.archive)), to unpack
        into O(engine_archive.root) where O(engine_stamp) says the root does not hold them. Needs
        O(engine_stamp). The action reads the archive on the controller and sends its bytes with
        the module's arguments (O(engine_archive.content)); nothing is sent to a host as a file.
      - Only folders and regular files under relative names are taken; an archive with anything
        else fails the task before a file is written.
    type: dict
    suboptions:
      path:
        description: The archive on the controller.
        type: path
        required: true
      root:
        description: The engine's root on the host (created 0755 when missing).
        type: path
        required: true
      content:
        description: The archive's bytes in base64 (set by the action from O(engine_archive.path)).
        type: str
  manifest:
    description: The deployment manifest to write to O(manifest_path) (nothing else is written then).
    type: dict
  manifest_path:
    description: Where the manifest goes.
    type: path
  keep_previous:
    description:
      - Instances whose current configuration served (the server role passes the manifest's
        instances that became ready). When their files are about to change, the env file,
        launch script and C(--config) file are copied to C(<dir>/previous/) first, so that a
        rollback needs no planning input (O(rollback), C(playbooks/rollback.yml)).
    type: list
    elements: str
    default: []
  rollback:
    description:
      - Instances to put back on their previous configuration - their C(<dir>/previous/) files
        go back in place and the files they replace are kept in C(<dir>/rolled-back/). Nothing
        else is written then. Returns C(restored), C(missing) (no previous copy), C(lines) and, as
        C(restart), the instances restored. O(instances) gives their paths.
    type: list
    elements: str
attributes:
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
    details: Secret files show as C((secret)).
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
    platforms: posix
seealso:
  - module: llmops.sglang.server_plan
"""

EXAMPLES = r"""
- name: Write the instances' folders, logs, environment files, launch scripts and --config files
  llmops.sglang.server_files:
    instances: "{{ __sglang_plan.instances }}"
    base_dir: /srv/sglang
    python: /srv/sglang/venv/bin/python
  register: __sglang_files
"""

RETURN = r"""
restart:
  description: Instances whose environment file, launch script or --config file changed.
  returned: always
  type: list
  elements: str
files:
  description: The paths written or fixed (or that would be, in check mode).
  returned: always
  type: list
  elements: str
restored:
  description: With O(rollback), the instances whose previous files went back in place.
  returned: with O(rollback)
  type: list
  elements: str
missing:
  description: With O(rollback), the instances that had no previous copy (left alone).
  returned: with O(rollback)
  type: list
  elements: str
lines:
  description: With O(rollback), what the operator should know of C(missing) (empty when none is).
  returned: with O(rollback)
  type: list
  elements: str
engine_current:
  description:
    - Whether the engine root holds the files of O(engine_stamp)'s digest (null without it), after
      this run's unpack (O(engine_archive)).
  returned: always
  type: bool
engine_unpacked:
  description:
    - Whether a file of the engine changed in its root (O(engine_archive); or would, in check
      mode). Only files whose bytes or mode differ are written; the stamp is not counted.
  returned: always
  type: bool
"""


from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._server.engineroot import (
    engine_current,
    unpack_engine,
)
from ansible_collections.llmops.sglang.plugins.module_utils._server.files import (
    Owner,
    restore_previous,
    write_instances,
    write_manifest,
)
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec

PATH_KEYS = ("dir", "log_file", "env_file", "launch_script", "secrets_file")


def main() -> None:
    module = AnsibleModule(
        # the engine's archive is no secret, but 160 KB of base64 in every -vvv invocation is noise
        argument_spec=argument_spec("server_files", no_log={"secret_env": True, "engine_archive.content": True}),
        required_together=[("manifest", "manifest_path")],
        supports_check_mode=True,
    )
    params = module.params
    owner = Owner(params["owner"], params["group"])
    try:
        if params["rollback"] is not None:
            back = restore_previous(params["instances"], params["rollback"], module.check_mode)
            module.exit_json(changed=bool(back["restored"]), restart=back["restored"], **back)
        if params["manifest"] is not None:
            outcome = write_manifest(params["manifest_path"], params["manifest"], Owner(), module.check_mode)
        else:
            for inst in params["instances"]:
                missing = [key for key in PATH_KEYS if not (inst.get("paths") or {}).get(key)]
                missing += [] if inst.get("name") else ["name"]
                if missing:
                    module.fail_json(msg=f"instance {inst.get('name')!r}: missing {', '.join(missing)}")
            outcome = write_instances(params["instances"], base_dir=params["base_dir"] or "",
                                      profile=params["profile"], release=params["release"],
                                      engine=params["engine"], python=params["python"],
                                      secret_env=params["secret_env"], api_key=params["api_key"],
                                      owner=owner, check=module.check_mode,
                                      keep_previous=params["keep_previous"])
    except (OSError, KeyError, ValueError) as exc:
        module.fail_json(msg=f"writing the instances' files: {exc}")
    stamp, archive = params["engine_stamp"], params["engine_archive"]
    current, engine_files, stamped = None, [], False
    if archive and not stamp:
        module.fail_json(msg="engine_archive needs engine_stamp (the digest its root must hold)")
    if archive and not archive.get("content"):
        module.fail_json(msg=f"engine_archive: no content (the action reads {archive['path']} on the controller)")
    if stamp:
        if archive:
            try:
                engine_files, stamped = unpack_engine(str(archive["content"]), str(archive["root"]), stamp,
                                                      module.check_mode)
            except (OSError, ValueError) as exc:
                module.fail_json(msg=f"unpacking the embedded engine into {archive['root']}: {exc}")
        current = engine_current(stamp)
    changed = outcome.changed + engine_files + ([str(stamp["path"])] if stamped else [])
    result = {"changed": bool(changed), "restart": outcome.restart, "files": changed,
              "engine_current": current, "engine_unpacked": bool(engine_files)}
    if module._diff:
        result["diff"] = outcome.diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
