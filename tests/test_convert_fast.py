"""zarrext.convert's whole-unit path: the source's chunk objects fetched at once and
decoded in the write unit's thread, whole shards encoded and stored there; the same
stored objects as the region path (``src[region]`` read, ``dst[region] =`` written)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, GzipCodec, ZstdCodec

import zarrext
from tests.conftest import Where
from zarrext.jobs.convert import ChunkObjectReader, ShardWriter

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
