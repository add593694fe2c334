"""A shard's size and decoded index, read from an open file (no locking)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.core.buffer import default_buffer_prototype

from zarrext._zarr_compat import ShardIndex, decode_shard_index_sync, encode_shard_index_sync
from zarrext.sharding.geometry import EMPTY, ShardGeometry

if TYPE_CHECKING:
    from zarr.codecs.sharding import ShardingCodec

__all__ = [
    "ShardCorruptError",
    "ShardState",
    "decode_table",
    "encode_index",
    "encode_table",
    "check_entries",
    "entry_past_end",
    "half_empty_entry",
    "load_state",
    "read_index",
    "state_of_bytes",
]


class ShardCorruptError(ValueError):
    """A shard file whose index cannot be used."""


def encode_index(codec: ShardingCodec, geometry: ShardGeometry, table: np.ndarray) -> bytes:
    """Encode an ``(n, 2)`` offsets/lengths table with the codec's index codecs."""
    return encode_table(codec, geometry.chunks_per_shard, table)


def encode_table(
    codec: ShardingCodec, chunks_per_shard: tuple[int, ...], table: np.ndarray
) -> bytes:
    """Encode an ``(n, 2)`` offsets/lengths table with the codec's index codecs."""
    index = ShardIndex(chunks_per_shard, table.reshape((*chunks_per_shard, 2)))
    return encode_shard_index_sync(codec, index).to_bytes()


def decode_table(
    codec: ShardingCodec, chunks_per_shard: tuple[int, ...], raw: bytes
) -> np.ndarray:
    """Decode an encoded index into an ``(n, 2)`` uint64 offsets/lengths table.

    Raises
    ------
    ValueError
        When the bytes are no valid index (e.g. checksum mismatch).
    """
    index = decode_shard_index_sync(
        codec, default_buffer_prototype().buffer.from_bytes(raw), chunks_per_shard
    )
    return np.array(index.offsets_and_lengths, dtype=np.uint64).reshape(-1, 2)


class ShardState:
    """A locked shard's size and decoded index.

    Attributes
    ----------
    size : int
        File size in bytes.
    index_offset : int
        Where the index is.
    index_bytes : bytes
        The encoded index as stored.
    table : numpy.ndarray
        ``(n, 2)`` uint64 offsets and lengths, C order of inner chunks; writable copy.
    """

    def __init__(self, size: int, index_offset: int, index_bytes: bytes, table: np.ndarray):
        self.size = size
        self.index_offset = index_offset
        self.index_bytes = index_bytes
        self.table = table

    def present(self) -> np.ndarray:
        return np.asarray(self.table[:, 0] != EMPTY)


def read_index(
    fd: int, codec: ShardingCodec, geometry: ShardGeometry, where: Any
) -> tuple[int, int, bytes, np.ndarray]:
    """Read and decode the index of the open shard ``fd``, entries unchecked.

    Returns
    -------
    tuple
        File size, index offset, raw index bytes, and the ``(n, 2)`` table of
        offsets and lengths.

    Raises
    ------
    ShardCorruptError
        When the file is shorter than its index or the index fails to decode
        (e.g. checksum mismatch).
    """
    size = os.fstat(fd).st_size
    offset = _index_offset(size, geometry, where)
    raw = os.pread(fd, geometry.index_size, offset)
    return size, offset, raw, _decoded(codec, geometry, raw, where)


def _index_offset(size: int, geometry: ShardGeometry, where: Any) -> int:
    isz = geometry.index_size
    if size < isz:
        raise ShardCorruptError(
            f"shard {where}: {size} bytes is shorter than its {isz}-byte index"
        )
    return 0 if geometry.index_location == "start" else size - isz


def _decoded(codec: ShardingCodec, geometry: ShardGeometry, raw: bytes, where: Any) -> np.ndarray:
    try:
        return decode_table(codec, geometry.chunks_per_shard, raw)
    except ValueError as e:
        raise ShardCorruptError(f"shard {where}: index does not decode: {e}") from e


def entry_past_end(table: np.ndarray, size: int) -> tuple[int, int] | None:
    """The present entry of an ``(n, 2)`` table reaching furthest past ``size`` bytes.

    Returns its flat index and end, or None when every entry ends inside. Offsets
    and lengths are compared without uint64 wrap-around (an offset near 2**64 plus
    a length must not look small).
    """
    offsets, lengths = table[:, 0], table[:, 1]
    limit = np.uint64(size)
    bad = (offsets != EMPTY) & (
        (offsets > limit) | (lengths > limit - np.minimum(offsets, limit))
    )
    if not bad.any():
        return None
    ends = {int(f): int(offsets[f]) + int(lengths[f]) for f in np.flatnonzero(bad)}
    flat = max(ends, key=lambda f: ends[f])
    return flat, ends[flat]


def half_empty_entry(table: np.ndarray) -> int | None:
    """The flat index of the first entry with one field ``2**64 - 1`` and not the other.

    Spec 001 marks an empty inner chunk with both offset and nbytes ``2**64 - 1``; an
    entry with only one of them is neither empty nor a chunk.
    """
    half = (table[:, 0] == EMPTY) != (table[:, 1] == EMPTY)
    return int(np.flatnonzero(half)[0]) if half.any() else None


def check_entries(table: np.ndarray, size: int, where: Any) -> None:
    """Refuse an index whose entries are neither empty nor inside the ``size``-byte
    shard, naming the inner chunk (:class:`ShardCorruptError`)."""
    half = half_empty_entry(table)
    if half is not None:
        offset, nbytes = (int(v) for v in table[half])
        raise ShardCorruptError(
            f"shard {where}: index entry of inner chunk {half} has offset {offset} and "
            f"nbytes {nbytes}: an empty entry has both 2**64-1 (sharding_indexed)"
        )
    bad = entry_past_end(table, size)
    if bad is not None:
        raise ShardCorruptError(
            f"shard {where}: inner chunk {bad[0]} ends at byte {bad[1]}, "
            f"past the end of the {size}-byte shard"
        )


def _checked(state: ShardState, where: Any) -> ShardState:
    check_entries(state.table, state.size, where)
    return state


def state_of_bytes(
    data: bytes, codec: ShardingCodec, geometry: ShardGeometry, where: Any
) -> ShardState:
    """The decoded index of a whole shard held in memory (an object store's shard).

    Raises
    ------
    ShardCorruptError
        As :func:`load_state`.
    """
    offset = _index_offset(len(data), geometry, where)
    raw = bytes(data[offset : offset + geometry.index_size])
    table = _decoded(codec, geometry, raw, where)
    return _checked(ShardState(len(data), offset, raw, table), where)


def load_state(fd: int, codec: ShardingCodec, geometry: ShardGeometry, where: Any) -> ShardState:
    """Read and decode the index of the open shard ``fd``.

    Raises
    ------
    ShardCorruptError
        When the file is shorter than its index or the index fails to decode
        (e.g. checksum mismatch), or an entry points outside the file.
    """
    size, offset, raw, table = read_index(fd, codec, geometry, where)
    return _checked(ShardState(size, offset, raw, table), where)
