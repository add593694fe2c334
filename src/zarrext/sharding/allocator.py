"""Where a transaction puts each new inner chunk: a pure slot allocator (no I/O).

Readers that take no lock (zarr-python, tensorstore) read a shard's index, then
its chunks, in separate opens. A writer must therefore never put a chunk where an
index a reader may still hold points to *another* chunk. The rules:

- Inner chunk ``i`` owns two places of ``S`` bytes (``S``: the slot size): its
  *home* ``data_start + i * S`` and its *spare slot* ``spare_start + i * S``
  after the slot area (and, for an index at the end, after the index's first
  place). An update goes to whichever of the two its current copy does not use,
  so in a shard in slot form a chunk alternates between its own two places and
  nothing else ever lands there: freed space is reused only by the same chunk.
- A place is taken while anything live overlaps it (a chunk, the index) or a
  *quarantined* range does: bytes freed by a chunk outside its own places (a
  compacted or appended shard being rewritten in place) may not be reused for
  ``grace`` seconds (:data:`REUSE_GRACE`), the bound on how long a reader may
  hold an index. The writer keeps the quarantine in a small file beside the shard.
- A chunk whose two places are both taken (only while a shard that was not in
  slot form is first rewritten in place), or that is larger than ``S``, goes to
  the end of the file; that region is never reused in place (``compact``
  reclaims it).

Extra space is therefore bounded: one spare slot per chunk (``n * S``), plus what
is appended while such a transition lasts.

Whole-file readers and the index at the end
-------------------------------------------
zarr-python reads a whole shard in one ``read`` of the file, which is not atomic
against a writer's ``pwrite`` (ext4 and tmpfs copy page by page without a lock; a
reader preempted mid-copy sees pages from before and after whole transactions).
The pages come in file order, so with the index at the end a reader can pair a
*new* index with data bytes from *before* the transaction: the chunk's new place
as it was before the new copy landed there. In slot form that place is the
chunk's other own place, so such a reader gets an older version of the chunk, as
long as that place already held one. A spare slot that was never written is a
hole (zeros, read as the fill value by raw codecs). Hence (:attr:`Allocation.prefill`,
:attr:`Allocation.mirror`), with the index at the end:

- the transaction that brings spare slots into the file fills each with its
  chunk's current bytes, in the same write that extends the file (a reader
  cannot have read past the old end before that write);
- a chunk stored into its slot while its spare slot in the file does not hold its
  previous copy (a chunk stored for the first time) gets its new bytes in both.

With the index at the start a whole-file reader reads the index first: an old
index with newer bytes, which the alternation already makes a version of the chunk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from zarrext.sharding.geometry import EMPTY, ShardGeometry

__all__ = [
    "REUSE_GRACE", "WHOLE_FILE", "Allocation", "Busy", "Interval", "allocate", "freed_ranges",
    "occupied",
]

REUSE_GRACE = 10.0
"""Seconds during which bytes freed outside a chunk's own places are not reused."""

WHOLE_FILE = 1 << 62
"""End of a quarantined range that holds every byte of the file (an unreadable
quarantine). It holds places inside the file; appends still go to its end."""

Interval = tuple[int, int, float]  # start, end (exclusive), release time (epoch seconds)


@dataclass(frozen=True)
class Allocation:
    """The outcome of :func:`allocate`.

    Attributes
    ----------
    offsets : dict of int to int
        Offset of each new chunk (flat index in the shard -> byte offset).
    eof : int
        End of data after the transaction (the new index goes here when the
        index is at the end and the data grew past the old file).
    prefill : dict of int to int
        Spare slots this transaction brings into the file that get a copy of their
        chunk's *current* bytes (flat index -> offset), so that they never hold
        zeros where a new index may point.
    mirror : dict of int to int
        Spare slots that get a second copy of their chunk's *new* bytes (flat
        index -> offset): the chunk goes to its slot and its spare slot held none
        of its versions.
    """

    offsets: dict[int, int]
    eof: int
    prefill: dict[int, int] = field(default_factory=dict)
    mirror: dict[int, int] = field(default_factory=dict)


class Busy:
    """Occupied byte ranges ``[start, end)``, for overlap tests."""

    def __init__(self, starts: Sequence[int], ends: Sequence[int]) -> None:
        s = np.asarray(starts, dtype=np.int64)
        e = np.asarray(ends, dtype=np.int64)
        order = np.argsort(s, kind="stable")
        self.starts, self.ends = s[order], e[order]
        self.reach = np.maximum.accumulate(self.ends) if self.ends.size else self.ends

    def overlaps(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` (not empty) overlaps an occupied range."""
        if not self.starts.size:
            return False
        i = int(np.searchsorted(self.starts, hi, side="left")) - 1
        return i >= 0 and int(self.reach[i]) > lo


def _live(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    present = table[:, 0] != EMPTY
    starts = table[present, 0].astype(np.int64)
    return starts, starts + table[present, 1].astype(np.int64)


def occupied(
    table: np.ndarray, index_offset: int, index_size: int, held: Sequence[tuple[int, int]]
) -> Busy:
    """What no new byte may overwrite while ``table`` is the published index: the
    chunks it references, the index itself and the ``held`` (quarantined) ranges."""
    starts, ends = _live(table)
    return Busy(
        [*starts.tolist(), index_offset, *(a for a, _ in held)],
        [*ends.tolist(), index_offset + index_size, *(b for _, b in held)],
    )


def allocate(
    table: np.ndarray,
    size: int,
    index_offset: int,
    geometry: ShardGeometry,
    lengths: Mapping[int, int],
    layout: str,
    quarantine: Sequence[Interval] = (),
    now: float = 0.0,
) -> Allocation:
    """Offsets for new chunks of a shard, never over live or quarantined bytes.

    Parameters
    ----------
    table : numpy.ndarray
        The shard's current ``(n, 2)`` offsets/lengths (old copies stay live until
        the new index is published).
    size, index_offset : int
        The shard file's size and where its index is.
    geometry : ShardGeometry
    lengths : mapping of int to int
        Encoded length of each chunk to place (flat index -> bytes).
    layout : {"fixed-slot", "append"}
    quarantine : sequence of (start, end, release)
        Ranges not to reuse before ``release``.
    now : float
        The current time (same clock as ``release``).
    """
    held = [(a, b) for a, b, release in quarantine if release > now]
    busy = occupied(table, index_offset, geometry.index_size, held)
    # Appends start past everything: the file, the spare area, and quarantined
    # bytes past the end (a rolled-back transaction's, which a reader may hold).
    # A WHOLE_FILE hold says nothing about where the file ends: appending past
    # it would ask for a 4 EiB file (EFBIG).
    tail = max([size, *(b for a, b in held if size < b < WHOLE_FILE)])
    slot = geometry.slot_size
    offsets: dict[int, int] = {}
    used_spare = False
    if layout == "fixed-slot" and slot is not None:
        tail = max(tail, geometry.spare_end)
        placed: list[tuple[int, int]] = []
        for flat, length in lengths.items():
            if length > slot:
                continue
            for place in (geometry.data_start + flat * slot, geometry.spare_start + flat * slot):
                if busy.overlaps(place, place + slot):
                    continue
                offsets[flat] = place
                placed.append((place, place + slot))
                used_spare |= place >= geometry.spare_start
                break
    for flat, length in lengths.items():
        if flat not in offsets:
            offsets[flat], tail = tail, tail + length
    ends = [offsets[f] + lengths[f] for f in offsets]
    eof = max([size, *ends])
    if used_spare and geometry.index_location == "end":
        # The index must end the file: put it past the whole spare area at once,
        # so that it never sits in a spare slot another chunk may need.
        eof = max(eof, geometry.spare_end)
    if layout != "fixed-slot" or slot is None or geometry.index_location != "end":
        return Allocation(offsets, eof)
    prefill, mirror = _spare_versions(table, size, eof, geometry, offsets, busy)
    return Allocation(offsets, eof, prefill, mirror)


def _spare_versions(
    table: np.ndarray,
    size: int,
    eof: int,
    geometry: ShardGeometry,
    offsets: Mapping[int, int],
    busy: Busy,
) -> tuple[dict[int, int], dict[int, int]]:
    """The spare slots to fill so that each holds a version of its chunk before a
    new index can point to it (see the module docstring): ``(prefill, mirror)``."""
    slot = geometry.slot_size
    assert slot is not None
    prefill: dict[int, int] = {}
    mirror: dict[int, int] = {}
    # Only the chunks this transaction stores can need a mirror, and only spare
    # slots between the old end of the file and the new one a prefill: a loop over
    # every chunk of the shard cost a single-chunk write 1.3 ms on 1024 chunks.
    for flat, offset in offsets.items():
        spare = geometry.spare_start + flat * slot
        # Stored into its slot, previous copy not in its spare slot (none, or
        # elsewhere): the spare slot, if in the file, holds no version of it.
        if (
            offset == geometry.home(flat)
            and int(table[flat, 0]) != spare
            and spare < size
            and not busy.overlaps(spare, spare + slot)
        ):
            mirror[flat] = spare
    if eof <= size or size >= geometry.spare_end:
        return prefill, mirror  # no spare slot enters the file
    first = max(0, (size - geometry.spare_start) // slot)
    last = min(geometry.n_chunks, (eof - geometry.spare_start) // slot)  # spare + slot <= eof
    for flat in range(first, last):
        if flat in offsets:
            continue
        spare = geometry.spare_start + flat * slot
        old, length = (int(v) for v in table[flat])
        if (
            size <= spare
            and spare + slot <= eof
            and old != int(EMPTY)
            and length <= slot
            and not busy.overlaps(spare, spare + slot)
        ):
            prefill[flat] = spare
    return prefill, mirror


def freed_ranges(
    table: np.ndarray, flats: Sequence[int], geometry: ShardGeometry
) -> list[tuple[int, int]]:
    """Old byte ranges of ``flats`` that need a quarantine when they are replaced.

    A chunk's old copy in its own home or spare slot needs none (only that chunk
    ever goes there); neither does one past the spare area (never reused in
    place). Anything else (a compacted or appended shard's chunk) does.
    """
    slot = geometry.slot_size
    out: list[tuple[int, int]] = []
    for flat in flats:
        offset, length = (int(v) for v in table[flat])
        if offset == int(EMPTY):
            continue
        end = offset + length
        if slot is not None:
            own = (geometry.data_start + flat * slot, geometry.spare_start + flat * slot)
            if any(p <= offset and end <= p + slot for p in own):
                continue
            if offset >= geometry.spare_end:
                continue
        out.append((offset, end))
    return out
