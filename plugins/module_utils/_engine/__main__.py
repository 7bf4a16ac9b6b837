# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""``python -m ansible_collections.llmops.sglang.plugins.module_utils._engine <real sglang argv>``."""
from __future__ import annotations

import sys

from ansible_collections.llmops.sglang.plugins.module_utils._engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
