# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What the router role runs on a host: the router's files and its worker API."""
