"""A fill value the array's filters do not give back is refused (spec 002: "Implementations
SHOULD validate fill value survives round-trip at metadata construction time").

Such a fill value reads as itself in missing chunks, but once one element of a chunk is
written, the chunk's other elements read what the filters make of it. ``zarrext.create_array``,
the planner and ``zarrext quantize`` refuse it; ``zarrext check`` reports arrays that have one.

What the fill value reads back as is computed here from the spec's rules with numpy
(:func:`spec_read_back`), and checked against what plain zarr-python reads from a chunk
written with the fill value: never taken from zarrext's helper under test.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, CastValue, ScaleOffset, ShardingCodec, TransposeCodec
from zarr.storage import MemoryStore

import zarrext
from tests.conftest import Run, Where
from zarrext import quantize
from zarrext.errors import FillValueError
from zarrext.quantize import QuantizationError

ROUNDING_MODES = ("nearest-even", "towards-zero", "towards-positive", "towards-negative",
                  "nearest-away")
TARGETS = ("uint8", "int8", "uint16", "int16", "int32")


def _same(a: Any, b: Any) -> bool:
    """Bit for bit equal float64 values, any NaN matching any NaN (-0.0 != 0.0)."""
    a, b = np.float64(a), np.float64(b)
    return bool(np.isnan(a) and np.isnan(b)) or a.tobytes() == b.tobytes()


def _round(x: np.float64, mode: str) -> np.float64:
    """The spec's rounding modes for one float64 value."""
    trunc = np.trunc(x)
    if mode == "nearest-even":
        return np.rint(x)
    if mode == "towards-zero":
        return trunc
    if mode == "towards-positive":
        return np.ceil(x)
    if mode == "towards-negative":
        return np.floor(x)
    # nearest-away, without x + 0.5 (which rounds 0.49999999999999994 up)
    return trunc + np.sign(x) if abs(x - trunc) >= 0.5 else trunc


def spec_read_back(
    fill: float,
    target: str,
    rounding: str,
    out_of_range: str | None,
    nan_code: int | None,
    offset_scale: tuple[float, float] | None,
) -> np.float64 | None:
    """What a float64 ``fill`` reads back as through [scale_offset,] cast_value, by the
    spec's rules; None where the spec says the cast must fail."""
    x = np.float64(fill)
    if offset_scale is not None:
        offset, scale = (np.float64(v) for v in offset_scale)
        x = (x - offset) * scale  # in the array's own type
    info = np.iinfo(target)
    if nan_code is not None and np.isnan(x):  # scalar_map comes first
        code = nan_code
    elif not np.isfinite(x):
        return None  # no NaN/Inf in an integer type without a map
    else:
        r = int(_round(x, rounding))
        if info.min <= r <= info.max:
            code = r
        elif out_of_range == "clamp":
            code = min(max(r, int(info.min)), int(info.max))
        elif out_of_range == "wrap":
            span = int(info.max) - int(info.min) + 1
            code = (r - int(info.min)) % span + int(info.min)
        else:
            return None
    y = np.float64(np.nan) if code == nan_code else np.float64(code)
    if offset_scale is not None:
        y = y / scale + offset
    return y


def _filters(
    target: str, rounding: str, out_of_range: str | None, nan_code: int | None,
    offset_scale: tuple[float, float] | None,
) -> list[Any]:
    scalar_map = (
        None if nan_code is None
        else {"encode": [["NaN", nan_code]], "decode": [[nan_code, "NaN"]]}
    )
    cast = CastValue(data_type=target, rounding=rounding,  # type: ignore[arg-type]
                     out_of_range=out_of_range, scalar_map=scalar_map)  # type: ignore[arg-type]
    if offset_scale is None:
        return [cast]
    return [ScaleOffset(offset=offset_scale[0], scale=offset_scale[1]), cast]


FILLS = st.one_of(
    st.integers(-70_000, 70_000).map(float),
    st.integers(-4_000, 4_000).map(lambda i: i / 8),  # ties of every rounding mode
    st.floats(-1e6, 1e6),
    st.sampled_from([np.nan, np.inf, -np.inf, -0.0, 0.0, 255.0, 127.0, -128.0, 65535.0]),
)
OFFSET_SCALE = st.one_of(
    st.none(),
    st.tuples(st.sampled_from([0.0, -10.0, 5.0, 2.5, -300.0, 1000.0]),
              st.sampled_from([1.0, 0.5, 2.0, 10.0, 0.1, -4.0, 3.0])),
)


@given(
    fill=FILLS,
    target=st.sampled_from(TARGETS),
    rounding=st.sampled_from(ROUNDING_MODES),
    out_of_range=st.sampled_from([None, "clamp", "wrap"]),
    nan_mapped=st.booleans(),
    offset_scale=OFFSET_SCALE,
)
def test_property_create_array_refuses_exactly_the_fill_values_the_filters_change(
    fill: float, target: str, rounding: str, out_of_range: str | None, nan_mapped: bool,
    offset_scale: tuple[float, float] | None,
) -> None:
    nan_code = int(np.iinfo(target).max) if nan_mapped else None
    expected = spec_read_back(fill, target, rounding, out_of_range, nan_code, offset_scale)
    filters = _filters(target, rounding, out_of_range, nan_code, offset_scale)
    create = {"shape": (2,), "chunks": (2,), "dtype": "float64", "fill_value": fill,
              "config": {"write_empty_chunks": True}}
    if expected is not None:
        # the spec's rules agree with what zarr-python stores: a chunk written with the
        # fill value reads it back as ``expected`` (plain zarr accepts the fill value)
        plain = zarr.create_array(MemoryStore(), filters=filters, **create)
        plain[0] = fill
        assert _same(plain[1], expected), (plain[1], expected)

    stored: dict[str, Any] = {}
    store = MemoryStore(stored)
    if expected is not None and _same(expected, fill):
        z = zarrext.create_array(store, filters=filters, **create)
        z[0] = fill
        assert _same(z[1], fill)
        return
    # zarr's own refusal where the fill cannot be cast at all, ours where it changes
    refusals = r"(?i)out of range|cannot cast|does not survive"
    with pytest.raises(ValueError, match=refusals) as refused:
        zarrext.create_array(store, filters=filters, **create)
    assert stored == {}  # nothing written
    message = str(refused.value)
    assert "\n" not in message
    if expected is not None:  # the fill survives encoding, not decoding: ours says so
        assert isinstance(refused.value, FillValueError)
        assert f"fill value {np.float64(fill)} does not survive" in message
        assert f"reads back as {expected}" in message


# --- where the filters are: filters=, shards= (inside), a sharding serializer -----------


def _layouts(filters: list[Any]) -> dict[str, dict[str, Any]]:
    return {
        "filters": {"chunks": (4,), "filters": filters},
        "shards": {"chunks": (2,), "shards": (4,), "filters": filters},
        "inner": {"chunks": (4,), "compressors": None, "serializer": ShardingCodec(
            chunk_shape=(2,), codecs=[*filters, BytesCodec()])},
    }


LOSSY = [ScaleOffset(offset=0.25, scale=2.0), CastValue(data_type="int16")]  # 0.5 -> 0.5 -> 0


@pytest.mark.parametrize("layout", ["filters", "shards", "inner"])
def test_create_array_refuses_wherever_the_filters_are(where: Where, layout: str) -> None:
    # by the spec: (0.5 - 0.25) * 2 = 0.5, nearest-even 0, decodes to 0 / 2 + 0.25 = 0.25
    assert spec_read_back(0.5, "int16", "nearest-even", None, None, (0.25, 2.0)) == 0.25
    with pytest.raises(FillValueError) as refused:
        zarrext.create_array(where.location("a"), storage_options=where.options, shape=(8,),
                             dtype="float64", fill_value=0.5, **_layouts(LOSSY)[layout])
    message = str(refused.value)
    assert "\n" not in message
    assert "fill value 0.5 does not survive the filters (scale_offset, cast_value)" in message
    assert "reads back as 0.25" in message
    assert where.location("a").rsplit("/", 1)[-1] in message  # names the array
    assert where.stored("a") == {}  # no zarr.json left: the retry below can create it

    z = zarrext.create_array(where.location("a"), storage_options=where.options, shape=(8,),
                             dtype="float64", fill_value=0.25, **_layouts(LOSSY)[layout])
    z[0] = 1.25
    assert np.array_equal(z[:], [1.25] + [0.25] * 7)


def test_create_array_runs_every_array_to_array_codec(tmp_path: Any) -> None:
    """transpose needs the array's dimensions; it loses nothing, cast_value after it does."""
    two_d = {"shape": (4, 6), "chunks": (2, 3), "dtype": "float32"}
    z = zarrext.create_array(str(tmp_path / "t"), fill_value=-0.0, **two_d,
                             filters=[TransposeCodec(order=(1, 0))])
    z[0, 0] = 2
    assert z[0, 1] == 0
    assert np.signbit(z[0, 1])
    with pytest.raises(FillValueError, match=r"fill value 1\.5 does not survive the filters "
                       r"\(transpose, cast_value\): it reads back as 2\.0"):
        zarrext.create_array(str(tmp_path / "u"), fill_value=1.5, **two_d,
                             filters=[TransposeCodec(order=(1, 0)), CastValue(data_type="uint8")])


# --- the planner, and the copy job ------------------------------------------------------


@given(
    fill=st.one_of(st.floats(-1e4, 1e4, width=32), st.sampled_from([np.nan, np.inf, -np.inf,
                                                                    -0.0, 0.0])),
    dtype=st.sampled_from(["float32", "float64"]),
)
def test_property_planner_refuses_exactly_the_fill_values_its_filters_change(
    fill: float, dtype: str
) -> None:
    data = np.linspace(-50, 50, 101, dtype=dtype)
    kwargs = {"max_abs_error": 0.01, "fill_value": fill}
    # the planner's layout: a finite fill is the offset (code 0, decoded as 0 / scale +
    # offset, which loses only the sign of -0.0); NaN and Inf get reserved codes
    if fill == 0 and np.signbit(fill):
        with pytest.raises(QuantizationError) as refused:
            quantize.plan(data, **kwargs)
        assert "fill value -0.0 does not survive" in str(refused.value)
        assert "reads back as 0.0" in str(refused.value)
        return
    filters = quantize.plan(data, **kwargs)
    # what plain zarr-python reads from a chunk written with the fill value
    z = zarr.create_array(MemoryStore(), shape=(2,), chunks=(2,), dtype=dtype, fill_value=fill,
                          filters=filters, config={"write_empty_chunks": True})
    z[0] = fill
    assert _same(z[1], np.dtype(dtype).type(fill))


def test_quantize_refuses_a_lost_fill_value_before_reading_any_block(
    tmp_path: Any, run: Run
) -> None:
    src = zarr.create_array(str(tmp_path / "src"), shape=(100,), chunks=(10,), dtype="float32",
                            fill_value=-0.0)
    src[:50] = np.linspace(0, 1, 50)
    phases: list[str] = []
    with pytest.raises(QuantizationError) as refused:
        quantize.copy_quantized(str(tmp_path / "src"), str(tmp_path / "out"), max_abs_error=0.01,
                                progress=lambda phase, done, total: phases.append(phase))
    assert phases == []  # refused before the scan
    assert "fill value -0.0 does not survive" in str(refused.value)
    assert not (tmp_path / "out").exists()

    code, _, err = run("quantize", tmp_path / "src", "--max-abs-error", "0.01",
                         "--out", tmp_path / "out")
    assert code == 1
    assert len(err.strip().splitlines()) == 1
    assert "fill value -0.0 does not survive" in err
    assert "reads back as 0.0" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("attrs", "packed"),
    [
        ({"scale_factor": 0.5, "add_offset": 0.25}, "int16"),  # 0.0 would read back 0.25
        ({"scale_factor": 0.1, "add_offset": 1.0}, "uint8"),  # 0.0 packs to -10: refused
        ({"scale_factor": 0.01, "add_offset": 273.15}, "int16"),
        ({"add_offset": -0.0}, "int8"),
        ({"scale_factor": np.float32(2.0), "add_offset": np.float32(-7.5)}, "uint16"),
        ({"scale_factor": 0.01, "add_offset": 273.15, "_FillValue": -32767}, "int16"),
        ({"scale_factor": 0.5, "add_offset": 3.0}, "float32"),
    ],
    ids=["lost-0", "unpackable-0", "cf-kelvin", "negative-zero-offset", "float32-unsigned",
         "cf-fill", "float-packed"],
)
def test_from_cf_gives_a_fill_value_that_survives_its_filters(
    attrs: dict[str, Any], packed: str
) -> None:
    conv = quantize.from_cf(attrs, packed_dtype=packed, warn=False)
    z = zarrext.create_array(MemoryStore(), shape=(2,), chunks=(2,), dtype=conv.dtype,
                             fill_value=conv.fill_value, filters=list(conv.filters),
                             config={"write_empty_chunks": True})
    z[0] = conv.fill_value
    assert _same(z[1], conv.fill_value)  # by plain zarr's codecs, through a stored chunk
    if "_FillValue" in attrs:
        assert np.isnan(conv.fill_value)
    else:  # CF's packed 0, unpacked
        assert conv.fill_value == float(attrs.get("add_offset", 0.0))


# --- zarrext check ----------------------------------------------------------------------


def test_check_reports_an_array_plain_zarr_made_with_a_lost_fill_value(where: Where) -> None:
    lossy = zarr.create_array(where.location("lossy"), storage_options=where.options,
                              shape=(4,), chunks=(2,), dtype="float64", fill_value=0.5,
                              filters=[CastValue(data_type="uint8")])
    lossy[0] = 3
    assert np.array_equal(lossy[:], [3, 0, 0.5, 0.5])  # what the finding is about

    (finding,) = zarrext.check(where.location("lossy"), storage_options=where.options)
    assert finding.key == "zarr.json"
    (problem,) = finding.details
    assert problem.kind == "fill_value_lost"
    assert problem.text.startswith("fill value 0.5 does not survive the filters (cast_value): "
                                   "it reads back as 0.0")
    assert not problem.repairable
    assert problem.advice


@pytest.mark.parametrize(
    "make",
    [
        {"filters": None, "fill_value": 0.5},
        {"filters": [TransposeCodec(order=(0,))], "fill_value": -0.0},
        {"filters": [CastValue(data_type="float32")], "fill_value": np.nan},
        {"filters": [CastValue(data_type="uint8")], "fill_value": 3.0},
        {"filters": "plan", "fill_value": np.nan},
        {"shards": (4,), "filters": [CastValue(data_type="int16")], "fill_value": -7.0},
    ],
    ids=["no-filters", "transpose", "to-float32", "cast-integer-fill", "planned", "sharded"],
)
def test_check_says_nothing_of_fill_values_that_survive(
    where: Where, make: dict[str, Any]
) -> None:
    if make["filters"] == "plan":
        make = {**make, "filters": quantize.plan(np.linspace(0, 1, 9), max_abs_error=0.01)}
    z = zarr.create_array(where.location("a"), storage_options=where.options, shape=(8,),
                          chunks=(2,), dtype="float64", **make)
    z[0] = 1.0
    assert zarrext.check(where.location("a"), storage_options=where.options) == []


def test_cli_check_reports_the_fill_value_with_exit_code_1(tmp_path: Any, run: Run) -> None:
    group = zarr.open_group(str(tmp_path / "g"), mode="w")
    group.create_array("lossy", shape=(4,), chunks=(2,), dtype="float64", fill_value=0.5,
                       filters=[CastValue(data_type="uint8")])[0] = 3
    group.create_array("plain", shape=(4,), chunks=(2,), dtype="float64", fill_value=0.5)[:] = 1

    code, out, _ = run("check", tmp_path / "g")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "lossy zarr.json:"
    assert lines[1].startswith("  problem: fill value 0.5 does not survive the filters "
                               "(cast_value): it reads back as 0.0")
    assert lines[2].startswith("    --repair cannot fix this: ")
    assert lines[3].startswith("plain: 2 chunks listed")

    code, out, _ = run("check", tmp_path / "g", "--json")
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False
    findings = {a["array"]: a["findings"] for a in report["arrays"]}
    assert findings["plain"] == []
    ((finding,),) = (findings["lossy"],)
    assert finding["key"] == "zarr.json"
    assert [(p["kind"], p["repairable"]) for p in finding["problems"]] == [
        ("fill_value_lost", False)
    ]


# --- an existing array with such a fill value, written through zarrext -----------------


def _plain_lossy(where: Where, **layout: Any) -> None:
    """An array plain zarr makes with fill value 0.5 and ``cast_value(uint8)``, which
    stores 0.5 as 0: 8 elements in chunks of 2, nothing stored yet."""
    chunks = layout.pop("chunks", (2,))
    zarr.create_array(where.location("lossy"), storage_options=where.options, shape=(8,),
                      chunks=chunks, dtype="float64", fill_value=0.5,
                      filters=[CastValue(data_type="uint8")], **layout)


def _refusal(where: Where, write: Any) -> str:
    z = zarrext.open_array(where.location("lossy"), storage_options=where.options)
    before = where.stored("lossy")
    with pytest.raises(FillValueError) as refused:
        write(z)
    assert where.stored("lossy") == before  # nothing of the write is stored
    message = str(refused.value)
    assert "\n" not in message
    assert "lossy" in message  # names the array
    assert "fill value 0.5 does not survive the filters (cast_value): it reads back as 0.0" \
        in message
    assert "zarrext check reports it as fill_value_lost" in message
    return message


def test_a_partial_write_to_a_missing_chunk_is_refused(where: Where) -> None:
    _plain_lossy(where)
    plain = zarr.open_array(where.location("lossy"), storage_options=where.options)
    assert np.array_equal(plain[:], [0.5] * 8)

    def write(z: zarr.Array) -> None:
        z[1] = 3  # chunk 0 is missing: element 0 would read 0.0 instead of 0.5

    message = _refusal(where, write)
    assert "c/0" in message
    assert np.array_equal(plain[:], [0.5] * 8)

    def spanning(z: zarr.Array) -> None:
        z[2:5] = [1, 2, 3]  # chunk 1 whole, chunk 2 in part: nothing written at all

    assert "c/2" in _refusal(where, spanning)
    assert np.array_equal(plain[:], [0.5] * 8)


def test_writes_that_change_no_unwritten_element_go_through(where: Where) -> None:
    _plain_lossy(where)
    z = zarrext.open_array(where.location("lossy"), storage_options=where.options)
    z[2:6] = [1, 2, 3, 4]  # whole chunks
    z[3] = 7  # part of a stored chunk: its other element is stored already
    z[6:] = [5, 6]
    assert np.array_equal(z[:], [0.5, 0.5, 1, 7, 3, 4, 5, 6])


def test_an_edge_chunk_written_to_the_arrays_end_goes_through(tmp_path: Any) -> None:
    zarr.create_array(str(tmp_path / "lossy"), shape=(5,), chunks=(2,), dtype="float64",
                      fill_value=0.5, filters=[CastValue(data_type="uint8")])
    z = zarrext.open_array(str(tmp_path / "lossy"))
    z[4:] = [9]
    assert np.array_equal(z[:], [0.5, 0.5, 0.5, 0.5, 9])


def test_a_partial_write_to_a_sharded_array_is_refused(where: Where) -> None:
    _plain_lossy(where, chunks=(2,), shards=(4,))  # the filters inside the shards
    z = zarrext.open_array(where.location("lossy"), storage_options=where.options)
    z[4:] = [1, 2, 3, 4]  # whole shard
    assert np.array_equal(z[:], [0.5] * 4 + [1, 2, 3, 4])

    def write(z: zarr.Array) -> None:
        z[0:2] = [1, 2]  # a whole inner chunk, but the shard's other is not stored

    _refusal(where, write)

    def into_a_stored_shard(z: zarr.Array) -> None:
        z[5] = 9  # what is stored of the shard cannot be told without reading it

    _refusal(where, into_a_stored_shard)
    assert np.array_equal(z[:], [0.5] * 4 + [1, 2, 3, 4])


def test_plain_zarr_with_zarrexts_pipeline_refuses_too(tmp_path: Any) -> None:
    zarr.create_array(str(tmp_path / "lossy"), shape=(8,), chunks=(2,), dtype="float64",
                      fill_value=0.5, filters=[CastValue(data_type="uint8")])
    with zarr.config.set({"codec_pipeline.path": "zarrext.pipeline.ZarrextCodecPipeline"}):
        z = zarr.open_array(str(tmp_path / "lossy"), mode="r+")
        with pytest.raises(FillValueError, match=r"fill value 0\.5 does not survive"):
            z[1] = 3
    assert not (tmp_path / "lossy" / "c").exists()
