# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The files of a host's SGLang instances, rendered from the plan and written in one pass
(module llmops.sglang.server_files).

Per instance: its folder (0750), its log (0600, created empty, times kept), its environment
file (0600: the plan's whole environment plus the secret variables), its launch script (0750,
checked with ``bash -n`` before it is written) and SGLang's ``--config`` file with the API key
(0600; removed when the instance has no key). Each file is compared with what is on the host
first and written only when its content, mode or owner differ, atomically (a temporary file in
the same folder, then a rename). What changed in an instance's environment, launch script or
--config file is what restarts it. In check mode nothing is written.

Stdlib only; runs on the host (Python >= 3.10).
"""
from __future__ import annotations

import grp
import json
import os
import pwd
import shlex
import subprocess
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

HEADER = "# Ansible managed (llmops.sglang server role): edits here are overwritten by the next deploy"


def env_text(name: str, env: Mapping[str, str]) -> str:
    """An instance's environment file (sourced by its launch script with ``set -a``)."""
    lines = [HEADER, f"# Environment of SGLang instance {name} (mode 0600: may hold secrets)."]
    lines += [f"{key}={shlex.quote(str(env[key]))}" for key in sorted(env)]
    return "\n".join(lines) + "\n"


def launch_text(inst: Mapping[str, Any], *, profile: str, release: str, engine: str, python: str) -> str:
    """An instance's launch script: its environment, then ``exec python -m sglang.launch_server``."""
    gpus = ",".join(str(g) for g in inst.get("gpu_ids") or [])
    lines = [
        "#!/usr/bin/env bash",
        HEADER,
        f"# SGLang instance {inst['name']} on GPU(s) {gpus}: profile {profile},",
        f"# release {release}, engine {engine}. Start it through the service",
        "# manager, not by hand; by hand it runs in the foreground.",
        "set -euo pipefail",
        "set -a",
        "# shellcheck disable=SC1091",
        f". {shlex.quote(inst['paths']['env_file'])}",
        "set +a",
        *storage_layout_lines(inst),
        "args=(",
        *(f"  {shlex.quote(str(arg))}" for arg in inst.get("argv") or []),
        ")",
        f'exec {shlex.quote(python)} -m sglang.launch_server "${{args[@]}}"',
    ]
    return "\n".join(lines) + "\n"


def storage_layout_lines(inst: Mapping[str, Any]) -> list[str]:
    """HiCache's storage tier: the folder's pages are of one layout (the plan's ``storage_layout``:
    release, weights, the flags that shape a KV page); where its stamp names another (or none), the
    pages are removed before the server starts and the stamp is written. A restart of the same
    layout keeps them: that is what the tier is for."""
    layout = inst.get("storage_layout") or {}
    folder = inst.get("storage_dir")
    if not folder or not layout.get("digest"):
        return []
    digest, stamp = shlex.quote(str(layout["digest"])), shlex.quote(str(layout["stamp"]))
    return [
        "# HiCache storage: pages of another layout (model, release, TP, KV dtype, page size, memory",
        "# layout) are never reused; they go before the server starts (docs/planning.md)",
        f'if [ "$(cat {stamp} 2>/dev/null || true)" != {digest} ]; then',
        f"  find {shlex.quote(str(folder))} -maxdepth 1 -type f -name '*.bin' -delete",
        f"  printf '%s\\n' {digest} > {stamp}",
        "fi",
    ]


def secrets_text(api_key: str) -> str:
    """SGLang's --config file: the API key, never in argv."""
    return json.dumps({"api-key": api_key}) + "\n"


@dataclass
class Owner:
    """Who owns the files: a user and group name, or the connection's user ("")."""

    user: str = ""
    group: str = ""

    def ids(self) -> tuple[int, int]:
        uid = pwd.getpwnam(self.user).pw_uid if self.user else -1
        gid = grp.getgrnam(self.group).gr_gid if self.group else -1
        return uid, gid


@dataclass
class Outcome:
    """What a pass changed (or would change, in check mode)."""

    changed: list[str] = field(default_factory=list)  # paths
    restart: list[str] = field(default_factory=list)  # instance names
    diffs: list[dict[str, str]] = field(default_factory=list)


class Writer:
    """Compares and writes files; in check mode compares only."""

    def __init__(self, owner: Owner, check: bool) -> None:
        self.uid, self.gid = owner.ids()
        self.check = check
        self.outcome = Outcome()

    def _owner_differs(self, st: os.stat_result) -> bool:
        return (self.uid != -1 and st.st_uid != self.uid) or (self.gid != -1 and st.st_gid != self.gid)

    def _fix(self, path: str, mode: int, st: os.stat_result) -> bool:
        """Mode and owner of an existing path; True when they changed."""
        if (st.st_mode & 0o7777) == mode and not self._owner_differs(st):
            return False
        if not self.check:
            os.chmod(path, mode)
            if self._owner_differs(st):
                os.chown(path, self.uid, self.gid)
        self.outcome.changed.append(path)
        return True

    def directory(self, path: str, mode: int) -> None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if not self.check:
                os.makedirs(path, exist_ok=True)
                os.chmod(path, mode)
                os.chown(path, self.uid, self.gid)
            self.outcome.changed.append(path)
            return
        self._fix(path, mode, st)

    def touch(self, path: str, mode: int) -> None:
        """Create an empty file if missing; never change its content or times."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if not self.check:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)
                os.close(fd)
                os.chmod(path, mode)
                os.chown(path, self.uid, self.gid)
            self.outcome.changed.append(path)
            return
        self._fix(path, mode, st)

    def absent(self, path: str) -> None:
        if os.path.lexists(path):
            if not self.check:
                os.unlink(path)
            self.outcome.changed.append(path)

    def content(self, path: str, text: str, mode: int, secret: bool = False, validate: list[str] | None = None) -> bool:
        """Write ``text`` when it differs; True when the content changed."""
        data = text.encode()
        try:
            with open(path, "rb") as handle:
                before: bytes | None = handle.read()
            st: os.stat_result | None = os.stat(path)
        except FileNotFoundError:
            before, st = None, None
        if before == data and st is not None:
            self._fix(path, mode, st)
            return False
        if validate:
            _validate(text, validate, path)
        if not self.check:
            atomic_write(path, data, mode, self.uid, self.gid)
        self.outcome.changed.append(path)
        self.outcome.diffs.append({
            "before_header": path, "after_header": path,
            "before": "(secret)\n" if secret else (before or b"").decode(errors="replace"),
            "after": "(secret)\n" if secret else text,
        })
        return True


def _validate(text: str, command: list[str], path: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".sh") as handle:
        handle.write(text)
        handle.flush()
        proc = subprocess.run([*command, handle.name], capture_output=True, text=True, check=False)
    if proc.returncode:
        raise ValueError(f"{path} would not pass {' '.join(command)}: {proc.stderr.strip()}")


def atomic_write(path: str, data: bytes, mode: int, uid: int = -1, gid: int = -1) -> None:
    """``data`` to ``path`` with ``mode`` (and owner; -1 keeps the writer's): a temporary file in the same folder, then a rename."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.chown(tmp, uid, gid)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_instances(instances: list[Mapping[str, Any]], *, base_dir: str, profile: str, release: str,
                    engine: str, python: str, secret_env: Mapping[str, str], api_key: str,
                    owner: Owner, check: bool, keep_previous: Collection[str] = ()) -> Outcome:
    """Every instance's files (see the module docstring); ``restart`` lists the instances whose
    environment, launch script or --config file changed. An instance named in ``keep_previous``
    (its configuration served: the role passes the manifest's ready instances) whose files are
    about to change has them copied to ``<dir>/previous/`` first, for a rollback."""
    writer = Writer(owner, check)
    if base_dir:
        writer.directory(base_dir, 0o755)
    for inst in instances:
        name, paths = str(inst["name"]), inst["paths"]
        writer.directory(paths["dir"], 0o750)
        if inst.get("storage_dir"):  # HiCache's storage tier: its pages, written by the server's user
            writer.directory(str(inst["storage_dir"]), 0o750)
        writer.touch(paths["log_file"], 0o600)
        env = {str(k): str(v) for k, v in (inst.get("env") or {}).items()}
        env.update({key: str(secret_env[key]) for key in inst.get("env_secrets") or [] if key in secret_env})
        texts = {"env_file": env_text(name, env),
                 "launch_script": launch_text(inst, profile=profile, release=release, engine=engine, python=python)}
        if inst.get("secrets"):
            texts["secrets_file"] = secrets_text(api_key)
        if name in keep_previous and not check and _differs(paths, texts):
            _snapshot(paths, owner)
        touched = writer.content(paths["env_file"], texts["env_file"], 0o600, secret=True)
        touched = writer.content(paths["launch_script"], texts["launch_script"], 0o750,
                                 validate=["bash", "-n"]) or touched
        if "secrets_file" in texts:
            touched = writer.content(paths["secrets_file"], texts["secrets_file"], 0o600, secret=True) or touched
        else:
            writer.absent(paths["secrets_file"])
        if touched:
            writer.outcome.restart.append(name)
    return writer.outcome


# --------------------------------------------------------------------------------------------
# The previous configuration's files, for a rollback without planning input

PREVIOUS, ROLLED_BACK = "previous", "rolled-back"
SNAPSHOT_KEYS = ("env_file", "launch_script", "secrets_file")


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _differs(paths: Mapping[str, str], texts: Mapping[str, str]) -> bool:
    """Whether writing ``texts`` would change a file that exists now (a first deploy has nothing to keep)."""
    if _read(paths["launch_script"]) is None:
        return False
    return any(_read(paths[key]) != (texts[key].encode() if key in texts else None) for key in SNAPSHOT_KEYS)


def _snapshot(paths: Mapping[str, str], owner: Owner) -> None:
    """Copy the instance's env file, launch script and --config file to ``<dir>/previous/``
    (replacing an older copy whole: a file the configuration did not have is not left there)."""
    folder = os.path.join(paths["dir"], PREVIOUS)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    uid, gid = owner.ids()
    for key in SNAPSHOT_KEYS:
        target = os.path.join(folder, os.path.basename(paths[key]))
        data = _read(paths[key])
        if data is None:
            if os.path.exists(target):
                os.unlink(target)
            continue
        atomic_write(target, data, os.stat(paths[key]).st_mode & 0o777, uid, gid)


def has_previous(paths: Mapping[str, str]) -> bool:
    """Whether ``<dir>/previous/`` holds a launch script to go back to."""
    return os.path.isfile(os.path.join(paths["dir"], PREVIOUS, os.path.basename(paths["launch_script"])))


def restore_previous(instances: list[Mapping[str, Any]], names: Collection[str], check: bool) -> dict[str, list[str]]:
    """Put each named instance's ``previous/`` files back in place; the files they replace go to
    ``<dir>/rolled-back/`` (kept: what was rolled back stays readable). ``{restored, missing,
    lines}``: ``missing`` names the instances without a previous copy (their files are left
    alone), ``lines`` says so for the operator."""
    restored: list[str] = []
    missing: list[str] = []
    for inst in instances:
        name, paths = str(inst["name"]), inst["paths"]
        if name not in names:
            continue
        if not has_previous(paths):
            missing.append(name)
            continue
        restored.append(name)
        if check:
            continue
        aside = os.path.join(paths["dir"], ROLLED_BACK)
        os.makedirs(aside, mode=0o700, exist_ok=True)
        for key in SNAPSHOT_KEYS:
            base = os.path.basename(paths[key])
            if os.path.exists(paths[key]):
                os.replace(paths[key], os.path.join(aside, base))
            elif os.path.exists(os.path.join(aside, base)):
                os.unlink(os.path.join(aside, base))
            kept = os.path.join(paths["dir"], PREVIOUS, base)
            if os.path.exists(kept):
                os.replace(kept, paths[key])
        try:
            os.rmdir(os.path.join(paths["dir"], PREVIOUS))
        except OSError:
            pass  # a file someone put there: left in place
    lines = [f"no previous configuration kept for {', '.join(missing)}: left as they are"] if missing else []
    return {"restored": restored, "missing": missing, "lines": lines}


def write_manifest(path: str, manifest: Mapping[str, Any], owner: Owner, check: bool) -> Outcome:
    """deployment.json (0644), written when it differs."""
    writer = Writer(owner, check)
    writer.content(path, json.dumps(manifest, indent=2, sort_keys=True) + "\n", 0o644)
    return writer.outcome
