# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Shared by the plan, the engine and the hosts: releases and their flag schemas, model kinds, data paths, the server's /metrics."""
