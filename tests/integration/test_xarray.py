"""xarray on nullable data: the ``zarrext`` engine and ``to_zarr`` of optional variables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.storage
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import ZstdCodec

import zarrext
from tests.conftest import tree_digest
from zarrext.dtypes.optional_conversions import nan_dtype
from zarrext.integration.optional import OptionalReadWarning

xr = pytest.importorskip("xarray")

MASK = np.array([0, 1, 0, 1, 0, 0, 1], bool)  # True = missing
VALUES = {
    "rain": ("float32", [0.5, 9.0, 2.0, 9.0, 0.0, 1.5, 9.0]),
    "count": ("int16", [1, 9, 3, 9, -5, 6, 9]),
    "big": ("int64", [1, 9, 3, 9, 5, -6, 9]),
    "wet": ("bool", [1, 1, 1, 1, 0, 1, 1]),
}
DECODED = {"rain": "float32", "count": "float32", "big": "float64", "wet": "float32"}


def _group(path: Path, name: str = "optional") -> None:
    """A group with one optional variable per inner type, plus a plain coordinate."""
    g = zarr.open_group(path, mode="w", zarr_format=3)
    t = g.create_array("t", shape=(7,), chunks=(7,), dtype="int32", dimension_names=["t"])
    t[:] = np.arange(7) * 10
    for var, (inner, values) in VALUES.items():
        a = g.create_array(var, shape=(7,), chunks=(3,), fill_value=None, dimension_names=["t"],
                           dtype=zarrext.OptionalDType(inner, name=name))
        a[:] = np.ma.MaskedArray(np.array(values, dtype=inner), mask=MASK)


def _expected(var: str) -> np.ndarray:
    inner, values = VALUES[var]
    return np.where(MASK, np.nan, np.array(values, dtype=inner)).astype(DECODED[var])


def _open(path: Path, **kwargs: Any) -> Any:
    return xr.open_dataset(path, engine="zarrext", consolidated=False, **kwargs)


@pytest.mark.parametrize("chunks", [None, {}], ids=["numpy", "dask"])
@pytest.mark.parametrize("var", sorted(VALUES))
def test_open_and_compute(tmp_path: Path, var: str, chunks: Any) -> None:
    _group(tmp_path / "g.zarr")
    ds = _open(tmp_path / "g.zarr", chunks=chunks)
    v, expected = ds[var], _expected(var)
    assert v.dtype == np.dtype(DECODED[var])
    assert v.dims == ("t",)
    np.testing.assert_array_equal(v.values, expected)
    assert float(v.mean()) == pytest.approx(np.nanmean(expected))
    np.testing.assert_array_equal((v + 1).values, expected + 1)
    assert v.isnull().values.tolist() == MASK.tolist()
    series = v.to_series()
    assert series.isna().tolist() == MASK.tolist()
    assert series.index.tolist() == list(range(0, 70, 10))
    assert series.sum() == pytest.approx(np.nansum(expected))


@pytest.mark.parametrize(
    "select",
    [
        lambda v: v[2:6],  # basic: values and mask decoded apart
        lambda v: v[5],
        lambda v: v[::2],
        lambda v: v.isel(t=[6, 0, 3]),  # outer: through the (value, valid) records
        lambda v: v[xr.DataArray([1, 4], dims="i")],  # vectorized
    ],
    ids=["slice", "int", "step", "outer", "vectorized"],
)
@pytest.mark.parametrize("var", sorted(VALUES))
def test_every_kind_of_selection_decodes_the_same(tmp_path: Path, var: str, select: Any) -> None:
    _group(tmp_path / "g.zarr")
    got = select(_open(tmp_path / "g.zarr")[var]).values
    expected = select(xr.DataArray(_expected(var), dims="t")).values
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_basic_selections_never_build_value_valid_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _group(tmp_path / "g.zarr")
    ds = _open(tmp_path / "g.zarr")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the interleaved (value, valid) chunk was built")

    monkeypatch.setattr(zarrext.OptionalCodec, "_assemble", refuse)
    for var in VALUES:
        np.testing.assert_array_equal(ds[var].values, _expected(var))
        np.testing.assert_array_equal(ds[var][1:5].values, _expected(var)[1:5])


@pytest.mark.parametrize("name", ["optional", "zarrs.optional"])
def test_write_back_keeps_the_optional_type(tmp_path: Path, name: str) -> None:
    _group(tmp_path / "g.zarr", name=name)
    ds = _open(tmp_path / "g.zarr")
    ds.to_zarr(tmp_path / "c.zarr", mode="w", consolidated=False)  # encoding: the codec
    # computing drops encoding (xarray's rule): ask for the type again
    encoding = {var: zarrext.optional_encoding(inner, name=name)
                for var, (inner, _) in VALUES.items()}
    masked = ds.where(ds.t != 40)  # one more missing value, at t=40 (index 4)
    masked.to_zarr(tmp_path / "m.zarr", mode="w", consolidated=False, encoding=encoding)
    more = MASK | (np.arange(7) == 4)
    for store, missing in (("c.zarr", MASK), ("m.zarr", more)):
        for var, (inner, values) in VALUES.items():
            z = zarr.open_array(tmp_path / store / var)
            assert z.metadata.to_dict()["data_type"] == {
                "name": name, "configuration": {"name": inner, "configuration": {}}}
            assert z.metadata.fill_value["valid"] == np.False_
            assert "_FillValue" not in z.attrs  # missing is the mask, not a CF fill value
            raw = z[:]
            assert raw["valid"].tolist() == (~missing).tolist()
            present = np.array(values, dtype=inner)[~missing]
            np.testing.assert_array_equal(raw["value"][~missing], present)
    xr.testing.assert_identical(_open(tmp_path / "c.zarr"), ds)
    xr.testing.assert_identical(_open(tmp_path / "m.zarr"), masked)


@pytest.mark.parametrize(("inner", "values"), [
    ("int16", [1.0, np.nan, -3.0, 4.0]),
    ("bool", [1.0, np.nan, 0.0, 1.0]),
    ("float64", [0.25, np.nan, -3.5, np.inf]),
    ("uint8", [255.0, np.nan, 0.0, 7.0]),
])
def test_to_zarr_with_optional_encoding(tmp_path: Path, inner: str, values: list[float]) -> None:
    ds = xr.Dataset({"v": ("x", np.array(values))})
    ds.to_zarr(tmp_path / "u.zarr", mode="w", consolidated=False,
               encoding={"v": zarrext.optional_encoding(inner)})
    z = zarr.open_array(tmp_path / "u.zarr" / "v")
    assert z.metadata.dtype == zarrext.OptionalDType(inner)
    assert dict(z.attrs) == {}
    assert z[:]["valid"].tolist() == [True, False, True, True]
    back = _open(tmp_path / "u.zarr").v
    assert back.dtype == nan_dtype(zarrext.OptionalDType(inner))
    np.testing.assert_array_equal(back.values, np.array(values).astype(back.dtype))


def test_serializer_alone_also_round_trips(tmp_path: Path) -> None:
    """The codec alone as serializer: xarray adds a NaN ``_FillValue``; the engine reads it."""
    ds = xr.Dataset({"v": ("x", np.array([1.0, np.nan, 3.0]))})
    ds.to_zarr(tmp_path / "u.zarr", mode="w", consolidated=False,
               encoding={"v": {"serializer": zarrext.OptionalCodec(inner="int32")}})
    z = zarr.open_array(tmp_path / "u.zarr" / "v")
    assert z.metadata.dtype == zarrext.OptionalDType("int32")
    assert "_FillValue" in z.attrs
    back = _open(tmp_path / "u.zarr").v
    assert back.dtype == np.float64
    np.testing.assert_array_equal(back.values, [1.0, np.nan, 3.0])


def test_open_zarr_to_zarr_round_trip(tmp_path: Path) -> None:
    """Item 4's second example: the plain zarr engine's structured arrays write back."""
    _group(tmp_path / "g.zarr")
    with pytest.warns(OptionalReadWarning, match='engine="zarrext"'):
        ds = xr.open_zarr(tmp_path / "g.zarr", consolidated=False)
    assert ds["count"].dtype.names == ("value", "valid")  # the zarr engine: raw layout
    ds.to_zarr(tmp_path / "c.zarr", mode="w", consolidated=False)
    for var, (inner, _) in VALUES.items():
        source = zarr.open_array(tmp_path / "g.zarr" / var)
        copy = zarr.open_array(tmp_path / "c.zarr" / var)
        assert copy.metadata.dtype == zarrext.OptionalDType(inner)
        np.testing.assert_array_equal(copy[:], source[:])
    xr.testing.assert_identical(_open(tmp_path / "c.zarr"), _open(tmp_path / "g.zarr"))


def test_mask_and_scale_false_keeps_the_raw_layout(tmp_path: Path) -> None:
    _group(tmp_path / "g.zarr")
    ds = _open(tmp_path / "g.zarr", mask_and_scale=False)
    assert ds["count"].dtype.names == ("value", "valid")
    assert ds["count"].values["valid"].tolist() == (~MASK).tolist()


def test_present_fill_value_round_trips(tmp_path: Path) -> None:
    g = zarr.open_group(tmp_path / "g.zarr", mode="w")
    a = g.create_array("v", shape=(4,), chunks=(2,), fill_value=[7], dimension_names=["x"],
                       dtype=zarrext.OptionalDType("int16"))
    a[:2] = np.ma.MaskedArray([1, 2], mask=[0, 1])  # chunk 1 never written: fill [7]
    ds = _open(tmp_path / "g.zarr")
    np.testing.assert_array_equal(ds.v.values, [1, np.nan, 7, 7])
    ds.to_zarr(tmp_path / "c.zarr", mode="w", consolidated=False)
    assert zarr.open_array(tmp_path / "c.zarr" / "v").metadata.to_dict()["fill_value"] == [7]


def test_plain_variables_read_as_the_zarr_engine_reads_them(tmp_path: Path) -> None:
    g = zarr.open_group(tmp_path / "p.zarr", mode="w")
    a = g.create_array("x", shape=(5,), chunks=(2,), dtype="int16", fill_value=-1,
                       dimension_names=["i"], attributes={"_FillValue": -1, "units": "m"})
    a[:] = [1, -1, 3, 4, -1]
    ours = _open(tmp_path / "p.zarr")
    theirs = xr.open_dataset(tmp_path / "p.zarr", engine="zarr", consolidated=False)
    xr.testing.assert_identical(ours, theirs)
    assert ours.x.isnull().values.tolist() == [False, True, False, False, True]


def test_nested_optional_keeps_the_raw_layout(tmp_path: Path) -> None:
    g = zarr.open_group(tmp_path / "g.zarr", mode="w")
    g.create_array("v", shape=(3,), chunks=(3,), fill_value=None, dimension_names=["x"],
                   dtype=zarrext.OptionalDType(zarrext.OptionalDType("uint8")))
    assert nan_dtype(zarr.open_array(tmp_path / "g.zarr" / "v").metadata.dtype) is None
    assert _open(tmp_path / "g.zarr").v.dtype.names == ("value", "valid")


@pytest.mark.parametrize("chunks", [None, {}], ids=["numpy", "dask"])
def test_open_zarr_then_decode_optional(tmp_path: Path, chunks: Any) -> None:
    """xr.open_zarr gives (value, valid) arrays; decode_optional gives the engine's NaN form."""
    _group(tmp_path / "g.zarr")
    with pytest.warns(OptionalReadWarning, match="decode_optional"):
        raw = xr.open_zarr(tmp_path / "g.zarr", consolidated=False, chunks=chunks)
    with pytest.raises(TypeError):
        float(raw["count"].mean())  # what the issue saw: structured arrays do not compute
    ds = zarrext.decode_optional(raw)
    for var in VALUES:
        v, expected = ds[var], _expected(var)
        assert v.dtype == np.dtype(DECODED[var])
        assert (v.chunks is None) == (chunks is None)  # dask data stays lazy
        assert float(v.mean()) == pytest.approx(np.nanmean(expected))
        np.testing.assert_array_equal((v * 2).values, expected * 2)
        assert v.isnull().values.tolist() == MASK.tolist()
        assert v.to_series().isna().tolist() == MASK.tolist()
    xr.testing.assert_identical(ds.compute(), _open(tmp_path / "g.zarr").compute())
    ds.to_zarr(tmp_path / "c.zarr", mode="w", consolidated=False)  # optional again
    for var, (inner, _) in VALUES.items():
        copy = zarr.open_array(tmp_path / "c.zarr" / var)
        assert copy.metadata.dtype == zarrext.OptionalDType(inner)
        assert copy[:]["valid"].tolist() == (~MASK).tolist()


def _dates(path: Path) -> np.ndarray:
    g = zarr.open_group(path, mode="w")
    when = np.array(["2020-01-01", "2020-01-02", "2020-01-03", "2020-01-05"], "datetime64[s]")
    a = g.create_array("when", shape=(4,), chunks=(2,), fill_value=None, dimension_names=["t"],
                       dtype=zarrext.OptionalDType("datetime64[s]"))
    a[:] = np.ma.MaskedArray(when, mask=[0, 1, 0, 0])
    return when


@pytest.mark.parametrize("chunks", [None, {}], ids=["numpy", "dask"])
def test_datetimes_open_and_compute_write_back_refused(tmp_path: Path, chunks: Any) -> None:
    when = _dates(tmp_path / "g.zarr")
    ds = _open(tmp_path / "g.zarr", chunks=chunks)
    v = ds.when
    assert v.dtype == np.dtype("datetime64[s]")
    assert v.isnull().values.tolist() == [False, True, False, False]
    np.testing.assert_array_equal(v.values[[0, 2, 3]], when[[0, 2, 3]])
    assert (v + np.timedelta64(1, "D")).values[0] == np.datetime64("2020-01-02")
    assert v.to_series().isna().tolist() == [False, True, False, False]
    assert v.max(skipna=True).values == np.datetime64("2020-01-05")
    # xarray's to_zarr sends datetimes as numbers with units: refused, not stored wrong
    with pytest.raises(TypeError, match=r"optional<datetime64\[s\]> takes datetime64\[s\] values"):
        ds.to_zarr(tmp_path / "c.zarr", mode="w", consolidated=False)


def _appendable(path: Path) -> Any:
    _group(path)
    return _open(path)


@pytest.mark.parametrize("dask", [False, True], ids=["numpy", "dask"])
def test_append_with_encode_optional(tmp_path: Path, dask: bool) -> None:
    ds = _appendable(tmp_path / "g.zarr")
    new = ds.isel(t=[0, 1, 2]).assign_coords(t=[70, 80, 90])  # missing at 80
    new = new.where(new.t != 90)  # and at 90
    if dask:
        new = new.chunk({"t": 2})
    zarrext.encode_optional(new, tmp_path / "g.zarr").to_zarr(
        tmp_path / "g.zarr", append_dim="t", consolidated=False)
    back = _open(tmp_path / "g.zarr")
    missing = [*MASK.tolist(), False, True, True]
    for var, (inner, values) in VALUES.items():
        z = zarr.open_array(tmp_path / "g.zarr" / var)
        assert z.metadata.dtype == zarrext.OptionalDType(inner)
        assert z[:]["valid"].tolist() == [not m for m in missing]
        assert z[7]["value"] == np.array(values[0], dtype=inner)
        assert back[var].isnull().values.tolist() == missing


@pytest.mark.parametrize("dask", [False, True], ids=["numpy", "dask"])
def test_region_write_with_encode_optional(tmp_path: Path, dask: bool) -> None:
    _appendable(tmp_path / "g.zarr")
    ds = _open(tmp_path / "g.zarr")
    part = (ds.drop_vars("t").isel(t=slice(3, 6)) * 0 + 1).where(
        xr.DataArray([True, False, True], dims="t"))
    if dask:
        part = part.chunk({"t": 3})
    types = {var: inner for var, (inner, _) in VALUES.items()}  # a mapping does as well
    zarrext.encode_optional(part, types).to_zarr(
        tmp_path / "g.zarr", region={"t": slice(3, 6)}, consolidated=False)
    # t=3 was missing and stays so (NaN * 0 + 1), t=4 is made missing, t=5 becomes 1
    missing = [*MASK[:3].tolist(), True, True, False, *MASK[6:].tolist()]
    assert missing != MASK.tolist()
    for var in VALUES:
        z = zarr.open_array(tmp_path / "g.zarr" / var)
        assert z[:]["valid"].tolist() == [not m for m in missing]
        assert z[5]["value"] == 1


# Appends and region writes without encode_optional: zarrext converts NaN-form values
# before xarray casts them to the stored (value, valid) records. Each case: stored
# values, then new values with NaN (NaT) and a real zero (the epoch for datetimes).
WRITES = {
    "int16": ([5, 7, 9, 11], [0.0, np.nan, -3.0]),
    "bool": ([True, True, False, True], [0.0, np.nan, 1.0]),
    "float32": ([0.5, 1.5, 2.5, 3.5], [0.0, np.nan, -2.25]),
    "datetime64[s]": (
        np.array(["2020-01-01", "2020-01-02", "2020-01-03", "2020-01-04"], "datetime64[s]"),
        np.array(["1970-01-01", "NaT", "2021-06-01"], "datetime64[ns]"),
    ),
}


def _stored(path: Path, inner: str, chunk: int = 2) -> Any:
    """One optional variable ``v`` over ``t`` holding WRITES' stored values, all present."""
    g = zarr.open_group(path, mode="w")
    a = g.create_array("v", shape=(4,), chunks=(chunk,), fill_value=None, dimension_names=["t"],
                       dtype=zarrext.OptionalDType(inner))
    a[:] = np.asarray(WRITES[inner][0], dtype=inner)
    return a


def _new(inner: str, dask: bool) -> Any:
    new = xr.Dataset({"v": ("t", np.asarray(WRITES[inner][1]))})
    return new.chunk({"t": 2}) if dask else new


def _check_written(path: Path, inner: str, where: slice) -> None:
    """The written slots: the zero present and zero, NaN missing, the third present."""
    raw = zarr.open_array(path / "v")[where]
    new = np.asarray(WRITES[inner][1])
    assert raw["valid"].tolist() == [True, False, True]
    assert raw["value"][0] == np.zeros((), raw["value"].dtype)  # a real zero, stored present
    assert raw["value"][2] == new[2].astype(raw["value"].dtype)
    assert raw["value"][1] == np.zeros((), raw["value"].dtype)  # missing: the canonical filler


@pytest.mark.parametrize("dask", [False, True], ids=["numpy", "dask"])
@pytest.mark.parametrize("inner", sorted(WRITES))
def test_plain_append_stores_nan_missing_and_zeros_present(
    tmp_path: Path, inner: str, dask: bool
) -> None:
    _stored(tmp_path / "g.zarr", inner)
    _new(inner, dask).to_zarr(tmp_path / "g.zarr", append_dim="t", consolidated=False)
    raw = zarr.open_array(tmp_path / "g.zarr" / "v")[:]
    assert raw.shape == (7,)
    assert raw["valid"][:4].all()  # the stored values are untouched
    np.testing.assert_array_equal(raw["value"][:4], np.asarray(WRITES[inner][0], inner))
    _check_written(tmp_path / "g.zarr", inner, slice(4, 7))
    back = _open(tmp_path / "g.zarr").v
    assert back.isnull().values.tolist() == [False] * 5 + [True, False]


@pytest.mark.parametrize("dask", [False, True], ids=["numpy", "dask"])
@pytest.mark.parametrize("inner", sorted(WRITES))
def test_plain_region_write_stores_nan_missing_and_zeros_present(
    tmp_path: Path, inner: str, dask: bool
) -> None:
    _stored(tmp_path / "g.zarr", inner, chunk=1)  # xarray: dask chunks must not share one
    _new(inner, dask).to_zarr(tmp_path / "g.zarr", region={"t": slice(0, 3)},
                              consolidated=False)
    _check_written(tmp_path / "g.zarr", inner, slice(0, 3))
    assert zarr.open_array(tmp_path / "g.zarr" / "v")[3]["valid"]  # outside the region


def test_append_of_what_the_engine_opened(tmp_path: Path) -> None:
    """The report's flow: open with the engine, select, append; NaN and zeros as they were."""
    ds = _appendable(tmp_path / "g.zarr")
    new = ds.isel(t=[4, 1, 0]).assign_coords(t=[70, 80, 90])  # index 4: wet False, rain 0.0
    new.to_zarr(tmp_path / "g.zarr", append_dim="t", consolidated=False)
    for var, (inner, values) in VALUES.items():
        raw = zarr.open_array(tmp_path / "g.zarr" / var)[7:]
        assert raw["valid"].tolist() == [True, False, True], var
        np.testing.assert_array_equal(raw["value"][[0, 2]],
                                      np.array(values, dtype=inner)[[4, 0]])
    back = _open(tmp_path / "g.zarr")
    xr.testing.assert_identical(back.isel(t=[7, 8, 9]), new)


def test_numbers_into_an_optional_datetime_are_refused_naming_the_variable(
    tmp_path: Path,
) -> None:
    _stored(tmp_path / "g.zarr", "datetime64[s]")
    numbers = xr.Dataset({"v": ("t", np.array([1.0, np.nan]))})
    with pytest.raises(TypeError, match=r"variable 'v': .*takes datetime64\[s\] values"):
        numbers.to_zarr(tmp_path / "g.zarr", append_dim="t", consolidated=False)
    assert zarr.open_array(tmp_path / "g.zarr" / "v").shape == (4,)


def test_a_plain_struct_with_the_same_fields_is_left_to_xarray(tmp_path: Path) -> None:
    """zarr's own struct type with fields (value, valid) is not zarrext's: no conversion."""
    from zarrext.integration.optional import raw_for_stored_optional

    g = zarr.open_group(tmp_path / "s.zarr", mode="w")
    native = zarrext.OptionalDType("int16").to_native_dtype()
    g.create_array("v", shape=(2,), chunks=(2,), dtype=native, dimension_names=["t"])
    stored = xr.open_zarr(tmp_path / "s.zarr", consolidated=False).v
    assert not isinstance(stored.encoding["serializer"], zarrext.OptionalCodec)
    plain = xr.Variable("t", np.array([np.nan, 0.0]), encoding=stored.encoding)
    assert raw_for_stored_optional(plain) is plain
    optional = xr.Variable("t", np.array([np.nan, 0.0]), encoding={
        **stored.encoding, "serializer": zarrext.OptionalCodec()})
    converted = raw_for_stored_optional(optional)
    assert converted.data["valid"].tolist() == [False, True]


def test_optional_encoding_has_create_arrays_default_chains(tmp_path: Path) -> None:
    values = np.ma.MaskedArray(np.arange(4096, dtype="int32") % 7, mask=np.arange(4096) % 5 == 0)
    for inner in ("int16", "int32", "bool"):
        typed = values.astype(inner)
        made = zarrext.create_array(tmp_path / f"{inner}.zarr", shape=typed.shape,
                                    chunks=(1024,), dtype=zarrext.OptionalDType(inner),
                                    fill_value=None)
        made[:] = typed
        encoding = zarrext.optional_encoding(inner)
        codec = encoding["serializer"]
        assert codec == zarr.open_array(tmp_path / f"{inner}.zarr").serializer
        assert isinstance(codec.mask_codecs[-1], ZstdCodec)
        assert isinstance(codec.data_codecs[-1], ZstdCodec)
        ds = xr.Dataset({"v": ("x", np.where(typed.mask, np.nan, typed.data.astype(float)))})
        ds.to_zarr(tmp_path / f"x{inner}.zarr", mode="w", consolidated=False,
                   encoding={"v": {**encoding, "chunks": (1024,)}})
        written = zarr.open_array(tmp_path / f"x{inner}.zarr" / "v")
        assert written.compressors == ()
        np.testing.assert_array_equal(written[:], zarr.open_array(tmp_path / f"{inner}.zarr")[:])
        # chunk bytes (zarr.json differs: xarray writes dimension names)
        assert _chunk_bytes(tmp_path / f"x{inner}.zarr" / "v") == _chunk_bytes(
            tmp_path / f"{inner}.zarr")
        assert _chunk_bytes(tmp_path / f"x{inner}.zarr" / "v") < typed.size * typed.itemsize


def _chunk_bytes(array: Path) -> int:
    return sum(f.stat().st_size for f in (array / "c").rglob("*") if f.is_file())


def test_the_zarr_engine_warns_about_optional_variables(tmp_path: Path) -> None:
    _group(tmp_path / "g.zarr")
    with pytest.warns(OptionalReadWarning) as caught:
        ds = xr.open_dataset(tmp_path / "g.zarr", engine="zarr", consolidated=False)
    assert ds["count"].dtype.names == ("value", "valid")
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == len(VALUES)  # one per optional variable, none for "t"
    assert "variable 'count' is zarrext's optional<int16>" in messages[1]
    assert all('engine="zarrext"' in m and "decode_optional" in m for m in messages)
    assert {w.filename for w in caught} == {__file__}  # points at the caller


@pytest.mark.parametrize("mask_and_scale", [True, False])
def test_the_zarrext_engine_and_writes_do_not_warn(tmp_path: Path, mask_and_scale: bool) -> None:
    import warnings

    _group(tmp_path / "g.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = _open(tmp_path / "g.zarr", mask_and_scale=mask_and_scale)
        ds.isel(t=[0]).to_zarr(tmp_path / "g.zarr", append_dim="t", consolidated=False)
    assert zarr.open_array(tmp_path / "g.zarr" / "count").shape == (8,)


def _fake_backend(**changes: Any) -> Any:
    """A copy of xarray's zarr backend module's wrapped names, some changed."""
    import types

    import xarray.backends.zarr as real

    class ZarrStore:
        encode_variable = real.ZarrStore.encode_variable
        open_store_variable = real.ZarrStore.open_store_variable
        encode = real.ZarrStore.encode
        members = real.ZarrStore.members
        _fetch_members = real.ZarrStore._fetch_members

    module = types.ModuleType("fake_backend")
    module.ZarrStore = ZarrStore  # type: ignore[attr-defined]
    module.encode_zarr_variable = real.encode_zarr_variable  # type: ignore[attr-defined]
    for name, value in changes.items():
        if value is None:
            delattr(module, name)
        else:
            setattr(module, name, value)
    return module


@pytest.mark.parametrize(("changes", "named"), [
    ({"encode_zarr_variable": None}, "encode_zarr_variable, which does not exist"),
    ({"encode_zarr_variable": lambda var, name=None: var}, r"encode_zarr_variable\(var, "),
], ids=["missing", "other-parameters"])
def test_a_changed_xarray_backend_is_named_not_wrapped(changes: Any, named: str) -> None:
    from zarrext.integration.optional import install_xarray_hooks
    from zarrext.integration.xarray_compat import XarrayCompatibilityError, check

    module = _fake_backend(**changes)
    with pytest.raises(XarrayCompatibilityError, match=named):
        check(module)
    before = dict(vars(module))
    with pytest.warns(RuntimeWarning, match="not converted.*zarrext.encode_optional"):
        install_xarray_hooks(module)
    assert dict(vars(module)) == before  # nothing wrapped


def test_a_store_that_no_longer_fetches_members_is_named() -> None:
    """The zarrext engine reads its arrays through zarrext's pipeline by overriding
    ``ZarrStore._fetch_members``: an xarray whose ``members`` no longer calls it (or
    that lacks it) is named, not trusted."""
    from zarrext.integration.xarray_compat import XarrayCompatibilityError, check

    module = _fake_backend()
    module.ZarrStore.members = property(lambda self: {})
    with pytest.raises(XarrayCompatibilityError, match=r"does not call ZarrStore\._fetch_members"):
        check(module)
    module = _fake_backend()
    del module.ZarrStore._fetch_members
    with pytest.raises(XarrayCompatibilityError, match="_fetch_members, which does not exist"):
        check(module)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_the_engine_reads_through_zarrexts_pipeline(tmp_path: Path, zarr_format: int) -> None:
    """A blosc chunk cut short: xarray's zarr engine (zarr-python, numcodecs) reads
    other values; the zarrext engine refuses it, naming the chunk, in either format,
    and reads an intact store as the zarr engine does."""
    import numcodecs
    from zarr.codecs import BloscCodec

    from zarrext.errors import ChunkDecodeError

    values = np.random.default_rng(3).random((32, 32)).astype("f4")
    compressor = numcodecs.Blosc(cname="lz4") if zarr_format == 2 else BloscCodec(cname="lz4")
    path = tmp_path / "d.zarr"
    xr.Dataset({"t": (("y", "x"), values)}).to_zarr(
        path, zarr_format=zarr_format, consolidated=False,
        encoding={"t": {"chunks": (16, 16), "compressors": compressor}})
    xr.testing.assert_identical(
        _open(path), xr.open_dataset(path, engine="zarr", consolidated=False))
    key = "1.0" if zarr_format == 2 else "c/1/0"
    chunk = path / "t" / key
    chunk.write_bytes(chunk.read_bytes()[:-5])
    with pytest.raises(ChunkDecodeError, match="cut short") as raised:
        _open(path).t.load()
    assert str(raised.value.key).endswith(key)
    np.testing.assert_array_equal(_open(path).t[:16].values, values[:16])


def test_xarrays_backend_is_wrapped_once() -> None:
    import xarray.backends.zarr as real

    from zarrext.integration.xarray_compat import check, wrap

    check(real)  # the installed xarray has what zarrext wraps
    assert real.encode_zarr_variable._zarrext_wrapped
    assert real.ZarrStore.open_store_variable._zarrext_wrapped
    assert real.ZarrStore.encode._zarrext_wrapped
    module = _fake_backend()  # already wrapped functions: a second wrap does nothing
    assert wrap(module, lambda f: f, lambda f: f) is False


def test_appends_are_converted_when_xarray_is_imported_after_zarrext(tmp_path: Path) -> None:
    """zarr loads zarrext's type before xarray exists: the hook waits for xarray's import."""
    import subprocess
    import sys

    script = f"""
import sys, numpy as np, zarr, zarrext
g = zarr.open_group({str(tmp_path / "g.zarr")!r}, mode="w")
a = g.create_array("v", shape=(2,), chunks=(2,), dtype=zarrext.OptionalDType("int16"),
                   fill_value=None, dimension_names=["t"])
a[:] = [1, 2]
assert "zarrext.integration.optional" in sys.modules and "xarray" not in sys.modules
import xarray as xr
xr.Dataset({{"v": ("t", [0.0, np.nan])}}).to_zarr(
    {str(tmp_path / "g.zarr")!r}, append_dim="t", consolidated=False)
assert "zarrext.xarray.backend" not in sys.modules  # the hook came with xarray's import
print(zarr.open_array({str(tmp_path / "g.zarr" / "v")!r})[:]["valid"].tolist())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[True,", "True,", "True,", "False]"]


# -- floats appended into optional integers: rounded as xarray does, range refused --

INTEGERS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


def test_floats_appended_into_an_optional_integer_round_as_xarray_and_refuse_out_of_range(
    tmp_path: Path,
) -> None:
    """The user's append: 2.7 -> 3, -1.6 -> -2 (not 2, -1), 40000 refused, nothing written."""
    path = tmp_path / "g.zarr"
    xr.Dataset({"v": ("time", [1.0, np.nan])}).to_zarr(
        path, encoding={"v": zarrext.optional_encoding("int16")}, zarr_format=3,
        consolidated=False)
    xr.Dataset({"v": ("time", [2.7, np.nan, -1.6, 2.5, 3.5])}).to_zarr(
        path, append_dim="time", consolidated=False)
    stored = zarr.open_array(path / "v")[2:]
    assert stored["valid"].tolist() == [True, False, True, True, True]
    assert stored["value"][stored["valid"]].tolist() == [3, -2, 2, 4]
    before = tree_digest(path)
    for bad, shown in [(40000.0, "40000.0"), (np.inf, "inf"), (-np.inf, "-inf")]:
        with pytest.raises(ValueError, match=rf"^variable 'v': value {shown} is outside the "
                           r"range of int16 \[-32768, 32767\]$") as refused:
            xr.Dataset({"v": ("time", [bad, 2.7, np.nan])}).to_zarr(
                path, append_dim="time", consolidated=False)
        assert "\n" not in str(refused.value)
        assert tree_digest(path) == before


def test_a_lazy_out_of_range_append_is_refused_before_xarray_grows_the_array(
    tmp_path: Path,
) -> None:
    path = tmp_path / "g.zarr"
    xr.Dataset({"v": ("time", [1.0, np.nan])}).to_zarr(
        path, encoding={"v": zarrext.optional_encoding("uint8")}, zarr_format=3,
        consolidated=False)
    before = tree_digest(path)
    late = xr.Dataset({"v": ("time", [1.0, np.nan, 2.0, 255.7])}).chunk(time=2)
    with pytest.raises(ValueError, match=r"^variable 'v': value 255.7 is outside"):
        late.to_zarr(path, append_dim="time", consolidated=False)
    assert tree_digest(path) == before
    fine = xr.Dataset({"v": ("time", [np.nan, np.nan, 0.4, 254.5])}).chunk(time=2)
    fine.to_zarr(path, append_dim="time", consolidated=False)
    stored = zarr.open_array(path / "v")[2:]
    assert stored["valid"].tolist() == [False, False, True, True]
    assert stored["value"][2:].tolist() == [0, 254]


def _float_inputs(inner: str) -> st.SearchStrategy[list[float]]:
    info = np.iinfo(inner)
    low, high = float(info.min), float(info.max)
    edges = [low, high, low - 0.5, high + 0.5, high + 1, low - 1, -0.5, 0.5, 1.5, 2.5,
             -1.5, -2.5, np.nan, np.inf, -np.inf, 0.0, -0.0]
    element = st.one_of(
        st.sampled_from(edges),
        st.integers(-6, 6).map(lambda k: k + 0.5),
        st.floats(min_value=low - 3, max_value=high + 3),
        st.floats(allow_nan=True, allow_infinity=True),
    )
    return st.lists(element, min_size=1, max_size=6)


# xarray's own cast of the plain variable (NaN through its _FillValue) warns
@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")
@settings(max_examples=25, deadline=None)
@given(data=st.data(), inner=st.sampled_from(INTEGERS))
def test_float_appends_into_optional_integers_match_xarrays_plain_integer_encoding(
    data: st.DataObject, inner: str,
) -> None:
    """In range: the value xarray stores in a plain integer variable (np.round, half to
    even, which Python's round agrees with); out of range or infinite: refused."""
    values = data.draw(_float_inputs(inner))
    info = np.iinfo(inner)
    present = [not np.isnan(v) for v in values]
    fits = [np.isnan(v) or (np.isfinite(v) and info.min <= round(v) <= info.max)
            for v in values]
    ours = zarr.storage.MemoryStore()
    zarr.open_group(ours, mode="w").create_array(
        "v", shape=(1,), chunks=(4,), dtype=zarrext.OptionalDType(inner), fill_value=None,
        dimension_names=["t"])
    new = xr.Dataset({"v": ("t", np.array(values, dtype="float64"))})
    if not all(fits):
        with pytest.raises(ValueError, match=rf"^variable 'v': value .* outside the range of "
                           rf"{inner} "):
            new.to_zarr(ours, append_dim="t", consolidated=False)
        assert zarr.open_array(ours, path="v").shape == (1,)
        return
    new.to_zarr(ours, append_dim="t", consolidated=False)
    stored = zarr.open_array(ours, path="v")[1:]
    assert stored["valid"].tolist() == present
    expected = [round(v) for v in values if not np.isnan(v)]
    assert stored["value"][stored["valid"]].tolist() == expected
    # xarray's own encoding into a plain integer variable stores the same numbers
    plain = zarr.storage.MemoryStore()
    new.to_zarr(plain, encoding={"v": {"dtype": inner, "_FillValue": info.max}},
                zarr_format=3, consolidated=False)
    xarray_stored = zarr.open_array(plain, path="v")[:]
    assert xarray_stored[np.array(present)].tolist() == expected


# -- issue 34.8: to_zarr through a conditional codec takes the decision zarrext's writers use --

ZSTD = {"name": "zstd", "configuration": {"level": 1}}


def _masks(path: Path) -> dict[int, int]:
    """The conditional headers' masks of every stored chunk, read from the bytes: the
    header's first byte (one nested codec, header_bits 8)."""
    files = [p for p in (path / "c").rglob("*") if p.is_file()]
    assert files
    counts: dict[int, int] = {}
    for p in files:
        mask = p.read_bytes()[0]
        counts[mask] = counts.get(mask, 0) + 1
    return counts


def _ramp_dataset(n: int = 400, *, dask: bool = False, block: int = 100) -> Any:
    ds = xr.Dataset({"v": ("x", np.zeros(n, "f4"))})  # zeros: zstd shrinks every chunk
    return ds.chunk({"x": block}) if dask else ds


def _cond(**kwargs: Any) -> Any:
    return zarrext.ConditionalCodec([ZSTD], **kwargs)


def _encoding(codec: Any) -> dict[str, Any]:
    return {"v": {"compressors": [codec], "chunks": (100,)}}


@pytest.mark.parametrize("dask", [False, True], ids=["numpy", "dask"])
@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_to_zarr_without_a_decision_warns_as_zarrexts_writers_do(
    tmp_path: Path, dask: bool, sharded: bool
) -> None:
    """The chunks are stored raw, as before, and now with the NoDecisionWarning that
    zarrext.create_array gives (once per array written), naming the array and how to
    give a decision in xarray's encoding."""
    encoding = _encoding(_cond())
    if sharded:
        encoding["v"]["shards"] = (200,)
    with pytest.warns(zarrext.codecs.decisions.NoDecisionWarning) as caught:
        _ramp_dataset(dask=dask, block=200 if sharded else 100).to_zarr(
            tmp_path / "x.zarr", mode="w", zarr_format=3, consolidated=False, encoding=encoding)
    messages = [str(w.message) for w in caught
                if issubclass(w.category, zarrext.codecs.decisions.NoDecisionWarning)]
    assert len(messages) == 1
    assert "x.zarr/v" in messages[0]
    assert "decision='compress_if_smaller'" in messages[0]
    # the same warning as zarrext.create_array's, but for the encoding
    with pytest.warns(zarrext.codecs.decisions.NoDecisionWarning, match="stored raw") as direct:
        zarrext.create_array(str(tmp_path / "z.zarr"), shape=(400,), chunks=(100,),
                             dtype="f4", compressors=[_cond()])[:] = 1
    assert messages[0].split(";")[0].replace(str(tmp_path / "x.zarr/v"), "A") == str(
        direct[0].message).split(";")[0].replace(str(tmp_path / "z.zarr"), "A")
    inventory = zarrext.inventory(str(tmp_path / "x.zarr" / "v"))
    assert inventory.mask_counts == {0: 4}  # raw, as the spec's default says
    np.testing.assert_array_equal(
        xr.open_zarr(tmp_path / "x.zarr", consolidated=False)["v"].values, np.zeros(400))


@pytest.mark.parametrize("decision", ["compress_if_smaller", "never_apply", "spec_literal"])
def test_to_zarr_keeps_the_decision_the_codec_carries(tmp_path: Path, decision: str) -> None:
    """ConditionalCodec(..., decision=...) in the encoding decides each chunk, without a
    warning; never_apply given on purpose is a decision, not the lack of one."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", zarrext.codecs.decisions.NoDecisionWarning)
        _ramp_dataset().to_zarr(tmp_path / "x.zarr", mode="w", zarr_format=3,
                                consolidated=False, encoding=_encoding(_cond(decision=decision)))
    assert _masks(tmp_path / "x.zarr" / "v") == ({0: 4} if decision == "never_apply" else {1: 4})


def test_appends_through_xarray_take_the_recorded_decision(tmp_path: Path) -> None:
    """An array zarrext.create_array made with a built-in decision records it; xarray's
    appends (which open the array through zarr) now write with it, without a warning."""
    import warnings

    zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=3)
    zarrext.create_array(str(tmp_path / "g.zarr" / "v"), shape=(0,), chunks=(100,), dtype="f4",
                         fill_value=np.nan, dimension_names=["x"], compressors=[_cond()],
                         decision="compress_if_smaller")
    with warnings.catch_warnings():
        warnings.simplefilter("error", zarrext.codecs.decisions.NoDecisionWarning)
        _ramp_dataset().to_zarr(tmp_path / "g.zarr", append_dim="x", consolidated=False)
    assert _masks(tmp_path / "g.zarr" / "v") == {1: 4}


def test_to_zarr_decides_when_xarray_was_imported_before_zarrext(tmp_path: Path) -> None:
    """The wrapper comes with ``import zarrext`` whether xarray is imported before or
    after it (and whether the optional type's hooks wait for xarray too)."""
    import subprocess
    import sys

    script = f"""
import sys, warnings
import xarray as xr, numpy as np
import zarrext
ds = xr.Dataset({{"v": ("x", np.zeros(100, "f4"))}})
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ds.to_zarr({str(tmp_path / "x.zarr")!r}, mode="w", zarr_format=3, consolidated=False,
               encoding={{
        "v": {{"compressors": [zarrext.ConditionalCodec([{ZSTD!r}])]}}}})
print(sum(issubclass(w.category, zarrext.codecs.decisions.NoDecisionWarning) for w in caught))
"""
    for order in (script, script.replace("import xarray as xr, numpy as np\nimport zarrext",
                                         "import zarrext\nimport xarray as xr, numpy as np")):
        done = subprocess.run([sys.executable, "-c", order], capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["1"]
