"""Tests for the ``pad`` codec (zarrext.codecs.pad)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import jsonschema
import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, GzipCodec, ZstdCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import get_data_type_from_native_dtype

import zarrext
from tests.conftest import DATA, Where, raises_chunk_error
from zarrext.codecs.pad import PadCodec, PadCodecError

SPEC_TIFF_PADDING = (
    "SUkqAAgAAAAIAAABAwABAAAAAAEAAAEBAwABAAAAAAEAAAIBAwABAAAAEAAAAAMBAwABAAAAAQAAAAYBAwABAAAA"
    "AQAAABEBBAABAAAAbgAAABYBAwABAAAAAAEAABcBBAABAAAAAAACAAAAAAA="
)


def spec_of(shape: tuple[int, ...] = (8,), dtype: str = "uint8") -> ArraySpec:
    return ArraySpec(
        shape=shape,
        dtype=get_data_type_from_native_dtype(np.dtype(dtype)),
        fill_value=0,
        config=ArrayConfig.from_dict({}),
        prototype=default_buffer_prototype(),
    )


def buf(data: bytes):
    return default_buffer_prototype().buffer.from_bytes(data)


@pytest.fixture(scope="module")
def pad_schema() -> dict:
    return json.loads((DATA / "pad.schema.json").read_text())


# -- metadata -----------------------------------------------------------------


def test_spec_example_1_round_trips_and_validates(pad_schema: dict) -> None:
    metadata = {
        "name": "pad",
        "configuration": {"location": "start", "nbytes": 110, "padding": SPEC_TIFF_PADDING},
    }
    codec = PadCodec.from_dict(metadata)
    assert codec.padding == base64.b64decode(SPEC_TIFF_PADDING)
    assert codec.padding is not None
    assert codec.padding[:4] == b"II*\x00"
    assert codec.to_dict() == metadata
    jsonschema.validate(codec.to_dict(), pad_schema)


@pytest.mark.parametrize(
    "codec",
    [
        PadCodec(location="end", nbytes=0),
        PadCodec(location="start", nbytes=3, padding=b"abc"),
        PadCodec(location="start", nbytes=4, padding=lambda d, i, s: b"1234"),
    ],
)
def test_written_metadata_validates_against_registry_schema(codec: PadCodec, pad_schema: dict):
    jsonschema.validate(codec.to_dict(), pad_schema)
    assert PadCodec.from_dict(codec.to_dict()) == codec


@pytest.mark.parametrize(
    ("configuration", "message"),
    [
        ({"location": "middle", "nbytes": 1}, "location"),
        ({"location": "start", "nbytes": -1}, "nbytes must be >= 0"),
        ({"location": "start", "nbytes": 1.5}, "nbytes must be an integer"),
        ({"location": "start", "nbytes": True}, "nbytes must be an integer"),
        ({"location": "start", "nbytes": 2, "padding": "AAAA"}, "decodes to 3 bytes"),
        ({"location": "start", "nbytes": 2, "padding": "!!"}, "not valid base64"),
        ({"location": "start", "nbytes": 2, "padding": 7}, "base64 string"),
        ({"location": "start"}, "'nbytes'"),
        ({"nbytes": 1}, "'location'"),
        ({"location": "start", "nbytes": 1, "fill": 0}, "unknown configuration keys"),
    ],
)
def test_invalid_configuration_is_rejected(configuration: dict, message: str) -> None:
    with pytest.raises(PadCodecError, match=message):
        PadCodec.from_dict({"name": "pad", "configuration": configuration})


def test_padding_function_is_runtime_only() -> None:
    static = PadCodec(location="start", nbytes=4)
    dynamic = PadCodec(location="start", nbytes=4, padding=lambda d, i, s: b"xxxx")
    assert dynamic == static
    assert dynamic.to_dict() == {"name": "pad", "configuration": {"location": "start", "nbytes": 4}}
    assert static.with_padding(dynamic.padding_func).padding_func is dynamic.padding_func


# -- encode / decode ----------------------------------------------------------


@given(
    data=st.binary(max_size=300),
    location=st.sampled_from(["start", "end"]),
    padding=st.one_of(st.none(), st.binary(max_size=40)),
    zeros=st.integers(0, 40),
)
def test_round_trip(data: bytes, location: str, padding: bytes | None, zeros: int) -> None:
    nbytes = zeros if padding is None else len(padding)
    codec = PadCodec(location=location, nbytes=nbytes, padding=padding)  # type: ignore[arg-type]
    spec = spec_of((len(data),))
    encoded = codec._encode_sync(buf(data), spec).to_bytes()
    pad = padding if padding is not None else bytes(zeros)
    assert encoded == (pad + data if location == "start" else data + pad)
    assert len(encoded) == codec.compute_encoded_size(len(data), spec)
    assert codec._decode_sync(buf(encoded), spec).to_bytes() == data


@given(
    values=st.lists(st.integers(0, 2**16 - 1), min_size=1, max_size=60),
    chunk=st.integers(1, 20),
    head=st.binary(max_size=20),
    tail=st.binary(max_size=20),
)
def test_round_trip_through_an_array(values: list[int], chunk: int, head: bytes, tail: bytes):
    data = np.array(values, dtype="uint16")
    store = zarr.storage.MemoryStore()
    array = zarr.create_array(
        store,
        shape=data.shape,
        chunks=(chunk,),
        dtype=data.dtype,
        compressors=[
            ZstdCodec(),
            PadCodec(location="start", nbytes=len(head), padding=head),
            PadCodec(location="end", nbytes=len(tail), padding=tail),
        ],
    )
    array[:] = data
    np.testing.assert_array_equal(zarr.open_array(store, mode="r")[:], data)


@given(
    chunks=st.lists(st.one_of(st.none(), st.binary(min_size=3, max_size=50)), max_size=12),
    location=st.sampled_from(["start", "end"]),
)
def test_batches_in_place_match_one_chunk_at_a_time(
    chunks: list[bytes | None], location: str
) -> None:
    """zarr's batched pipeline hands the codec batches (None for a missing chunk):
    decoded and encoded in place, in order, as the per-chunk methods would."""
    import asyncio

    codec = PadCodec(location=location, nbytes=3, padding=b"abc")  # type: ignore[arg-type]
    batch = [(None if c is None else buf(c), spec_of((len(c or b""),))) for c in chunks]
    encoded = asyncio.run(codec.encode(batch))
    decoded = asyncio.run(codec.decode(batch))
    for (chunk, spec), enc, dec in zip(batch, encoded, decoded, strict=True):
        if chunk is None:
            assert enc is None
            assert dec is None
            continue
        assert enc is not None
        assert dec is not None
        assert enc.to_bytes() == codec._encode_sync(chunk, spec).to_bytes()
        assert dec.to_bytes() == codec._decode_sync(chunk, spec).to_bytes()


def test_plain_zarr_batches_of_many_chunks_round_trip(where: Where) -> None:
    """zarr-python's own pipeline with batches of many chunks (its batch_size)."""
    data = np.arange(40 * 30, dtype="<u2").reshape(40, 30)
    with zarr.config.set({"codec_pipeline.batch_size": 7}):
        z = zarr.create_array(
            where.location("a.zarr"), storage_options=where.options,
            shape=data.shape, chunks=(8, 8), dtype="<u2",
            compressors=[ZstdCodec(level=1), PadCodec(location="end", nbytes=2, padding=b"ok")],
        )
        z[:] = data
        np.testing.assert_array_equal(
            zarr.open_array(where.location("a.zarr"), storage_options=where.options,
                            mode="r")[:], data)
    chunks = {k: v for k, v in where.stored("a.zarr").items() if k.startswith("c/")}
    assert len(chunks) == 5 * 4
    for chunk in chunks.values():
        assert chunk.endswith(b"ok")


def test_decode_of_too_short_chunk_names_the_chunk(where: Where) -> None:
    array = zarrext.create_array(
        where.location("a.zarr"),
        storage_options=where.options,
        shape=(4, 4),
        chunks=(2, 2),
        dtype="uint8",
        compressors=[PadCodec(location="start", nbytes=10)],
    )
    array[:] = 1
    where.put("a.zarr", "c/1/0", b"short")
    with raises_chunk_error(PadCodecError, match=r"chunk \(1, 0\).*5 bytes.*10 bytes"):
        zarrext.open_array(where.location("a.zarr"), storage_options=where.options, mode="r")[:]


def test_two_pads_wrap_the_chunk(where: Where) -> None:
    array = zarr.create_array(
        where.location("a.zarr"),
        storage_options=where.options,
        shape=(6,),
        chunks=(3,),
        dtype="uint8",
        serializer=BytesCodec(),
        compressors=[
            PadCodec(location="start", nbytes=4, padding=b"HEAD"),
            PadCodec(location="end", nbytes=4, padding=b"TAIL"),
        ],
    )
    array[:] = np.arange(6, dtype="uint8")
    assert where.stored("a.zarr")["c/1"] == b"HEAD\x03\x04\x05TAIL"
    np.testing.assert_array_equal(
        zarr.open_array(where.location("a.zarr"), storage_options=where.options)[:],
        np.arange(6))


def test_spec_example_2_custom_header_before_gzip(where: Where) -> None:
    codec = PadCodec.from_dict(
        {
            "name": "pad",
            "configuration": {
                "location": "start",
                "nbytes": 16,
                "padding": "TVlfQ1VTVE9NX0hFQURFUg==",
            },
        }
    )
    array = zarr.create_array(
        where.location("a.zarr"),
        storage_options=where.options,
        shape=(100,),
        chunks=(100,),
        dtype="int32",
        compressors=[GzipCodec(), codec],
    )
    array[:] = np.arange(100)
    stored = where.stored("a.zarr")["c/0"]
    assert stored[:16] == b"MY_CUSTOM_HEADER"
    assert stored[16:18] == b"\x1f\x8b"  # the gzip stream follows the header
    np.testing.assert_array_equal(
        zarr.open_array(where.location("a.zarr"), storage_options=where.options)[:],
        np.arange(100))


# -- dynamic padding ----------------------------------------------------------


def test_padding_function_sees_encoded_chunk_index_and_shape(where: Where) -> None:
    calls: list[tuple[bytes, tuple[int, ...] | None, tuple[int, ...]]] = []

    def padding(encoded: bytes, index, shape) -> bytes:
        calls.append((encoded, index, shape))
        return len(encoded).to_bytes(4, "little")

    array = zarrext.create_array(
        where.location("a.zarr"),
        storage_options=where.options,
        shape=(4, 6),
        chunks=(2, 3),
        dtype="uint16",
        serializer=BytesCodec(endian="little"),
        compressors=[ZstdCodec(), PadCodec(location="start", nbytes=4, padding=padding)],
    )
    data = np.arange(24, dtype="uint16").reshape(4, 6)
    array[:] = data
    objects = where.stored("a.zarr")
    meta = json.loads(objects["zarr.json"])
    assert meta["codecs"][-1] == {
        "name": "pad",
        "configuration": {"location": "start", "nbytes": 4},
    }
    assert sorted(c[1] for c in calls) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {c[2] for c in calls} == {(2, 3)}
    for encoded, index, _ in calls:
        stored = objects["c/" + "/".join(map(str, index))]
        assert stored == len(encoded).to_bytes(4, "little") + encoded
    np.testing.assert_array_equal(
        zarr.open_array(where.location("a.zarr"), storage_options=where.options)[:], data)


@pytest.mark.parametrize("bad", [b"abc", b"abcde", "abcd"])
def test_padding_function_wrong_answer_names_the_chunk(where: Where, bad: object) -> None:
    array = zarrext.create_array(
        where.location("a.zarr"),
        storage_options=where.options,
        shape=(4,),
        chunks=(2,),
        dtype="uint8",
        compressors=[PadCodec(location="end", nbytes=4, padding=lambda d, i, s: bad)],
    )
    with pytest.raises(PadCodecError, match=r"pad codec, chunk \(\d,\).*padding function"):
        array[:] = 1


def test_entry_point_registers_pad_in_a_fresh_process(where: Where) -> None:
    zarr.create_array(
        where.location("a.zarr"),
        storage_options=where.options,
        shape=(3,),
        chunks=(3,),
        dtype="uint8",
        compressors=[PadCodec(location="start", nbytes=2, padding=b"PP")],
    )[:] = [7, 8, 9]
    code = (
        "import json, sys, zarr; "
        "a = zarr.open_array(sys.argv[1], storage_options=json.loads(sys.argv[2])); "
        "assert list(a[:]) == [7, 8, 9], a[:]; print(type(a.metadata.codecs[-1]).__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, where.location("a.zarr"), json.dumps(where.options)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "zarrext.codecs.pad"
