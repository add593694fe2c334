"""The optional codec: format, chains, names, sharding, round trips and hostile chunks."""

from __future__ import annotations

import gzip
import json
import struct
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import jsonschema
import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from zarr.abc.codec import BytesBytesCodec
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import (
    Bool,
    Complex64,
    DateTime64,
    FixedLengthUTF32,
    Float32,
    Float64,
    Int8,
    Int16,
    NullTerminatedBytes,
    Struct,
    UInt8,
    UInt64,
    VariableLengthBytes,
    VariableLengthUTF8,
)
from zarr.registry import register_codec

import zarrext
from tests.conftest import DATA, Where, raises_chunk_error
from zarrext import ConditionalCodec, OptionalCodec, OptionalDType, PackBitsCodec
from zarrext.codecs.optional import OptionalCodecError

CODEC_SCHEMA = json.loads((DATA / "optional-codec.schema.json").read_text())
PROTO = default_buffer_prototype()


def _spec(dtype: OptionalDType, shape: tuple[int, ...]) -> ArraySpec:
    return ArraySpec(shape=shape, dtype=dtype, fill_value=dtype.default_scalar(),
                     config=ArrayConfig.from_dict({}), prototype=PROTO)


def _optional_array(dtype: OptionalDType, values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    out = np.zeros(values.shape, dtype.to_native_dtype())
    out["valid"] = valid
    out["value"][valid] = values[valid]
    return out


def _buf(data: bytes) -> Any:
    return PROTO.buffer.from_bytes(data)


# -- format ---------------------------------------------------------------------------


def test_encoded_layout_matches_spec() -> None:
    """Header, packbits mask, then only the present values, in C order."""
    dtype = OptionalDType(Int16())
    values = np.arange(12, dtype="i2").reshape(3, 4) * 100
    valid = (np.arange(12) % 3 != 1).reshape(3, 4)
    codec = OptionalCodec(mask_codecs=[PackBitsCodec()],
                          data_codecs=[BytesCodec(endian="big")])
    spec = _spec(dtype, (3, 4))
    encoded = codec._encode_sync(PROTO.nd_buffer.from_numpy_array(
        _optional_array(dtype, values, valid)), spec).to_bytes()
    mask_len, data_len = struct.unpack("<QQ", encoded[:16])
    expected_mask = np.packbits(valid.ravel(), bitorder="little").tobytes()
    expected_data = values[valid].astype(">i2").tobytes()
    assert (mask_len, data_len) == (len(expected_mask), len(expected_data))
    assert encoded[16:] == expected_mask + expected_data


def test_all_missing_chunk_stores_the_data_codecs_encoding_of_nothing() -> None:
    """Spec 003: the data section is the data codecs applied to the present values,
    here none: zstd's frame of zero bytes (zarrs would write no data bytes)."""
    dtype = OptionalDType(Float64())
    codec = OptionalCodec(data_codecs=[BytesCodec(), ZstdCodec()])
    spec = _spec(dtype, (10,))
    encoded = codec._encode_sync(PROTO.nd_buffer.from_numpy_array(
        np.zeros(10, dtype.to_native_dtype())), spec).to_bytes()
    nothing = bytes(numcodecs.Zstd(level=0).encode(b""))
    assert encoded == struct.pack("<QQ", 2, len(nothing)) + b"\0\0" + nothing
    decoded = codec._decode_sync(_buf(encoded), spec).as_numpy_array()
    assert not decoded["valid"].any()


# -- a chunk with no element present: both forms, every chain zarr ships ---------------
# Spec 003's data section is the data codecs applied to the present values: with none
# present, their encoding of an empty array (gzip(b""), a zstd frame of nothing, ...);
# zarrs writes no data bytes instead. The chunks below are built here from the spec's
# layout and the codecs' own formats (gzip, numcodecs, crc32c), not by zarrext.


def _gzip(raw: bytes) -> bytes:
    return gzip.compress(raw, compresslevel=5, mtime=0)


def _zstd(raw: bytes, checksum: bool = False) -> bytes:
    return bytes(numcodecs.Zstd(level=3, checksum=checksum).encode(raw))


def _blosc(raw: bytes) -> bytes:
    return bytes(numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE,
                                 blocksize=0, typesize=4).encode(raw))


def _with_crc32c(raw: bytes) -> bytes:
    return raw + struct.pack("<I", crc32c.crc32c(raw))


def _packbits(valid: np.ndarray) -> bytes:
    """The registry's packbits of a bool array: C order, bit 0 first, zero-padded."""
    return np.packbits(valid.ravel(), bitorder="little").tobytes()


BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}
GZIP = {"name": "gzip", "configuration": {"level": 5}}
ZSTD = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
ZSTD_CHECKSUM = {"name": "zstd", "configuration": {"level": 3, "checksum": True}}
BLOSC = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                            "typesize": 4, "blocksize": 0}}
CRC32C = {"name": "crc32c"}
PACKBITS = {"name": "packbits"}

Encode = Callable[[bytes], bytes]
# data chain: (zarr.json codecs, the encoding of the present values' little-endian bytes)
DATA_CHAINS: dict[str, tuple[list[dict[str, Any]], Encode]] = {
    "bytes": ([BYTES_LE], lambda raw: raw),
    "bytes-gzip": ([BYTES_LE, GZIP], _gzip),
    "bytes-zstd": ([BYTES_LE, ZSTD], _zstd),
    "bytes-zstd(checksum)": ([BYTES_LE, ZSTD_CHECKSUM], lambda raw: _zstd(raw, checksum=True)),
    "bytes-blosc": ([BYTES_LE, BLOSC], _blosc),
    "bytes-crc32c": ([BYTES_LE, CRC32C], _with_crc32c),
    "bytes-gzip-crc32c": ([BYTES_LE, GZIP, CRC32C], lambda raw: _with_crc32c(_gzip(raw))),
    "bytes-zstd-crc32c": ([BYTES_LE, ZSTD, CRC32C], lambda raw: _with_crc32c(_zstd(raw))),
    "bytes-blosc-crc32c": ([BYTES_LE, BLOSC, CRC32C], lambda raw: _with_crc32c(_blosc(raw))),
}
# zarrext's conditional (spec 000) with its one codec applied: header byte 0b1, payload
READ_CHAINS = {**DATA_CHAINS, **{
    f"bytes-conditional({name})": (
        [BYTES_LE, {"name": "conditional", "configuration": {"codecs": [codec], "header_bits": 8}}],
        lambda raw, encode=encode: b"\x01" + encode(raw))
    for name, codec, encode in (("zstd", ZSTD, _zstd), ("blosc", BLOSC, _blosc))
}}
# mask chain: (zarr.json codecs, the encoding of the validity); each data chain gets one
MASK_CHAINS: list[tuple[list[dict[str, Any]], Callable[[np.ndarray], bytes]]] = [
    ([PACKBITS], _packbits),
    ([PACKBITS, ZSTD], lambda valid: _zstd(_packbits(valid))),
    ([{"name": "bytes"}], lambda valid: valid.astype(np.uint8).tobytes()),  # a byte each
]

HAND_SHAPE, HAND_CHUNK = (3, 8), (3, 4)
HAND_FILL = 7.0  # present: a chunk read as missing was read, not filled in
HAND_VALUES = (np.linspace(-5, 5, 12, dtype="f4") + 0.25).reshape(HAND_CHUNK)
HAND_VALID = {  # none present: no data bytes (zarrs), or the data codecs of nothing (spec)
    "none-zarrs": np.zeros(HAND_CHUNK, bool),
    "none-spec": np.zeros(HAND_CHUNK, bool),
    "some": (np.arange(12) % 3 == 0).reshape(HAND_CHUNK),
    "all": np.ones(HAND_CHUNK, bool),
}


def _optional_chunk(mask_section: bytes, data_section: bytes) -> bytes:
    """Spec 003's layout: u64 LE mask length, u64 LE data length, mask, data."""
    return struct.pack("<QQ", len(mask_section), len(data_section)) + mask_section + data_section


def _write_by_hand(where: Where, name: str, codec: dict[str, Any], chunk: bytes,
                   data_type: dict[str, Any] | None = None,
                   fill_value: Any = (HAND_FILL,)) -> None:
    """A zarr.json written here (shape 3x8, chunks 3x4) and chunk c/0/0; c/0/1 absent."""
    if where.local:
        (Path(where.root) / name / "c" / "0").mkdir(parents=True)
    float32 = {"name": "float32", "configuration": {}}
    metadata = {
        "zarr_format": 3, "node_type": "array", "shape": list(HAND_SHAPE),
        "data_type": data_type or {"name": "optional", "configuration": float32},
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(HAND_CHUNK)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": list(fill_value), "codecs": [codec],
    }
    where.put(name, "zarr.json", json.dumps(metadata).encode())
    where.put(name, "c/0/0", chunk)


def _read_both_routes(where: Where, name: str) -> list[tuple[str, np.ndarray]]:
    """The whole array through plain zarr, zarrext (split decode) and read_masked."""
    options = {"storage_options": where.options, "mode": "r"}
    plain = zarr.open_array(where.location(name), **options)[...]
    ours = zarrext.open_array(where.location(name), **options)
    masked = zarrext.read_masked(ours)
    as_records = np.zeros(masked.shape, plain.dtype)
    as_records["value"], as_records["valid"] = masked.data, ~np.ma.getmaskarray(masked)
    return [("zarr", plain), ("zarrext", ours[...]), ("read_masked", as_records)]


def _hand_expected(valid: np.ndarray) -> np.ndarray:
    out = np.zeros(HAND_SHAPE, [("value", "<f4"), ("valid", "?")])
    out["valid"][:, :4] = valid
    out["value"][:, :4] = np.where(valid, HAND_VALUES, 0)
    out["valid"][:, 4:] = True
    out["value"][:, 4:] = HAND_FILL
    return out


@pytest.mark.parametrize("chain", list(READ_CHAINS))
def test_hand_built_chunks_read_through_both_routes(where: Where, chain: str) -> None:
    """An array per kind of chunk: none present in both forms, some, all; and one
    whose data section holds a value though none is present, refused."""
    data_codecs, encode = READ_CHAINS[chain]
    mask_codecs, encode_mask = MASK_CHAINS[list(READ_CHAINS).index(chain) % len(MASK_CHAINS)]
    codec = {"name": "optional",
             "configuration": {"mask_codecs": mask_codecs, "data_codecs": data_codecs}}
    for kind, valid in HAND_VALID.items():
        present = HAND_VALUES[valid].astype("<f4").tobytes()
        data_section = b"" if kind == "none-zarrs" else encode(present)
        if kind == "none-spec":
            assert data_section == encode(b"")  # the chain applied to nothing
        _write_by_hand(where, kind, codec, _optional_chunk(encode_mask(valid), data_section))
        for route, got in _read_both_routes(where, kind):
            np.testing.assert_array_equal(got, _hand_expected(valid), err_msg=f"{kind}, {route}")

    one_value = encode(np.float32(1.5).tobytes())
    _write_by_hand(where, "refused", codec,
                   _optional_chunk(encode_mask(np.zeros(HAND_CHUNK, bool)), one_value))
    message = (rf"the mask marks no element present, but the {len(one_value)}-byte data "
               r"section is not the data codecs' encoding of zero elements")
    options = {"storage_options": where.options, "mode": "r"}
    with pytest.raises(OptionalCodecError, match=rf"optional codec, chunk .*: {message}"):
        zarr.open_array(where.location("refused"), **options)[...]
    with raises_chunk_error(OptionalCodecError, match=rf"chunk \(0, 0\): {message}"):
        zarrext.open_array(where.location("refused"), **options)[...]


def _without_time_and_os(gzip_member: bytes) -> bytes:
    """A gzip member but its header's MTIME and OS fields, which vary by writer."""
    return gzip_member[:4] + gzip_member[8:9] + gzip_member[10:]


@pytest.mark.parametrize("chain", list(DATA_CHAINS))
def test_all_missing_chunk_is_written_as_the_spec_says(where: Where, chain: str) -> None:
    """The data codecs' encoding of nothing (gzip's header fields that vary by writer
    aside)."""
    data_codecs, encode = DATA_CHAINS[chain]
    z = zarr.create_array(
        where.location("a"), storage_options=where.options, shape=HAND_SHAPE,
        chunks=HAND_CHUNK, dtype=OptionalDType(Float32()), fill_value=[HAND_FILL],
        serializer=OptionalCodec(mask_codecs=[PACKBITS], data_codecs=data_codecs),
        compressors=None,
    )
    z[:, :4] = np.ma.masked_all(HAND_CHUNK, "f4")
    chunk = where.stored("a")["c/0/0"]
    mask_len, data_len = struct.unpack("<QQ", chunk[:16])
    assert chunk[16:16 + mask_len] == _packbits(np.zeros(12, bool))
    data_section = chunk[16 + mask_len:]
    assert len(data_section) == data_len
    if "gzip" in chain:
        member = data_section[:-4] if "crc32c" in chain else data_section
        assert _without_time_and_os(member) == _without_time_and_os(_gzip(b""))
        assert data_section == (_with_crc32c(member) if "crc32c" in chain else member)
    else:
        assert data_section == encode(b"")
    for route, got in _read_both_routes(where, "a"):
        np.testing.assert_array_equal(got, _hand_expected(np.zeros(HAND_CHUNK, bool)),
                                      err_msg=route)


@pytest.mark.parametrize("compressor", [ZstdCodec(), zarr.codecs.BloscCodec(cname="lz4")],
                         ids=["zstd", "blosc"])
def test_all_missing_chunk_under_conditional_reads_back(where: Where, compressor: Any) -> None:
    """A decision that applies the codec to nothing: numcodecs alone would not decode it."""
    serializer = OptionalCodec(data_codecs=[BytesCodec(), ConditionalCodec(codecs=[compressor])])
    zarrext.create_array(where.location("a"), storage_options=where.options, shape=HAND_SHAPE,
                         chunks=HAND_CHUNK, dtype=OptionalDType(Float32()),
                         fill_value=[HAND_FILL], serializer=serializer, compressors=None)
    options = {"storage_options": where.options}
    zarrext.open_array(where.location("a"), decision="always_apply", **options)[:, :4] = (
        np.ma.masked_all(HAND_CHUNK, "f4"))
    chunk = where.stored("a")["c/0/0"]
    mask_len, data_len = struct.unpack("<QQ", chunk[:16])
    assert chunk[16 + mask_len] == 0b1  # the conditional header: the codec was applied
    assert data_len > 1
    for route, got in _read_both_routes(where, "a"):
        np.testing.assert_array_equal(got, _hand_expected(np.zeros(HAND_CHUNK, bool)),
                                      err_msg=route)


# A nested optional (optional<optional<float32>>) with the registry's default chains at
# both levels: mask [packbits, zstd], data [optional(...)] then [bytes, zstd].
NESTED_INNER_CODEC = {"name": "optional", "configuration": {
    "mask_codecs": [PACKBITS, ZSTD], "data_codecs": [BYTES_LE, ZSTD]}}
NESTED_CODEC = {"name": "optional", "configuration": {
    "mask_codecs": [PACKBITS, ZSTD], "data_codecs": [NESTED_INNER_CODEC]}}
NESTED_TYPE = {"name": "optional", "configuration": {
    "name": "optional", "configuration": {"name": "float32", "configuration": {}}}}
INNER_OF_NOTHING = {
    # the inner codec applied to zero elements, as the spec writes it
    "spec": _optional_chunk(_zstd(b""), _zstd(b"")),
    # a writer that stores no bytes for nothing at every level
    "no bytes": _optional_chunk(b"", b""),
    # zarrs: no bytes in the outer data section at all
    "zarrs": b"",
}


@pytest.mark.parametrize("form", list(INNER_OF_NOTHING))
def test_nested_optional_with_no_outer_element_present(where: Where, form: str) -> None:
    outer_valid = np.zeros(HAND_CHUNK, bool)
    chunk = _optional_chunk(_zstd(_packbits(outer_valid)), INNER_OF_NOTHING[form])
    _write_by_hand(where, "a", NESTED_CODEC, chunk, data_type=NESTED_TYPE,
                   fill_value=[[HAND_FILL]])
    options = {"storage_options": where.options, "mode": "r"}
    for route in (zarr.open_array, zarrext.open_array):
        got = route(where.location("a"), **options)[...]
        assert not got["valid"][:, :4].any(), route
        assert got["valid"][:, 4:].all(), route
        assert got["value"]["valid"][:, 4:].all(), route
        assert (got["value"]["value"][:, 4:] == HAND_FILL).all(), route


@pytest.mark.parametrize("form", ["spec", "zarrs"])
def test_nested_optional_with_no_inner_element_present(where: Where, form: str) -> None:
    """Outer present, inner missing (``[null]``) everywhere but one element."""
    outer_valid = np.ones(HAND_CHUNK, bool)
    inner_valid = np.zeros(12, bool)  # the 12 present outer elements, in C order
    inner = _optional_chunk(_zstd(_packbits(inner_valid)),
                            _zstd(b"") if form == "spec" else b"")
    chunk = _optional_chunk(_zstd(_packbits(outer_valid)), inner)
    _write_by_hand(where, "a", NESTED_CODEC, chunk, data_type=NESTED_TYPE,
                   fill_value=[[HAND_FILL]])
    for route in (zarr.open_array, zarrext.open_array):
        got = route(where.location("a"), storage_options=where.options, mode="r")[...]
        assert got["valid"].all(), route
        assert not got["value"]["valid"][:, :4].any(), route
        assert got["value"]["valid"][:, 4:].all(), route


def test_nested_optional_section_holding_an_element_when_none_is_present_is_refused() -> None:
    codec = OptionalCodec.from_dict(NESTED_CODEC)
    dtype = OptionalDType(OptionalDType(Float32()))
    inner_one = _optional_chunk(_zstd(_packbits(np.ones(1, bool))),
                                _zstd(np.float32(1.5).tobytes()))
    chunk = _optional_chunk(_zstd(_packbits(np.zeros(4, bool))), inner_one)
    with pytest.raises(OptionalCodecError, match=r"optional codec, chunk .*: cannot decode the "
                       r"10-byte mask section .*expected 0 for 0 elements"):
        codec._decode_sync(_buf(chunk), _spec(dtype, (4,)))


@pytest.mark.parametrize("form", ["spec", "zarrs", "spec, gzip", "one element, gzip"])
def test_variable_length_strings_with_no_element_present(form: str) -> None:
    """A variable-length section of nothing is its count, 0 (u32 LE)."""
    dtype = OptionalDType(VariableLengthUTF8())
    gzipped = "gzip" in form
    data_codecs: list[Any] = [zarr.codecs.VLenUTF8Codec()] + [zarr.codecs.GzipCodec()] * gzipped
    codec = OptionalCodec(mask_codecs=[PackBitsCodec()], data_codecs=data_codecs)
    section = {"spec": struct.pack("<I", 0), "zarrs": b"",
               "spec, gzip": _gzip(struct.pack("<I", 0)),
               "one element, gzip": _gzip(struct.pack("<II", 1, 1) + b"a")}[form]
    chunk = _optional_chunk(_packbits(np.zeros(4, bool)), section)
    if form.startswith("one element"):
        with pytest.raises(OptionalCodecError, match="holds 1 elements, but the mask marks 0"):
            codec._decode_sync(_buf(chunk), _spec(dtype, (4,)))
        return
    decoded = codec._decode_sync(_buf(chunk), _spec(dtype, (4,))).as_numpy_array()
    assert not decoded["valid"].any()


# -- round trips ----------------------------------------------------------------------

INNER = [Bool(), Int8(), UInt8(), Int16(), UInt64(), Float32(), Float64()]


@st.composite
def arrays(draw: st.DrawFn) -> tuple[OptionalDType, np.ndarray, tuple[int, ...],
                                     tuple[int, ...] | None]:
    leaf = draw(st.sampled_from(INNER))
    depth = draw(st.integers(1, 2))
    dtype: Any = leaf
    for _ in range(depth):
        dtype = OptionalDType(dtype)
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=9))
    chunks = tuple(draw(st.integers(1, s)) for s in shape)
    shards = None
    if draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    native_leaf = leaf.to_native_dtype()
    values = draw(hnp.arrays(native_leaf, shape, elements=hnp.from_dtype(
        native_leaf, allow_nan=False) if native_leaf.kind == "f" else None))
    array = np.zeros(shape, dtype.to_native_dtype())
    level = array
    for _ in range(depth):
        density = draw(st.sampled_from([0.0, 0.01, 0.5, 0.99, 1.0]))
        seed = draw(st.integers(0, 2**16))
        level["valid"] = np.random.default_rng(seed).random(shape) < density
        level = level["value"]
    level[...] = values
    # missing elements hold zeros at every level below them (the canonical form)
    canonical = zarrext.as_optional_array(_to_masked_deep(array, depth), dtype)
    return dtype, canonical, chunks, shards


def _to_masked_deep(array: np.ndarray, depth: int) -> Any:
    masked = zarrext.to_masked(array)
    if depth == 1:
        return masked
    inner = zarrext.as_optional_array(_to_masked_deep(masked.data, depth - 1),
                                      OptionalDType.from_native_layout(masked.data.dtype))
    return np.ma.MaskedArray(inner, mask=masked.recordmask)


@given(arrays(), st.sampled_from(["optional", "zarrs.optional"]))
def test_roundtrip_through_zarr_arrays(case: tuple[OptionalDType, np.ndarray, tuple[int, ...],
                                                   tuple[int, ...] | None],
                                       name: str) -> None:
    dtype, array, chunks, shards = case
    store: dict[str, Any] = {}
    codec = OptionalCodec.default_for(dtype)
    codec = OptionalCodec(mask_codecs=codec.mask_codecs, data_codecs=codec.data_codecs,
                          name=name)
    z = zarr.create_array(store, shape=array.shape, chunks=chunks, shards=shards, dtype=dtype,
                          fill_value=None, serializer=codec)
    z[...] = array
    fresh = zarr.open_array(store, mode="r")
    got = fresh[...]
    assert got.tobytes() == array.tobytes()
    written = fresh.metadata.to_dict()["codecs"][0]
    if shards is not None:
        written = written["configuration"]["codecs"][0]
    assert written["name"] == name


OTHER_INNERS = {
    "struct": (Struct(fields=(("a", Int16()), ("b", Float64()))), [(1, 2.5), None, (3, -1.0)]),
    "datetime64": (DateTime64(unit="s", scale_factor=1),
                   [np.datetime64("2020-01-01T00:00:00"), None,
                    np.datetime64("1999-12-31T23:59:59")]),
    "complex64": (Complex64(), [1 + 2j, None, -3j]),
    "fixed utf32": (FixedLengthUTF32(length=3), ["ab", None, "xyz"]),
    "null-terminated bytes": (NullTerminatedBytes(length=4), [b"ab", None, b"wxyz"]),
    "string": (VariableLengthUTF8(), ["\u03b1", None, ""]),
    "variable bytes": (VariableLengthBytes(), [b"\x00\x01", None, b""]),
}


@pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
@pytest.mark.parametrize("case", sorted(OTHER_INNERS))
def test_other_inner_types_roundtrip(case: str) -> None:
    inner, values = OTHER_INNERS[case]
    dtype = OptionalDType(inner)
    present = [v for v in values if v is not None]
    masked = np.ma.MaskedArray(
        np.array([v if v is not None else present[0] for v in values],
                 dtype=dtype.to_native_dtype()["value"]),
        mask=[v is None for v in values])
    store: dict[str, Any] = {}
    z = zarr.create_array(store, shape=(3,), chunks=(2,), dtype=dtype, fill_value=None)
    z[...] = masked
    got = zarr.open_array(store, mode="r")[...]
    assert got["valid"].tolist() == [v is not None for v in values]
    expected = np.array(present, dtype=dtype.to_native_dtype()["value"])
    assert got["value"][got["valid"]].tolist() == expected.tolist()


def test_fortran_ordered_chunks_keep_c_order_on_disk() -> None:
    dtype = OptionalDType(Int16())
    grid = np.arange(20).reshape(4, 5)
    values = np.ma.MaskedArray(grid, mask=grid % 3 == 0)
    stores: list[dict[str, Any]] = [{}, {}]
    for store, order in zip(stores, ("C", "F"), strict=True):
        z = zarr.create_array(store, shape=(4, 5), chunks=(3, 4), dtype=dtype, fill_value=None,
                              config={"order": order}, compressors=None)
        z[...] = values
        got = zarrext.to_masked(zarr.open_array(store, mode="r", config={"order": order})[...])
        assert got.mask.tolist() == values.mask.tolist()
        assert got.compressed().tolist() == values.compressed().tolist()
    assert {k: v.to_bytes() for k, v in stores[0].items() if k.startswith("c/")} == {
        k: v.to_bytes() for k, v in stores[1].items() if k.startswith("c/")}


def test_sharded_optional_array_reads_partial_and_skips_empty_inner_chunks() -> None:
    dtype = OptionalDType(Float32())
    store: dict[str, Any] = {}
    z = zarr.create_array(store, shape=(16, 16), chunks=(4, 4), shards=(8, 8), dtype=dtype,
                          fill_value=None, compressors=ZstdCodec())
    values = np.ma.masked_all((16, 16), dtype="f4")
    values[:3, :5] = np.arange(15).reshape(3, 5)
    z[...] = values
    assert sorted(k for k in store if k.startswith("c/")) == ["c/0/0"]
    np.testing.assert_array_equal(zarrext.to_masked(z[1:3, 2:4]).filled(-1),
                                  values[1:3, 2:4].filled(-1))


# -- chains ---------------------------------------------------------------------------


def test_data_chain_quantizes_only_present_values() -> None:
    dtype = OptionalDType(Float32())
    data_codecs = [
        {"name": "scale_offset", "configuration": {"offset": 10, "scale": 100}},
        {"name": "cast_value", "configuration": {"data_type": "int16"}},
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 3}},
    ]
    store: dict[str, Any] = {}
    z = zarr.create_array(store, shape=(8,), chunks=(8,), dtype=dtype, fill_value=None,
                          serializer=OptionalCodec(data_codecs=data_codecs), compressors=None)
    values = np.ma.MaskedArray([10.5, 1e30, 11.25, -7e30, 9.0, 10.0, 0, 12.0],
                               mask=[0, 1, 0, 1, 0, 0, 1, 0], dtype="f4")
    z[...] = values  # huge values under the mask would overflow int16 if quantized
    got = zarrext.to_masked(z[...])
    assert got.mask.tolist() == values.mask.tolist()
    np.testing.assert_allclose(got.compressed(), values.compressed(), atol=0.005)
    # the data section is what zarr-python's own chain makes of the present values alone
    plain: dict[str, Any] = {}
    p = zarr.create_array(plain, shape=(5,), chunks=(5,), dtype="float32",
                          filters=data_codecs[:2], serializer=data_codecs[2],
                          compressors=data_codecs[3:])
    p[...] = values.compressed()
    chunk = store["c/0"].to_bytes()
    mask_len, _ = struct.unpack("<QQ", chunk[:16])
    assert chunk[16 + mask_len:] == plain["c/0"].to_bytes()


def test_mask_chain_with_conditional_zstd_gets_runtime_decision(where: Where) -> None:
    dtype = OptionalDType(UInt8())
    codec = OptionalCodec(mask_codecs=[PackBitsCodec(), ConditionalCodec(codecs=[ZstdCodec()])],
                          data_codecs=[BytesCodec()])
    zarr.create_array(where.location("a"), storage_options=where.options, shape=(4096,),
                      chunks=(4096,), dtype=dtype, fill_value=None, serializer=codec,
                      compressors=None)
    values = np.ma.MaskedArray(np.arange(4096) % 200, mask=np.arange(4096) % 64 != 0)
    for decision, applied in (("never_apply", 0), ("always_apply", 1)):
        z = zarrext.open_array(where.location("a"), storage_options=where.options,
                               decision=decision)
        z[...] = values
        chunk = where.stored("a")["c/0"]
        mask_len, _ = struct.unpack("<QQ", chunk[:16])
        assert chunk[16] == applied  # the conditional header byte opens the mask section
        if applied:
            assert mask_len < 4096 // 8
        got = zarr.open_array(where.location("a"), storage_options=where.options, mode="r")[...]
        assert zarrext.to_masked(got).mask.tolist() == values.mask.tolist()


def test_map_nested_codecs_reaches_nested_chains() -> None:
    inner = OptionalCodec(mask_codecs=[PackBitsCodec(), ConditionalCodec(codecs=[ZstdCodec()])])
    outer = OptionalCodec(data_codecs=[inner])
    seen: list[str] = []

    def fn(codec: Any) -> Any:
        seen.append(type(codec).__name__)
        if isinstance(codec, OptionalCodec):
            return codec.map_nested_codecs(fn)
        if isinstance(codec, ConditionalCodec):
            return codec.with_decision("always_apply")
        return codec

    mapped = outer.map_nested_codecs(fn)
    assert seen == ["PackBitsCodec", "OptionalCodec", "PackBitsCodec", "ConditionalCodec",
                    "BytesCodec"]
    assert mapped == outer  # decisions are not part of equality, metadata unchanged
    nested_conditional = mapped.data_codecs[0].mask_codecs[1]  # type: ignore[attr-defined]
    assert nested_conditional.decision is not inner.mask_codecs[1].decision  # type: ignore[attr-defined]


# -- names and metadata ----------------------------------------------------------------


def test_name_dispatch_keeps_both_optional_codecs_working() -> None:
    nullable = zarr.registry.get_codec_class("optional").from_dict(
        {"name": "optional", "configuration": {"mask_codecs": [{"name": "packbits"}],
                                               "data_codecs": [{"name": "bytes"}]}})
    assert isinstance(nullable, OptionalCodec)
    conditional = zarr.registry.get_codec_class("optional").from_dict(
        {"name": "optional",
         "configuration": {"codecs": [{"name": "zstd", "configuration": {"level": 1}}]}})
    assert isinstance(conditional, ConditionalCodec)
    assert conditional.to_dict()["name"] == "optional"
    alias = zarr.registry.get_codec_class("zarrs.optional").from_dict(
        {"name": "zarrs.optional", "configuration": {"mask_codecs": [{"name": "packbits"}],
                                                     "data_codecs": [{"name": "bytes"}]}})
    assert isinstance(alias, OptionalCodec)
    assert alias.to_dict()["name"] == "zarrs.optional"
    # the legacy conditional name still encodes and decodes inside an array
    store: dict[str, Any] = {}
    z = zarr.create_array(store, shape=(100,), chunks=(50,), dtype="uint16",
                          compressors=[conditional])
    z[...] = np.arange(100)
    np.testing.assert_array_equal(zarr.open_array(store)[...], np.arange(100))


def test_written_metadata_validates_against_schema(where: Where) -> None:
    dtype = OptionalDType(OptionalDType(Float64()))
    zarr.create_array(where.location("a"), storage_options=where.options, shape=(4,),
                      dtype=dtype, fill_value=[None])
    codecs = json.loads(where.stored("a")["zarr.json"])["codecs"]
    jsonschema.validate(codecs[0], CODEC_SCHEMA)
    jsonschema.validate(codecs[0]["configuration"]["data_codecs"][0], CODEC_SCHEMA)


def test_configuration_errors() -> None:
    with pytest.raises(OptionalCodecError, match="missing \\['data_codecs'\\]"):
        OptionalCodec.from_dict({"name": "optional", "configuration": {"mask_codecs": []}})
    with pytest.raises(OptionalCodecError, match="invalid data_codecs"):
        OptionalCodec(data_codecs=[ZstdCodec()])
    with pytest.raises(OptionalCodecError, match="name must be one of"):
        OptionalCodec(name="nullable")
    with pytest.raises(OptionalCodecError, match="needs the optional data type"):
        zarr.create_array({}, shape=(3,), dtype="uint8", serializer=OptionalCodec())


# -- async-only nested codecs -------------------------------------------------------------


@dataclass(frozen=True)
class AsyncOnlyXor(BytesBytesCodec):
    """A bytes->bytes codec with no synchronous path (xor 0x5A)."""

    is_fixed_size = True

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AsyncOnlyXor:
        return cls()

    def to_dict(self) -> dict[str, Any]:
        return {"name": "test.async_xor"}

    async def _decode_single(self, chunk_bytes: Any, chunk_spec: ArraySpec) -> Any:
        data = chunk_bytes.as_numpy_array() ^ 0x5A
        return chunk_spec.prototype.buffer.from_array_like(data)

    async def _encode_single(self, chunk_bytes: Any, chunk_spec: ArraySpec) -> Any:
        return await self._decode_single(chunk_bytes, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, _: ArraySpec) -> int:
        return input_byte_length


def test_async_only_codecs_in_chains() -> None:
    register_codec("test.async_xor", AsyncOnlyXor)
    codec = OptionalCodec(mask_codecs=[PackBitsCodec(), AsyncOnlyXor()],
                          data_codecs=[BytesCodec(), AsyncOnlyXor()])
    assert not codec._sync_capable
    store: dict[str, Any] = {}
    z = zarr.create_array(store, shape=(20,), chunks=(10,), dtype=OptionalDType(UInt8()),
                          fill_value=None, serializer=codec, compressors=None)
    values = np.ma.MaskedArray(np.arange(20), mask=np.arange(20) % 3 == 0)
    z[...] = values
    chunk = store["c/0"].to_bytes()
    mask_len, _ = struct.unpack("<QQ", chunk[:16])
    present = values[:10].compressed().astype("u1")
    assert chunk[16 + mask_len:] == (present ^ 0x5A).tobytes()
    got = zarrext.to_masked(zarr.open_array(store)[...])
    assert got.mask.tolist() == values.mask.tolist()


@pytest.mark.parametrize("form", ["spec", "zarrs"])
def test_async_only_chains_with_no_element_present(form: str) -> None:
    register_codec("test.async_xor", AsyncOnlyXor)
    codec = OptionalCodec(mask_codecs=[PackBitsCodec(), AsyncOnlyXor()],
                          data_codecs=[BytesCodec(), AsyncOnlyXor(), ZstdCodec()])
    store: dict[str, Any] = {}
    z = zarr.create_array(store, shape=(20,), chunks=(10,), dtype=OptionalDType(UInt8()),
                          fill_value=[3], serializer=codec, compressors=None)
    z[:10] = np.ma.masked_all(10, "u1")
    mask = bytes(b ^ 0x5A for b in _packbits(np.zeros(10, bool)))
    nothing = bytes(numcodecs.Zstd(level=0).encode(b""))  # xor of nothing is nothing
    assert store["c/0"].to_bytes() == _optional_chunk(mask, nothing)
    if form == "zarrs":
        store["c/0"] = PROTO.buffer.from_bytes(_optional_chunk(mask, b""))
    got = zarr.open_array(store, mode="r")[...]
    assert got["valid"].tolist() == [False] * 10 + [True] * 10
    assert got["value"].tolist() == [0] * 10 + [3] * 10


# -- hostile chunks -------------------------------------------------------------------------

HOSTILE_DTYPE = OptionalDType(Int16())
HOSTILE_SPEC = _spec(HOSTILE_DTYPE, (8,))
GOOD_MASK = np.packbits([1, 0, 1, 1, 0, 0, 0, 1], bitorder="little").tobytes()
GOOD_DATA = np.array([1, 2, 3, 4], "<i2").tobytes()
HOSTILE = {
    "short header": (b"\1\0\0", "shorter than the 16-byte header"),
    "mask past end": (struct.pack("<QQ", 50, 0) + GOOD_MASK, "mask length 50 exceeds"),
    "data past end": (struct.pack("<QQ", 1, 9) + GOOD_MASK + GOOD_DATA, "data length 9 exceeds"),
    "max mask length": (struct.pack("<QQ", 2**64 - 1, 8) + GOOD_MASK + GOOD_DATA,
                        "mask length 18446744073709551615 exceeds"),
    "max data length": (struct.pack("<QQ", 1, 2**64 - 1) + GOOD_MASK + GOOD_DATA,
                        "data length 18446744073709551615 exceeds"),
    "both huge, summing past end": (struct.pack("<QQ", 2**63, 2**63) + GOOD_MASK,
                                    "exceeds"),
    "trailing bytes": (struct.pack("<QQ", 1, 8) + GOOD_MASK + GOOD_DATA + b"xx",
                       "2 trailing bytes"),
    "fewer elements than mask": (struct.pack("<QQ", 1, 6) + GOOD_MASK + GOOD_DATA[:6],
                                 "cannot decode 4 present elements from the 6-byte"),
    "more elements than mask": (struct.pack("<QQ", 1, 10) + GOOD_MASK + GOOD_DATA + b"\0\0",
                                "cannot decode 4 present elements from the 10-byte"),
    "data but nothing present": (struct.pack("<QQ", 1, 2) + b"\0" + b"\1\0",
                                 "no element present, but the 2-byte data section is not "
                                 "the data codecs' encoding of zero elements"),
    "truncated packbits mask": (struct.pack("<QQ", 0, 8) + GOOD_DATA,
                                "packbits codec, chunk .*0 bytes, expected 1"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_chunks_fail_clearly_without_large_allocation(case: str) -> None:
    data, message = HOSTILE[case]
    codec = OptionalCodec(mask_codecs=[PackBitsCodec()], data_codecs=[BytesCodec()])
    codec = codec.evolve_from_array_spec(HOSTILE_SPEC)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=message):
            codec._decode_sync(_buf(data), HOSTILE_SPEC)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_hostile_chunk_in_array_names_codec_and_chunk() -> None:
    store: dict[str, Any] = {}
    z = zarrext.create_array(store, shape=(16,), chunks=(8,), dtype=HOSTILE_DTYPE,
                             fill_value=None, compressors=None)
    z[...] = np.ma.MaskedArray(np.arange(16), mask=np.arange(16) % 2 == 0)
    store["c/1"] = PROTO.buffer.from_bytes(struct.pack("<QQ", 2**64 - 1, 0))
    with raises_chunk_error(OptionalCodecError, match=r"optional codec, chunk \(1,\): mask length"):
        zarrext.open_array(store, mode="r")[...]


def test_good_hostile_baseline_decodes() -> None:
    """The hostile cases are corruptions of this valid chunk."""
    codec = OptionalCodec(mask_codecs=[PackBitsCodec()],
                          data_codecs=[BytesCodec()]).evolve_from_array_spec(HOSTILE_SPEC)
    chunk = struct.pack("<QQ", 1, 8) + GOOD_MASK + GOOD_DATA
    got = codec._decode_sync(_buf(chunk), HOSTILE_SPEC).as_numpy_array()
    assert got["valid"].tolist() == [True, False, True, True, False, False, False, True]
    assert got["value"][got["valid"]].tolist() == [1, 2, 3, 4]


# -- hostile bytes: every failure is this codec's error, bounded by the chunk ------


@pytest.mark.parametrize(
    "compressor", [ZstdCodec(), zarr.codecs.GzipCodec()], ids=["zstd", "gzip"]
)
def test_nested_chain_errors_are_the_codecs_own(compressor: Any) -> None:
    dtype = OptionalDType(UInt8())
    codec = OptionalCodec(mask_codecs=[PackBitsCodec()], data_codecs=[BytesCodec(), compressor])
    chunk = struct.pack("<QQ", 1, 4) + b"\x0f" + bytes(4)  # 4 present, data not compressed
    with pytest.raises(OptionalCodecError, match=r"optional codec, chunk.*4 present elements"):
        codec._decode_sync(PROTO.buffer.from_bytes(chunk), _spec(dtype, (4,)))


def test_mask_chain_errors_are_the_codecs_own() -> None:
    dtype = OptionalDType(UInt8())
    codec = OptionalCodec(mask_codecs=[PackBitsCodec(), ZstdCodec()], data_codecs=[BytesCodec()])
    chunk = struct.pack("<QQ", 3, 0) + b"abc"
    with pytest.raises(OptionalCodecError, match=r"cannot decode the 3-byte mask section"):
        codec._decode_sync(PROTO.buffer.from_bytes(chunk), _spec(dtype, (4,)))


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "zstd"])
def test_variable_length_count_is_bounded_by_the_mask(compressed: bool) -> None:
    """A 4-byte count inside the chunk must not drive the allocation (was 9.5 s, 6 GiB)."""
    dtype = OptionalDType(VariableLengthUTF8())
    data_codecs: list[Any] = [zarr.codecs.VLenUTF8Codec()]
    section = struct.pack("<I", 0x40000000) + bytes(4)
    if compressed:
        data_codecs.append(ZstdCodec())
        section = numcodecs.Zstd(level=1).encode(section)
    codec = OptionalCodec(mask_codecs=[PackBitsCodec()], data_codecs=data_codecs)
    chunk = struct.pack("<QQ", 1, len(section)) + b"\x01" + section
    tracemalloc.start()
    try:
        with pytest.raises(OptionalCodecError, match=r"holds 1073741824 elements.*marks 1"):
            codec._decode_sync(PROTO.buffer.from_bytes(chunk), _spec(dtype, (4,)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def _nested_codec(depth: int) -> dict[str, Any]:
    codec: dict[str, Any] = {"name": "bytes"}
    for _ in range(depth):
        codec = {"name": "optional", "configuration": {
            "mask_codecs": [{"name": "packbits"}], "data_codecs": [codec]}}
    return codec


def test_nesting_depth_is_capped_at_parse_time() -> None:
    assert OptionalCodec.from_dict(_nested_codec(31)) is not None
    with pytest.raises(ValueError, match="more than 32 levels deep"):
        OptionalCodec.from_dict(_nested_codec(300))
