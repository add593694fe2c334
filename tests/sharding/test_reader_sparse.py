"""zarrext's whole-shard reads read only the bytes a shard's index references.

A fixed-slot shard whose chunks were updated holds spare slots (mostly holes) and
stale copies; zarr-python asks for the whole file when it wants every inner chunk.
zarrext's reader answers with the referenced bytes only, packed behind a
re-encoded index, and must still give exactly the chunks a whole-file read gives
(also for a killed writer's pending transaction, read with the journal's old index).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

import zarrext
import zarrext.sharding.codec
from zarrext.sharding.journal import write_journal
from zarrext.sharding.reader import index_format, open_shared

INNER = 128  # 64 KiB inner chunks of int32: gaps between them are not read through
SIDE = 4 * INNER  # one shard of 4x4 inner chunks


def values(version: int) -> np.ndarray:
    return (np.arange(SIDE * SIDE, dtype="i4") * 7 + version).reshape(SIDE, SIDE)


def updated_array(path: Path, location: str) -> tuple[zarr.Array, np.ndarray]:
    """A fixed-slot shard whose last inner chunk was updated into its spare slot."""
    array = zarrext.create_array(
        str(path), shape=(SIDE, SIDE), chunks=(SIDE, SIDE), dtype="i4", fill_value=0,
        compressors=None,
        serializer=ShardingCodec(
            chunk_shape=(INNER, INNER), codecs=[BytesCodec(), Crc32cCodec()],
            index_location=location,
        ),
        shard_layout="fixed-slot",
    )
    expected = values(0)
    array[:] = expected
    expected[-INNER:, -INNER:] = values(1)[-INNER:, -INNER:]
    array[-INNER:, -INNER:] = expected[-INNER:, -INNER:]
    return array, expected


class ReadCounter:
    """Counts the bytes ``os.pread``/``os.preadv`` are asked for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.total = 0
        pread, preadv = os.pread, os.preadv

        def counted_pread(fd: int, n: int, offset: int) -> bytes:
            self.total += n
            return pread(fd, n, offset)

        def counted_preadv(fd: int, buffers: list[memoryview], offset: int) -> int:
            self.total += sum(memoryview(b).nbytes for b in buffers)
            return preadv(fd, buffers, offset)

        monkeypatch.setattr(os, "pread", counted_pread)
        monkeypatch.setattr(os, "preadv", counted_preadv)


@pytest.fixture(params=["pieces", "chunk-by-chunk"])
def shard_reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Whole shards read in pieces of several inner chunks (SHARD_PIECE_BYTES, as
    here) or chunk by chunk (inner chunks larger than a piece; forced here by a
    zero bound)."""
    if request.param == "chunk-by-chunk":
        monkeypatch.setattr(zarrext.sharding.codec, "SHARD_PIECE_BYTES", 0)
    return str(request.param)


@pytest.mark.usefixtures("shard_reads")
@pytest.mark.parametrize("location", ["start", "end"])
def test_whole_shard_read_reads_referenced_bytes_only(
    tmp_path: Path, location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    array, expected = updated_array(tmp_path / "a", location)
    shard = tmp_path / "a" / "c" / "0" / "0"
    size = shard.stat().st_size
    codec = array.metadata.codecs[0]
    fmt = index_format(codec, (4, 4))
    with open(shard, "rb") as f:
        raw = f.read()
    index_at = size - fmt.size if location == "end" else 0
    table = fmt.decode(raw[index_at : index_at + fmt.size])
    referenced = int(table[:, 1].sum()) + fmt.size
    assert referenced < 0.6 * size  # the spare area makes the file about twice its data

    counter = ReadCounter(monkeypatch)
    back = zarrext.open_array(str(tmp_path / "a"), mode="r")[:]
    np.testing.assert_array_equal(back, expected)
    assert counter.total < 0.6 * size
    assert counter.total >= referenced

    handle = open_shared(shard, fmt)
    assert handle is not None
    try:
        packed = handle.read_packed()
    finally:
        handle.close()
    assert packed is not None
    assert packed.nbytes < 0.6 * size
    packed_at = packed.size - fmt.size if location == "end" else 0
    new = fmt.decode(packed[packed_at : packed_at + fmt.size].tobytes())
    np.testing.assert_array_equal(new[:, 1], table[:, 1])
    for (offset, length), (at, _) in zip(table.tolist(), new.tolist(), strict=True):
        assert packed[at : at + length].tobytes() == raw[offset : offset + length]


@pytest.mark.usefixtures("shard_reads")
def test_dense_shard_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    array, expected = updated_array(tmp_path / "a", "end")
    zarrext.compact(array)
    shard = tmp_path / "a" / "c" / "0" / "0"
    fmt = index_format(array.metadata.codecs[0], (4, 4))
    handle = open_shared(shard, fmt)
    assert handle is not None
    try:
        assert handle.read_packed() is None  # dense: one whole-file read instead
    finally:
        handle.close()
    counter = ReadCounter(monkeypatch)
    np.testing.assert_array_equal(zarrext.open_array(str(tmp_path / "a"), mode="r")[:], expected)
    # the index, then the chunks' bytes in one run (a whole-array read is a shard job)
    assert counter.total == shard.stat().st_size


@pytest.mark.parametrize("location", ["start", "end"])
def test_pending_transaction_read_as_rolled_back(tmp_path: Path, location: str) -> None:
    array, expected = updated_array(tmp_path / "a", location)
    shard = tmp_path / "a" / "c" / "0" / "0"
    good = shard.read_bytes()
    isz = index_format(array.metadata.codecs[0], (4, 4)).size
    offset = 0 if location == "start" else len(good) - isz
    write_journal(shard, len(good), offset, good[offset : offset + isz])
    with open(shard, "r+b") as f:  # a torn new index and new data, then the writer died
        f.seek(offset)
        f.write(os.urandom(isz // 2))
        f.seek(0, 2)
        f.write(os.urandom(1000))
    back = zarrext.open_array(str(tmp_path / "a"), mode="r")[:]
    np.testing.assert_array_equal(back, expected)


def test_entry_that_wraps_around_uint64_is_past_the_end(tmp_path: Path) -> None:
    """An offset near 2**64 plus a length must not wrap around to a small end."""
    from zarr.codecs import BytesCodec, ShardingCodec

    from zarrext.sharding.geometry import EMPTY
    from zarrext.sharding.state import entry_past_end

    table = np.array([[0, 8], [2**64 - 8, 16], [EMPTY, EMPTY]], dtype=np.uint64)
    assert entry_past_end(table, 100) == (1, 2**64 + 8)
    assert entry_past_end(table[[0, 2]], 100) is None
    z = zarrext.create_array(
        str(tmp_path / "a"), shape=(4,), chunks=(4,), dtype="u1", compressors=None,
        serializer=ShardingCodec(chunk_shape=(2,), index_codecs=[BytesCodec()]),
    )
    z[:] = 1
    shard = tmp_path / "a" / "c" / "0"
    data = bytearray(shard.read_bytes())
    data[-32:-24] = (2**64 - 2).to_bytes(8, "little")  # inner chunk 0's offset (not EMPTY)
    shard.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="past the end of the"):
        zarrext.open_array(str(tmp_path / "a"), mode="r")[:]


def _pieces_of(path: Path, table: np.ndarray, piece_bytes: int) -> list[tuple[bytes, list]]:
    from zarrext.sharding.reader import LockedShardFile

    handle = LockedShardFile(os.open(path, os.O_RDONLY), path.stat().st_size)
    try:  # each piece copied out: its memory is reused by the next
        return [
            (raw.tobytes(), members)
            for raw, members in handle.referenced_pieces(table, piece_bytes)
        ]
    finally:
        handle.close()


@given(
    lengths=st.lists(st.integers(0, 3000), min_size=1, max_size=12),
    gaps=st.lists(st.sampled_from([0, 1, 500, (64 << 10) + 1]), min_size=12, max_size=12),
    absent=st.sets(st.integers(0, 11)),
    shuffle_seed=st.integers(0, 2**16),
    piece_bytes=st.sampled_from([0, 1000, 4000, 1 << 20]),
)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_referenced_pieces(
    tmp_path: Path, lengths: list[int], gaps: list[int], absent: set[int],
    shuffle_seed: int, piece_bytes: int,
) -> None:
    """Every present entry's bytes come exactly once, in file order, in pieces no
    larger than ``piece_bytes`` (but for an entry larger on its own), split where
    the gap to the next entry is too large to read through."""
    from zarrext.sharding import reader
    from zarrext.sharding.geometry import EMPTY

    starts, at = [], 0
    for length, gap in zip(lengths, gaps, strict=False):
        starts.append(at + gap)
        at += gap + length
    data = np.random.default_rng(shuffle_seed).integers(0, 256, at, dtype=np.uint8).tobytes()
    path = tmp_path / f"shard-{shuffle_seed}-{len(lengths)}-{piece_bytes}"
    path.write_bytes(data)
    table = np.array(list(zip(starts, lengths, strict=True)), dtype=np.uint64)
    order = np.random.default_rng(shuffle_seed).permutation(len(lengths))
    table = table[order]  # the index order is not the file order
    for k in absent & set(range(len(lengths))):
        table[k] = EMPTY

    pieces = _pieces_of(path, table, piece_bytes)
    seen = [entry for _, members in pieces for entry, _ in members]
    present = [k for k in range(len(table)) if table[k, 0] != EMPTY]
    assert sorted(seen) == present
    offsets = [int(table[k, 0]) for k in seen]
    assert offsets == sorted(offsets)  # file order
    for raw, members in pieces:
        for entry, where in members:
            offset, length = (int(v) for v in table[entry])
            assert raw[where : where + length] == data[offset : offset + length]
        if len(members) > 1:
            assert len(raw) <= piece_bytes
        ends = itertools.accumulate(
            (sum(int(v) for v in table[e]) for e, _ in members), max
        )
        for end, (entry, _) in zip(ends, members[1:], strict=False):
            assert int(table[entry, 0]) <= end + reader._READ_THROUGH_GAP  # read through
    for (raw, members), (_, following) in itertools.pairwise(pieces):
        lo = int(table[members[0][0], 0])
        start, length = (int(v) for v in table[following[0][0]])
        # the next piece starts where its first entry could not join this one
        assert (start > lo + len(raw) + reader._READ_THROUGH_GAP
                or max(lo + len(raw), start + length) - lo > piece_bytes)


@pytest.mark.parametrize(
    ("piece_bytes", "expected"),
    [(30, [[0, 1, 2]]), (29, [[0, 1], [2]]), (20, [[0, 1], [2]]), (19, [[0], [1], [2]])],
)
def test_piece_bound_is_inclusive(
    tmp_path: Path, piece_bytes: int, expected: list[list[int]]
) -> None:
    path = tmp_path / "shard"
    path.write_bytes(bytes(range(30)))
    table = np.array([[0, 10], [10, 10], [20, 10]], dtype=np.uint64)
    pieces = _pieces_of(path, table, piece_bytes)
    assert [[entry for entry, _ in members] for _, members in pieces] == expected


@pytest.mark.parametrize("piece_chunks", [1, 3])
def test_whole_shard_read_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece_chunks: int
) -> None:
    """No read of a whole-shard read is larger than a piece, and all chunks arrive."""
    _, expected = updated_array(tmp_path / "a", "end")
    chunk_bytes = INNER * INNER * 4 + 4  # int32 values and their crc32c
    monkeypatch.setattr(zarrext.sharding.codec, "SHARD_PIECE_BYTES", piece_chunks * chunk_bytes)
    sizes: list[int] = []
    preadv = os.preadv

    def recorded(fd: int, buffers: list[memoryview], offset: int) -> int:
        sizes.append(sum(memoryview(b).nbytes for b in buffers))
        return preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", recorded)
    back = zarrext.open_array(str(tmp_path / "a"), mode="r")[:]
    np.testing.assert_array_equal(back, expected)
    assert max(sizes) <= piece_chunks * chunk_bytes
    assert sum(sizes) == 16 * chunk_bytes  # the 15 home slots and the moved chunk
    assert len(sizes) == -(-15 // piece_chunks) + 1
