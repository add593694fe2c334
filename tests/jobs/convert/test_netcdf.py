"""What zarrext records in an array's attributes breaks no other tool (issue 42, item 2).

A converted array records its decision (and a quantized one its plan) in its
attributes; xarray shows them in each variable's ``attrs``, so they must be values
netCDF takes (every engine), survive xarray -> netCDF -> xarray -> zarr, and still be
found there by zarrext's writers.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrext
from zarrext.codecs.decisions import (
    NoDecisionWarning,
    decision_record,
    recorded_decision,
    with_record,
    zarrext_record,
)
from zarrext.codecs.quantized_writes import PlannedRange

ENGINES = ["netcdf4", "h5netcdf", "scipy"]


def _dataset() -> xr.Dataset:
    x = np.linspace(0.0, 1.0, 64)
    smooth = np.tile(np.sin(x * 3), (16, 1))  # compresses: the decision enables zstd
    return xr.Dataset({"v": (("y", "x"), smooth, {"units": "m"}),
                       "w": (("y", "x"), smooth.astype("f4"))},
                      coords={"x": x, "y": np.arange(16)})


def _converted(tmp_path: Path, **options: object) -> Path:
    _dataset().to_zarr(tmp_path / "src.zarr", zarr_format=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantize's notes on the plan
        zarrext.convert(tmp_path / "src.zarr", tmp_path / "dst.zarr", **options)  # type: ignore[arg-type]
    return tmp_path / "dst.zarr"


def _first_chunk_mask(path: Path) -> int:
    """The conditional header of the array's first chunk (bit 0: its first codec applied)."""
    document = json.loads((path / "zarr.json").read_text())
    separator = document["chunk_key_encoding"].get("configuration", {}).get("separator", "/")
    key = separator.join(["c"] + ["0"] * len(document["shape"]))
    return (path / key).read_bytes()[0]


def _written_again_by_zarrext(path: Path) -> None:
    """Write the array at ``path`` through zarrext.open_array with no decision given:
    the recorded one must be used (no NoDecisionWarning; the chunk's codecs applied)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoDecisionWarning)
        array = zarrext.open_array(path, mode="r+")
        array[:] = np.full(array.shape, 1.5)  # compresses well
    assert _first_chunk_mask(path) != 0


@pytest.mark.parametrize("engine", ENGINES)
def test_converted_dataset_goes_to_netcdf_and_keeps_the_record(
    tmp_path: Path, engine: str
) -> None:
    dst = _converted(tmp_path)
    ds = xr.open_zarr(dst)
    ds.to_netcdf(tmp_path / "out.nc", engine=engine)  # type: ignore[arg-type]
    back = xr.open_dataset(tmp_path / "out.nc", engine=engine).load()  # type: ignore[arg-type]
    xr.testing.assert_identical(back, ds.load())
    for name in ("v", "w", "x", "y"):
        assert decision_record(back[name].attrs) == "compress_if_smaller"
        assert recorded_decision(back[name].attrs, name) == "compress_if_smaller"


@pytest.mark.parametrize("engine", ENGINES)
def test_quantized_plan_goes_to_netcdf_and_back(tmp_path: Path, engine: str) -> None:
    dst = _converted(tmp_path, max_abs_error=0.001, arrays=["v"])
    planned = PlannedRange.recorded(zarr.open_array(dst / "v").attrs.asdict())
    assert planned is not None
    assert planned.max_abs_error == 0.001
    xr.open_zarr(dst).to_netcdf(tmp_path / "out.nc", engine=engine)  # type: ignore[arg-type]
    back = xr.open_dataset(tmp_path / "out.nc", engine=engine)  # type: ignore[arg-type]
    assert PlannedRange.recorded(back["v"].attrs) == planned


def test_record_found_by_zarrext_writers_after_netcdf_and_zarr_again(tmp_path: Path) -> None:
    dst = _converted(tmp_path)
    _written_again_by_zarrext(dst / "v")
    xr.open_zarr(dst).to_netcdf(tmp_path / "out.nc", engine="netcdf4")
    from_netcdf = xr.open_dataset(tmp_path / "out.nc", engine="netcdf4")
    # back to zarr with the converted array's codecs, given no decision: xarray's
    # writes through zarrext take the recorded one
    codecs = xr.open_zarr(dst)["v"].encoding
    encoding = {"v": {"compressors": codecs["compressors"], "serializer": codecs["serializer"],
                      "chunks": codecs["chunks"]}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoDecisionWarning)
        from_netcdf.to_zarr(tmp_path / "again.zarr", zarr_format=3, encoding=encoding)
    assert _first_chunk_mask(tmp_path / "again.zarr" / "v") != 0
    assert decision_record(zarr.open_array(tmp_path / "again.zarr" / "v").attrs) == (
        "compress_if_smaller")
    _written_again_by_zarrext(tmp_path / "again.zarr" / "v")
    # and xarray -> zarr straight from the converted store
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoDecisionWarning)
        xr.open_zarr(dst).to_zarr(tmp_path / "copy.zarr", zarr_format=3)
    _written_again_by_zarrext(tmp_path / "copy.zarr" / "v")


def test_old_nested_record_is_still_read(tmp_path: Path) -> None:
    array = zarrext.create_array(
        tmp_path / "a.zarr", shape=(64,), chunks=(64,), dtype="f8",
        compressors=[zarrext.ConditionalCodec([zarr.codecs.ZstdCodec()])],
        decision="always_apply",
    )
    # as zarrext wrote it before: a nested object
    array.attrs.put({"zarrext": {"decision": "compress_if_smaller"}})
    assert decision_record(zarr.open_array(tmp_path / "a.zarr").attrs) == "compress_if_smaller"
    _written_again_by_zarrext(tmp_path / "a.zarr")


def test_record_is_a_json_string_beside_other_entries_and_refuses_a_foreign_value() -> None:
    attributes = with_record({"units": "m", "zarrext": {"quantize": {"range": [0, 1]}}},
                             "decision", decision="smallest")
    assert isinstance(attributes["zarrext"], str)  # what netCDF takes
    assert zarrext_record(attributes) == {"quantize": {"range": [0, 1]}, "decision": "smallest"}
    assert zarrext_record({"zarrext": b'{"decision": "smallest"}'}) == {"decision": "smallest"}
    assert decision_record({"zarrext": "not json"}) is None
    with pytest.raises(ValueError, match=r"attributes\['zarrext'\] is 'mine'.*decision"):
        with_record({"zarrext": "mine"}, "decision", decision="smallest")
