"""zarrext.convert's whole-unit path: the source's chunk objects fetched at once and
decoded in the write unit's thread, whole shards encoded and stored there; the same
stored objects as the region path (``src[region]`` read, ``dst[region] =`` written)."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from numcodecs import Blosc, Zstd
from zarr.codecs import BytesCodec, GzipCodec, ZstdCodec

import zarrext
from tests.conftest import Where
from zarrext.jobs.convert.shards import ShardWriter
from zarrext.jobs.convert.source_chunks import ChunkObjectReader

SHAPE = (40, 30)  # 8x8 chunks: partial edge chunks on both axes
FILL = 3


def _source(where: Where, form: str) -> np.ndarray:
    """A source with partial edge chunks, a chunk never written (read as the fill
    value) and a 16x16 block never written (a whole target shard of fill values)."""
    data = np.random.default_rng(5).normal(size=SHAPE).astype("f4")
    common: dict[str, Any] = {"shape": SHAPE, "chunks": (8, 8), "dtype": "f4",
                              "fill_value": FILL, "storage_options": where.options}
    location = where.location("src.zarr")
    if form.startswith("v2"):
        array = zarr.create_array(location, zarr_format=2, order="F" if form == "v2-F" else "C",
                                  **common)
    elif form == "v3-big-endian-gzip":
        array = zarr.create_array(location, serializer=BytesCodec(endian="big"),
                                  compressors=[GzipCodec(level=1)], **common)
    else:
        array = zarr.create_array(location, compressors=[ZstdCodec()], **common)
    data[8:16, 0:8] = FILL  # never written: a missing chunk
    data[32:40, 16:30] = FILL  # never written: the last target shard is all fill
    array[0:8, :] = data[0:8, :]
    array[8:16, 8:] = data[8:16, 8:]
    array[16:32, :] = data[16:32, :]
    array[32:40, 0:16] = data[32:40, 0:16]
    return data


TARGETS: dict[str, dict[str, Any]] = {
    "default": {},  # unsharded: the source's chunks, conditional([shuffle, zstd])
    "shards": {"chunks": (8, 8), "shards": (16, 16)},
    "wide-shards": {"chunks": (8, 8), "shards": (16, 24)},
    "conditional-zstd": {
        "chunks": (8, 8), "shards": (32, 16),
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "conditional", "configuration": {"codecs": [
                       {"name": "zstd", "configuration": {"level": 0, "checksum": False}}]}}],
    },
}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("form", ["v2", "v2-F", "v3", "v3-big-endian-gzip"])
def test_whole_unit_path_stores_what_the_region_path_stores(
    where: Where, form: str, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _source(where, form)
    options = TARGETS[target]
    read, written, transcoded = [], [], []
    reader_read, writer_write = ChunkObjectReader.read, ShardWriter.write
    writer_write_chunks = ShardWriter.write_chunks

    def counted_read(self: ChunkObjectReader, region: tuple[slice, ...]) -> Any:
        values = reader_read(self, region)
        read.append(values is not None)
        return values

    def counted_write(self: ShardWriter, region: tuple[slice, ...], values: np.ndarray) -> bool:
        done = writer_write(self, region, values)
        written.append(done)
        return done

    def counted_write_chunks(self: ShardWriter, region: tuple[slice, ...],
                             reader: ChunkObjectReader) -> bool:
        done = writer_write_chunks(self, region, reader)
        transcoded.append(done)
        return done

    monkeypatch.setattr(ChunkObjectReader, "read", counted_read)
    monkeypatch.setattr(ShardWriter, "write", counted_write)
    monkeypatch.setattr(ShardWriter, "write_chunks", counted_write_chunks)
    zarrext.convert(where.location("src.zarr"), where.location("fast.zarr"),
                    storage_options=where.options, **options)
    unsharded = "shards" not in options
    units = math.prod(-(-n // s) for n, s in zip(SHAPE, options.get("shards", (8, 8)),
                                                  strict=True))
    # the shards wholly inside the array, of inner chunks that are the source's
    # chunks, go from source chunk to inner chunk (on any store)
    whole = 0 if unsharded else math.prod(n // s for n, s in zip(SHAPE, options["shards"],
                                                                 strict=True))
    assert transcoded.count(True) == whole
    assert whole == 0 or whole < units  # both paths taken
    # every other unit read from its chunk objects
    assert read == [True] * (units - whole)
    # and stored by the unit's thread where the store has synchronous IO
    assert written == ([] if unsharded else [where.local] * (units - whole))

    monkeypatch.setattr(ChunkObjectReader, "of", classmethod(lambda cls, *a: None))
    monkeypatch.setattr(ShardWriter, "of", classmethod(lambda cls, *a: None))
    zarrext.convert(where.location("src.zarr"), where.location("region.zarr"),
                    storage_options=where.options, **options)

    fast, region = where.stored("fast.zarr"), where.stored("region.zarr")
    assert sorted(fast) == sorted(region)
    assert fast == region
    out = zarr.open_array(where.location("fast.zarr"), mode="r", storage_options=where.options)
    np.testing.assert_array_equal(out[:], data)
    if not unsharded:  # the all-fill shard is stored by neither
        last = tuple((n - 1) // s for n, s in zip(SHAPE, out.shards, strict=True))
        assert ("c/" + "/".join(map(str, last)) in fast) == bool(
            (data[tuple(slice(i * s, (i + 1) * s) for i, s in zip(last, out.shards,
                                                                  strict=True))] != FILL).any()
        )


@pytest.mark.parametrize("compressor", ["blosc", "zstd"])
@pytest.mark.parametrize("damage", ["garbage", "truncated", "other-size"])
def test_a_format_2_chunk_that_does_not_decode_fails_as_the_region_path_fails(
    tmp_path: Any, damage: str, compressor: str
) -> None:
    """A damaged chunk of a format 2 blosc or zstd source (decoded into scratch memory
    on the chunk-to-chunk path) is read again by the region path, whose error (the
    one naming the chunk) is raised: the same error either way, nothing written."""
    codec = {"blosc": Blosc(cname="lz4", shuffle=Blosc.SHUFFLE), "zstd": Zstd(level=1)}[compressor]
    source = zarr.create_array(tmp_path / "src.zarr", shape=(16, 16), chunks=(8, 8), dtype="f4",
                               zarr_format=2, filters=None, compressors=codec)
    source[:] = np.arange(256, dtype="f4").reshape(16, 16)
    chunk = tmp_path / "src.zarr" / "1.0"
    stored = chunk.read_bytes()
    chunk.write_bytes({
        "garbage": b"not blosc at all, not at all",
        "truncated": stored[: len(stored) // 2],
        # a valid frame of fewer values than the chunk holds
        "other-size": codec.encode(np.arange(60, dtype="f4")),
    }[damage])
    reader = ChunkObjectReader.of(zarr.open_array(tmp_path / "src.zarr", mode="r"), (16, 16))
    assert reader is not None
    assert reader.format_2 is not None
    transcoded: list[bool] = []
    write_chunks = ShardWriter.write_chunks

    def counted(self: ShardWriter, region: tuple[slice, ...], reader: ChunkObjectReader) -> bool:
        transcoded.append(True)
        return write_chunks(self, region, reader)

    with mock.patch.object(ShardWriter, "write_chunks", counted), \
            pytest.raises(Exception) as fast:  # noqa: PT011 (compared below)
        zarrext.convert(tmp_path / "src.zarr", tmp_path / "fast.zarr", chunks=(8, 8),
                        shards=(16, 16))
    assert transcoded == [True]
    with mock.patch.object(ChunkObjectReader, "of", classmethod(lambda cls, *a: None)), \
            mock.patch.object(ShardWriter, "of", classmethod(lambda cls, *a: None)), \
            pytest.raises(Exception) as region:  # noqa: PT011
        zarrext.convert(tmp_path / "src.zarr", tmp_path / "region.zarr", chunks=(8, 8),
                        shards=(16, 16))
    assert type(fast.value) is type(region.value)
    assert str(fast.value) == str(region.value)
    assert not (tmp_path / "fast.zarr").exists()


def test_a_chunk_that_does_not_decode_is_named_as_the_region_path_names_it(
    tmp_path: Any,
) -> None:
    source = zarr.create_array(tmp_path / "src.zarr", shape=(16, 16), chunks=(8, 8), dtype="f4",
                               compressors=[ZstdCodec()])
    source[:] = 1.0
    (tmp_path / "src.zarr" / "c" / "1" / "0").write_bytes(b"not zstd")
    with pytest.raises(ValueError, match=r"c/1/0"):
        zarrext.convert(tmp_path / "src.zarr", tmp_path / "out.zarr", chunks=(8, 8),
                        shards=(16, 16))


CHAINS: dict[str, list[dict[str, Any]] | None] = {
    "default": None,  # bytes as the source's, conditional([shuffle, zstd])
    "bytes-zstd": [{"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "zstd", "configuration": {"level": 1, "checksum": False}}],
    "conditional-zstd": TARGETS["conditional-zstd"]["codecs"],
    # stored as the values' bytes: the encoded chunk may be a view of the decoded one
    "bytes": [{"name": "bytes", "configuration": {"endian": "little"}}],
    # (not gzip: its header holds the time it was written)
    "big-endian-conditional-zstd-checksum": [
        {"name": "bytes", "configuration": {"endian": "big"}},
        {"name": "conditional", "configuration": {"codecs": [
            {"name": "zstd", "configuration": {"level": 3, "checksum": True}}]}}],
}


# format 2 sources: numcodecs compressors (blosc as the store has it), no
# filters, either order
V2_COMPRESSORS: dict[str, Any] = {
    "blosc-lz4-shuffle": Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE),
    "zstd": Zstd(level=1),
    "none": None,
}
SOURCES = ["v3-zstd", "v3-gzip", "v3-big-endian-zstd", "v2-blosc-lz4-shuffle", "v2-zstd",
           "v2-none", "v2-blosc-lz4-shuffle-F"]


@settings(max_examples=30, deadline=None)
@given(
    dtype=st.sampled_from(["u1", "i2", "f4", "f8"]),
    chunks=st.tuples(st.integers(2, 4), st.integers(2, 4)),
    per_shard=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    whole=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    edge=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    source_form=st.sampled_from(SOURCES),
    fill=st.sampled_from([0.0, 3.0, "NaN"]),
    chain=st.sampled_from(sorted(CHAINS)),
    seed=st.integers(0, 2**16),
)
def test_shards_from_source_chunks_store_what_the_region_path_stores(
    dtype: str, chunks: tuple[int, int], per_shard: tuple[int, int], whole: tuple[int, int],
    edge: tuple[int, int], source_form: str, fill: float | str, chain: str, seed: int,
) -> None:
    """Any data type, grid, source (format 3, or format 2 with numcodecs'
    compressors) and chains: whole shards inside the array go from source chunk to
    inner chunk, the rest by the values path; the objects stored are the region
    path's, byte for byte. Some chunks are missing, some all fill values (elided),
    some start with the fill value, some -0.0 where the fill is 0.0, NaNs of
    other bits where it is NaN."""
    shards = tuple(c * k for c, k in zip(chunks, per_shard, strict=True))
    shape = tuple(s * w + e for s, w, e in zip(shards, whole, edge, strict=True))
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype).kind
    fill_value = np.dtype(dtype).type(np.nan if fill == "NaN" and kind == "f" else
                                      0 if fill == "NaN" else fill)
    data = (rng.normal(size=shape) * 50).astype(dtype)
    data[rng.random(shape) < 0.3] = fill_value  # runs of fill values
    data[: chunks[0], : chunks[1]] = fill_value  # a whole chunk of fill values: elided
    # a chunk that starts with the fill value and differs later
    data[: chunks[0], chunks[1] : 2 * chunks[1]] = fill_value
    if shape[1] >= 2 * chunks[1]:
        data[chunks[0] - 1, 2 * chunks[1] - 1] = 1 if fill == "NaN" else fill_value + 1
    if kind == "f" and fill != 3.0:
        # -0.0 where the fill is 0.0 (not its bits: stored), a NaN of other bits
        # where it is NaN (equal to it: elided)
        other_bits = np.array([-fill_value if fill == 0.0 else fill_value])
        other_bits.view(np.uint8)[0] ^= 0 if fill == 0.0 else 1
        data[chunks[0] : 2 * chunks[0], : chunks[1]] = other_bits[0]
    with tempfile.TemporaryDirectory() as tmp:
        # chunks of fill values stored too (a NaN fill's NaNs of other bits kept)
        common: dict[str, Any] = {"shape": shape, "chunks": chunks, "dtype": dtype,
                                  "fill_value": fill_value,
                                  "config": {"write_empty_chunks": True}}
        if source_form.startswith("v2"):
            name = source_form.removeprefix("v2-").removesuffix("-F")
            source = zarr.create_array(
                f"{tmp}/src.zarr", zarr_format=2, filters=None,
                compressors=V2_COMPRESSORS[name], order="F" if source_form.endswith("-F") else "C",
                **common)
            missing = f"{tmp}/src.zarr/0.1"
        else:
            source = zarr.create_array(
                f"{tmp}/src.zarr",
                serializer=BytesCodec(endian="big" if "big-endian" in source_form else "little"),
                compressors=[GzipCodec(level=1) if "gzip" in source_form else ZstdCodec()],
                **common)
            missing = f"{tmp}/src.zarr/c/0/1"
        source[:] = data
        if os.path.exists(missing):  # a chunk never written: read as the fill value
            os.remove(missing)
            data[: chunks[0], chunks[1] : 2 * chunks[1]] = fill_value
        options: dict[str, Any] = {"chunks": chunks, "shards": shards}
        if CHAINS[chain] is not None:
            options["codecs"] = CHAINS[chain]
        transcoded: list[bool] = []
        write_chunks = ShardWriter.write_chunks

        def counted(self: ShardWriter, region: tuple[slice, ...],
                    reader: ChunkObjectReader) -> bool:
            transcoded.append(write_chunks(self, region, reader))
            return transcoded[-1]

        with mock.patch.object(ShardWriter, "write_chunks", counted):
            zarrext.convert(f"{tmp}/src.zarr", f"{tmp}/fast.zarr", **options)
        assert transcoded.count(True) == math.prod(
            n // s for n, s in zip(shape, shards, strict=True))
        with mock.patch.object(ChunkObjectReader, "of", classmethod(lambda cls, *a: None)), \
                mock.patch.object(ShardWriter, "of", classmethod(lambda cls, *a: None)):
            zarrext.convert(f"{tmp}/src.zarr", f"{tmp}/region.zarr", **options)
        fast, region = _stored_files(f"{tmp}/fast.zarr"), _stored_files(f"{tmp}/region.zarr")
        assert fast == region
        np.testing.assert_array_equal(zarr.open_array(f"{tmp}/fast.zarr", mode="r")[:], data)


def _stored_files(root: str) -> dict[str, bytes]:
    base = Path(root)
    return {p.relative_to(base).as_posix(): p.read_bytes()
            for p in sorted(base.rglob("*")) if p.is_file()}


def test_inner_chunks_from_source_chunks_are_encoded_knowing_their_array_wide_index(
    tmp_path: Path,
) -> None:
    """A decision by chunk index sees each inner chunk's array-wide index, as the
    values path shows it: the same chunks compressed, the same bytes stored."""
    shape, chunks, shards = (16, 24), (4, 4), (8, 12)
    data = np.random.default_rng(2).normal(size=shape).astype("f4")
    source = zarr.create_array(tmp_path / "src.zarr", shape=shape, chunks=chunks, dtype="f4",
                               compressors=[ZstdCodec()])
    source[:] = data
    seen: dict[str, list[tuple[int, ...]]] = {"chunks": [], "values": []}

    def make(name: str) -> Any:
        def compress_odd_rows(chunk_index: tuple[int, ...], codec: Any, chunk: Any) -> bool:
            seen[name].append(tuple(chunk_index))
            return chunk_index[0] % 2 == 1

        return zarrext.create_array(
            tmp_path / f"{name}.zarr", shape=shape, chunks=chunks, shards=shards, dtype="f4",
            compressors=[zarrext.ConditionalCodec([ZstdCodec()])], decision=compress_odd_rows)

    by_chunks, by_values = make("chunks"), make("values")
    reader = ChunkObjectReader.of(zarrext.open_array(tmp_path / "src.zarr", mode="r"), shards)
    writer = ShardWriter.of(by_chunks)
    assert reader is not None
    assert writer is not None
    for i in range(shape[0] // shards[0]):
        for j in range(shape[1] // shards[1]):
            region = (slice(i * shards[0], (i + 1) * shards[0]),
                      slice(j * shards[1], (j + 1) * shards[1]))
            assert writer.write_chunks(region, reader)
            by_values[region] = data[region]
    every = [(i, j) for i in range(shape[0] // chunks[0]) for j in range(shape[1] // chunks[1])]
    assert sorted(seen["chunks"]) == sorted(seen["values"]) == every
    assert _stored_files(str(tmp_path / "chunks.zarr")) == _stored_files(
        str(tmp_path / "values.zarr"))
    np.testing.assert_array_equal(by_chunks[:], data)


@pytest.mark.parametrize("chain", ["bytes", "conditional-zstd"])
def test_large_inner_chunks_from_source_chunks_store_what_the_region_path_stores(
    tmp_path: Path, chain: str,
) -> None:
    """Inner chunks large enough to be encoded in the thread's arena (256 KiB): the
    same bytes as the region path's, whether the chain compresses or stores the
    values' bytes as they are."""
    shape, chunks, shards = (512, 640), (256, 256), (512, 256)  # 2 whole shards, 1 edge
    data = np.random.default_rng(4).normal(size=shape).astype("f4")
    source = zarr.create_array(tmp_path / "src.zarr", shape=shape, chunks=chunks, dtype="f4",
                               compressors=[ZstdCodec()])
    source[:] = data
    options = {"chunks": chunks, "shards": shards, "codecs": CHAINS[chain],
               "allow_larger": True}  # "bytes" stores the floats uncompressed, as asked
    transcoded: list[bool] = []
    write_chunks = ShardWriter.write_chunks

    def counted(self: ShardWriter, region: tuple[slice, ...], reader: ChunkObjectReader) -> bool:
        transcoded.append(write_chunks(self, region, reader))
        return transcoded[-1]

    with mock.patch.object(ShardWriter, "write_chunks", counted):
        zarrext.convert(tmp_path / "src.zarr", tmp_path / "fast.zarr", **options)
    assert transcoded.count(True) == 2
    with mock.patch.object(ChunkObjectReader, "of", classmethod(lambda cls, *a: None)), \
            mock.patch.object(ShardWriter, "of", classmethod(lambda cls, *a: None)):
        zarrext.convert(tmp_path / "src.zarr", tmp_path / "region.zarr", **options)
    assert _stored_files(str(tmp_path / "fast.zarr")) == _stored_files(
        str(tmp_path / "region.zarr"))
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "fast.zarr", mode="r")[:], data)
