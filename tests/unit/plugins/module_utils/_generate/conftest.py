"""The generation job's tests: a fake OpenAI-shaped server per test (fakeserver.py)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fakeserver import FakeServer


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer().start()
    yield srv
    srv.stop()
