"""Shard layouts: slot bounds, in-place writes, fallbacks, zarr-python reads them."""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec
from zarr.codecs.numcodecs import BZ2
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import Int32
from zarr.storage import MemoryStore

import zarrext
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.codecs.decisions import FixedMask
from zarrext.jobs.shards.inspect import shard_report
from zarrext.sharding import ShardLayoutError, slot_bound
from zarrext.sharding.bounds import zstd_bound
from zarrext.sharding.journal import journal_pending
from zarrext.sharding.layout import LayoutShardingCodec

INNER = (8, 8)
SHARD = (32, 32)
RAW = 8 * 8 * 4


def spec(shape: tuple[int, ...] = INNER) -> ArraySpec:
    return ArraySpec(
        shape=shape,
        dtype=Int32(),
        fill_value=np.int32(0),
        config=ArrayConfig.from_dict({}),
        prototype=default_buffer_prototype(),
    )


def make(
    path: Path,
    *,
    layout: str | None = "fixed-slot",
    location: str = "end",
    codecs: list | None = None,
    decision: object = None,
    shape: tuple[int, int] = (64, 64),
) -> zarr.Array:
    return zarrext.create_array(
        str(path),
        shape=shape,
        chunks=SHARD,
        dtype="i4",
        fill_value=-1,
        compressors=None,
        serializer=ShardingCodec(
            chunk_shape=INNER,
            codecs=codecs or [BytesCodec()],
            index_location=location,
        ),
        shard_layout=layout,
        decision=decision,
    )


def conditional_codecs(compressor: object = None) -> list:
    nested = compressor if compressor is not None else ZstdCodec(level=1)
    return [BytesCodec(), ConditionalCodec(codecs=[nested]), Crc32cCodec()]


def unbounded() -> BZ2:
    """A compressor whose worst-case size zarrext knows no bound for."""
    return BZ2(level=1)


def fresh(path: Path) -> np.ndarray:
    return zarr.open_array(str(path), mode="r")[:]


# -- slot bound ------------------------------------------------------------------------


def test_slot_bound_fixed_size_codecs() -> None:
    assert slot_bound((BytesCodec(),), spec()) == RAW
    assert slot_bound((BytesCodec(), Crc32cCodec()), spec()) == RAW + 4


def test_slot_bound_conditional_adds_header_and_later_fixed_codecs() -> None:
    # a nested compressor without a bound: the decision's no-inflation guarantee
    codecs = (
        BytesCodec(),
        ConditionalCodec(codecs=[unbounded()], decision="compress_if_smaller"),
        Crc32cCodec(),
    )
    assert slot_bound(codecs, spec()) == RAW + 1 + 4
    # a nested compressor with a bound: its worst case, whatever the decision
    for decision in ("compress_if_smaller", "always_apply"):
        codecs = (
            BytesCodec(), ConditionalCodec(codecs=[ZstdCodec()], decision=decision), Crc32cCodec()
        )
        assert slot_bound(codecs, spec()) == zstd_bound(RAW) + 1 + 4


def test_slot_bound_refuses_unbounded_codecs() -> None:
    with pytest.raises(ShardLayoutError, match="bz2") as caught:
        slot_bound((BytesCodec(), unbounded()), spec())
    # the message names both ways out
    assert "shard_layout='append'" in str(caught.value)
    assert "'conditional'" in str(caught.value)
    inflating = ConditionalCodec(codecs=[unbounded()], decision="always_apply")
    with pytest.raises(ShardLayoutError, match="conditional"):
        slot_bound((BytesCodec(), inflating), spec())


def test_fixed_slot_without_bound_fails_at_open(tmp_path: Path) -> None:
    make(tmp_path / "a", layout=None, codecs=[BytesCodec(), unbounded()])
    with pytest.raises(ShardLayoutError, match="no bound"):
        zarrext.open_array(str(tmp_path / "a"), shard_layout="fixed-slot")
    make(tmp_path / "b", layout=None, codecs=conditional_codecs(unbounded()))
    with pytest.raises(ShardLayoutError, match="no bound"):
        zarrext.open_array(str(tmp_path / "b"), shard_layout="fixed-slot", decision="always_apply")
    # the append layout needs no bound
    array = zarrext.open_array(str(tmp_path / "a"), shard_layout="append")
    assert isinstance(array.metadata.codecs[0], LayoutShardingCodec)


def test_layout_errors(tmp_path: Path) -> None:
    zarr.create_array(str(tmp_path / "plain"), shape=(4,), chunks=(2,), dtype="i4")
    with pytest.raises(ShardLayoutError, match="sharded"):
        zarrext.open_array(str(tmp_path / "plain"), shard_layout="fixed-slot")
    make(tmp_path / "a", layout=None)
    with pytest.raises(ShardLayoutError, match="must be one of"):
        zarrext.open_array(str(tmp_path / "a"), shard_layout="sideways")


def test_layout_is_not_in_metadata(tmp_path: Path) -> None:
    make(tmp_path / "plain", layout=None)
    make(tmp_path / "slots", layout="fixed-slot")
    meta = [json.loads((tmp_path / n / "zarr.json").read_text()) for n in ("plain", "slots")]
    assert meta[0] == meta[1]
    array = zarrext.open_array(str(tmp_path / "slots"), shard_layout="append")
    array[:8, :8] = 1
    assert json.loads((tmp_path / "slots" / "zarr.json").read_text()) == meta[0]


# -- writes read back with zarr-python ------------------------------------------------------

writes = st.lists(
    st.tuples(
        st.integers(0, 63), st.integers(0, 63), st.integers(1, 20), st.integers(1, 20),
        st.integers(-1, 3),
    ),
    min_size=1,
    max_size=12,
)


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("layout", ["fixed-slot", "append"])
@given(ops=writes)
def test_random_writes_read_back_with_zarr(
    tmp_path_factory: pytest.TempPathFactory, layout: str, location: str, ops: list
) -> None:
    path = tmp_path_factory.mktemp("w") / "a"
    array = make(path, layout=layout, location=location, codecs=conditional_codecs(),
                 decision="compress_if_smaller")
    expected = np.full((64, 64), -1, dtype="i4")
    rng = np.random.default_rng(len(ops))
    for x, y, h, w, kind in ops:
        region = (slice(x, min(x + h, 64)), slice(y, min(y + w, 64)))
        shape = (region[0].stop - x, region[1].stop - y)
        # -1 writes the fill value (chunks may become empty), 0 random, else constant
        value = (
            rng.integers(0, 1 << 30, shape).astype("i4")
            if kind == 0
            else np.full(shape, kind, "i4")
        )
        array[region] = value
        expected[region] = value
    np.testing.assert_array_equal(fresh(path), expected)
    np.testing.assert_array_equal(array[:], expected)
    assert zarrext.check(array) == []


def _file_bytes(path: Path) -> bytes:
    return path.read_bytes()


@pytest.mark.parametrize("location", ["start", "end"])
def test_inner_write_touches_only_its_slot_and_index(tmp_path: Path, location: str) -> None:
    array = make(tmp_path / "a", location=location)
    full = np.arange(64 * 64, dtype="i4").reshape(64, 64)
    array[:32, :32] = full[:32, :32]
    shard = tmp_path / "a" / "c" / "0" / "0"
    before = _file_bytes(shard)
    isz = 16 * 16 + 4
    data_start = isz if location == "start" else 0
    # the first write went to the slots: the file is index + 16 slots, chunk i at its slot
    assert len(before) == isz + 16 * RAW
    flat = 5  # inner chunk (1, 1)
    home = slice(data_start + flat * RAW, data_start + (flat + 1) * RAW)
    assert before[home] == full[8:16, 8:16].tobytes()
    # update chunk 5 twice: first to the spare area (its slot is live), then back home
    array[8:16, 8:16] = 7
    after = _file_bytes(shard)
    index_range = (0, isz) if location == "start" else (len(before) - isz, len(before))
    changed = [
        i for i in range(len(before))
        if before[i] != after[i] and not index_range[0] <= i < index_range[1]
    ]
    assert changed == [] or min(changed) >= data_start + 16 * RAW
    array[8:16, 8:16] = 9
    again = _file_bytes(shard)
    assert again[data_start + flat * RAW : data_start + (flat + 1) * RAW] == np.full(
        (8, 8), 9, "i4"
    ).tobytes()
    # no other slot changed through both updates
    for other in range(16):
        if other != flat:
            lo = data_start + other * RAW
            assert again[lo : lo + RAW] == before[lo : lo + RAW]
    expected = full.copy()
    expected[32:, :] = -1
    expected[:, 32:] = -1
    expected[8:16, 8:16] = 9
    np.testing.assert_array_equal(fresh(tmp_path / "a"), expected)


def test_oversized_chunk_goes_elsewhere_and_spares_neighbours(tmp_path: Path) -> None:
    make(tmp_path / "a", layout=None, codecs=conditional_codecs())
    honest = zarrext.open_array(str(tmp_path / "a"), shard_layout="fixed-slot")
    honest[:32, :32] = 3
    shard = tmp_path / "a" / "c" / "0" / "0"
    before = shard.read_bytes()
    slot = RAW + 1 + 4
    # A decision that claims no inflation but always compresses random data (inflates).
    liar = FixedMask(1, "lying_always")
    liar.guarantees_no_inflation = True
    lying = zarrext.open_array(str(tmp_path / "a"), shard_layout="fixed-slot", decision=liar)
    noise = np.random.default_rng(1).integers(-(1 << 31), 1 << 31, (8, 8), dtype="i4")
    lying[8:16, 8:16] = noise
    after = shard.read_bytes()
    for other in range(16):
        if other != 5:
            neighbour = slice(other * slot, (other + 1) * slot)
            assert after[neighbour] == before[neighbour]
    expected = np.full((64, 64), -1, "i4")
    expected[:32, :32] = 3
    expected[8:16, 8:16] = noise
    np.testing.assert_array_equal(fresh(tmp_path / "a"), expected)
    report = shard_report(lying)
    assert report[0].file_size > 16 * slot + 16 * 16 + 4


def test_memory_store_refuses_in_place_layouts_and_inspect_says_so() -> None:
    store = MemoryStore()
    kwargs = {
        "shape": (16, 16), "chunks": (16, 16), "dtype": "i4", "fill_value": 0,
        "compressors": None, "serializer": ShardingCodec(chunk_shape=(8, 8)),
    }
    with pytest.raises(ShardLayoutError, match="MemoryStore cannot do"):
        zarrext.create_array(store, shard_layout="fixed-slot", **kwargs)
    array = zarrext.create_array(store, **kwargs)
    array[:8, :8] = 4
    array[8:, 8:] = 5
    np.testing.assert_array_equal(zarr.open_array(store, mode="r")[:8, :8], np.full((8, 8), 4))
    (info,) = shard_report(array)
    assert info.in_place is False
    assert info.empty_chunks == 2
    assert info.layout == "dense"  # zarr-python's rewrite packs chunks


def test_concurrent_threads_same_shard(tmp_path: Path) -> None:
    make(tmp_path / "a", location="start", codecs=conditional_codecs(),
         decision="compress_if_smaller")
    rng = np.random.default_rng(0)
    data = rng.integers(0, 50, (64, 64)).astype("i4")

    def write(flat: int) -> None:
        own = zarrext.open_array(str(tmp_path / "a"), shard_layout="fixed-slot",
                                 decision="compress_if_smaller")
        i, j = divmod(flat, 8)
        own[i * 8 : i * 8 + 8, j * 8 : j * 8 + 8] = data[i * 8 : i * 8 + 8, j * 8 : j * 8 + 8]

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(64)))
    np.testing.assert_array_equal(fresh(tmp_path / "a"), data)
    assert zarrext.check(zarr.open_array(str(tmp_path / "a"))) == []


def test_same_chunk_concurrently_ends_as_one_write(tmp_path: Path) -> None:
    array = make(tmp_path / "a")
    values = list(range(1, 25))

    def write(v: int) -> None:
        array[:8, :8] = np.full((8, 8), v, "i4")

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(write, values))
    chunk = fresh(tmp_path / "a")[:8, :8]
    assert len(np.unique(chunk)) == 1
    assert int(chunk[0, 0]) in values


def test_fixed_slot_file_is_sparse_slots_after_index(tmp_path: Path) -> None:
    array = make(tmp_path / "a", location="start")
    array[0, 0] = 1
    shard = tmp_path / "a" / "c" / "0" / "0"
    assert shard.stat().st_size == 16 * 16 + 4 + 16 * RAW
    digest = hashlib.sha256(shard.read_bytes()).hexdigest()
    array[0, 0] = 1  # same value again: rewritten to the spare area, not in place
    assert hashlib.sha256(shard.read_bytes()).hexdigest() != digest
    assert fresh(tmp_path / "a")[0, 0] == 1
    # only the shard: the journal is deleted at commit, no stale temporary file
    assert sorted(os.listdir(shard.parent)) == ["0"]
    assert not journal_pending(shard)


def test_runtime_rebinding_keeps_the_layout(tmp_path: Path) -> None:
    array = make(tmp_path / "a", codecs=conditional_codecs(unbounded()))
    rebound = zarrext.with_runtime(array, decision="compress_if_smaller")
    codec = rebound.metadata.codecs[0]
    assert isinstance(codec, LayoutShardingCodec)
    assert codec.shard_layout == "fixed-slot"
    with pytest.raises(ShardLayoutError, match="no bound"):
        zarrext.with_runtime(array, decision="always_apply")


def test_whole_shard_rewrite_keeps_chunks_in_their_slots(tmp_path: Path) -> None:
    array = make(tmp_path / "a", location="start")
    array[:32, :32] = 1
    shard = tmp_path / "a" / "c" / "0" / "0"
    inode, size = shard.stat().st_ino, shard.stat().st_size
    array[:32, :32] = np.arange(32 * 32, dtype="i4").reshape(32, 32)
    # swapped in whole (new inode), same size: no chunk went to the spare area
    assert shard.stat().st_ino != inode
    assert shard.stat().st_size == size
    (info,) = shard_report(array)
    assert info.layout == "fixed-slot"
    assert info.stored_bytes + info.index_bytes == info.file_size
    np.testing.assert_array_equal(
        fresh(tmp_path / "a")[:32, :32], np.arange(32 * 32, dtype="i4").reshape(32, 32)
    )


def test_unbounded_fixed_slot_refused_before_metadata_is_written(tmp_path: Path) -> None:
    kwargs: dict = dict(
        shape=(64, 64), chunks=(32, 32), dtype="i4", compressors=None,
        serializer=ShardingCodec(chunk_shape=(8, 8), codecs=[BytesCodec(), unbounded()]),
    )
    with pytest.raises(ShardLayoutError, match="no bound"):
        zarrext.create_array(str(tmp_path / "a"), shard_layout="fixed-slot", **kwargs)
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").rglob("zarr.json"))
    array = zarrext.create_array(str(tmp_path / "a"), shard_layout="append", **kwargs)  # retry
    array[:8, :8] = 1
    assert fresh(tmp_path / "a")[0, 0] == 1


def test_layout_is_a_runtime_field_kept_by_replace_and_evolve() -> None:
    import dataclasses
    import pickle

    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.dtype import Int32

    stock = ShardingCodec(chunk_shape=(8, 8), codecs=[BytesCodec()])
    codec = LayoutShardingCodec.from_codec(stock, "append")
    assert codec == stock  # the layout is not compared: same metadata, same codec
    assert dataclasses.replace(codec, codecs=(BytesCodec(),)).shard_layout == "append"
    spec = ArraySpec((32, 32), Int32(), 0, ArrayConfig.from_dict({}), default_buffer_prototype())
    assert codec.evolve_from_array_spec(spec).shard_layout == "append"
    assert pickle.loads(pickle.dumps(codec)).shard_layout == "append"
    assert "shard_layout" not in json.dumps(codec.to_dict())


def test_damaged_quarantine_holds_the_file_and_writes_append(tmp_path: Path) -> None:
    # A quarantine that does not pass its checksum holds every byte of the shard:
    # the next update goes to the end of the file (CI once saw EFBIG here: the
    # update went past a hold ending at 2**62).
    array = make(tmp_path / "a")
    array[:32, :32] = 3
    shard = tmp_path / "a" / "c" / "0" / "0"
    Path(f"{shard}.zarrext-free").write_bytes(b"ZXF1\0\0")  # torn
    size = shard.stat().st_size
    array[:8, :8] = 5
    # past the (sparse) spare area: one chunk and the index
    assert size < shard.stat().st_size <= size + 16 * RAW + RAW + 16 * 16 + 4
    expected = np.full((64, 64), -1, "i4")
    expected[:32, :32] = 3
    expected[:8, :8] = 5
    np.testing.assert_array_equal(fresh(tmp_path / "a"), expected)


def test_quarantine_is_replaced_atomically(tmp_path: Path) -> None:
    from zarrext.sharding import journal

    shard = tmp_path / "s"
    shard.write_bytes(b"")
    journal.write_quarantine(shard, [(0, 10, 1e12)])
    journal.write_quarantine(shard, [(5, 20, 1e12)])
    assert journal.read_quarantine(shard, now=0.0) == [(5, 20, 1e12)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s", "s.zarrext-free"]


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("first", ["whole-shard", "one-chunk"])
@pytest.mark.parametrize("layout", ["fixed-slot", "append"])
def test_fill_over_a_whole_shard_deletes_it_as_zarr_does(
    tmp_path: Path, location: str, first: str, layout: str
) -> None:
    """zarr-python stores no shard whose chunks all hold the fill value; neither do
    zarrext's in-place writers (no index-only file left behind), whichever path wrote
    the shard first (a whole fresh shard, or one chunk into its slot)."""
    region = (slice(0, 32), slice(0, 32)) if first == "whole-shard" else (slice(0, 8),) * 2
    ours = make(tmp_path / "ours", layout=layout, location=location)
    stock = zarr.create_array(
        str(tmp_path / "stock"), shape=(64, 64), chunks=SHARD, dtype="i4", fill_value=-1,
        compressors=None,
        serializer=ShardingCodec(chunk_shape=INNER, codecs=[BytesCodec()],
                                 index_location=location),
    )
    for array in (ours, stock):
        array[region] = 5
        array[32:, 32:] = 6  # another shard, which stays
    shard = Path("c") / "0" / "0"
    assert (tmp_path / "ours" / shard).exists()
    assert (tmp_path / "stock" / shard).exists()
    for array in (ours, stock):
        array[:32, :32] = -1
    assert not (tmp_path / "stock" / shard).exists()
    assert not (tmp_path / "ours" / shard).exists()
    assert not list((tmp_path / "ours").rglob("*zarrext*"))  # no journal or temporary
    assert (tmp_path / "ours" / "c" / "1" / "1").exists()
    np.testing.assert_array_equal(fresh(tmp_path / "ours"), fresh(tmp_path / "stock"))
    assert zarrext.check(ours) == []
