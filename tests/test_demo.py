"""``zarrext demo``: the main job runs end to end and its own checks hold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rich.cells import cell_len

from zarrext.demo import SECTIONS


def test_demo_runs_every_section_in_80_columns(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from zarrext.cli import main; main()", "demo", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "COLUMNS": "80", "PYTHONIOENCODING": "utf-8"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for section in SECTIONS:
        assert section in result.stdout
        assert (tmp_path / section).is_dir()
    # Sections print these words when one of their own checks fails.
    for word in ("DIFFERENT", "CHANGED", "MISSES"):
        assert word not in result.stdout
    assert "identical" in result.stdout  # the conditional plan read back
    assert "unchanged" in result.stdout  # zarr.json untouched by recompress
    # Every table fits the terminal: nothing cut short with an ellipsis, no line wider.
    assert "\u2026" not in result.stdout
    assert max(cell_len(line) for line in result.stdout.splitlines()) <= 80
    assert "recompress with decision compress_if_smaller" in result.stdout  # whole caption
    # Nothing on stderr: no warning a user would take for a fault of the demo
    assert result.stderr == ""
