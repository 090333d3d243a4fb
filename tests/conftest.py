"""Shared fixtures. Recorded sessions live in ../shared/recordings beside the checkout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """../shared beside the checkout (as in CI), or RELAY_SHARED_DIR, or /work/shared."""
    candidates = [os.environ.get("RELAY_SHARED_DIR"), REPO.parent / "shared", "/work/shared"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "recordings").is_dir():
            return Path(candidate)
    raise RuntimeError("cannot find the shared recordings: set RELAY_SHARED_DIR")


@pytest.fixture(scope="session")
def recordings_dir() -> Path:
    return shared_dir() / "recordings"
