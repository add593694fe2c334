"""What a job reads before it writes creates nothing: a refused job leaves no folder
behind, and looking for format 2 groups above an output or for leftovers of killed
jobs (``zarrext check``) only reads."""

from __future__ import annotations

from pathlib import Path

import pytest

import zarrext
from zarrext.jobs.outputs.leftovers import find_leftovers
from zarrext.jobs.outputs.local import format_2_group_above


def test_a_refused_convert_creates_no_parent_of_its_output(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        zarrext.convert(tmp_path / "missing.zarr", tmp_path / "deep" / "er" / "out.zarr")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_looking_for_groups_and_leftovers_creates_nothing(tmp_path: Path) -> None:
    assert format_2_group_above(tmp_path / "deep" / "out.zarr") is None
    assert find_leftovers(tmp_path / "absent") == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []
