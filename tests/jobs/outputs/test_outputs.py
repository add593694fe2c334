"""Local outputs of whole-store jobs (``zarrext.jobs.outputs.staged_output``): a
replaced output's path holds the old output or the new one at every moment."""

from __future__ import annotations

import os
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.storage import ZipStore

from zarrext.jobs import outputs
from zarrext.jobs.outputs import STAGING_MARKER, staged_output


def _write(target: Any, value: float) -> None:
    zarr.create_array(target, shape=(4, 4), chunks=(2, 2), dtype="float32",
                      fill_value=0)[:] = value


def _value_at(path: Path) -> float | None:
    """The one value of the array at ``path`` (None when nothing opens there)."""
    try:
        if path.suffix == ".zip":
            with ZipStore(path, mode="r") as store:
                values = zarr.open_array(store, mode="r")[:]
        else:
            values = zarr.open_array(str(path), mode="r")[:]
    except (FileNotFoundError, ValueError, KeyError):
        return None
    assert np.unique(values).size == 1
    return float(values[0, 0])


def _replace(path: Path, value: float) -> None:
    with staged_output(str(path), overwrite=True) as target:
        _write(target, value)


def _leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if STAGING_MARKER in p.name)


@pytest.fixture
def old_output(tmp_path: Path) -> Path:
    path = tmp_path / "out.zarr"
    _write(str(path), 1.0)
    return path


def test_a_replaced_directory_is_never_moved_away_from_its_path(
    old_output: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old output leaves its path only by the exchange that puts the new one
    there: nothing renames it aside, and while it is removed the path opens the
    new output."""
    real_replace, real_rmtree = os.replace, shutil.rmtree
    seen_while_removing: list[float | None] = []

    def replace(src: Any, dst: Any) -> None:
        assert Path(src) != old_output, "the old output was renamed away from its path"
        real_replace(src, dst)

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        seen_while_removing.append(_value_at(old_output))
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    _replace(old_output, 2.0)
    assert seen_while_removing == [2.0]
    assert _value_at(old_output) == 2.0
    assert _leftovers(old_output) == []


@pytest.mark.parametrize("when", ["before-the-exchange", "after-the-exchange",
                                  "while-removing-the-old"])
def test_a_kill_while_publishing_leaves_the_old_or_the_new_output(
    old_output: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Interrupted at any step of publishing (KeyboardInterrupt standing for a
    kill), the path opens as one of the two outputs, whole."""
    real_exchange = outputs.local._exchange

    def exchange(a: Path, b: Path) -> bool:
        if when == "before-the-exchange":
            raise KeyboardInterrupt
        swapped = real_exchange(a, b)
        if when == "after-the-exchange":
            raise KeyboardInterrupt
        return swapped

    def rmtree(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs.local, "_exchange", exchange)
    if when == "while-removing-the-old":
        monkeypatch.setattr(shutil, "rmtree", rmtree)
    with pytest.raises(KeyboardInterrupt):
        _replace(old_output, 2.0)
    expected = 1.0 if when == "before-the-exchange" else 2.0
    assert _value_at(old_output) == expected


def test_without_the_exchange_the_old_directory_is_renamed_aside_then_removed(
    old_output: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no exchange exists (another OS, a file system without it) the two
    renames still publish the new output and remove the old one."""
    monkeypatch.setattr(outputs.local, "_exchange", lambda a, b: False)
    _replace(old_output, 2.0)
    assert _value_at(old_output) == 2.0
    assert _leftovers(old_output) == []


def test_the_exchange_swaps_two_directories_or_changes_nothing(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    (b / "x").write_text("b")
    if outputs.local._exchange(a, b):
        assert ((a / "x").read_text(), (b / "x").read_text()) == ("b", "a")
    else:  # no exchange here: nothing moved
        assert ((a / "x").read_text(), (b / "x").read_text()) == ("a", "b")
    if sys.platform.startswith("linux"):  # elsewhere there is no exchange to fail
        with pytest.raises(FileNotFoundError):
            outputs.local._exchange(tmp_path / "missing", a)


@pytest.mark.parametrize("name", ["out.zarr", "out.zip"])
def test_a_new_output_is_published_and_a_zip_replaces_its_old_file(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / name
    _replace(path, 1.0)
    assert _value_at(path) == 1.0
    _replace(path, 2.0)
    assert _value_at(path) == 2.0
    assert _leftovers(path) == []


@pytest.mark.parametrize("consolidated", [False, True])
def test_a_group_converts_into_a_zip_archive(tmp_path: Path, consolidated: bool) -> None:
    """A group's zarr.json is written twice (created, then consolidated again), which a
    zip archive cannot take: the archive is built as a directory and zipped whole."""
    import xarray as xr

    import zarrext

    group = zarr.open_group(tmp_path / "g.zarr", mode="w")
    a = group.create_array("a", shape=(64,), chunks=(16,), dtype="f4", dimension_names=["x"])
    a[:] = np.arange(64)
    if consolidated:
        zarr.consolidate_metadata(str(tmp_path / "g.zarr"))
    zarrext.convert(str(tmp_path / "g.zarr"), str(tmp_path / "out.zip"))
    with zipfile.ZipFile(tmp_path / "out.zip") as archive:
        names = archive.namelist()
    assert len(names) == len(set(names))  # every entry once
    assert "zarr.json" in names
    assert "a/zarr.json" in names
    copy = zarr.open_group(ZipStore(tmp_path / "out.zip", mode="r"), mode="r")
    np.testing.assert_array_equal(copy["a"][:], np.arange(64))
    if consolidated:
        ds = xr.open_zarr(ZipStore(tmp_path / "out.zip", mode="r"))
        np.testing.assert_array_equal(ds["a"].values, np.arange(64))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.zarr", "out.zip"]
