# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What the server role runs on a host: its facts, layout, manifest, pre-flight, files, readiness and run lock."""
