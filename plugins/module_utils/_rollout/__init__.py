# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What the rollout guard measures on the router's host."""
