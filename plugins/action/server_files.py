# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Action llmops.sglang.server_files: the module of the same name, with the embedded engine's
archive read on the controller (documentation: plugins/modules/server_files.py).

Why an action: the engine's archive is built on the controller (the plan's
``engine_files.archive``); its bytes go to the host with the module's arguments
(``engine_archive.content``, 120 KB of gzip), so that the module writes the instances' files,
unpacks the engine where its stamp says it must, and writes the stamp in one run on the host,
instead of a folder, an ``unarchive`` (with a transfer of its own) and a ``copy`` of the stamp
(issue 27). Everything else is the module's."""
from __future__ import annotations

import base64
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    """Read ``engine_archive.path`` into ``engine_archive.content``, then run the module."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        archive = args.get("engine_archive")
        if isinstance(archive, dict) and archive.get("path") and not archive.get("content"):
            path = str(archive["path"])
            try:
                with open(path, "rb") as handle:
                    content = base64.b64encode(handle.read()).decode("ascii")
            except OSError as exc:
                raise AnsibleActionFail(f"engine_archive: cannot read {path} on the controller: {exc}") from None
            args["engine_archive"] = {**archive, "content": content}
        result.update(self._execute_module(module_name="llmops.sglang.server_files", module_args=args,
                                           task_vars=task_vars))
        return result
