"""Journals, locks and the reuse quarantine of local shard files.

- Lock: ``flock(LOCK_EX)`` on the shard file itself (:func:`locked_shard`).
- Journal ``<shard>.zarrext-journal``: the shard's size and index before a
  transaction, with a crc32c of its own; present only while a transaction is
  under way (deleted at commit). :func:`recover` rolls an interrupted one back.
- Quarantine ``<shard>.zarrext-free``: byte ranges freed outside their chunk's own
  places, with the time before which they may not be reused (see
  :mod:`zarrext.sharding.allocator`); present only while such a range is held.
- Temporary files ``<shard>.zarrext-tmp-<pid>-<host>-<id>``: new shards being
  built. ``<host>`` is a short hash of the host name: a file whose writer
  provably died (this host's tag, its process gone) is deleted on the next open
  for writing (:func:`dead_writer_temp`); a file of another host is never judged
  (its process cannot be seen from here).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import google_crc32c
import numpy as np

from zarrext.sharding.allocator import REUSE_GRACE, WHOLE_FILE, Interval
from zarrext.sharding.geometry import EMPTY, ShardGeometry
from zarrext.sharding.state import encode_index

if TYPE_CHECKING:
    from zarr.codecs.sharding import ShardingCodec

__all__ = [
    "FREE_SUFFIX",
    "HOST",
    "JOURNAL_SUFFIX",
    "TMP_MARK",
    "dead_writer_temp",
    "discard_journal",
    "discard_sidecars",
    "free_path",
    "journal_path",
    "journal_pending",
    "locked_shard",
    "process_alive",
    "read_journal",
    "read_quarantine",
    "recover",
    "temp_owner",
    "temp_path",
    "write_journal",
    "write_quarantine",
]

JOURNAL_SUFFIX = ".zarrext-journal"
FREE_SUFFIX = ".zarrext-free"
TMP_MARK = ".zarrext-tmp-"
_JOURNAL_MAGIC = b"ZXJ1"
_JOURNAL_HEAD = struct.Struct("<4sQQQ")  # magic, old size, index offset, index length
_INACTIVE = b"\0\0\0\0"  # an older zarrext's committed journal
_FREE_MAGIC = b"ZXF1"
_FREE_ENTRY = struct.Struct("<QQd")  # start, end, release time


def free_path(path: Path) -> Path:
    """The reuse quarantine of the shard at ``path``."""
    return path.with_name(path.name + FREE_SUFFIX)


def journal_path(path: Path) -> Path:
    """The journal of the shard at ``path``."""
    return path.with_name(path.name + JOURNAL_SUFFIX)


# this host's tag in temporary names: a pid means something only on its own host
HOST = hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()
# <pid>-<host>-<id>, or <pid>-<id> as zarrext wrote them before the host tag
_TEMP_NAME = re.compile(re.escape(TMP_MARK) + r"(\d+)-(?:([0-9a-f]{8})-)?[0-9a-f]+$")


def temp_path(path: Path) -> Path:
    """A fresh temporary name beside ``path`` (cleaned up by ``check --repair``, and
    by the next open for writing once its writer is gone)."""
    return path.with_name(
        f"{path.name}{TMP_MARK}{os.getpid()}-{HOST}-{uuid.uuid4().hex[:8]}"
    )


def temp_owner(name: str) -> tuple[int, str | None] | None:
    """``(pid, host tag or None)`` of a zarrext temporary file's name, else None."""
    match = _TEMP_NAME.search(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2)


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dead_writer_temp(name: str) -> bool:
    """Whether ``name`` is a temporary file of a writer provably gone: written on
    this host (its tag in the name) by a process that no longer exists.

    A live writer's file (its pid alive, or the pid reused: kept either way), a
    file of another host and an untagged one (an older zarrext's) are not.
    """
    owner = temp_owner(name)
    return owner is not None and owner[1] == HOST and not process_alive(owner[0])


def _create(path: Path, codec: ShardingCodec, geometry: ShardGeometry, layout: str) -> None:
    """Create an empty shard at ``path`` atomically (no-op if one appears meanwhile)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    table = np.full((geometry.n_chunks, 2), EMPTY, dtype="<u8")
    index = encode_index(codec, geometry, table)
    size = geometry.empty_file_size(layout)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        # The slot area is a hole: it costs no disk until a chunk is written.
        os.ftruncate(fd, size)
        os.pwrite(fd, index, 0 if geometry.index_location == "start" else size - len(index))
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


@contextlib.contextmanager
def locked_shard(
    path: Path,
    *,
    create: tuple[ShardingCodec, ShardGeometry, str] | None = None,
) -> Iterator[int | None]:
    """Open ``path`` read-write with an exclusive lock; yields None if it is missing.

    ``create=(codec, geometry, layout)`` creates a missing shard first. Any
    interrupted transaction is rolled back before the descriptor is yielded.
    """
    while True:
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            if create is None:
                yield None
                return
            _create(path, *create)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = -1
            if current != os.fstat(fd).st_ino:
                continue  # replaced (compacted) or deleted while we waited
            recover(path, fd)
            yield fd
            return
        finally:
            os.close(fd)  # closing releases the lock


# -- journal -----------------------------------------------------------------------


def put_journal(jfd: int, old_size: int, index_offset: int, index: bytes) -> None:
    body = _JOURNAL_HEAD.pack(_JOURNAL_MAGIC, old_size, index_offset, len(index)) + index
    os.pwrite(jfd, body + google_crc32c.value(body).to_bytes(4, "little"), 0)


def write_journal(path: Path, old_size: int, index_offset: int, index: bytes) -> None:
    """Record the shard's size and index before a transaction changes them."""
    fd = os.open(journal_path(path), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        put_journal(fd, old_size, index_offset, index)
    finally:
        os.close(fd)


def replace_index(
    path: Path, fd: int, size: int, offset: int, old_index: bytes, new_index: bytes
) -> None:
    """Rewrite the index of the locked shard ``fd`` in place, journaled like a write."""
    write_journal(path, size, offset, old_index)
    os.pwrite(fd, new_index, offset)
    discard_journal(path)


def discard_journal(path: Path) -> None:
    """Delete the journal of the locked shard at ``path`` (after a rollback or a swap)."""
    journal_path(path).unlink(missing_ok=True)


def discard_sidecars(path: Path) -> None:
    """Delete the journal and quarantine of the locked shard at ``path``, just replaced
    by a whole new file (nothing in them is about the new file)."""
    journal_path(path).unlink(missing_ok=True)
    free_path(path).unlink(missing_ok=True)


def journal_pending(path: Path) -> bool:
    """Whether the shard at ``path`` has a journal of an unfinished transaction."""
    try:
        fd = os.open(journal_path(path), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        head = os.pread(fd, len(_INACTIVE), 0)
    finally:
        os.close(fd)
    return head != _INACTIVE  # empty: killed before the journal was written (torn)


def read_journal(path: Path) -> tuple[int, int, bytes] | None:
    """The (old size, index offset, old index) of a pending journal; None if torn/inactive."""
    try:
        record = journal_path(path).read_bytes()
    except FileNotFoundError:
        return None
    head = _JOURNAL_HEAD.size
    if len(record) < head + 4:
        return None
    magic, old_size, index_offset, index_len = _JOURNAL_HEAD.unpack_from(record)
    end = head + index_len
    if magic != _JOURNAL_MAGIC or len(record) < end + 4:
        return None
    if google_crc32c.value(record[:end]).to_bytes(4, "little") != record[end : end + 4]:
        return None
    return old_size, index_offset, record[head:end]


def recover(path: Path, fd: int) -> bool:
    """Roll back an interrupted transaction on the locked shard ``fd``; True if one was.

    A pending journal that fails its checksum was torn while being written, before
    the shard was touched: it is only cleared.
    """
    if not journal_pending(path):
        return False
    entry = read_journal(path)
    if entry is not None:
        old_size, index_offset, index = entry
        size = os.fstat(fd).st_size
        if size > old_size:
            # A reader may hold the killed transaction's published index, which
            # points past the old end: keep that region from the next appends.
            held = read_quarantine(path) or []
            write_quarantine(path, [*held, (old_size, size, time.time() + REUSE_GRACE)])
        os.ftruncate(fd, old_size)
        os.pwrite(fd, index, index_offset)
    discard_journal(path)
    return True


# -- reuse quarantine ------------------------------------------------------------------


def read_quarantine(path: Path, now: float | None = None) -> list[Interval] | None:
    """The held ranges of the shard at ``path`` (expired ones dropped); None if none.

    A quarantine file that does not pass its checksum (damaged: writers replace it
    atomically) holds every byte of the file for :data:`REUSE_GRACE` seconds from now.
    """
    try:
        record = free_path(path).read_bytes()
    except FileNotFoundError:
        return None
    now = time.time() if now is None else now
    body, crc = record[:-4], record[-4:]
    if (
        len(record) < 8
        or body[:4] != _FREE_MAGIC
        or (len(body) - 4) % _FREE_ENTRY.size
        or google_crc32c.value(body).to_bytes(4, "little") != crc
    ):
        return [(0, WHOLE_FILE, now + REUSE_GRACE)]
    entries = [
        _FREE_ENTRY.unpack_from(body, off) for off in range(4, len(body), _FREE_ENTRY.size)
    ]
    return [(int(a), int(b), float(r)) for a, b, r in entries if r > now]


def write_quarantine(path: Path, entries: list[Interval]) -> None:
    """Store the held ranges of the locked shard at ``path`` (none: delete the file)."""
    if not entries:
        free_path(path).unlink(missing_ok=True)
        return
    body = _FREE_MAGIC + b"".join(_FREE_ENTRY.pack(a, b, r) for a, b, r in entries)
    # Built under a temporary name and renamed: a writer killed here leaves the
    # previous quarantine, never a torn one (which would hold the whole file).
    tmp = temp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, body + google_crc32c.value(body).to_bytes(4, "little"))
    finally:
        os.close(fd)
    os.replace(tmp, free_path(path))
