"""Synchronous chunk IO for the codec threads: which stores serve it, and local reads.

A chunk job in a codec thread fetches and stores its chunk itself, without the
event loop, when the store serves synchronous IO (a local or memory store, a
shard's inner chunks). A chunk file of an open ``LocalStore`` is read here
straight into the thread's read buffer (:mod:`zarrext.pipeline.scratch`), and a
shard given in parts written there without joining them first.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.store import SyncByteGetter, SyncByteSetter
from zarr.storage import LocalStore, StorePath

from zarrext._zarr_compat import local_atomic_write, store_is_open, store_supports_sync_io
from zarrext.pipeline.scratch import SCRATCH_MAX_BYTES, read_scratch

if TYPE_CHECKING:
    from zarr.core.buffer import Buffer


def get_chunk_sync(byte_getter: Any, prototype: Any) -> Buffer | None:
    """A chunk's stored bytes (None if there are none), as ``byte_getter.get_sync``.

    A chunk file of an open ``LocalStore`` (:func:`local_chunk_file`) is read by
    :func:`read_chunk_file`, into the thread's read buffer.
    """
    path = local_chunk_file(byte_getter)
    if path is None:
        return byte_getter.get_sync(prototype=prototype)
    data = read_chunk_file(path)
    return None if data is None else prototype.buffer.from_array_like(data)


def local_chunk_file(byte_getter: Any) -> str | None:
    """The file of the chunk ``byte_getter`` addresses, when its store is an open
    ``LocalStore`` (that exact class: a subclass may change how keys are read);
    else None (the store's own ``get_sync`` reads it).

    The path is joined here, without the ``pathlib`` objects the store builds per
    key: they cost about a fifth of a small chunk's read, all of it holding the
    GIL the other codec threads wait for.
    """
    store = getattr(byte_getter, "store", None)
    key = getattr(byte_getter, "path", None)
    if type(store) is not LocalStore or not isinstance(key, str) or not store_is_open(store):
        return None
    return os.path.join(store.root, key)


def read_chunk_file(path: str) -> np.ndarray | None:
    """The bytes of the chunk file at ``path`` (None where ``LocalStore.get_sync``
    finds no chunk: no file, a folder, a path under a file).

    Up to :data:`~zarrext.pipeline.scratch.SCRATCH_MAX_BYTES`, the bytes are the
    thread's read buffer (:func:`~zarrext.pipeline.scratch.read_scratch`), valid
    until the thread reads its next chunk file. Four system calls (``open``,
    ``fstat``, one read, ``close``), as few as can tell the file's end: each lets
    go of the GIL and takes it back, a hand-off between the codec threads.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None  # as LocalStore.get_sync: no chunk
    try:
        size = os.fstat(fd).st_size
        if size > SCRATCH_MAX_BYTES:
            return np.frombuffer(_read_to_end(fd, b""), np.uint8)
        # one byte more than the file: a file grown since fstat fills it
        data = read_scratch(size + 1)
        got = os.readv(fd, [data])
        while 0 < got < size:  # a short read: read on to the end
            n = os.readv(fd, [data[got:]])
            if n == 0:
                break
            got += n
        if got > size:
            return np.frombuffer(_read_to_end(fd, data[:got].tobytes()), np.uint8)
    except IsADirectoryError:  # opened, but a folder
        return None
    finally:
        os.close(fd)
    return data[:got]


# Not inherited by a process the caller starts while the file is open.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


def _read_to_end(fd: int, head: bytes) -> bytes:
    parts = [head]
    while chunk := os.read(fd, 1 << 20):
        parts.append(chunk)
    return b"".join(parts)


def set_parts_sync(byte_setter: Any, parts: list[Buffer]) -> None:
    """Store ``parts``, joined, as ``byte_setter``'s object (``byte_setter.set_sync``).

    In an open, writable ``LocalStore`` (that exact class) the parts are written
    one after another into the file the store would write (a temporary file
    renamed over the key's): a 16 MiB shard is not first copied into one fresh
    buffer, which cost about 5 % of ``convert``'s CPU here (the copy and its page
    faults).
    """
    store = getattr(byte_setter, "store", None)
    key = getattr(byte_setter, "path", None)
    if (
        type(store) is not LocalStore
        or not isinstance(key, str)
        or not store_is_open(store)
        or store.read_only
    ):
        byte_setter.set_sync(joined(parts))
        return
    views = [memoryview(part.as_buffer_like()).cast("B") for part in parts]
    path = store.root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    with local_atomic_write(path) as file:
        with contextlib.suppress(OSError, AttributeError):  # where the system has none
            # the file's blocks allocated at once, not page by page as it is written:
            # a 16 MiB shard's write took 35 % less CPU here (ext4)
            os.posix_fallocate(file.fileno(), 0, sum(v.nbytes for v in views))
        for view in views:
            while view:
                view = view[file.write(view):]


def store_parts_sync(byte_setter: Any, parts: list[Buffer] | None) -> None:
    """Store a shard given in ``parts`` (:func:`set_parts_sync`); None (no inner chunk
    stored): delete it, as zarr-python's sharding codec does."""
    if parts is None:
        byte_setter.delete_sync()
    else:
        set_parts_sync(byte_setter, parts)


def joined(parts: list[Buffer]) -> Buffer:
    """``parts`` as one buffer (as zarr's sharding codec joins a shard's)."""
    return parts[0].combine(parts[1:])


def sync_io(holder: object, *, write: bool) -> bool:
    """Whether a byte getter/setter serves synchronous IO (checked on a batch's first)."""
    if isinstance(holder, StorePath):
        return store_supports_sync_io(holder.store)
    return isinstance(holder, SyncByteSetter if write else SyncByteGetter)


def local_file(byte_getter: object) -> Path | None:
    """The file (or, for an array's store path, the directory) behind a store path in a
    ``LocalStore``, read-only or not; None in any other store."""
    store = getattr(byte_getter, "store", None)
    path = getattr(byte_getter, "path", None)
    if isinstance(store, LocalStore) and isinstance(path, str):
        return store.root / path
    return None
