# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What the bench runs beside the sweep: statistics both sides share, progress lines, interrupts, the report folder, the fleet views and the capacity answer."""
