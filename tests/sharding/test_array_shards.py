"""ArrayShards.of: what a job knows of an array's shards, read from its metadata.

Each fact is checked against what the Zarr v3 spec and the sharding spec (seed 001)
make of the array's metadata, worked out here by hand: a shard index of 16 bytes
per inner chunk and a crc32c, keys ``c/i/j`` in C order, a transpose permuting the
shard the sharding codec sees.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, TransposeCodec, ZstdCodec
from zarr.storage import MemoryStore

from tests.conftest import Where
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.sharding.array_shards import ArrayShards
from zarrext.sharding.geometry import ShardLayoutError


@st.composite
def sharded_arrays(draw: st.DrawFn) -> dict:
    ndim = draw(st.integers(1, 3))
    inner = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    per_shard = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    order = tuple(draw(st.permutations(range(ndim)))) if draw(st.booleans()) else None
    # The shard as the sharding codec sees it, and in the array's axes (the transpose
    # maps one onto the other). zarr also asks the inner chunks to divide the shard in
    # the array's axes, so with a transpose its edges are multiples of every one.
    unit = inner if order is None else (math.lcm(*inner),) * ndim
    seen = tuple(u * k for u, k in zip(unit, per_shard, strict=True))
    shard = seen if order is None else tuple(seen[order.index(a)] for a in range(ndim))
    shape = tuple(draw(st.integers(1, 3 * s)) for s in shard)  # partial edge shards too
    return {
        "shape": shape, "shard": shard, "inner": inner, "order": order, "seen": seen,
        "dtype": draw(st.sampled_from(["u1", "i4", "f8"])),
        "location": draw(st.sampled_from(["start", "end"])),
        "outer": draw(st.booleans()),
    }


@settings(max_examples=30)
@given(case=sharded_arrays())
def test_of_reads_the_specs_geometry_and_keys(case: dict) -> None:
    array = zarr.create_array(
        MemoryStore(), shape=case["shape"], chunks=case["shard"], dtype=case["dtype"],
        filters=[] if case["order"] is None else [TransposeCodec(order=case["order"])],
        serializer=ShardingCodec(chunk_shape=case["inner"], codecs=[BytesCodec()],
                                 index_location=case["location"]),
        compressors=[ZstdCodec()] if case["outer"] else None,
    )
    shards = ArrayShards.of(array)

    assert tuple(shards.stored_spec.shape) == case["shard"]
    assert tuple(shards.shard_spec.shape) == case["seen"]
    assert shards.codec is array.metadata.codecs[len(shards.chain.array_array)]
    assert shards.bare is not case["outer"]
    per_shard = tuple(s // i for s, i in zip(case["seen"], case["inner"], strict=True))
    n = math.prod(per_shard)
    itemsize = np.dtype(case["dtype"]).itemsize
    assert shards.geometry.chunks_per_shard == per_shard
    assert shards.geometry.index_size == 16 * n + 4  # offset and length, then crc32c
    assert shards.geometry.index_location == case["location"]
    # bytes alone: every inner chunk its raw size, in every version's slots
    assert shards.geometry.slot_size == math.prod(case["inner"]) * itemsize
    assert shards.geometry.earlier_slot_sizes == ()
    grid = [range(-(-s // c)) for s, c in zip(case["shape"], case["shard"], strict=True)]
    assert shards.keys == ["c/" + "/".join(map(str, c)) for c in itertools.product(*grid)]
    assert shards.directory is None  # not a local store


def test_directory_and_stored_bytes(where: Where) -> None:
    """The directory is the array's folder on local disk, None elsewhere; the stored
    object decodes to a shard through the codecs after the sharding codec."""
    array = zarr.create_array(
        where.location("a"), storage_options=where.options, shape=(8, 8), chunks=(8, 8),
        dtype="u2", serializer=ShardingCodec(chunk_shape=(4, 4)), compressors=[ZstdCodec()],
    )
    array[...] = np.arange(64, dtype="u2").reshape(8, 8)
    shards = ArrayShards.of(array)
    assert shards.directory == (Path(where.root, "a") if where.local else None)
    if where.local:
        assert shards.path("c/0/0") == Path(where.root, "a", "c", "0", "0")
    else:
        with pytest.raises(ShardLayoutError, match="not in a local store"):
            shards.path("c/0/0")
    stored = where.stored("a")["c/0/0"]
    shard = numcodecs.Zstd().decode(stored)
    assert shards.shard_bytes(stored) == shard
    assert len(shard) == 4 * (4 * 4 * 2) + 4 * 16 + 4  # 4 raw inner chunks, the index
    assert shards.shard_bytes(shards.stored_bytes(shard)) == shard


def test_geometry_knows_the_earlier_slot_size() -> None:
    """A compressing chain: today's slot is zstd's bound + header + crc32c in 4 KiB
    blocks; version 1 gave raw + header + crc32c (tests/sharding/test_upgrade.py)."""
    array = zarr.create_array(
        MemoryStore(), shape=(128, 128), chunks=(128, 128), dtype="u2", compressors=None,
        serializer=ShardingCodec(chunk_shape=(64, 64), codecs=[
            BytesCodec(), ConditionalCodec([ZstdCodec()]), Crc32cCodec()]),
    )
    geometry = ArrayShards.of(array).geometry
    raw = 64 * 64 * 2
    zstd_bound = raw + (raw >> 8) + (((128 << 10) - raw) >> 11)  # ZSTD_COMPRESSBOUND
    assert geometry.slot_size == -(-(zstd_bound + 1 + 4) // 4096) * 4096
    assert geometry.earlier_slot_sizes == (raw + 1 + 4,)


def test_of_refuses_arrays_without_shards() -> None:
    v2 = zarr.create_array(MemoryStore(), shape=(4,), chunks=(2,), dtype="u1", zarr_format=2)
    with pytest.raises(ShardLayoutError, match="need a Zarr format 3 array"):
        ArrayShards.of(v2)
    plain = zarr.create_array(MemoryStore(), shape=(4,), chunks=(2,), dtype="u1", name="p")
    with pytest.raises(ShardLayoutError, match="array 'p' is not sharded"):
        ArrayShards.of(plain)
