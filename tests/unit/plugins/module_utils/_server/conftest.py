"""The recorded 2x H200 host of test_hostfacts.py, for the tests of the host's other facts."""
from __future__ import annotations

from .test_hostfacts import h200x2  # noqa: F401 (a fixture)
