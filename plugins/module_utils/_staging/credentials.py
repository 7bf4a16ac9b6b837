# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Where the Hub token comes from: the module's no_log option, a 0600 file, or the task's
environment (``HF_TOKEN``), in that order. Never argv, never a result, never a message."""
from __future__ import annotations

import os
import stat

from ansible_collections.llmops.sglang.plugins.module_utils._staging.errors import StageError


def read_token(token: str | None, token_file: str | None, environ: dict[str, str] | None = None) -> str | None:
    """The token, or None to go without one (public repositories)."""
    if token:
        return token.strip()
    if token_file:
        try:
            st = os.stat(token_file)
        except OSError as exc:
            raise StageError(f"the token file {token_file} cannot be read ({exc.strerror}): create it with mode 0600, "
                             "or leave sglang_hf_token_file empty for a public repository") from exc
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise StageError(f"the token file {token_file} has mode {stat.S_IMODE(st.st_mode):04o}: others than its "
                             f"owner may read it; chmod 0600 {token_file}")
        with open(token_file, encoding="utf-8") as fh:
            value = fh.read().strip()
        if not value:
            raise StageError(f"the token file {token_file} is empty")
        return value
    env = os.environ if environ is None else environ
    return (env.get("HF_TOKEN") or "").strip() or None
