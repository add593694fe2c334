"""Consistent reads of local shard files: one open, a shared lock, the committed index.

zarr-python reads a shard's index and then its chunks in separate opens of the
file, with no lock: a writer or a ``compact`` in between can make it read one
file's index and another's bytes. zarrext's readers (arrays opened with
:func:`zarrext.open_array`) read a local shard through :func:`open_shared`:

- the file is opened once and ``flock(LOCK_SH)`` is held until the read is done,
  so no zarrext writer, ``compact``, ``expand``, ``recompress`` or
  ``check --repair`` (all of which take ``LOCK_EX``) changes it meanwhile;
- a file replaced meanwhile (``os.replace`` by ``compact``) is still read whole
  from the descriptor: the old file's index and the old file's bytes;
- a transaction a killed writer left pending is read as its rollback will leave
  it: the journal's old size and index.

:class:`LockedShardFile` answers zarr's byte-range requests from that descriptor,
so zarr-python's own shard decoding runs unchanged on top of it. zarr-python asks
for the whole file when a read wants every inner chunk of a shard; a fixed-slot
shard whose chunks were updated is then up to twice its data (the spare slots, which
hold copies of their chunks with the index at the end, and stale copies), so the
whole-file answer is the shard packed: only the bytes its index references, read in
runs, behind an index that points into them (:meth:`LockedShardFile.read_packed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype

from zarrext.sharding.geometry import EMPTY
from zarrext.sharding.journal import journal_pending, read_journal
from zarrext.sharding.state import (
    ShardCorruptError,
    check_entries,
    decode_table,
    encode_table,
)

if TYPE_CHECKING:
    from zarr.codecs.sharding import ShardingCodec

__all__ = ["IndexFormat", "LockedShardFile", "index_format", "open_shared"]

_THREAD_READ = 1 << 20  # larger reads leave the event loop
# Unreferenced bytes between two referenced ranges up to this size are read through:
# one larger read costs less than two system calls.
_READ_THROUGH_GAP = 64 << 10
# A whole-file request reads only the referenced bytes when they are at most this
# share of the file; a denser file is read whole, in one call.
_SPARSE_SHARE = 0.9


@dataclass(frozen=True)
class IndexFormat:
    """How to find and decode a shard's index.

    Attributes
    ----------
    size : int
        Encoded size of the index.
    at_end : bool
        Whether the index ends the file (else it starts it).
    decode : callable
        Encoded index -> ``(n, 2)`` uint64 offsets and lengths; raises ``ValueError``
        when the bytes are no valid index.
    encode : callable
        The inverse of ``decode``.
    """

    size: int
    at_end: bool
    decode: Callable[[bytes], np.ndarray]
    encode: Callable[[np.ndarray], bytes]


def index_format(codec: ShardingCodec, chunks_per_shard: tuple[int, ...]) -> IndexFormat:
    """The :class:`IndexFormat` of the shards ``codec`` encodes."""
    return IndexFormat(
        size=codec._shard_index_size(chunks_per_shard),
        at_end=codec.index_location == "end",
        decode=partial(decode_table, codec, chunks_per_shard),
        encode=partial(encode_table, codec, chunks_per_shard),
    )


class LockedShardFile:
    """A shard file held open under a shared lock, read as zarr's byte getter.

    Parameters
    ----------
    fd : int
        The open, locked file (closed by :meth:`close`).
    size : int
        The size the file is read with.
    overlay : tuple of (int, bytes), optional
        Bytes that replace the file's at an offset (a pending journal's index).
    index : IndexFormat, optional
        The shard's index format: whole-file requests then read only the bytes
        the index references.
    """

    def __init__(
        self,
        fd: int,
        size: int,
        overlay: tuple[int, bytes] | None = None,
        index: IndexFormat | None = None,
    ) -> None:
        self.fd = fd
        self.size = size
        self.overlay = overlay
        self.index = index

    def close(self) -> None:
        os.close(self.fd)  # releases the lock

    def _range(self, byte_range: Any) -> tuple[int, int]:
        if byte_range is None:
            return 0, self.size
        if isinstance(byte_range, RangeByteRequest):
            return min(byte_range.start, self.size), min(byte_range.end, self.size)
        if isinstance(byte_range, OffsetByteRequest):
            return min(byte_range.offset, self.size), self.size
        if isinstance(byte_range, SuffixByteRequest):
            return max(0, self.size - byte_range.suffix), self.size
        raise TypeError(f"unexpected byte range {byte_range!r}")

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` as this reader sees the file."""
        data = os.pread(self.fd, end - start, start) if end > start else b""
        if self.overlay is not None:
            at, patch = self.overlay
            lo, hi = max(start, at), min(end, at + len(patch))
            if lo < hi:
                buf = bytearray(data.ljust(end - start, b"\0"))
                buf[lo - start : hi - start] = patch[lo - at : hi - at]
                data = bytes(buf)
        return data

    def _pread_into(self, out: np.ndarray, start: int) -> None:
        view = memoryview(out)
        done = 0
        while done < view.nbytes:
            n = os.preadv(self.fd, [view[done:]], start + done)
            if n <= 0:  # the file ends early: leave zeros, as a short read would
                return
            done += n

    def index_table(self, where: str) -> np.ndarray:
        """The shard's ``(n, 2)`` offsets and lengths as this reader sees them.

        Raises
        ------
        ShardCorruptError
            When the file is shorter than its index, the index does not decode, or
            an entry ends past the end of the file.
        """
        fmt = self.index
        assert fmt is not None
        if self.size < fmt.size:
            raise ShardCorruptError(
                f"shard {where}: {self.size} bytes is shorter than its {fmt.size}-byte index"
            )
        at = self.size - fmt.size if fmt.at_end else 0
        try:
            table = np.asarray(fmt.decode(self.read(at, at + fmt.size)), dtype=np.uint64)
        except ValueError as e:
            raise ShardCorruptError(f"shard {where}: index does not decode: {e}") from e
        table = table.reshape(-1, 2)
        check_entries(table, self.size, where)
        return table

    def read_packed(self) -> np.ndarray | None:
        """The shard as this reader sees it, packed: only the bytes its index references.

        The referenced byte ranges are read in runs (gaps up to
        ``_READ_THROUGH_GAP`` read through) and laid end to end, with the index
        re-encoded to point into them, where the shard's index goes: zarr-python
        decodes the result as it would the whole file, and gets the same chunks.
        Holes, unused or stale spare slots and old copies are never read. None
        when the whole file is better read in one go: no index format given, an
        index that does not decode or points outside the file (zarr-python's
        whole-file decoding then reports it), or referenced bytes that fill most
        of the file.
        """
        fmt = self.index
        if fmt is None:
            return None
        try:
            table = self.index_table("")
        except ValueError:
            return None
        present = np.flatnonzero(table[:, 0] != EMPTY)
        starts = table[present, 0].astype(np.int64)
        ends = starts + table[present, 1].astype(np.int64)
        if int((ends - starts).sum()) + fmt.size >= _SPARSE_SHARE * self.size:
            return None
        runs, run_of = _runs(starts, ends)
        lengths = np.array([hi - lo for lo, hi in runs], dtype=np.int64)
        base = 0 if fmt.at_end else fmt.size
        packed_at = base + np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        out = np.empty(base + int(lengths.sum()) + (fmt.size if fmt.at_end else 0), np.uint8)
        for (lo, hi), at in zip(runs, packed_at.tolist(), strict=True):
            self._pread_into(out[at : at + hi - lo], lo)
        if self.overlay is not None:  # as read() shows it, wherever the patch lies
            self._patch(out, runs, packed_at)
        new = table.copy()
        if present.size:
            new[present, 0] = (packed_at[run_of] + starts - np.array(
                [runs[r][0] for r in run_of.tolist()], dtype=np.int64
            )).astype(np.uint64)
        where = out.size - fmt.size if fmt.at_end else 0
        out[where : where + fmt.size] = np.frombuffer(fmt.encode(new), dtype=np.uint8)
        return out

    def referenced_pieces(
        self, table: np.ndarray, piece_bytes: int
    ) -> Iterator[tuple[np.ndarray, list[tuple[int, int]]]]:
        """The bytes ``table``'s present entries reference, read a piece at a time.

        Entries are taken in file order and grouped while their bytes span at most
        ``piece_bytes`` (an entry larger than that is a piece of its own) and the
        gaps between them are at most ``_READ_THROUGH_GAP``. Each piece is one read
        into this thread's scratch memory, yielded with its entries as ``(entry,
        where its bytes start in the piece)``; the memory is reused for the next
        piece, so a caller decodes a piece's entries before it asks for the next,
        while they are still in cache. Entries must lie inside the file and there
        must be no overlay (a pending journal): callers check both.
        """
        present = np.flatnonzero(table[:, 0] != EMPTY)
        starts = table[present, 0].astype(np.int64)
        ends = starts + table[present, 1].astype(np.int64)
        runs, run_of = _runs(starts, ends, max_span=piece_bytes)
        members: list[list[tuple[int, int]]] = [[] for _ in runs]
        for k in np.argsort(starts, kind="stable").tolist():  # file order in each piece
            run = int(run_of[k])
            members[run].append((int(present[k]), int(starts[k]) - runs[run][0]))
        for (lo, hi), entries in zip(runs, members, strict=True):
            out = _scratch(hi - lo)
            self._pread_into(out, lo)
            yield out, entries

    def _patch(self, out: np.ndarray, runs: list[list[int]], packed_at: np.ndarray) -> None:
        """Apply the overlay to the runs of ``out`` that hold its file bytes."""
        assert self.overlay is not None
        at, patch = self.overlay
        for (lo, hi), dst in zip(runs, packed_at.tolist(), strict=True):
            a, b = max(lo, at), min(hi, at + len(patch))
            if a < b:
                out[dst + a - lo : dst + b - lo] = np.frombuffer(patch, np.uint8)[a - at : b - at]

    def get_sync(
        self, prototype: BufferPrototype | None = None, byte_range: Any = None
    ) -> Buffer | None:
        buffer = (prototype or default_buffer_prototype()).buffer
        if byte_range is None:
            packed = self.read_packed()
            if packed is not None:
                return buffer.from_array_like(packed)
        start, end = self._range(byte_range)
        return buffer.from_bytes(self.read(start, end))

    async def get(self, prototype: BufferPrototype, byte_range: Any = None) -> Buffer | None:
        start, end = self._range(byte_range)
        if byte_range is None or end - start > _THREAD_READ:
            return await asyncio.to_thread(self.get_sync, prototype, byte_range)
        return self.get_sync(prototype, byte_range)

    async def exists(self) -> bool:
        return True


def _runs(
    starts: np.ndarray, ends: np.ndarray, max_span: int | None = None
) -> tuple[list[list[int]], np.ndarray]:
    """Runs of referenced bytes ``[file start, file end)`` and each entry's run.

    Gaps up to ``_READ_THROUGH_GAP`` are read through; with ``max_span`` a run
    spans at most that many bytes, unless one entry alone spans more.
    """
    order = np.argsort(starts, kind="stable")
    runs: list[list[int]] = []
    run_of = np.empty(starts.size, dtype=np.int64)
    for k in order.tolist():
        lo, hi = int(starts[k]), int(ends[k])
        if (
            runs
            and lo <= runs[-1][1] + _READ_THROUGH_GAP
            and (max_span is None or max(runs[-1][1], hi) - runs[-1][0] <= max_span)
        ):
            runs[-1][1] = max(runs[-1][1], hi)
        else:
            runs.append([lo, hi])
        run_of[k] = len(runs) - 1
    return runs, run_of


# Pieces of shards up to this size are read into memory each thread keeps (fresh
# memory for every read is faulted in page by page, a cost as large as the read
# itself); a larger inner chunk gets fresh memory, so that a thread keeps little.
SCRATCH_MAX_BYTES = 16 << 20
_thread = threading.local()


def _scratch(nbytes: int) -> np.ndarray:
    if nbytes > SCRATCH_MAX_BYTES:
        return np.empty(nbytes, np.uint8)
    buffer: np.ndarray | None = getattr(_thread, "buffer", None)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = _thread.buffer = np.empty(nbytes, np.uint8)
    return buffer[:nbytes]


def open_shared(path: Path, index: IndexFormat | None = None) -> LockedShardFile | None:
    """Open and share-lock the shard at ``path``; None if there is none.

    The caller closes the result. A pending journal (a killed writer's
    transaction) makes the file read with the journal's size and index.
    ``index`` lets whole-file requests read only what the index references.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError as e:  # a file system without flock: read unlocked, as zarr does
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
        size = os.fstat(fd).st_size
        overlay = None
        try:
            current = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        # A replaced file is read as it is (nobody writes to it any more); the
        # journal beside the name then belongs to the new file.
        if current and journal_pending(path):
            entry = read_journal(path)
            if entry is not None:
                old_size, index_offset, old_index = entry
                size, overlay = min(size, old_size), (index_offset, old_index)
    except BaseException:
        os.close(fd)
        raise
    return LockedShardFile(fd, size, overlay, index)


@contextlib.contextmanager
def shared(path: Path, index: IndexFormat | None = None) -> Iterator[LockedShardFile | None]:
    """:func:`open_shared` as a context manager."""
    handle = open_shared(path, index)
    try:
        yield handle
    finally:
        if handle is not None:
            handle.close()
