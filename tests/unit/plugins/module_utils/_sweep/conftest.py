"""The known-rate server, started once per test module that asks for it."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from .helpers import knownrate_process


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with knownrate_process() as url:
        yield url
