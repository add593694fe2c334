"""Shared test fixtures and settings."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
# Schemas and arrays written by other implementations (see tests/data/README.md).
DATA = ROOT / "tests" / "data"


def tree_digest(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes: equal before and after means untouched."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): p.read_bytes() for p in files}

settings.register_profile(
    "default",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

