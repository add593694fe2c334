"""Where the repository's files are, for tests in any folder of ``tests/``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root folder (where pyproject.toml is)."""
