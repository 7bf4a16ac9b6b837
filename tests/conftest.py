"""Test configuration: make the collection importable by its FQCN and locate ../shared."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))


def shared_dir() -> Path:
    """The read-only shared/ folder beside the checkout (SHARED_DIR overrides it)."""
    env = os.environ.get("SHARED_DIR")
    return Path(env) if env else ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> Path:
    path = shared_dir()
    if not path.is_dir():
        pytest.fail(f"shared/ not found at {path}: set SHARED_DIR")
    return path


@pytest.fixture(scope="session")
def fixtures_dir(shared: Path) -> Path:
    return shared / "fixtures"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT
