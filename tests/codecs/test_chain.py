"""zarrext.codecs.chain: one model of an array's codecs, and what it lets layouts do.

The refusals named in the layout section of the README each have a test here that
checks the array's files afterwards; the configuration space is covered by
tests/sharding/test_configurations.py.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.abc.codec import ArrayArrayCodec
from zarr.codecs import (
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)
from zarr.storage import MemoryStore

import zarrext
from tests.conftest import tree_digest
from zarrext.codecs.chain import CodecChain
from zarrext.sharding.geometry import ShardLayoutError


def _metadata(**kwargs) -> object:
    kwargs.setdefault("shape", (32, 32))
    kwargs.setdefault("dtype", "int32")
    return zarr.create_array(MemoryStore(), **kwargs).metadata


def test_roles_of_a_default_sharded_chain() -> None:
    # zarr puts its default zstd after a ShardingCodec serializer
    chain = CodecChain.from_metadata(
        _metadata(chunks=(16, 16), serializer=ShardingCodec(chunk_shape=(8, 8)))
    )
    assert chain.sharding is not None
    assert [c.to_dict()["name"] for c in chain.bytes_bytes] == ["zstd"]
    assert not chain.stores_bare_shards
    assert chain.names() == ["sharding_indexed[bytes]", "zstd"]
    assert chain.inner is not None
    assert chain.inner.sharding is None


def test_shards_route_keeps_compressors_inside() -> None:
    chain = CodecChain.from_metadata(
        _metadata(chunks=(8, 8), shards=(16, 16), compressors=[ZstdCodec()],
                  filters=[TransposeCodec(order=(1, 0))])
    )
    # zarr puts the filters and compressors of shards= arrays inside the shard
    assert chain.stores_bare_shards
    assert chain.array_array == ()
    assert chain.inner is not None
    assert [c.to_dict()["name"] for c in chain.inner.codecs] == ["transpose", "bytes", "zstd"]


def test_conditional_is_found_at_any_depth() -> None:
    cond = zarrext.ConditionalCodec([ZstdCodec()])
    top = CodecChain.of([BytesCodec(), cond, Crc32cCodec()]).conditional()
    assert top is not None
    assert top.sharding is None
    assert [c.to_dict()["name"] for c in top.after] == ["crc32c"]
    nested = CodecChain.of([ShardingCodec(chunk_shape=(4, 4), codecs=[
        ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec(), cond])])]).conditional()
    assert nested is not None
    assert nested.codec == cond
    assert nested.sharding is not None
    assert nested.sharding.chunk_shape == (2, 2)
    assert CodecChain.of([BytesCodec()]).conditional() is None


class Reverse(ArrayArrayCodec):
    """An array->array codec zarrext cannot tell keeps values in place (it does not:
    it reverses the first axis)."""

    is_fixed_size = True

    @classmethod
    def from_dict(cls, data):
        return cls()

    def to_dict(self):
        return {"name": "zarrext-test-reverse"}

    def compute_encoded_size(self, input_byte_length, chunk_spec):
        return input_byte_length

    async def _encode_single(self, chunk_array, chunk_spec):
        return chunk_array[::-1]

    async def _decode_single(self, chunk_array, chunk_spec):
        return chunk_array[::-1]


def test_local_filters() -> None:
    plan = zarrext.quantize.plan(value_range=(0.0, 1.0), max_abs_error=0.01, dtype="float32")
    local = CodecChain.of([*plan, TransposeCodec(order=(1, 0)), BytesCodec()])
    assert local.local_filters() is None
    why = CodecChain.of([Reverse(), BytesCodec()]).local_filters()
    assert why is not None
    assert "'zarrext-test-reverse'" in why


@pytest.mark.parametrize(
    "outer", [[ZstdCodec(level=3)], [Crc32cCodec()], [GzipCodec(), Crc32cCodec()]],
    ids=["zstd", "crc32c", "gzip-crc32c"],
)
def test_stored_objects_decode_through_the_codecs_after_sharding(outer) -> None:
    z = zarr.create_array(MemoryStore(), shape=(16, 16), chunks=(16, 16), dtype="uint16",
                          serializer=ShardingCodec(chunk_shape=(8, 8)), compressors=outer)
    z[...] = np.arange(256, dtype="uint16").reshape(16, 16)
    chain = CodecChain.from_metadata(z.metadata)
    from zarrext.sharding.array_shards import stored_spec_of

    spec = stored_spec_of(z.metadata)
    stored = z.store_path.store._store_dict["c/0/0"].to_bytes()  # type: ignore[attr-defined]
    shard = chain.decode_stored(stored, spec)
    assert shard != stored
    # a bare shard ends with its index: 4 inner chunks of 16 bytes, and its crc32c
    assert len(shard) == 4 * 8 * 8 * 2 + 4 * 16 + 4
    assert chain.decode_stored(chain.encode_stored(shard, spec), spec) == shard


# -- layouts: refused at open, with the fix, files unchanged -----------------------


def _refused(tmp_path: Path, layout: str, **kwargs) -> str:
    path = tmp_path / "a.zarr"
    z = zarr.create_array(path, shape=(64, 64), dtype="int32", fill_value=0, **kwargs)
    z[...] = np.arange(64 * 64, dtype="int32").reshape(64, 64)
    before = tree_digest(path)
    with pytest.raises(ShardLayoutError) as refused:
        zarrext.open_array(path, mode="r+", shard_layout=layout)
    assert tree_digest(path) == before
    np.testing.assert_array_equal(zarr.open_array(path)[...],
                                  np.arange(64 * 64, dtype="int32").reshape(64, 64))
    message = str(refused.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("layout", ["fixed-slot", "append"])
def test_zarrs_default_zstd_after_the_sharding_codec_is_refused(tmp_path, layout) -> None:
    message = _refused(tmp_path, layout, chunks=(64, 64),
                       serializer=ShardingCodec(chunk_shape=(16, 16)))
    assert "'zstd' after sharding_indexed" in message
    assert "compressors=None" in message
    assert "shards=" in message


@pytest.mark.parametrize("layout", ["fixed-slot", "append"])
def test_crc32c_after_the_sharding_codec_is_refused(tmp_path, layout) -> None:
    message = _refused(tmp_path, layout, chunks=(64, 64), compressors=[Crc32cCodec()],
                       serializer=ShardingCodec(chunk_shape=(16, 16)))
    assert "'crc32c' after sharding_indexed" in message


def test_an_unsharded_array_is_refused(tmp_path) -> None:
    assert "needs a sharded array" in _refused(tmp_path, "append", chunks=(16, 16))


def test_an_unknown_filter_is_refused(tmp_path) -> None:
    from zarr.registry import register_codec

    register_codec("zarrext-test-reverse", Reverse)
    message = _refused(tmp_path, "append", chunks=(64, 64), compressors=None,
                       filters=[Reverse()], serializer=ShardingCodec(chunk_shape=(16, 16)))
    assert "'zarrext-test-reverse'" in message


def test_create_array_refuses_before_writing_anything(tmp_path) -> None:
    with pytest.raises(ShardLayoutError, match="after sharding_indexed"):
        zarrext.create_array(tmp_path / "a.zarr", shape=(64, 64), chunks=(64, 64),
                             dtype="int32", serializer=ShardingCodec(chunk_shape=(16, 16)),
                             shard_layout="fixed-slot")
    assert not (tmp_path / "a.zarr").exists()


# -- layouts: the configurations the issue measured, now without a lost write -----


def _parallel_inner_chunks(z: zarr.Array, inner: tuple[int, int], threads: int = 4) -> None:
    rows, cols = z.shape[0] // inner[0], z.shape[1] // inner[1]

    def write(t: int) -> None:
        for k in range(t, rows * cols, threads):
            i, j = divmod(k, cols)
            z[i * inner[0] : (i + 1) * inner[0], j * inner[1] : (j + 1) * inner[1]] = k + 1

    workers = [threading.Thread(target=write, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def _lost(path: Path, inner: tuple[int, int], atol: float = 0.0) -> int:
    """Inner chunks that do not hold what their writer wrote (within ``atol``)."""
    a = zarr.open_array(path)[...]
    cols = a.shape[1] // inner[1]
    lost = 0
    for i in range(a.shape[0] // inner[0]):
        for j in range(cols):
            block = a[i * inner[0] : (i + 1) * inner[0], j * inner[1] : (j + 1) * inner[1]]
            lost += not np.allclose(block, i * cols + j + 1, rtol=0, atol=atol)
    return lost


@pytest.mark.parametrize("layout", ["fixed-slot", "append"])
def test_a_quantized_array_takes_parallel_in_place_writes(tmp_path, layout) -> None:
    plan = zarrext.quantize.plan(value_range=(0.0, 100.0), max_abs_error=0.01, dtype="float32",
                                 fill_value=0.0)
    path = tmp_path / "q.zarr"
    zarr.create_array(path, shape=(256, 256), chunks=(256, 256), dtype="float32", fill_value=0.0,
                      filters=plan, compressors=None,
                      serializer=ShardingCodec(chunk_shape=(32, 32)))
    z = zarrext.open_array(path, mode="r+", shard_layout=layout)
    _parallel_inner_chunks(z, (32, 32))
    assert _lost(path, (32, 32), atol=0.01) == 0
    inode = (path / "c" / "0" / "0").stat().st_ino
    z[0:32, 0:32] = 7.0  # one inner chunk, in place: the shard file stays the same file
    assert (path / "c" / "0" / "0").stat().st_ino == inode
    assert zarrext.check(zarr.open_array(path), deep=True) == []


@pytest.mark.parametrize("layout", ["fixed-slot", "append"])
def test_a_transposed_array_takes_parallel_in_place_writes(tmp_path, layout) -> None:
    path = tmp_path / "t.zarr"
    zarr.create_array(path, shape=(256, 256), chunks=(256, 256), dtype="int32", fill_value=0,
                      filters=[TransposeCodec(order=(1, 0))], compressors=None,
                      serializer=ShardingCodec(chunk_shape=(32, 32)))
    _parallel_inner_chunks(zarrext.open_array(path, mode="r+", shard_layout=layout), (32, 32))
    assert _lost(path, (32, 32)) == 0


def test_nested_shards_take_parallel_writes_of_their_innermost_chunks(tmp_path) -> None:
    path = tmp_path / "n.zarr"
    zarr.create_array(path, shape=(256, 256), chunks=(256, 256), dtype="int32", fill_value=0,
                      compressors=None, serializer=ShardingCodec(
                          chunk_shape=(128, 128), codecs=[ShardingCodec(chunk_shape=(32, 32))]))
    _parallel_inner_chunks(zarrext.open_array(path, mode="r+", shard_layout="append"), (32, 32))
    assert _lost(path, (32, 32)) == 0


def test_a_whole_shard_rewrite_under_a_layout_raises() -> None:
    from zarrext.sharding.layout import LayoutShardingCodec

    codec = LayoutShardingCodec(chunk_shape=(4, 4), shard_layout="append")
    with pytest.raises(ShardLayoutError, match="whole-shard rewrite"):
        codec._encode_sync(None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("orders", [[(1, 0)], [(2, 0, 1)], [(2, 0, 1), (1, 2, 0)], []])
def test_array_and_serializer_axes_are_inverse(orders) -> None:
    ndim = len(orders[0]) if orders else 3
    chain = CodecChain.of([*(TransposeCodec(order=o) for o in orders), BytesCodec()])
    coords = tuple(range(10, 10 + ndim))
    there = chain.to_serializer_axes(coords)
    expected = np.empty(coords).transpose(*orders[0]).shape if len(orders) == 1 else None
    if expected is not None:
        assert there == expected  # what zarr's transpose does to a shape
    assert chain.to_array_axes(there) == coords
