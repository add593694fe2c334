"""An output inside a Zarr format 2 group is refused before anything is read
(issue 42, item 6).

A job's output is a format 3 array or group. Inside a format 2 group it is no
member its readers can see: xarray and zarr-python open the group as format 2 and
find members by their ``.zarray``/``.zgroup`` (or through ``.zmetadata``, which can
only describe format 2 members). Replacing a member that way made xarray read it
as all NaN through the old ``.zmetadata``; a new member was invisible. So such an
output is refused, in one line, before the source is read: the group (its
consolidated metadata included) stays byte for byte, and reads the same through
xarray and zarr.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrext
from tests.conftest import Run, Where, tree_digest
from zarrext.jobs.outputs import OutputConflictError
from zarrext.quantize import copy_quantized


def _format_2_group(location: str, options: dict[str, Any] | None, *,
                    consolidated: bool) -> xr.Dataset:
    rng = np.random.default_rng(0)
    ds = xr.Dataset({
        "t": (("y", "x"), rng.uniform(270, 300, (6, 8)).astype("f4")),
        "p": (("y", "x"), rng.uniform(900, 1000, (6, 8)).astype("f8")),
    })
    ds.to_zarr(location, zarr_format=2, consolidated=consolidated, mode="w",
               storage_options=options)
    return ds


def _new_array(location: str, options: dict[str, Any] | None) -> None:
    zarr.create_array(location, shape=(6, 8), chunks=(3, 4), dtype="f4", fill_value=np.nan,
                      dimension_names=("y", "x"), storage_options=options)[:] = 1.5


def _reads_as_before(location: str, options: dict[str, Any] | None, ds: xr.Dataset,
                     consolidated: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xr.testing.assert_identical(
            xr.open_zarr(location, storage_options=options, consolidated=consolidated)
            .load(), ds)
        group = zarr.open_group(location, mode="r", storage_options=options)
    assert sorted(group.array_keys()) == ["p", "t"]
    np.testing.assert_array_equal(group["t"][:], ds["t"].values)


@pytest.mark.parametrize("member", ["t", "new"])
@pytest.mark.parametrize("consolidated", [True, False])
def test_an_output_inside_a_format_2_group_is_refused(
    tmp_path: Path, run: Run, member: str, consolidated: bool
) -> None:
    parent = tmp_path / "parent.zarr"
    ds = _format_2_group(str(parent), None, consolidated=consolidated)
    _new_array(str(tmp_path / "new.zarr"), None)
    before = tree_digest(parent)
    code, out, err = run("convert", tmp_path / "new.zarr", "--out", parent / member,
                         "--overwrite")
    assert code == 1, (out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "format 2 group" in err
    assert str(parent) in err
    assert tree_digest(parent) == before
    _reads_as_before(str(parent), None, ds, consolidated)


def test_an_output_inside_a_format_2_group_is_refused_before_the_source_is_read(
    tmp_path: Path,
) -> None:
    """Quantize scans its source before it writes: the refusal comes first (a
    source whose chunks cannot be decoded shows it)."""
    parent = tmp_path / "parent.zarr"
    _format_2_group(str(parent), None, consolidated=True)
    source = tmp_path / "new.zarr"
    _new_array(str(source), None)
    for chunk in (source / "c").rglob("*"):
        if chunk.is_file():
            chunk.write_bytes(b"damaged")
    before = tree_digest(parent)
    with pytest.raises(OutputConflictError, match="format 2 group"):
        zarrext.convert(str(source), str(parent / "t"), overwrite=True)
    with pytest.raises(OutputConflictError, match="format 2 group"):
        zarrext.convert(str(source), str(parent / "q"), max_abs_error=0.01)
    with pytest.raises(OutputConflictError, match="format 2 group"):
        copy_quantized(str(source), str(parent / "q"), max_abs_error=0.01)
    assert tree_digest(parent) == before


def test_an_output_inside_a_format_2_group_on_s3_is_refused(s3: dict[str, Any]) -> None:
    where = Where("s3", s3["url"], s3["options"])
    ds = _format_2_group(where.location("parent.zarr"), s3["options"], consolidated=True)
    _new_array(where.location("new.zarr"), s3["options"])
    before = where.stored("parent.zarr")
    with pytest.raises(OutputConflictError, match="format 2 group"):
        zarrext.convert(where.location("new.zarr"), where.location("parent.zarr/new"),
                        storage_options=s3["options"])
    assert where.stored("parent.zarr") == before
    _reads_as_before(where.location("parent.zarr"), s3["options"], ds, True)


def test_an_output_beside_a_format_2_group_is_written(tmp_path: Path) -> None:
    """Only a group's inside is refused: a format 2 group's sibling is no member."""
    _format_2_group(str(tmp_path / "parent.zarr"), None, consolidated=True)
    _new_array(str(tmp_path / "new.zarr"), None)
    zarrext.convert(str(tmp_path / "new.zarr"), str(tmp_path / "out.zarr"))
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "out.zarr"))[:], 1.5)
