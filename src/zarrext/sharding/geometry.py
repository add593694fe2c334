"""Where things live in one shard: slots, spare area and index (no I/O).

Used by every module of :mod:`zarrext.sharding`; it imports none of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    """

    chunks_per_shard: tuple[int, ...]
    index_size: int
    index_location: str
    slot_size: int | None

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


def guess_layout(table: np.ndarray, size: int, geometry: ShardGeometry) -> str:
    """Which layout a shard's index and size look like.

    ``"fixed-slot"`` when every present chunk is in its slot or in the spare area
    after the slots, ``"dense"`` when the chunks and index fill the file exactly,
    else ``"append"``.
    """
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
