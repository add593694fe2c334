"""Shared test fixtures and settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
# Specs, schemas and interop data live beside the repository, read-only.
SHARED = Path(os.environ.get("ZARREXT_SHARED", ROOT.parent / "shared"))

settings.register_profile(
    "default",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture
def shared() -> Path:
    """The shared specs/interop directory; tests that need it skip loudly if absent."""
    if not SHARED.is_dir():
        pytest.fail(f"shared data directory {SHARED} is missing")
    return SHARED
