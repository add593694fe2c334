"""Shard files built by hand from spec 001's byte layout, for tests.

A ``sharding_indexed`` shard with the default index codecs (``bytes`` little
endian, ``crc32c``) is its inner chunks' bytes wherever the writer put them, and an
index of ``n`` pairs ``(offset, nbytes)`` as little-endian uint64 in C order of the
inner chunks (``2**64 - 1`` twice for a missing chunk) followed by the CRC-32C of
those pairs, at the start or at the end of the file. Nothing here calls zarrext.
"""

from __future__ import annotations

from collections.abc import Mapping

import google_crc32c
import numpy as np

EMPTY = 2**64 - 1


def crc32c(data: bytes) -> bytes:
    """The 4 bytes zarr's ``crc32c`` codec appends: CRC-32C, little endian."""
    return google_crc32c.value(data).to_bytes(4, "little")


def index_size(n_chunks: int) -> int:
    """Bytes of the encoded index of ``n_chunks`` inner chunks."""
    return 16 * n_chunks + 4


def encode_index(table: np.ndarray) -> bytes:
    """The encoded index of an ``(n, 2)`` offsets/lengths table."""
    raw = np.ascontiguousarray(table, dtype="<u8").tobytes()
    return raw + crc32c(raw)


def decode_index(shard: bytes, n_chunks: int, location: str) -> np.ndarray:
    """The ``(n, 2)`` offsets/lengths table of a shard's bytes (checksum verified)."""
    size = index_size(n_chunks)
    encoded = shard[:size] if location == "start" else shard[len(shard) - size :]
    raw, stored = encoded[:-4], encoded[-4:]
    assert crc32c(raw) == stored, "index checksum"
    return np.frombuffer(raw, dtype="<u8").reshape(n_chunks, 2)


def shard_file(
    n_chunks: int,
    placed: Mapping[int, tuple[int, bytes]],
    location: str,
    data_end: int,
) -> bytes:
    """A shard holding each chunk ``flat -> (offset, bytes)`` at its offset.

    ``data_end`` is where the data area ends (bytes no chunk fills are zeros); the
    index follows it (``location="end"``) or comes first (``"start"``, offsets count
    from the file's start, so they must leave its bytes free).
    """
    isz = index_size(n_chunks)
    data_start = isz if location == "start" else 0
    out = bytearray(data_end + (isz if location == "end" else 0))
    table = np.full((n_chunks, 2), EMPTY, dtype="<u8")
    for flat, (offset, data) in placed.items():
        assert offset >= data_start, (flat, offset)
        assert offset + len(data) <= data_end, (flat, offset)
        out[offset : offset + len(data)] = data
        table[flat] = (offset, len(data))
    where = 0 if location == "start" else data_end
    out[where : where + isz] = encode_index(table)
    return bytes(out)


def dense_shard(n_chunks: int, chunks: Mapping[int, bytes], location: str = "end") -> bytes:
    """A shard with ``chunks`` (flat index -> bytes) back to back in flat order."""
    offset = index_size(n_chunks) if location == "start" else 0
    placed = {}
    for flat in sorted(chunks):
        placed[flat] = (offset, chunks[flat])
        offset += len(chunks[flat])
    return shard_file(n_chunks, placed, location, offset)
