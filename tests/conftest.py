"""Shared fixtures: where the real recorded trials live.

The data folder is ``../shared/data`` beside the checkout (as laid out for developers and CI), or
the folder named by WALKLAB_SHARED_DATA. It is required: tests that need it fail, not skip, when
it is missing.
"""
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    p = Path(os.environ.get("WALKLAB_SHARED_DATA", REPO.parent / "shared" / "data"))
    assert p.is_dir(), f"shared test data not found at {p} (set WALKLAB_SHARED_DATA)"
    return p
