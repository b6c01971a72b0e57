"""Shared fixtures: offline switches, the real data root (skips cleanly when absent), a seeded fake encoder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

FIXTURES = Path(__file__).parent / "fixtures"


def _real_data_root() -> Path | None:
    configured = os.environ.get("MEMREPRO_DATA_DIR")
    candidate = Path(configured) if configured else Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
    return candidate.resolve() if candidate.is_dir() else None


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The real benchmark folder (``$MEMREPRO_DATA_DIR`` or ``../shared/data``); the test skips when absent."""
    root = _real_data_root()
    if root is None:
        pytest.skip("real benchmark data not found (set MEMREPRO_DATA_DIR or place it at ../shared/data)")
    return root


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES
