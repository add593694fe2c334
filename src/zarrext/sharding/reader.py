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
so zarr-python's own shard decoding runs unchanged on top of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import LocalStore

from zarrext.sharding.journal import journal_pending, read_journal

__all__ = ["LockedShardFile", "local_file", "open_shared"]

_THREAD_READ = 1 << 20  # larger reads leave the event loop


def local_file(byte_getter: object) -> Path | None:
    """The file behind a store path in a ``LocalStore`` (read-only or not)."""
    store = getattr(byte_getter, "store", None)
    path = getattr(byte_getter, "path", None)
    if isinstance(store, LocalStore) and isinstance(path, str):
        return store.root / path
    return None


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
    """

    def __init__(self, fd: int, size: int, overlay: tuple[int, bytes] | None = None) -> None:
        self.fd = fd
        self.size = size
        self.overlay = overlay

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

    def get_sync(
        self, prototype: BufferPrototype | None = None, byte_range: Any = None
    ) -> Buffer | None:
        start, end = self._range(byte_range)
        return (prototype or default_buffer_prototype()).buffer.from_bytes(self.read(start, end))

    async def get(self, prototype: BufferPrototype, byte_range: Any = None) -> Buffer | None:
        start, end = self._range(byte_range)
        if end - start > _THREAD_READ:
            return await asyncio.to_thread(self.get_sync, prototype, byte_range)
        return self.get_sync(prototype, byte_range)

    async def exists(self) -> bool:
        return True


def open_shared(path: Path) -> LockedShardFile | None:
    """Open and share-lock the shard at ``path``; None if there is none.

    The caller closes the result. A pending journal (a killed writer's
    transaction) makes the file read with the journal's size and index.
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
                old_size, index_offset, index = entry
                size, overlay = min(size, old_size), (index_offset, index)
    except BaseException:
        os.close(fd)
        raise
    return LockedShardFile(fd, size, overlay)


@contextlib.contextmanager
def shared(path: Path) -> Iterator[LockedShardFile | None]:
    """:func:`open_shared` as a context manager."""
    handle = open_shared(path)
    try:
        yield handle
    finally:
        if handle is not None:
            handle.close()
