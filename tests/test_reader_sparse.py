"""zarrext's whole-shard reads read only the bytes a shard's index references.

A fixed-slot shard whose chunks were updated holds spare slots (mostly holes) and
stale copies; zarr-python asks for the whole file when it wants every inner chunk.
zarrext's reader answers with the referenced bytes only, packed behind a
re-encoded index, and must still give exactly the chunks a whole-file read gives
(also for a killed writer's pending transaction, read with the journal's old index).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

import zarrext
import zarrext.pipeline
from zarrext.sharding import writer
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


@pytest.fixture(params=["runs", "chunk-by-chunk"])
def shard_reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Whole shards read in runs (inner chunks under SHARD_RUNS_MAX_CHUNK_BYTES, as
    here) or chunk by chunk (larger inner chunks; forced here by a zero bound)."""
    if request.param == "chunk-by-chunk":
        monkeypatch.setattr(zarrext.pipeline, "SHARD_RUNS_MAX_CHUNK_BYTES", 0)
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
    writer.write_journal(shard, len(good), offset, good[offset : offset + isz])
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
