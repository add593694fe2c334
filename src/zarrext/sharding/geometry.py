"""Where things live in one shard: slots, spare area and index (no I/O).

Used by every module of :mod:`zarrext.sharding`; it imports none of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from zarrext._zarr_compat import EMPTY_SHARD_INDEX_ENTRY

__all__ = ["EMPTY", "ShardGeometry", "ShardLayoutError", "guess_layout"]

EMPTY = np.uint64(EMPTY_SHARD_INDEX_ENTRY)


class ShardLayoutError(ValueError):
    """A shard layout that cannot be used with this array."""


@dataclass(frozen=True)
class ShardGeometry:
    """Where things live in one shard of an array.

    Attributes
    ----------
    chunks_per_shard : tuple of int
        Inner chunks along each axis.
    index_size : int
        Encoded size of the shard index in bytes.
    index_location : {"start", "end"}
        Where the index is.
    slot_size : int or None
        ``S``, the fixed slot size, when the inner codecs bound it.
    earlier_slot_sizes : tuple of int
        The other slot sizes earlier versions of zarrext gave these inner codecs
        (:data:`zarrext.sharding.bounds.SLOT_RULES`), newest first: a shard they
        wrote keeps its own (:meth:`for_shard`).
    """

    chunks_per_shard: tuple[int, ...]
    index_size: int
    index_location: str
    slot_size: int | None
    earlier_slot_sizes: tuple[int, ...] = ()

    @property
    def n_chunks(self) -> int:
        return math.prod(self.chunks_per_shard)

    @property
    def data_start(self) -> int:
        """First byte after the index when it is at the start, else 0."""
        return self.index_size if self.index_location == "start" else 0

    @property
    def slots_end(self) -> int:
        """End of the slot area (= ``data_start`` when there are no slots)."""
        return self.data_start + self.n_chunks * (self.slot_size or 0)

    @property
    def spare_start(self) -> int:
        """Start of the spare slots: after the slots, and after the index's first
        place when the index is at the end (so that it never sits in a spare slot)."""
        return self.slots_end + (self.index_size if self.index_location == "end" else 0)

    @property
    def spare_end(self) -> int:
        """End of the spare slots (one per inner chunk)."""
        return self.spare_start + self.n_chunks * (self.slot_size or 0)

    def home(self, flat: int) -> int:
        """Offset of inner chunk ``flat``'s slot."""
        if self.slot_size is None:
            raise ShardLayoutError("this shard geometry has no fixed slot size")
        return self.data_start + flat * self.slot_size

    def empty_file_size(self, layout: str) -> int:
        """Size of a freshly created shard file for ``layout``."""
        return self.index_size + (
            self.n_chunks * (self.slot_size or 0) if layout == "fixed-slot" else 0
        )

    def for_shard(self, table: np.ndarray, size: int) -> ShardGeometry:
        """The geometry of one shard: the slot size its chunks are laid out in.

        A shard written by an earlier version of zarrext has that version's slots
        (:attr:`earlier_slot_sizes`), which nothing but the shard itself records:
        its chunks sit in their own places (slot ``data_start + i * S`` or spare
        slot ``spare_start + i * S``, whole). The slot size that puts most present
        chunks there is the shard's; on a tie (a shard holding only chunk 0, or
        none in place, such as a dense one), the one whose slot area holds no chunk
        outside its own slot (the others sit after the slots: in a gap, where an
        earlier version put updates, or past the spare slots, where a chunk goes
        whose two places are both taken), then the one whose fresh or fully spared
        shard has this file's size (:meth:`_sized_for`), then the newest. Writers
        keep a shard's slot size (each chunk goes to one of its own two places, or
        past the spare slots), so the answer does not change from one transaction
        to the next.

        Parameters
        ----------
        table : numpy.ndarray
            The shard's ``(n, 2)`` offsets and lengths.
        size : int
            The shard's size in bytes.

        Returns
        -------
        ShardGeometry
            This geometry with the shard's slot size and no earlier ones.
        """
        if not self.earlier_slot_sizes:
            return self
        present = table[:, 0] != EMPTY
        count = int(present.sum())
        # offset - i * S is data_start (its slot) or spare_start (its spare slot)
        offsets = table[:, 0].astype(np.int64)
        lengths = table[:, 1].astype(np.int64)
        flats = np.arange(table.shape[0], dtype=np.int64)
        best, best_score = self.slot_size, (-1, False, False)
        for slot in (self.slot_size, *self.earlier_slot_sizes):
            candidate = replace(self, slot_size=slot, earlier_slot_sizes=())
            score = (0, False, False)
            if slot is not None:
                start = offsets - flats * slot
                own = (start == candidate.data_start) | (start == candidate.spare_start)
                own &= present & (lengths <= slot)
                after_slots = bool(np.all(own | ~present | (offsets >= candidate.slots_end)))
                score = (int(own.sum()), after_slots, candidate._sized_for(size))
            if score > best_score:  # strictly better: ties stay with the newer size
                best, best_score = slot, score
            if best_score == (count, True, True):
                break  # every chunk in place, the file sized for it: no need to look on
        return replace(self, slot_size=best, earlier_slot_sizes=())

    def _sized_for(self, size: int) -> bool:
        """Whether a shard of ``size`` bytes has the size of a fresh fixed-slot shard
        of this geometry, or of one whose spare slots are all in the file."""
        data_end = size - (self.index_size if self.index_location == "end" else 0)
        return data_end in (self.slots_end, self.spare_end)


def guess_layout(table: np.ndarray, size: int, geometry: ShardGeometry) -> str:
    """Which layout a shard's index and size look like.

    ``"fixed-slot"`` when every present chunk is in its slot or in the spare area
    after the slots (of the shard's own slot size, :meth:`ShardGeometry.for_shard`),
    ``"dense"`` when the chunks and index fill the file exactly, else ``"append"``.
    """
    geometry = geometry.for_shard(table, size)
    present = table[:, 0] != EMPTY
    slot = geometry.slot_size
    if slot is not None and size >= geometry.slots_end:
        # Chunks in their slots, or in the spare area after them (being replaced).
        flats = np.flatnonzero(present)
        offsets = table[present, 0].astype(np.int64)
        at_home = offsets == geometry.data_start + flats * slot
        if np.all(at_home | (offsets >= geometry.slots_end)):
            return "fixed-slot"
    used = int(table[present, 1].sum()) + geometry.index_size
    return "dense" if used == size else "append"
