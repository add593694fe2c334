"""Tests for the ``n5_default`` codec (zarrext.codecs.n5_default)."""

from __future__ import annotations

import asyncio
import copy
import gzip
import json
import math
import struct
from pathlib import Path

import jsonschema
import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from referencing import Registry, Resource
from zarr.codecs import GzipCodec, ZstdCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import get_data_type_from_native_dtype

import zarrext
from tests.conftest import DATA, raises_chunk_error
from zarrext.codecs.n5_default import (
    N5DefaultCodec,
    N5DefaultCodecError,
    encode_header,
    parse_header,
)

N5_DTYPES = [
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "int8",
    "int16",
    "int32",
    "int64",
    "float32",
    "float64",
]
REGISTRY_BASE = "https://raw.githubusercontent.com/zarr-developers/zarr-extensions/refs/heads/main"

# Stand-ins for the two registry schemas n5_default.schema.json refers to by URL
# (no network in tests): a transpose codec with an integer ``order``, a bytes codec
# with an ``endian`` of "little" or "big".
TRANSPOSE_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"const": "transpose"},
        "configuration": {
            "type": "object",
            "properties": {"order": {"type": "array", "items": {"type": "integer"}}},
            "required": ["order"],
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}
BYTES_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"const": "bytes"},
        "configuration": {
            "type": "object",
            "properties": {"endian": {"enum": ["little", "big"]}},
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads((DATA / "n5_default.schema.json").read_text())
    # The registry schema writes ``"items": {"type": "#/$defs/codec"}``, which is
    # not a JSON Schema type; it means a reference, so validate with one.
    items = schema["properties"]["configuration"]["properties"]["codecs"]["items"]
    assert items == {"type": "#/$defs/codec"}
    schema = copy.deepcopy(schema)
    schema["properties"]["configuration"]["properties"]["codecs"]["items"] = {
        "$ref": "#/$defs/codec"
    }
    registry = Registry().with_resources(
        [
            (
                f"{REGISTRY_BASE}/codecs/transpose/schema.json",
                Resource.from_contents(TRANSPOSE_SCHEMA, default_specification=_draft()),
            ),
            (
                f"{REGISTRY_BASE}/codecs/bytes/schema.json",
                Resource.from_contents(BYTES_SCHEMA, default_specification=_draft()),
            ),
        ]
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _draft():
    from referencing.jsonschema import DRAFT202012

    return DRAFT202012


def spec_of(shape: tuple[int, ...], dtype: str, fill_value: object = 0) -> ArraySpec:
    return ArraySpec(
        shape=shape,
        dtype=get_data_type_from_native_dtype(np.dtype(dtype)),
        fill_value=fill_value,
        config=ArrayConfig.from_dict({}),
        prototype=default_buffer_prototype(),
    )


def buf(data: bytes):
    return default_buffer_prototype().buffer.from_bytes(data)


def nd(array: np.ndarray):
    return default_buffer_prototype().nd_buffer.from_numpy_array(array)


def n5_block(block: np.ndarray, compress=None) -> bytes:
    """An N5 default-mode block, written by hand as the N5 spec describes."""
    header = struct.pack(f">HH{block.ndim}I", 0, block.ndim, *block.shape)
    payload = block.astype(block.dtype.newbyteorder(">")).tobytes(order="F")
    return header + (compress(payload) if compress else payload)


# -- metadata -----------------------------------------------------------------


@pytest.mark.parametrize("compressor", [None, GzipCodec(level=5), ZstdCodec(level=3)])
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_metadata_round_trips_and_validates(ndim: int, compressor, validator) -> None:
    codec = N5DefaultCodec(ndim=ndim, compressor=compressor)
    metadata = json.loads(json.dumps(codec.to_dict()))  # as zarr.json holds it
    validator.validate(metadata)
    inner = metadata["configuration"]["codecs"]
    assert inner[0] == {"name": "transpose", "configuration": {"order": list(range(ndim))[::-1]}}
    assert inner[1] == {"name": "bytes", "configuration": {"endian": "big"}}
    assert N5DefaultCodec.from_dict(metadata) == codec


def test_registry_example_parses() -> None:
    metadata = {
        "name": "n5_default",
        "configuration": {
            "codecs": [
                {"name": "transpose", "configuration": {"order": [1, 0]}},
                {"name": "bytes", "configuration": {"endian": "big"}},
                {"name": "zstd", "configuration": {"level": 0, "checksum": False}},
            ]
        },
    }
    codec = N5DefaultCodec.from_dict(metadata)
    assert codec.compressor == ZstdCodec(level=0, checksum=False)
    assert json.loads(json.dumps(codec.to_dict())) == metadata


@pytest.mark.parametrize(
    ("codecs", "message"),
    [
        ([{"name": "bytes", "configuration": {"endian": "big"}}], "must be a transpose"),
        (
            [
                {"name": "transpose", "configuration": {"order": [0, 1]}},
                {"name": "bytes", "configuration": {"endian": "big"}},
            ],
            r"full reversal \[1, 0\]",
        ),
        (
            [
                {"name": "transpose", "configuration": {"order": [1, 0]}},
                {"name": "bytes", "configuration": {"endian": "little"}},
            ],
            "big-endian",
        ),
        (
            [
                {"name": "transpose", "configuration": {"order": [1, 0]}},
                {"name": "bytes", "configuration": {"endian": "big"}},
                {"name": "gzip", "configuration": {"level": 1}},
                {"name": "crc32c"},
            ],
            "at most one bytes->bytes",
        ),
        ("transpose", "must be a list"),
        ([{"name": "transpose", "configuration": {"order": [1, 0]}}], "invalid nested codec"),
    ],
)
def test_invalid_configuration_is_rejected(codecs: object, message: str) -> None:
    with pytest.raises(N5DefaultCodecError, match=message):
        N5DefaultCodec.from_dict({"name": "n5_default", "configuration": {"codecs": codecs}})


def test_array_validation_rejects_non_n5_types_and_wrong_rank(tmp_path: Path) -> None:
    with pytest.raises(N5DefaultCodecError, match="no N5 equivalent"):
        zarr.create_array(
            tmp_path / "a", shape=(2, 2), dtype="complex64", serializer=N5DefaultCodec(ndim=2)
        )
    with pytest.raises(N5DefaultCodecError, match="the array has 3 dimensions"):
        zarr.create_array(
            tmp_path / "b", shape=(2, 2, 2), dtype="uint8", serializer=N5DefaultCodec(ndim=2)
        )


# -- round trips ----------------------------------------------------------------


@st.composite
def chunks_and_blocks(draw):
    ndim = draw(st.integers(1, 3))
    chunk = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim)))
    # Stored block: truncated, exact, or (rarely) larger than the chunk.
    block = tuple(draw(st.integers(1, c + 1)) for c in chunk)
    dtype = draw(st.sampled_from(N5_DTYPES))
    data = draw(hnp.arrays(np.dtype(dtype), block, elements={"allow_nan": False}))
    compressor = draw(st.sampled_from([None, "gzip", "zstd"]))
    return chunk, data, compressor


COMPRESSORS = {None: None, "gzip": GzipCodec(level=1), "zstd": ZstdCodec(level=1)}


@given(case=chunks_and_blocks(), fill=st.integers(0, 100))
def test_decodes_hand_written_blocks_of_any_size(case, fill: int) -> None:
    chunk, block, compressor_name = case
    codec = N5DefaultCodec(ndim=len(chunk), compressor=COMPRESSORS[compressor_name])
    compress = {None: None, "gzip": gzip.compress, "zstd": numcodecs.Zstd(level=1).encode}[
        compressor_name
    ]
    stored = n5_block(block, compress)
    spec = spec_of(chunk, str(block.dtype), fill_value=fill)
    decoded = codec._decode_sync(buf(bytes(stored)), spec).as_numpy_array()
    expected = np.full(chunk, fill, dtype=block.dtype)
    common = tuple(slice(0, min(a, b)) for a, b in zip(block.shape, chunk, strict=True))
    expected[common] = block[common]
    np.testing.assert_array_equal(decoded, expected)


@given(case=chunks_and_blocks())
def test_encode_then_decode_round_trips(case) -> None:
    chunk, block, compressor_name = case
    data = np.resize(block, chunk) if block.size else np.zeros(chunk, block.dtype)
    codec = N5DefaultCodec(ndim=len(chunk), compressor=COMPRESSORS[compressor_name])
    spec = spec_of(chunk, str(data.dtype))
    encoded = codec._encode_sync(nd(data), spec)
    raw = encoded.to_bytes()
    assert parse_header(raw, len(chunk), "test").shape == chunk
    if compressor_name is None:
        # The payload is N5's: big-endian, column-major, after the header.
        assert raw[4 + 4 * len(chunk) :] == data.astype(data.dtype.newbyteorder(">")).tobytes("F")
        assert len(raw) == codec.compute_encoded_size(data.nbytes, spec)
    np.testing.assert_array_equal(codec._decode_sync(encoded, spec).as_numpy_array(), data)


def test_async_path_matches_sync_path() -> None:
    asyncio.run(_async_path_matches_sync_path())


async def _async_path_matches_sync_path() -> None:
    data = np.arange(2 * 3 * 4, dtype="int32").reshape(2, 3, 4)
    codec = N5DefaultCodec(ndim=3, compressor=GzipCodec(level=1))
    spec = spec_of((2, 3, 5), "int32", fill_value=-1)
    stored = buf(n5_block(data, gzip.compress))
    got = (await codec._decode_single(stored, spec)).as_numpy_array()
    np.testing.assert_array_equal(got, codec._decode_sync(stored, spec).as_numpy_array())
    assert (got[:, :, 4] == -1).all()
    encoded = await codec._encode_single(nd(got), spec)
    assert encoded is not None
    np.testing.assert_array_equal(codec._decode_sync(encoded, spec).as_numpy_array(), got)


def test_non_square_data_is_not_transposed(tmp_path: Path) -> None:
    data = np.arange(15, dtype="uint16").reshape(3, 5)
    array = zarr.create_array(
        tmp_path / "a",
        shape=(3, 5),
        chunks=(3, 5),
        dtype="uint16",
        serializer=N5DefaultCodec(ndim=2),
        chunk_key_encoding={"name": "v2", "separator": "/"},
        compressors=None,
    )
    array[:] = data
    stored = (tmp_path / "a" / "0" / "0").read_bytes()
    assert stored[:12] == struct.pack(">HHII", 0, 2, 3, 5)
    assert np.frombuffer(stored[12:], ">u2").tolist() == data.ravel(order="F").tolist()
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a")[:], data)


# -- bad blocks -----------------------------------------------------------------


@pytest.fixture
def n5_array(tmp_path: Path) -> Path:
    array = zarr.create_array(
        tmp_path / "a",
        shape=(4, 6),
        chunks=(2, 3),
        dtype="int16",
        serializer=N5DefaultCodec(ndim=2, compressor=GzipCodec(level=1)),
        chunk_key_encoding={"name": "v2", "separator": "/"},
        compressors=None,
    )
    array[:] = 5
    return tmp_path / "a"


@pytest.mark.parametrize(
    ("stored", "message"),
    [
        (struct.pack(">HHII", 1, 2, 2, 3) + b"\0" * 4 + b"x" * 12, r"mode is 1 \(varlength\)"),
        (
            struct.pack(">HHI", 0, 1, 6) + gzip.compress(b"\0" * 12, mtime=0),
            "has 1 dimensions, the array has 2",
        ),
        (
            struct.pack(">HHII", 0, 2, 2, 3) + gzip.compress(b"\0" * 10, mtime=0),
            r"block shape \(2, 3\) \(12 bytes of int16\).*decompressed data is 10 bytes",
        ),
        (struct.pack(">HHII", 0xFFFF, 2, 2, 3), "mode is 65535"),
        (b"\0\0\0", "too short"),
        (struct.pack(">HH", 0, 2) + b"\0\0\0\0", "shorter than the 12-byte header"),
    ],
    ids=["varlength", "wrong-ndim", "short-data", "unknown-mode", "no-header", "short-header"],
)
def test_bad_block_errors_name_the_block(n5_array: Path, stored: bytes, message: str) -> None:
    (n5_array / "1" / "0").write_bytes(stored)
    reader = zarrext.open_array(n5_array, mode="r")
    with raises_chunk_error(
        N5DefaultCodecError, match=rf"n5_default, block of chunk \(1, 0\).*{message}"
    ):
        reader[:]
    assert (reader[:2] == 5).all()  # the other blocks still read


def test_header_larger_than_the_data_cannot_allocate(n5_array: Path) -> None:
    # A raw block claiming 2^32-1 x 2^32-1 elements: refused by its length, nothing allocated.
    array = zarr.create_array(
        n5_array.parent / "raw",
        shape=(4,),
        chunks=(2,),
        dtype="uint8",
        serializer=N5DefaultCodec(ndim=1),
        chunk_key_encoding={"name": "v2", "separator": "/"},
        compressors=None,
    )
    array[:] = 1
    (n5_array.parent / "raw" / "0").write_bytes(struct.pack(">HHI", 0, 1, 2**32 - 1) + b"ab")
    with pytest.raises(N5DefaultCodecError, match=r"block shape \(4294967295,\).*data is 2 bytes"):
        zarr.open_array(n5_array.parent / "raw")[:]


def test_encode_header_limits() -> None:
    assert encode_header((3, 5)) == b"\0\0\0\2\0\0\0\3\0\0\0\5"
    with pytest.raises(N5DefaultCodecError, match="uint32"):
        encode_header((2**32,))
    assert math.prod(parse_header(encode_header((7, 1, 9)), 3, "x").shape) == 63


@pytest.mark.parametrize(
    "compression",
    [
        {"type": "raw"},
        {"type": "gzip", "level": -1},
        {"type": "zstd", "level": 3},
        {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
    ],
)
def test_converter_metadata_validates(compression: dict, validator) -> None:
    from zarrext.formats.n5 import array_metadata

    attrs = {
        "dimensions": [30, 20, 10],
        "blockSize": [8, 8, 8],
        "dataType": "uint16",
        "compression": compression,
    }
    (codec,) = array_metadata(attrs, "n5_default")["codecs"]
    validator.validate(codec)
    assert N5DefaultCodec.from_dict(codec).ndim == 3


def test_compressor_errors_are_the_codecs_own() -> None:
    codec = N5DefaultCodec(ndim=1, compressor=ZstdCodec())
    block = struct.pack(">HHI", 0, 1, 4) + bytes(4)
    with pytest.raises(N5DefaultCodecError, match=r"n5_default, block of chunk.*ZstdCodec"):
        codec._decode_sync(buf(block), spec_of((4,), "int32"))

