"""The optional data type: JSON, fill values, in-memory form, numpy.ma and pyarrow."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import jsonschema
import numpy as np
import pyarrow as pa
import pytest
import zarr
import zarr.storage
from hypothesis import given
from hypothesis import strategies as st
from zarr.core.dtype import (
    Bool,
    DateTime64,
    Float32,
    Float64,
    Int16,
    Struct,
    UInt8,
    VariableLengthUTF8,
    get_data_type_from_json,
    parse_dtype,
)
from zarr.errors import DataTypeValidationError

import zarrext
from tests.conftest import DATA, Where
from zarrext import OptionalDType, as_optional_array, from_arrow, from_masked, to_arrow, to_masked

DTYPE_SCHEMA = json.loads((DATA / "optional-dtype.schema.json").read_text())

INNERS = [
    Bool(), UInt8(), Int16(), Float32(), Float64(), VariableLengthUTF8(),
    DateTime64(unit="s", scale_factor=1),
    Struct(fields=(("a", Int16()), ("b", Float64()))),
]


@pytest.mark.parametrize("inner", INNERS, ids=lambda d: type(d).__name__)
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_json_roundtrip_through_zarr_registry(inner: object, depth: int) -> None:
    dtype = inner
    for _ in range(depth):
        dtype = OptionalDType(dtype)
    assert isinstance(dtype, OptionalDType)
    as_json = dtype.to_json(zarr_format=3)
    jsonschema.validate(as_json, DTYPE_SCHEMA)
    # the inner data type is always an object with name and configuration
    assert set(as_json["configuration"]) == {"name", "configuration"}
    parsed = parse_dtype(json.loads(json.dumps(as_json)), zarr_format=3)
    assert parsed == dtype
    assert dtype.depth == depth


def test_reads_registry_forms_of_inner_type() -> None:
    for inner in ({"name": "uint8"}, {"name": "uint8", "configuration": {}}):
        parsed = parse_dtype({"name": "optional", "configuration": inner}, zarr_format=3)
        assert parsed == OptionalDType(UInt8())


def test_bad_inner_type_is_reported_not_skipped() -> None:
    with pytest.raises(ValueError, match="unknown inner data type"):
        get_data_type_from_json({"name": "optional", "configuration": {"name": "no-such-type"}},
                                zarr_format=3)
    with pytest.raises(DataTypeValidationError):
        OptionalDType.from_json({"name": "optional"}, zarr_format=3)
    with pytest.raises(DataTypeValidationError):
        OptionalDType.from_json("optional", zarr_format=2)


def test_native_dtype_layout_and_inverse() -> None:
    dtype = OptionalDType(OptionalDType(Float32()))
    native = dtype.to_native_dtype()
    assert native.names == ("value", "valid")
    assert native["value"].names == ("value", "valid")
    assert native["value"]["value"] == np.dtype("float32")
    assert native["valid"] == np.dtype(bool)
    assert OptionalDType.from_native_layout(native) == dtype
    assert OptionalDType(VariableLengthUTF8()).to_native_dtype()["value"] == np.dtype("O")
    with pytest.raises(DataTypeValidationError):
        OptionalDType.from_native_layout(np.dtype([("a", "i2"), ("b", "?")]))
    # zarr-python's inference from a NumPy dtype never picks the optional type
    with pytest.raises(DataTypeValidationError, match="never inferred"):
        OptionalDType.from_native_dtype(native)
    # an all-zero array is all missing
    assert not np.zeros(3, native)["valid"].any()


FILL_CASES = [
    (OptionalDType(UInt8()), None),
    (OptionalDType(UInt8()), [42]),
    (OptionalDType(OptionalDType(UInt8())), None),
    (OptionalDType(OptionalDType(UInt8())), [None]),
    (OptionalDType(OptionalDType(UInt8())), [[42]]),
    (OptionalDType(Float64()), ["NaN"]),
    (OptionalDType(VariableLengthUTF8()), ["x"]),
]


@pytest.mark.parametrize(("dtype", "fill"), FILL_CASES)
def test_fill_value_json_both_directions(dtype: OptionalDType, fill: object,
                                         where: Where) -> None:
    scalar = dtype.from_json_scalar(fill, zarr_format=3)  # type: ignore[arg-type]
    assert dtype.to_json_scalar(scalar, zarr_format=3) == fill
    # the structure of the scalar follows the JSON: null is valid=False at that level
    level, value = scalar, fill
    while isinstance(value, list):
        assert bool(level["valid"])
        level, value = level["value"], value[0]
    if value is None:
        assert not bool(level["valid"])
    # and zarr writes it to zarr.json unchanged
    z = zarr.create_array(where.location("a"), storage_options=where.options, shape=(3,),
                          dtype=dtype, fill_value=scalar)
    written = json.loads(where.stored("a")["zarr.json"])
    assert written["fill_value"] == fill
    reopened = zarr.open_array(where.location("a"), storage_options=where.options)
    assert dtype.to_json_scalar(reopened.metadata.fill_value, zarr_format=3) == fill
    # unwritten elements read as the fill value (NaN-safe: compare JSON forms)
    assert dtype.to_json_scalar(z[0][()], zarr_format=3) == fill


def test_python_fill_values_and_bad_ones() -> None:
    dtype = OptionalDType(OptionalDType(Int16()))
    assert dtype.to_json_scalar(None, zarr_format=3) is None
    assert dtype.to_json_scalar([None], zarr_format=3) == [None]
    assert dtype.to_json_scalar(7, zarr_format=3) == [[7]]
    assert dtype.to_json_scalar(np.ma.masked, zarr_format=3) is None
    with pytest.raises(TypeError, match="null or a one-element list"):
        dtype.from_json_scalar([1, 2], zarr_format=3)
    with pytest.raises(TypeError):
        dtype.from_json_scalar(5, zarr_format=3)
    assert zarr.create_array({}, shape=(2,), dtype=dtype).metadata.to_dict()["fill_value"] is None


def test_to_masked_shares_the_values() -> None:
    dtype = OptionalDType(Float32())
    array = np.zeros((3, 4), dtype.to_native_dtype())
    array["value"] = np.arange(12).reshape(3, 4)
    array["valid"][::2] = True
    masked = to_masked(array)
    assert np.shares_memory(masked.data, array)
    assert masked.mask.tolist() == (~array["valid"]).tolist()
    array["value"][0, 0] = 99  # a view: the masked array sees it
    assert masked[0, 0] == 99
    assert masked.sum() == 99 + 1 + 2 + 3 + 8 + 9 + 10 + 11


@given(
    values=st.lists(st.one_of(st.none(), st.integers(-1000, 1000)), min_size=0, max_size=40),
)
def test_masked_arrow_and_list_conversions_agree(values: list[int | None]) -> None:
    dtype = OptionalDType(Int16())
    from_list = as_optional_array(values, dtype)
    mask = [v is None for v in values]
    masked = np.ma.MaskedArray([0 if v is None else v for v in values], mask=mask, dtype="i2")
    assert from_masked(masked, dtype).tobytes() == from_list.tobytes()
    arrow = to_arrow(from_list)
    assert arrow.type == pa.int16()
    assert arrow.to_pylist() == values
    assert from_arrow(arrow, dtype).tobytes() == from_list.tobytes()
    assert from_arrow(pa.chunked_array([arrow], type=pa.int16())).tobytes() == \
        from_list.tobytes()
    assert to_masked(from_list).tolist() == values


def test_nested_arrow_is_a_struct_per_level() -> None:
    dtype = OptionalDType(OptionalDType(Float64()))
    array = np.zeros(4, dtype.to_native_dtype())
    array["valid"] = [True, True, False, True]
    array["value"]["valid"] = [True, False, False, True]
    array["value"]["value"] = [1.5, 0, 0, -2]
    arrow = to_arrow(array)
    assert arrow.type == pa.struct([("value", pa.float64())])
    assert arrow.to_pylist() == [{"value": 1.5}, {"value": None}, None, {"value": -2.0}]
    back = from_arrow(arrow)
    assert back.dtype == array.dtype
    assert back.tobytes() == array.tobytes()


def test_strings_and_bools_to_arrow() -> None:
    strings = as_optional_array(["a", None, "ccc"], OptionalDType(VariableLengthUTF8()))
    assert to_arrow(strings).to_pylist() == ["a", None, "ccc"]
    assert from_arrow(pa.array(["a", None, "ccc"]))["valid"].tolist() == [True, False, True]
    bools = from_arrow(pa.array([True, None, False]))
    assert bools.dtype["value"] == np.dtype(bool)
    assert to_arrow(bools).to_pylist() == [True, None, False]


def test_writing_masked_arrays_scalars_and_arrow(where: Where) -> None:
    z = zarr.create_array(where.location("a"), storage_options=where.options, shape=(4, 6),
                          chunks=(2, 4), dtype=OptionalDType(Float32()), fill_value=None)
    block = np.ma.MaskedArray(np.arange(6, dtype="f4").reshape(2, 3),
                              mask=[[0, 1, 0], [1, 0, 0]])
    z[1:3, 2:5] = block  # partial chunks on both sides
    z[0, 0] = 4.5
    z[3, 5] = 2.0
    z[3, 5] = None
    z[0, 1:3] = pa.array([None, 8.0], pa.float32())
    got = to_masked(
        zarr.open_array(where.location("a"), storage_options=where.options, mode="r")[...])
    expected = np.ma.masked_all((4, 6), dtype="f4")
    expected[1:3, 2:5] = block
    expected[0, 0] = 4.5
    expected[0, 2] = 8.0
    assert got.mask.tolist() == np.ma.getmaskarray(expected).tolist()
    assert got.compressed().tolist() == expected.compressed().tolist()


def test_all_missing_chunks_are_not_stored(where: Where) -> None:
    z = zarr.create_array(where.location("a"), storage_options=where.options, shape=(8,),
                          chunks=(4,), dtype=OptionalDType(Int16()), fill_value=None)
    z[...] = np.ma.MaskedArray(np.arange(8), mask=[1, 1, 1, 1, 0, 1, 1, 1])
    assert sorted(where.stored("a")) == ["c/1", "zarr.json"]
    z[4] = None
    assert sorted(where.stored("a")) == ["zarr.json"]


def test_default_serializer_is_the_optional_codec(where: Where) -> None:
    z = zarr.create_array(where.location("a"), storage_options=where.options, shape=(5,),
                          dtype=OptionalDType(OptionalDType("i4")))
    codecs = json.loads(where.stored("a")["zarr.json"])["codecs"]
    assert codecs[0]["name"] == "optional"
    assert codecs[0]["configuration"]["data_codecs"][0]["name"] == "optional"
    assert isinstance(z.metadata.codecs[0], zarrext.OptionalCodec)


def test_entry_point_registration_in_fresh_process(where: Where) -> None:
    zarr.create_array(where.location("a"), storage_options=where.options, shape=(3,),
                      dtype=OptionalDType(Int16()), fill_value=[5])
    code = (
        "import json, sys, zarr\n"
        "z = zarr.open_array(sys.argv[1], storage_options=json.loads(sys.argv[2]))\n"
        "print(type(z.metadata.data_type).__module__, z.metadata.to_dict()['fill_value'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code, where.location("a"),
                          json.dumps(where.options)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["zarrext.dtypes.optional", "[5]"]



def test_nesting_depth_is_capped_at_parse_time() -> None:
    def nest(depth: int) -> dict[str, Any]:
        dtype: dict[str, Any] = {"name": "uint8", "configuration": {}}
        for _ in range(depth):
            dtype = {"name": "optional", "configuration": dtype}
        return dtype

    parsed = get_data_type_from_json(nest(32), zarr_format=3)
    assert parsed.to_json(zarr_format=3) == nest(32)
    with pytest.raises(ValueError, match="more than 32 levels deep"):
        get_data_type_from_json(nest(33), zarr_format=3)
    with pytest.raises(ValueError, match="more than 32 levels deep"):
        get_data_type_from_json(nest(500), zarr_format=3)


def test_zarrext_create_array_names_the_optional_codecs_itself(
    where: Where, monkeypatch: pytest.MonkeyPatch
) -> None:
    """zarrext's API passes the serializer explicitly (the public route): it does not
    need zarr's default serializer, which zarrext wraps only for plain zarr users."""
    import zarr.core.array as core_array

    stock = core_array.default_serializer_v3

    def refuse(dtype: object) -> object:
        if isinstance(dtype, OptionalDType):
            raise AssertionError("zarr's default serializer was asked for the optional type")
        return stock(dtype)  # the values' own serializer, inside the optional codec

    monkeypatch.setattr(core_array, "default_serializer_v3", refuse)
    z = zarrext.create_array(where.location("a"), storage_options=where.options, shape=(5,),
                             dtype=OptionalDType("i4"))
    z[:] = [1, None, 3, None, 5]
    codecs = json.loads(where.stored("a")["zarr.json"])["codecs"]
    assert [c["name"] for c in codecs] == ["optional"]  # the registry's advice: alone
    reopened = zarr.open_array(where.location("a"), storage_options=where.options)
    assert zarrext.to_masked(reopened[:]).mask.tolist() == [
        False, True, False, True, False
    ]


@pytest.mark.parametrize(
    ("dtype", "fill", "shown"),
    [
        (OptionalDType(UInt8()), [300], "300"),
        (OptionalDType(UInt8()), ["x"], "'x'"),
        (OptionalDType(Int16()), [2**70], str(2**70)),
        (OptionalDType(OptionalDType(UInt8())), [[-1]], "-1"),
        (OptionalDType(UInt8()), [[1]], "[1]"),
        (OptionalDType(UInt8()), 5, "5"),
    ],
    ids=["out-of-range", "string", "huge", "nested", "too-deep", "not-a-list"],
)
def test_fill_value_that_does_not_fit_names_the_field(dtype, fill, shown: str) -> None:
    """A ValueError (and, as zarr's own data types refuse, a TypeError) naming
    fill_value, the value and the data type: never the inner type's bare error."""
    from zarrext.errors import FillValueError

    with pytest.raises(FillValueError) as raised:
        dtype.from_json_scalar(fill, zarr_format=3)
    message = str(raised.value)
    assert isinstance(raised.value, ValueError)
    assert isinstance(raised.value, TypeError)
    assert message.startswith("fill_value ")
    assert shown in message
    assert "optional(" in message


def test_zarr_json_with_a_fill_value_that_does_not_fit(where: Where) -> None:
    """zarr-python turns the data type's ValueError into its own error naming
    fill_value; ours is the cause."""
    from zarrext.errors import FillValueError

    zarr.create_array(where.location("a"), storage_options=where.options, shape=(2,),
                      dtype=OptionalDType(UInt8()))
    meta = json.loads(where.stored("a")["zarr.json"])
    meta["fill_value"] = [300]
    where.put("a", "zarr.json", json.dumps(meta).encode())
    with pytest.raises((TypeError, ValueError), match="fill_value") as raised:
        zarr.open_array(where.location("a"), storage_options=where.options, mode="r")
    assert isinstance(raised.value.__cause__, FillValueError)


# -- numbers written into an optional integer array: rounded, never wrapped --

INTEGER_INNERS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


def _numbers(inner: str) -> st.SearchStrategy[list[Any]]:
    info = np.iinfo(inner)
    low, high = float(info.min), float(info.max)
    return st.lists(st.one_of(
        st.sampled_from([low, high, low - 0.5, high + 0.5, high + 1, -0.5, 0.5, 1.5, 2.5,
                         -2.5, np.nan, np.inf, -np.inf]),
        st.integers(-6, 6).map(lambda k: k + 0.5),
        st.floats(min_value=low - 3, max_value=high + 3),
        st.floats(),
    ), min_size=1, max_size=6)


@given(data=st.data(), inner=st.sampled_from(INTEGER_INNERS),
       width=st.sampled_from(["float64", "float32"]))
def test_floats_assigned_to_an_optional_integer_array_round_half_to_even(
    data: st.DataObject, inner: str, width: str,
) -> None:
    """``a[:] = floats``: NaN missing, others rounded as xarray (np.round) does; a value
    outside the inner range (or infinite) is refused and nothing is written."""
    with np.errstate(over="ignore"):  # large floats become float32 infinities
        values = np.array(data.draw(_numbers(inner)), dtype=width)
    info = np.iinfo(inner)
    a = zarr.create_array(zarr.storage.MemoryStore(), shape=values.shape, chunks=(4,),
                          dtype=OptionalDType(inner), fill_value=None)
    as_python = [float(v) for v in values]
    fits = all(np.isnan(v) or (np.isfinite(v) and info.min <= round(v) <= info.max)
               for v in as_python)
    if not fits:
        with pytest.raises(ValueError, match=rf"^value .* is outside the range of {inner} "):
            a[:] = values
        assert not a[:]["valid"].any()  # nothing written
        return
    a[:] = values
    stored = a[:]
    assert stored["valid"].tolist() == [not np.isnan(v) for v in as_python]
    assert stored["value"][stored["valid"]].tolist() == [
        round(v) for v in as_python if not np.isnan(v)]


@pytest.mark.parametrize(("value", "stored"), [
    (2.7, 3), (-1.6, -2), (2.5, 2), (3.5, 4), (np.float32(-0.5), 0), (7, 7), (True, 1),
])
def test_a_number_assigned_to_one_element_is_rounded_like_arrays(value: Any, stored: int) -> None:
    a = zarr.create_array(zarr.storage.MemoryStore(), shape=(2,), chunks=(2,),
                          dtype=OptionalDType("int16"), fill_value=None)
    a[1] = value
    assert a[1].tolist() == (stored, True)


@pytest.mark.parametrize("written", [
    np.array([70000]), np.array([-1], dtype="int64"), [1, 2**40], 1e10, -np.inf,
    np.ma.MaskedArray([1.0, 70000.0], mask=[False, False]), [1.5, None, 99999.0],
])
def test_values_outside_an_optional_integers_range_are_refused(written: Any) -> None:
    """Integers wrap, and floats truncate, under NumPy's cast: each is refused instead."""
    a = zarr.create_array(zarr.storage.MemoryStore(), shape=(2,), chunks=(2,),
                          dtype=OptionalDType("uint16"), fill_value=None)
    with pytest.raises(ValueError, match=r"^value -?[\dinf.e+]+ is outside the range of "
                       r"uint16 \[0, 65535\]$"):
        a[: np.size(np.asarray(written, dtype=object))] = written
    assert not a[:]["valid"].any()


def test_masked_out_values_are_not_checked() -> None:
    """A missing element's filler is never stored, whatever it holds."""
    written = np.ma.MaskedArray([1.4, np.inf, 1e30], mask=[False, True, True])
    assert as_optional_array(written, OptionalDType("int8")).tolist() == [
        (1, True), (0, False), (0, False)]
