"""In-place, concurrent, crash-safe writes of inner chunks into local shard files.

Scheme (one *transaction* per shard per write call)
--------------------------------------------------
1. Lock: ``flock(LOCK_EX)`` on the shard file itself. Compaction replaces the
   file with ``os.replace``, so after locking a writer checks that the path still
   names the inode it locked, else it reopens. A missing shard is created whole
   (temp file + ``os.link``), never seen half-initialized.
2. Recover: a journal left by a killed writer (``<shard>.zarrext-journal``) is
   rolled back before anything else (see below).
3. Allocate, never over live bytes: a chunk goes to its fixed slot when nothing
   live overlaps the slot (its previous copy included), else to the first gap
   after the slot area, else to the end of the file. A chunk being replaced thus
   alternates between its slot and the spare area; the copy readers see stays
   intact until the new index is published.
4. Journal: the shard's size and encoded index *before* the transaction are
   written to the journal (one write, with a crc32c of its own).
5. Data: ``os.pwrite`` of every new chunk at its place.
6. Publish: ``os.pwrite`` of the new index, in place (index at the start, or at
   the end when the file did not grow), else appended after the new data.
7. Commit: delete the journal; unlock. A shard whose last chunk was removed is
   deleted instead (like zarr-python, no empty shard is left).

A fixed-slot write that replaces every inner chunk of a shard skips the journal:
the new shard is built in a temporary file and swapped in with ``os.replace``
(under the lock), so all chunks stay in their slots.

Recovery (under the same lock, by the next writer, by ``zarrext check --repair``
or on opening the array for writing): a journal whose checksum fails was torn
before step 5 and nothing else was touched, so it is only cleared. A valid journal is
rolled back: truncate to the old size, rewrite the old index. Because steps 3-6
never overwrite bytes the old index references, the old index describes intact
chunks, so every chunk reads its content from before the interrupted
transaction, and every transaction that returned is kept. Torn index writes are
therefore harmless. The scheme protects against process death (SIGKILL), not
power loss: nothing is fsynced.

Readers (zarr-python, tensorstore) take no lock; a reader racing a writer of the
same shard can see an index being rewritten (a checksum error, never wrong data).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import signal
import struct
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import google_crc32c
import numpy as np
from zarr.codecs.sharding import _ShardIndex
from zarr.core.buffer import default_buffer_prototype

from zarrext.sharding.geometry import EMPTY, ShardGeometry

if TYPE_CHECKING:
    from zarr.codecs.sharding import ShardingCodec
    from zarr.core.buffer import Buffer

__all__ = [
    "JOURNAL_SUFFIX",
    "TMP_MARK",
    "ShardCorruptError",
    "ShardState",
    "encode_index",
    "journal_path",
    "journal_pending",
    "load_state",
    "locked_shard",
    "read_chunks",
    "recover",
    "write_chunks",
]

JOURNAL_SUFFIX = ".zarrext-journal"
TMP_MARK = ".zarrext-tmp-"
_JOURNAL_MAGIC = b"ZXJ1"
_JOURNAL_HEAD = struct.Struct("<4sQQQ")  # magic, old size, index offset, index length
_INACTIVE = b"\0\0\0\0"


class ShardCorruptError(ValueError):
    """A shard file whose index cannot be used."""


# -- fault injection (tests only) ------------------------------------------------
# ZARREXT_SHARDING_FAULT="point=probability,..." kills this process with SIGKILL at
# the named points of a transaction; "index" tears the index write in half first.


def _parse_faults(text: str | None) -> dict[str, float]:
    faults: dict[str, float] = {}
    for item in (text or "").split(","):
        if "=" in item:
            name, _, prob = item.partition("=")
            faults[name.strip()] = float(prob)
    return faults


_FAULTS = _parse_faults(os.environ.get("ZARREXT_SHARDING_FAULT"))


def _fault(point: str) -> bool:
    prob = _FAULTS.get(point)
    return prob is not None and random.random() < prob


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


# -- files and locks ---------------------------------------------------------------


def journal_path(path: Path) -> Path:
    """The journal of the shard at ``path``."""
    return path.with_name(path.name + JOURNAL_SUFFIX)


def temp_path(path: Path) -> Path:
    """A fresh temporary name beside ``path`` (cleaned up by ``check --repair``)."""
    return path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")


def encode_index(codec: ShardingCodec, geometry: ShardGeometry, table: np.ndarray) -> bytes:
    """Encode an ``(n, 2)`` offsets/lengths table with the codec's index codecs."""
    index = _ShardIndex(
        geometry.chunks_per_shard, table.reshape((*geometry.chunks_per_shard, 2))
    )
    return codec._encode_shard_index_sync(index).to_bytes()


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


def _put_journal(jfd: int, old_size: int, index_offset: int, index: bytes) -> None:
    body = _JOURNAL_HEAD.pack(_JOURNAL_MAGIC, old_size, index_offset, len(index)) + index
    os.pwrite(jfd, body + google_crc32c.value(body).to_bytes(4, "little"), 0)


def _write_journal(path: Path, old_size: int, index_offset: int, index: bytes) -> None:
    fd = os.open(journal_path(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _put_journal(fd, old_size, index_offset, index)
    finally:
        os.close(fd)


def _clear_journal(path: Path) -> None:
    journal_path(path).unlink(missing_ok=True)


def replace_index(
    path: Path, fd: int, size: int, offset: int, old_index: bytes, new_index: bytes
) -> None:
    """Rewrite the index of the locked shard ``fd`` in place, journaled like a write."""
    _write_journal(path, size, offset, old_index)
    os.pwrite(fd, new_index, offset)
    discard_journal(path)


def discard_journal(path: Path) -> None:
    """Delete the journal of the locked shard at ``path`` (after a rollback or a swap)."""
    journal_path(path).unlink(missing_ok=True)


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
    return bool(head) and head != _INACTIVE


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
        os.ftruncate(fd, old_size)
        os.pwrite(fd, index, index_offset)
    _clear_journal(path)
    return True


# -- index state ---------------------------------------------------------------------


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
    isz = geometry.index_size
    if size < isz:
        raise ShardCorruptError(
            f"shard {where}: {size} bytes is shorter than its {isz}-byte index"
        )
    offset = 0 if geometry.index_location == "start" else size - isz
    raw = os.pread(fd, isz, offset)
    try:
        index = codec._decode_shard_index_sync(
            default_buffer_prototype().buffer.from_bytes(raw), geometry.chunks_per_shard
        )
    except ValueError as e:
        raise ShardCorruptError(f"shard {where}: index does not decode: {e}") from e
    return size, offset, raw, np.array(index.offsets_and_lengths, dtype=np.uint64).reshape(-1, 2)


def load_state(fd: int, codec: ShardingCodec, geometry: ShardGeometry, where: Any) -> ShardState:
    """Read and decode the index of the open shard ``fd``.

    Raises
    ------
    ShardCorruptError
        When the file is shorter than its index or the index fails to decode
        (e.g. checksum mismatch), or an entry points outside the file.
    """
    size, offset, raw, table = read_index(fd, codec, geometry, where)
    present = table[:, 0] != EMPTY
    ends = table[present, 0] + table[present, 1]
    if ends.size and int(ends.max()) > size:
        bad = int(np.flatnonzero(present)[int(np.argmax(ends))])
        raise ShardCorruptError(
            f"shard {where}: index entry of inner chunk {bad} ends at byte {int(ends.max())}, "
            f"past the end of the {size}-byte file"
        )
    return ShardState(size, offset, raw, table)


# -- allocation ------------------------------------------------------------------------


class _Intervals:
    """Occupied byte ranges, for overlap tests and first-fit gap search."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        order = np.argsort(starts, kind="stable")
        self.starts = starts[order].astype(np.int64)
        self.ends = ends[order].astype(np.int64)
        self.reach = np.maximum.accumulate(self.ends) if self.ends.size else self.ends

    def overlaps(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """For each ``[lo, hi)``, whether it overlaps an occupied range."""
        if not self.starts.size:
            return np.zeros(lo.shape, dtype=bool)
        i = np.searchsorted(self.starts, hi, side="left") - 1
        return (i >= 0) & (self.reach[np.maximum(i, 0)] > lo)

    def gaps(self, lo: int, hi: int) -> list[list[int]]:
        """Free ``[start, end)`` ranges within ``[lo, hi)``, in order."""
        keep = self.ends > lo
        starts, ends = self.starts[keep], self.ends[keep]
        if not starts.size:
            return [[lo, hi]] if hi > lo else []
        reach = np.maximum(np.maximum.accumulate(ends), lo)
        gap_starts = np.concatenate(([lo], reach))
        gap_ends = np.minimum(np.concatenate((starts, [hi])), hi)
        free = gap_ends > gap_starts
        return [[int(a), int(b)] for a, b in zip(gap_starts[free], gap_ends[free], strict=True)]


def _allocate(
    state: ShardState,
    geometry: ShardGeometry,
    lengths: Mapping[int, int],
    layout: str,
) -> tuple[dict[int, int], int]:
    """Offsets for new chunks (flat index -> offset) and the new end of data."""
    present = state.present()
    busy = _Intervals(
        np.append(state.table[present, 0].astype(np.int64), state.index_offset),
        np.append(
            (state.table[present, 0] + state.table[present, 1]).astype(np.int64),
            state.index_offset + geometry.index_size,
        ),
    )
    offsets: dict[int, int] = {}
    slot = geometry.slot_size
    if layout == "fixed-slot" and slot is not None and lengths:
        flats = np.array([f for f, n in lengths.items() if n <= slot], dtype=np.int64)
        homes = geometry.data_start + flats * slot
        free = ~busy.overlaps(homes, homes + slot)
        for flat, home in zip(flats[free].tolist(), homes[free].tolist(), strict=True):
            offsets[flat] = home
        if free.any():
            busy = _Intervals(
                np.concatenate((busy.starts, homes[free])),
                np.concatenate((busy.ends, homes[free] + slot)),
            )
    eof = max([state.size, *(offsets[f] + lengths[f] for f in offsets)])
    rest = [(f, n) for f, n in lengths.items() if f not in offsets]
    # Gaps must stay before a trailing index, which is live until the new one is out.
    gap_end = state.index_offset if geometry.index_location == "end" else state.size
    gaps = busy.gaps(geometry.slots_end, gap_end) if rest and layout == "fixed-slot" else []
    for flat, length in rest:
        off = None
        for gap in gaps:  # first fit
            if gap[1] - gap[0] >= length:
                off = gap[0]
                gap[0] += length
                break
        if off is None:
            off, eof = eof, eof + length
        offsets[flat] = off
    return offsets, eof


# -- public operations -------------------------------------------------------------------


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
    if geometry.index_location == "start":
        state = ShardState(size, 0, b"", empty)
    else:  # no index yet: data from 0 (or the slots), the index after it
        size -= geometry.index_size
        state = ShardState(size, size, b"", empty)
    lengths = {f: len(v) for f, v in sorted(datas.items()) if v is not None and len(v)}
    offsets, eof = _allocate(state, geometry, lengths, layout)
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
    datas: dict[int, bytes | Buffer | None] = {_flat(c, geometry): v for c, v in updates.items()}
    if not path.exists() and _create_with(path, codec, geometry, layout, datas):
        return
    with locked_shard(path, create=(codec, geometry, layout)) as fd:
        assert fd is not None
        if layout == "fixed-slot" and len(datas) == geometry.n_chunks and any(
            v is not None and len(v) for v in datas.values()
        ):
            # Every chunk is replaced: a fresh shard swapped in atomically (readers
            # see the old shard or the new one) keeps every chunk in its slot,
            # where a transaction would have to move each one to the spare area.
            tmp = temp_path(path)
            build_file(tmp, codec, geometry, layout, datas)
            os.replace(tmp, path)  # waiting writers see the new inode and reopen
            return
        state = load_state(fd, codec, geometry, path)
        lengths = {f: len(v) for f, v in sorted(datas.items()) if v is not None and len(v)}
        offsets, eof = _allocate(state, geometry, lengths, layout)
        table = state.table.copy()
        for flat in datas:
            table[flat] = (offsets[flat], lengths[flat]) if flat in offsets else (EMPTY, EMPTY)
        if not (table[:, 0] != EMPTY).any():
            # Nothing left: like zarr-python, store no shard. Writers waiting on the
            # lock see the name gone and create a new shard.
            os.unlink(path)
            discard_journal(path)
            return
        if geometry.index_location == "start":
            new_index_offset = 0
        else:
            new_index_offset = eof if eof > state.size else state.index_offset
        index = encode_index(codec, geometry, table)
        jfd = os.open(journal_path(path), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _put_journal(jfd, state.size, state.index_offset, state.index_bytes)
            if _fault("journal"):
                _die()
            _write_runs(fd, [(off, datas[flat]) for flat, off in offsets.items()])
            if _fault("data"):
                _die()
            if _fault("index"):
                os.pwrite(fd, index[: len(index) // 2], new_index_offset)
                _die()
            os.pwrite(fd, index, new_index_offset)
            if _fault("published"):
                _die()
        finally:
            os.close(jfd)
        os.unlink(journal_path(path))  # commit
