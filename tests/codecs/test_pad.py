"""Tests for the ``pad`` codec (zarrext.codecs.pad)."""

from __future__ import annotations

import base64
import gzip
import json
import struct
import subprocess
import sys

import jsonschema
import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import get_data_type_from_native_dtype

import zarrext
from tests.conftest import DATA, Where, on_batched_path, raises_chunk_error
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


# -- static padding is written literally, byte for byte -------------------------------
# Spec 004: padding is "the literal bytes to use for padding". Example 1's TIFF header
# (made for 256x256 uint16 chunks) on 128x128 chunks, also behind gzip, must reach
# every stored chunk object exactly as zarr.json holds it, whichever route writes.


def spec_example_1_header(
    width: int = 256, length: int = 256, rows_per_strip: int = 256,
    strip_byte_count: int = 256 * 256 * 2,
) -> bytes:
    """Spec 004 Example 1's padding, from the fields its text lists (as its appendix
    script builds it): the 8-byte little-endian TIFF header, then one IFD of 8 entries
    in tag order and a next-IFD offset of 0. Other values give the same layout."""

    def entry(tag: int, kind: int, value: int) -> bytes:
        return struct.pack("<HHII", tag, kind, 1, value)

    ifd = struct.pack("<H", 8) + b"".join([
        entry(256, 3, width),  # ImageWidth (SHORT)
        entry(257, 3, length),  # ImageLength (SHORT)
        entry(258, 3, 16),  # BitsPerSample
        entry(259, 3, 1),  # Compression: none
        entry(262, 3, 1),  # PhotometricInterpretation: BlackIsZero
        entry(273, 4, 110),  # StripOffsets (LONG): right after the padding
        entry(278, 3, rows_per_strip),  # RowsPerStrip (SHORT)
        entry(279, 4, strip_byte_count),  # StripByteCounts (LONG)
    ]) + struct.pack("<I", 0)
    return b"II*\x00" + struct.pack("<I", 8) + ifd


EXAMPLE_1 = spec_example_1_header()
EXAMPLE_SHAPE, EXAMPLE_CHUNKS, EXAMPLE_SHARDS = (320, 256), (128, 128), (256, 256)
LITERAL_CHAINS = {"bytes-pad": [], "bytes-gzip-pad": [GzipCodec()]}
LITERAL_ROUTES = ("zarr", "zarrext", "zarrext-batched")


def test_spec_example_1_fields_give_its_base64_padding() -> None:
    # The spec's two statements of Example 1 (field list, base64) agree; the tests
    # below use the bytes built from the field list.
    assert len(EXAMPLE_1) == 110
    assert base64.b64decode(SPEC_TIFF_PADDING) == EXAMPLE_1


def sample_u16(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**16, shape, dtype="uint16")


def chunk_samples(data: np.ndarray, index: tuple[int, ...], chunks: tuple[int, ...]) -> bytes:
    """The chunk at ``index`` as the bytes codec lays it out (little endian, C order),
    edge chunks filled with the fill value 0 to the full chunk shape."""
    out = np.zeros(chunks, data.dtype)
    block = data[tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunks, strict=True))]
    out[tuple(slice(0, s) for s in block.shape)] = block
    return out.astype(out.dtype.newbyteorder("<")).tobytes()


def inner_chunk_objects(shard: bytes, per_shard: tuple[int, ...]) -> dict[tuple[int, ...], bytes]:
    """The stored inner chunks of a shard, read with the sharding spec's default index
    (at the end: (offset, nbytes) u64 little endian per inner chunk, then a crc32c)."""
    n = int(np.prod(per_shard))
    index = struct.unpack(f"<{2 * n}Q", shard[-(16 * n + 4) : -4])
    out = {}
    for flat, inner in enumerate(np.ndindex(*per_shard)):
        offset, nbytes = index[2 * flat], index[2 * flat + 1]
        if offset != 2**64 - 1:
            out[inner] = shard[offset : offset + nbytes]
    return out


def stored_chunks(
    objects: dict[str, bytes], chunks: tuple[int, ...], shards: tuple[int, ...] | None
) -> dict[tuple[int, ...], bytes]:
    """Every stored chunk object by chunk grid index: chunk files, or the inner chunks
    of every shard file."""
    files = {tuple(map(int, k.split("/")[1:])): v for k, v in objects.items()
             if k.startswith("c/")}
    if shards is None:
        return files
    per_shard = tuple(s // c for s, c in zip(shards, chunks, strict=True))
    out = {}
    for shard_index, shard in files.items():
        for inner, data in inner_chunk_objects(shard, per_shard).items():
            out[tuple(s * p + i for s, p, i in zip(shard_index, per_shard, inner,
                                                    strict=True))] = data
    return out


def _create_literal(route: str, where: Where, compressors: list, sharded: bool):
    kwargs = {
        "storage_options": where.options, "shape": EXAMPLE_SHAPE, "chunks": EXAMPLE_CHUNKS,
        "shards": EXAMPLE_SHARDS if sharded else None, "dtype": "uint16",
        "serializer": BytesCodec(endian="little"),
        "compressors": [*compressors, PadCodec.from_dict({"name": "pad", "configuration": {
            "location": "start", "nbytes": 110,
            "padding": base64.b64encode(EXAMPLE_1).decode()}})],
    }
    if route == "zarr":
        return zarr.create_array(where.location("a.zarr"), **kwargs)
    array = zarrext.create_array(where.location("a.zarr"), **kwargs)
    return on_batched_path(array) if route == "zarrext-batched" else array


def _reopen_literal(route: str, where: Where):
    if route == "zarr":
        return zarr.open_array(where.location("a.zarr"), storage_options=where.options,
                               mode="r+")
    array = zarrext.open_array(where.location("a.zarr"), storage_options=where.options)
    return on_batched_path(array) if route == "zarrext-batched" else array


@pytest.mark.filterwarnings("ignore::zarrext.codecs.pad.PaddingWarning")
@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
@pytest.mark.parametrize("route", LITERAL_ROUTES)
@pytest.mark.parametrize("chain", sorted(LITERAL_CHAINS))
def test_spec_example_1_header_on_other_chunks_is_written_literally(
    where: Where, chain: str, route: str, sharded: bool
) -> None:
    data = sample_u16(EXAMPLE_SHAPE)
    _create_literal(route, where, LITERAL_CHAINS[chain], sharded)[:] = data
    # a partial write (read-modify-write of the chunks it touches), reopened
    data[100:200, 50:60] = 7
    _reopen_literal(route, where)[100:200, 50:60] = 7
    objects = where.stored("a.zarr")
    meta = json.loads(objects["zarr.json"])
    codecs = meta["codecs"][0]["configuration"]["codecs"] if sharded else meta["codecs"]
    assert codecs[-1]["configuration"]["padding"] == base64.b64encode(EXAMPLE_1).decode()
    chunks = stored_chunks(objects, EXAMPLE_CHUNKS, EXAMPLE_SHARDS if sharded else None)
    assert sorted(chunks) == sorted(np.ndindex(3, 2))  # every chunk, edge chunks too
    for index, stored in chunks.items():
        assert stored[:110] == EXAMPLE_1, index  # the header as zarr.json holds it
        body = stored[110:]
        if chain == "bytes-gzip-pad":
            body = gzip.decompress(body)
        assert body == chunk_samples(data, index, EXAMPLE_CHUNKS), index
    np.testing.assert_array_equal(
        zarr.open_array(where.location("a.zarr"), storage_options=where.options, mode="r")[:],
        data)


@pytest.mark.filterwarnings("ignore::zarrext.codecs.pad.PaddingWarning")
def test_shard_layout_writes_write_the_padding_literally(tmp_path) -> None:
    """zarrext's in-place shard writer (shard_layout) encodes inner chunks its own way."""
    data = sample_u16(EXAMPLE_SHAPE, seed=1)
    for layout in ("append", "fixed-slot"):
        path = tmp_path / f"{layout}.zarr"
        zarrext.create_array(
            str(path), shape=EXAMPLE_SHAPE, chunks=EXAMPLE_CHUNKS, shards=EXAMPLE_SHARDS,
            dtype="uint16", serializer=BytesCodec(),
            compressors=[PadCodec(location="start", nbytes=110, padding=EXAMPLE_1)],
            shard_layout=layout,
        )[:] = data
        zarrext.open_array(str(path), shard_layout=layout)[:64, :64] = 9
        data[:64, :64] = 9
        objects = {p.relative_to(path).as_posix(): p.read_bytes()
                   for p in path.rglob("*") if p.is_file()}
        chunks = stored_chunks(objects, EXAMPLE_CHUNKS, EXAMPLE_SHARDS)
        assert sorted(chunks) == sorted(np.ndindex(3, 2))
        for index, stored in chunks.items():
            assert stored == EXAMPLE_1 + chunk_samples(data, index, EXAMPLE_CHUNKS), index


PROPERTY_CHAINS = {
    "bytes": ([], lambda body: body),
    "gzip": ([GzipCodec()], gzip.decompress),
    "zstd": ([ZstdCodec()], lambda body: numcodecs.Zstd().decode(body)),
    "crc32c": ([Crc32cCodec()], lambda body: body[:-4]),  # the checksum follows the data
}


@pytest.mark.filterwarnings("ignore::zarrext.codecs.pad.PaddingWarning")
@settings(max_examples=25)
@given(
    dtype=st.sampled_from(["uint8", "int16", "uint16", "float32", "float64"]),
    chunks=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    grid=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    cut=st.tuples(st.integers(0, 8), st.integers(0, 8)),
    chain=st.sampled_from(sorted(PROPERTY_CHAINS)),
    location=st.sampled_from(["start", "end"]),
    sharded=st.booleans(),
    route=st.sampled_from(["zarr", "zarrext"]),
)
def test_static_padding_reaches_every_chunk_object_byte_for_byte(
    dtype: str, chunks: tuple[int, int], grid: tuple[int, int], cut: tuple[int, int],
    chain: str, location: str, sharded: bool, route: str,
) -> None:
    # Partial edge chunks (cut), any data type, compressed or not, sharded or not: the
    # stored object is the padding, as given, then (or before) the encoded chunk.
    shape = tuple(max(1, g * c - k % c) for g, c, k in zip(grid, chunks, cut, strict=True))
    shards = tuple(2 * c for c in chunks) if sharded else None
    codecs, decode = PROPERTY_CHAINS[chain]
    data = (np.arange(np.prod(shape)) % 250 + 1).astype(dtype).reshape(shape)  # no fill
    objects: dict = {}
    create = zarr.create_array if route == "zarr" else zarrext.create_array
    array = create(
        zarr.storage.MemoryStore(store_dict=objects), shape=shape, chunks=chunks,
        shards=shards, dtype=dtype, serializer=BytesCodec(endian="little"),
        compressors=[*codecs, PadCodec(location=location, nbytes=110, padding=EXAMPLE_1)],
    )
    array[:] = data
    stored = stored_chunks({k: v.to_bytes() for k, v in objects.items()}, chunks, shards)
    assert len(stored) == np.prod([-(-s // c) for s, c in zip(shape, chunks, strict=True)])
    for index, chunk in stored.items():
        pad, body = (chunk[:110], chunk[110:]) if location == "start" else (
            chunk[-110:], chunk[:-110])
        assert pad == EXAMPLE_1
        assert decode(body) == chunk_samples(data, index, chunks)
    np.testing.assert_array_equal(array[:], data)
