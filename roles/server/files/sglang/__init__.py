"""Embedded SGLang-compatible engine of llmops.sglang (not the real SGLang)."""
