"""Drop-in for `python -m sglang.launch_server`: the llmops.sglang embedded engine."""
from ansible_collections.llmops.sglang.plugins.module_utils._engine.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
