"""The recorded hosts and model configs of test_plan.py, for every test of the plan."""
from __future__ import annotations

from .test_plan import configs, h200x2_facts  # noqa: F401 (fixtures)
