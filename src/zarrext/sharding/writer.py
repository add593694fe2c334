"""In-place, concurrent, crash-safe writes of inner chunks into local shard files.

Scheme (one *transaction* per shard per write call)
--------------------------------------------------
1. Lock: ``flock(LOCK_EX)`` on the shard file itself. Compaction replaces the
   file with ``os.replace``, so after locking a writer checks that the path still
   names the inode it locked, else it reopens. A missing shard is created whole
   (temp file + ``os.link``), never seen half-initialized
   (:func:`zarrext.sharding.journal.locked_shard`).
2. Recover: a journal left by a killed writer (``<shard>.zarrext-journal``) is
   rolled back before anything else (see below).
3. Allocate, never over live bytes (:mod:`zarrext.sharding.allocator`): a chunk
   goes to whichever of its two own places (its slot, its spare slot) its current
   copy does not use, else to the end of the file; bytes freed outside a chunk's
   own places are quarantined for a grace period. The copy readers see stays
   intact until the new index is published, and a reader holding an older index
   never finds another chunk where it looks.
4. Journal: the shard's size and encoded index *before* the transaction are
   written to the journal (one write, with a crc32c of its own).
5. Data: ``os.pwrite`` of every new chunk at its place.
6. Publish: ``os.pwrite`` of the new index, in place (index at the start, or at
   the end when the file did not grow), else appended after the new data.
7. Commit: record newly quarantined ranges, delete the journal; unlock. A shard
   whose last chunk was removed is deleted instead (like zarr-python, no empty
   shard is left).

A fixed-slot write that replaces every inner chunk of a shard in slot form skips
the journal: the new shard is built in a temporary file and swapped in with
``os.replace`` (under the lock), so all chunks go back to their slots.

Recovery (under the same lock, by the next writer, by ``zarrext check --repair``
or on opening the array for writing): a journal whose checksum fails was torn
before step 5 and nothing else was touched, so it is only cleared. A valid journal is
rolled back: truncate to the old size, rewrite the old index. Because steps 3-6
never overwrite bytes the old index references, the old index describes intact
chunks, so every chunk reads its content from before the interrupted
transaction, and every transaction that returned is kept. Torn index writes are
therefore harmless. The scheme protects against process death (SIGKILL), not
power loss: nothing is fsynced.

Readers
-------
zarrext's own reader (:mod:`zarrext.sharding.reader`) holds a shared lock across
its index and data reads of one open file, and reads a pending journal's index:
it sees the last committed version of every chunk. Readers that take no lock
(zarr-python, tensorstore) may see an index being rewritten (a checksum error of
the index), a stale version, or, when slower than two updates of the same chunk,
that chunk's newer version (or, while it is being written, a mix of two versions
that a crc32c in the inner codecs reports), but never another chunk's bytes as
long as they read a shard's chunks within the grace period
(:data:`~zarrext.sharding.allocator.REUSE_GRACE`) of reading its index.

zarr-python reads a whole shard in one ``read``, which the kernel (ext4, tmpfs)
copies page by page without a lock against ``pwrite``: a reader preempted mid-copy
gets pages from before and after whole transactions, in file order. With the index
at the end it can pair a new index with the old bytes at a chunk's new place. In
slot form that place is the chunk's other own place, and with the index at the end
a spare slot holds a version of its chunk before any index points to it (filled
when the spare area enters the file, or on the chunk's first store:
:mod:`zarrext.sharding.allocator`), so a chunk stored when such a read began reads
as some version of itself. The exact remainder: a chunk with no stored version
when the read began (never stored, or removed) may read as its slot's old bytes,
zeros (a hole; not the fill value unless it is 0) or a version from before its
removal. With the index at the start the index is read first (old index, newer
bytes): only the cases above.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.core.buffer import default_buffer_prototype

from zarrext.sharding import faults
from zarrext.sharding.allocator import REUSE_GRACE, allocate, freed_ranges
from zarrext.sharding.geometry import EMPTY, ShardGeometry
from zarrext.sharding.journal import (
    discard_sidecars,
    journal_path,
    locked_shard,
    put_journal,
    read_quarantine,
    temp_path,
    write_quarantine,
)
from zarrext.sharding.state import ShardState, encode_index, load_state

if TYPE_CHECKING:
    from zarr.codecs.sharding import ShardingCodec
    from zarr.core.buffer import Buffer

__all__ = ["build_file", "read_chunks", "update_chunks", "write_chunks"]


def _flat(coords: tuple[int, ...], geometry: ShardGeometry) -> int:
    return int(np.ravel_multi_index(coords, geometry.chunks_per_shard)) if coords else 0


def read_chunks(
    path: Path,
    codec: ShardingCodec,
    geometry: ShardGeometry,
    coords: list[tuple[int, ...]],
) -> dict[tuple[int, ...], Buffer]:
    """The encoded bytes of the present chunks among ``coords`` (under the lock)."""
    out: dict[tuple[int, ...], Buffer] = {}
    with locked_shard(path) as fd:
        if fd is None:
            return out
        state = load_state(fd, codec, geometry, path)
        for c in coords:
            off, n = state.table[_flat(c, geometry)]
            if off != EMPTY:
                out[c] = default_buffer_prototype().buffer.from_bytes(
                    os.pread(fd, int(n), int(off))
                )
    return out


def _write_runs(fd: int, pieces: list[tuple[int, Any]]) -> None:
    """``pwrite`` (offset, bytes) pieces, one ``pwritev`` per run of adjacent pieces."""
    pieces.sort(key=lambda p: p[0])
    i = 0
    while i < len(pieces):
        start = pieces[i][0]
        end = start
        run: list[memoryview] = []
        while i < len(pieces) and pieces[i][0] == end and len(run) < 512:
            data = pieces[i][1]
            view = memoryview(data if isinstance(data, bytes) else data.as_numpy_array())
            run.append(view)
            end += view.nbytes
            i += 1
        total = 0
        while total < end - start:  # pwritev may write less than asked
            written = os.pwritev(fd, run, start + total) if total == 0 else os.pwrite(
                fd, b"".join(bytes(v) for v in run)[total:], start + total
            )
            total += written


def build_file(
    tmp: Path,
    codec: ShardingCodec,
    geometry: ShardGeometry,
    layout: str,
    datas: Mapping[int, bytes | Buffer | None],
) -> None:
    """Write a complete new shard holding ``datas`` to ``tmp``."""
    size = geometry.empty_file_size(layout)
    empty = np.full((geometry.n_chunks, 2), EMPTY, dtype="<u8")
    # no index yet: data after it (start), or from 0 with the index after it (end)
    data_size = size if geometry.index_location == "start" else size - geometry.index_size
    index_at = 0 if geometry.index_location == "start" else data_size
    lengths = {f: len(v) for f, v in sorted(datas.items()) if v is not None and len(v)}
    offsets = allocate(empty, data_size, index_at, geometry, lengths, layout).offsets
    eof = max([data_size, *(offsets[f] + lengths[f] for f in offsets)])
    table = empty.copy()
    for flat, off in offsets.items():
        table[flat] = (off, lengths[flat])
    index_offset = 0 if geometry.index_location == "start" else eof
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.ftruncate(fd, size)
        _write_runs(fd, [(off, datas[flat]) for flat, off in offsets.items()])
        os.pwrite(fd, encode_index(codec, geometry, table), index_offset)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)


def _create_with(
    path: Path,
    codec: ShardingCodec,
    geometry: ShardGeometry,
    layout: str,
    datas: Mapping[int, bytes | Buffer | None],
) -> bool:
    """Create a missing shard holding ``datas`` (temp file + link); False if it exists."""
    if all(v is None or not len(v) for v in datas.values()):
        return True  # all empty: like zarr-python, store no shard at all
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    build_file(tmp, codec, geometry, layout, datas)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def _in_slot_form(state: ShardState, geometry: ShardGeometry) -> bool:
    """Whether every chunk is in one of its own places (nothing a swap could confuse)."""
    present = np.flatnonzero(state.present()).tolist()
    if geometry.slot_size is None:
        return False
    beyond = state.table[present, 0].astype(np.int64) >= geometry.spare_end
    return not beyond.any() and not freed_ranges(state.table, present, geometry)


def write_chunks(
    path: Path,
    codec: ShardingCodec,
    geometry: ShardGeometry,
    updates: Mapping[tuple[int, ...], Buffer | bytes | None],
    layout: str,
) -> None:
    """Write encoded inner chunks (None = empty) into the shard at ``path`` in place.

    One transaction (see the module docstring): other chunks are neither read nor
    rewritten, and a crash at any point leaves the shard as it was before the call.
    """
    update_chunks(path, codec, geometry, layout, [], lambda existing: updates)


Merge = Callable[[Mapping[tuple[int, ...], "Buffer"]], Mapping[tuple[int, ...], Any]]


def update_chunks(
    path: Path,
    codec: ShardingCodec,
    geometry: ShardGeometry,
    layout: str,
    reads: list[tuple[int, ...]],
    merge: Merge,
) -> None:
    """Read the inner chunks ``reads``, ``merge`` them with new values into encoded
    updates (None = empty), and write those, all in one hold of the shard's lock.

    Two writers of different parts of one inner chunk (a partial inner chunk, or
    different inner chunks of one inner shard when shards nest) each merge with
    the other's committed bytes instead of overwriting them. ``merge`` gets the
    present chunks among ``reads`` and runs under the exclusive lock when
    ``reads`` is not empty (once more if the shard appeared meanwhile).
    """
    if not reads:  # nothing to merge: encode outside the lock
        datas = _flat_updates(merge({}), geometry)
        if path.exists() or not _create_with(path, codec, geometry, layout, datas):
            _commit(path, codec, geometry, layout, datas)
        return
    if not path.exists() and _create_with(
        path, codec, geometry, layout, _flat_updates(merge({}), geometry)
    ):
        return
    _commit(path, codec, geometry, layout, None, reads, merge)


def _flat_updates(
    updates: Mapping[tuple[int, ...], Any], geometry: ShardGeometry
) -> dict[int, bytes | Buffer | None]:
    return {_flat(c, geometry): v for c, v in updates.items()}


def _commit(
    path: Path,
    codec: ShardingCodec,
    geometry: ShardGeometry,
    layout: str,
    datas: dict[int, bytes | Buffer | None] | None,
    reads: list[tuple[int, ...]] | None = None,
    merge: Merge | None = None,
) -> None:
    """One transaction under the shard's exclusive lock: ``datas``, or what ``merge``
    makes of the present chunks among ``reads``."""
    with locked_shard(path, create=(codec, geometry, layout)) as fd:
        assert fd is not None
        state = load_state(fd, codec, geometry, path)
        # An earlier version's shard keeps its slot size (sharding.bounds.SLOT_RULES):
        # its chunks go on alternating between their own two places.
        geometry = geometry.for_shard(state.table, state.size)
        if datas is None:
            assert merge is not None
            assert reads is not None
            existing = {}
            for c in reads:
                off, n = state.table[_flat(c, geometry)]
                if off != EMPTY:
                    existing[c] = default_buffer_prototype().buffer.from_bytes(
                        os.pread(fd, int(n), int(off))
                    )
            datas = _flat_updates(merge(existing), geometry)
        now = time.time()
        held = read_quarantine(path, now)
        lengths = {f: len(v) for f, v in sorted(datas.items()) if v is not None and len(v)}
        if (
            layout == "fixed-slot"
            and len(datas) == geometry.n_chunks
            and lengths
            and not held
            and _in_slot_form(state, geometry)
        ):
            # Every chunk is replaced: a fresh shard swapped in atomically keeps
            # every chunk in its slot. A reader holding the old index finds each
            # chunk's own place, or reads past the new file's end (an error).
            tmp = temp_path(path)
            build_file(tmp, codec, geometry, layout, datas)
            discard_sidecars(path)  # before the swap: then a new writer may start its own
            os.replace(tmp, path)  # waiting writers see the new inode and reopen
            return
        placed = allocate(
            state.table, state.size, state.index_offset, geometry, lengths, layout,
            held or (), now,
        )
        offsets, eof = placed.offsets, placed.eof
        table = state.table.copy()
        for flat in datas:
            table[flat] = (offsets[flat], lengths[flat]) if flat in offsets else (EMPTY, EMPTY)
        if not (table[:, 0] != EMPTY).any():
            # Nothing left: like zarr-python, store no shard. Writers waiting on the
            # lock see the name gone and create a new shard.
            discard_sidecars(path)  # before: then a new writer may create the shard anew
            os.unlink(path)
            return
        if geometry.index_location == "start":
            new_index_offset = 0
        else:
            new_index_offset = eof if eof > state.size else state.index_offset
        index = encode_index(codec, geometry, table)
        freed = freed_ranges(state.table, list(datas), geometry)
        jfd = os.open(journal_path(path), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            put_journal(jfd, state.size, state.index_offset, state.index_bytes)
            if faults.fault("journal"):
                faults.die()
            pieces = [(off, datas[flat]) for flat, off in offsets.items()]
            pieces += [(off, datas[flat]) for flat, off in placed.mirror.items()]
            pieces += [
                (off, os.pread(fd, int(state.table[flat, 1]), int(state.table[flat, 0])))
                for flat, off in placed.prefill.items()
            ]
            _write_runs(fd, pieces)
            if faults.fault("data"):
                faults.die()
            if faults.fault("index"):
                os.pwrite(fd, index[: len(index) // 2], new_index_offset)
                faults.die()
            os.pwrite(fd, index, new_index_offset)
            if faults.fault("published"):
                faults.die()
        finally:
            os.close(jfd)
        if freed or held is not None:
            release = time.time() + REUSE_GRACE
            write_quarantine(path, [*(held or []), *((a, b, release) for a, b in freed)])
        os.unlink(journal_path(path))  # commit
