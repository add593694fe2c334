"""A converted xarray dataset decodes to the same values (issue 42, item 1).

xarray's zarr backend reads CF's ``_FillValue`` from the array's ``fill_value`` in
Zarr format 2 and from the ``_FillValue`` attribute in format 3, so a format 2 -> 3
copy must write that attribute; what zarrext records in the attributes must be
netCDF-safe (item 2: tests/jobs/convert/test_netcdf.py).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.codecs import CastValue

import zarrext
from tests.conftest import Run

RECORD = "zarrext"


def _packed_pressure() -> xr.Dataset:
    """A CF-packed int16 variable with missing values, as netCDF tools write it."""
    rng = np.random.default_rng(0)
    p = rng.normal(1013.0, 5.0, (20, 30))
    p[rng.random(p.shape) < 0.1] = np.nan
    return xr.Dataset(
        {"p": (("y", "x"), p, {"units": "hPa"})},
        coords={"x": np.arange(30.0), "y": np.arange(20)},
    )


PACKED = {"p": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 1000.0,
                "_FillValue": -32768}}


def _without_record(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` less zarrext's own record, the one attribute a conversion adds."""
    ds = ds.copy()
    for v in ds.variables.values():
        v.attrs.pop(RECORD, None)
    return ds


def test_packed_missing_values_stay_missing_after_convert(run: Run, tmp_path: Path) -> None:
    ds = _packed_pressure()
    ds.to_zarr(tmp_path / "src.zarr", zarr_format=2, encoding=PACKED)
    code, _, err = run("convert", tmp_path / "src.zarr", "--out", tmp_path / "dst.zarr")
    assert code == 0, err
    before = xr.open_zarr(tmp_path / "src.zarr").load()
    after = xr.open_zarr(tmp_path / "dst.zarr").load()
    assert int(after.p.isnull().sum()) == int(before.p.isnull().sum()) > 0
    assert float(after.p.mean()) == float(before.p.mean())
    xr.testing.assert_identical(_without_record(after), before)
    assert after.p.encoding["_FillValue"] == -32768
    assert after.p.encoding["dtype"] == np.dtype("int16")


def test_quantized_copy_keeps_missing_values(tmp_path: Path) -> None:
    ds = _packed_pressure().astype("f8")
    ds["p"].encoding = {}
    ds.to_zarr(tmp_path / "src.zarr", zarr_format=2,
               encoding={"p": {"_FillValue": -9999.0}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarrext.convert(tmp_path / "src.zarr", tmp_path / "dst.zarr", max_abs_error=0.01,
                        arrays=["p"])
        zarrext.quantize.copy_quantized(tmp_path / "src.zarr/p", tmp_path / "q.zarr/p",
                                        max_abs_error=0.01)
    before = xr.open_zarr(tmp_path / "src.zarr").load()
    after = xr.open_zarr(tmp_path / "dst.zarr").load()
    assert int(after.p.isnull().sum()) == int(before.p.isnull().sum()) > 0
    xr.testing.assert_allclose(_without_record(after), before, atol=0.01, rtol=0)
    assert after.p.encoding["_FillValue"] == -9999.0
    copied = zarr.open_array(tmp_path / "q.zarr/p")
    assert copied.attrs["_FillValue"] == zarr.open_array(tmp_path / "dst.zarr/p").attrs[
        "_FillValue"]
    # -9999 has a code of its own: the pressures' codes fit 2 bytes (as the offset,
    # the fill would take 4); it reads back as itself, and xarray masks it
    for stored in (copied, zarr.open_array(tmp_path / "dst.zarr/p")):
        (cast_value,) = [c for c in stored.filters if isinstance(c, CastValue)]
        assert cast_value.dtype.to_native_dtype() == np.uint16
        assert -9999.0 in stored[...]


# -- property: any xarray dataset decodes the same after convert ------------------------

ENCODING_KEYS = ("dtype", "scale_factor", "add_offset", "_FillValue", "units", "calendar")
ATTRIBUTE_VALUES = st.one_of(
    st.integers(-1000, 1000),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(st.characters(codec="ascii", exclude_categories=("Cc", "Cs")), max_size=8),
    st.lists(st.integers(-5, 5), min_size=1, max_size=3),
)
ATTRIBUTES = st.dictionaries(st.sampled_from(["title", "long_name", "comment", "level",
                                              "valid_max", "history"]),
                             ATTRIBUTE_VALUES, max_size=3)


@st.composite
def cf_datasets(
    draw: st.DrawFn, floats: bool = False
) -> tuple[xr.Dataset, dict[str, dict[str, Any]]]:
    """A dataset and the encoding ``to_zarr`` is given: CF-packed ints with and
    without ``_FillValue``, floats with NaN (some with a ``_FillValue`` of their own;
    always with ``floats``), times with units and calendar, bools, strings,
    coordinates, attributes."""
    ny, nx = draw(st.integers(1, 4)), draw(st.integers(1, 9))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = (ny, nx)
    variables: dict[str, Any] = {}
    encoding: dict[str, dict[str, Any]] = {}

    def some_missing(values: np.ndarray) -> np.ndarray:
        values = values.copy()
        values[rng.random(shape) < draw(st.sampled_from([0.0, 0.3, 1.0]))] = np.nan
        return values

    for name, missing in (("packed", True), ("packed_full", False)):
        if draw(st.booleans()):
            scale = draw(st.sampled_from([0.01, 0.25, 0.1, 3.0]))
            offset = draw(st.sampled_from([0.0, 1000.0, -5.5]))
            codes = rng.integers(-1000, 1000, size=shape)
            values = codes * scale + offset
            encoding[name] = {"dtype": draw(st.sampled_from(["int16", "int32", "uint16"])),
                              "scale_factor": scale, "add_offset": offset}
            if encoding[name]["dtype"] == "uint16":
                encoding[name]["add_offset"] = offset - 2000 * scale  # codes are >= 0
            if missing:
                values = some_missing(values)
                encoding[name]["_FillValue"] = {"int16": -32768, "int32": -1,
                                                "uint16": 65535}[encoding[name]["dtype"]]
            variables[name] = (("y", "x"), values, draw(ATTRIBUTES) | {"units": "hPa"})
    if floats or draw(st.booleans()):
        dtype = draw(st.sampled_from(["f4", "f8"]))
        variables["temperature"] = (("y", "x"), some_missing(rng.normal(280, 5, shape))
                                    .astype(dtype), draw(ATTRIBUTES))
        if draw(st.booleans()):
            encoding["temperature"] = {"_FillValue": -9999.0}
    if draw(st.booleans()):
        days = rng.integers(0, 20000, size=nx).astype("timedelta64[D]")
        times = np.datetime64("1990-01-01", "ns") + days
        if draw(st.booleans()):  # xarray cannot encode times that are all NaT
            times[1:][rng.random(nx - 1) < 0.3] = np.datetime64("NaT", "ns")
        variables["time"] = (("x",), times)
        encoding["time"] = {
            "units": draw(st.sampled_from(["days since 1990-01-01", "hours since 2000-01-01"])),
            "calendar": draw(st.sampled_from(["standard", "proleptic_gregorian"])),
        }
    if draw(st.booleans()):
        variables["flag"] = (("y", "x"), rng.random(shape) < 0.5)
    if draw(st.booleans()):
        words = draw(st.lists(st.text(st.characters(codec="utf-8", exclude_categories=(
            "Cc", "Cs")), min_size=1, max_size=5), min_size=ny, max_size=ny))
        variables["station"] = (("y",), np.array(words, dtype=object), {"role": "name"})
    coords = {"x": ("x", np.arange(nx) * 0.5, {"units": "km"}), "y": ("y", np.arange(ny))}
    ds = xr.Dataset(variables, coords=coords, attrs=draw(ATTRIBUTES))
    return ds, encoding


def _same_encoding(before: Any, after: Any) -> bool:
    if before is None or after is None:
        return before is None and after is None
    if isinstance(before, float | np.floating) and np.isnan(before):
        return bool(np.isnan(after))
    return bool(np.all(before == after))


def _opened(path: Path, how: str) -> xr.Dataset:
    if how == "open_zarr":
        return xr.open_zarr(path).load()
    return xr.open_dataset(path, engine="zarr").load()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "codecs", "max_abs_error"])
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data(), fmt=st.sampled_from([2, 3]), consolidated=st.booleans())
def test_any_xarray_dataset_decodes_the_same_after_convert(
    tmp_path_factory: pytest.TempPathFactory, mode: str, data: st.DataObject, fmt: int,
    consolidated: bool,
) -> None:
    ds, encoding = data.draw(cf_datasets(floats=mode == "max_abs_error"), label="case")
    where = tmp_path_factory.mktemp("cf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # xarray's and zarr's notes on format 3 strings
        ds.to_zarr(where / "src.zarr", zarr_format=fmt, consolidated=consolidated,
                   encoding=encoding)
        options: dict[str, Any] = {}
        bound = 0.0
        if mode == "codecs":
            options["codecs"] = [{"name": "gzip", "configuration": {"level": 1}}]
        if mode == "max_abs_error":
            quantized = [n for n, v in ds.data_vars.items()
                         if v.dtype.kind == "f" and "scale_factor" not in encoding.get(n, {})]
            if fmt == 2 and "station" in ds:
                # a format 2 string array copied as it is beside --arrays: issue 42
                # item 7 (zarr's migrate_to_v3 has no vlen-utf8), not this test's
                ds = ds.drop_vars("station")
                shutil.rmtree(where / "src.zarr")
                ds.to_zarr(where / "src.zarr", zarr_format=fmt, consolidated=consolidated,
                           encoding=encoding)
            bound = 0.01
            options |= {"max_abs_error": bound, "arrays": quantized}
        zarrext.convert(where / "src.zarr", where / "dst.zarr", **options)
        for how in ("open_zarr", "open_dataset"):
            before = _opened(where / "src.zarr", how)
            after = _without_record(_opened(where / "dst.zarr", how))
            if bound:
                xr.testing.assert_allclose(after, before, atol=bound, rtol=0)
                for name in before.variables:
                    assert after[name].attrs == before[name].attrs, name
                    assert bool((after[name].isnull() == before[name].isnull()).all()), name
                assert after.attrs == before.attrs
            else:
                xr.testing.assert_identical(after, before)
            for name in before.variables:
                for key in ENCODING_KEYS:
                    assert _same_encoding(before[name].encoding.get(key),
                                          after[name].encoding.get(key)), (how, name, key)


def test_quantized_group_keeps_every_variables_missing_values(run: Run, tmp_path: Path) -> None:
    """``zarrext quantize GROUP``: the floats quantized, the CF-packed ints and the
    coordinates copied; xarray decodes each as it decoded the source."""
    ds = _packed_pressure()
    ds["t"] = ds.p.astype("f4") - 1000
    ds.to_zarr(tmp_path / "src.zarr", zarr_format=2, encoding=PACKED)
    code, _, err = run("quantize", tmp_path / "src.zarr", "--out", tmp_path / "q.zarr",
                       "--max-abs-error", "0.01", "--allow-larger")
    assert code == 0, err
    before = xr.open_zarr(tmp_path / "src.zarr").load()
    after = _without_record(xr.open_zarr(tmp_path / "q.zarr").load())
    assert int(after.p.isnull().sum()) == int(before.p.isnull().sum()) > 0
    xr.testing.assert_identical(after.drop_vars("t"), before.drop_vars("t"))
    xr.testing.assert_allclose(after.t, before.t, atol=0.01, rtol=0)
    assert bool((after.t.isnull() == before.t.isnull()).all())


@pytest.mark.parametrize(("dtype", "fill"), [
    ("f8", np.nan), ("f8", np.inf), ("f8", -np.inf), ("f8", -0.0), ("f4", -9999.0),
    ("f2", 1.5), ("i2", -32768), ("i8", 2**62), ("u1", 255), ("u8", 2**64 - 1),
    ("b1", True), ("b1", False), ("c16", 1 + 2j), ("c8", complex(np.nan, -1)),
])
def test_the_fill_value_attribute_is_what_xarray_itself_writes(dtype: str, fill: Any) -> None:
    """jobs/xarray_convention.py writes _FillValue as xarray's own FillValueCoder does
    (xarray is no dependency of convert, so its encoder is not called there)."""
    from xarray.backends.zarr import FillValueCoder

    from zarrext.jobs.xarray_convention import encoded_fill_value

    value = np.array(fill, dtype)[()]
    ours = encoded_fill_value(value, np.dtype(dtype))
    assert ours == FillValueCoder.encode(value, np.dtype(dtype))
    assert type(ours) in (bool, int, str, list)  # JSON, as zarr stores attributes
