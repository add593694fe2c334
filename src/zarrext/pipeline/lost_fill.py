"""Refuse writes that would change what an array's unwritten elements read.

An array whose filters do not give its fill value back (spec 002 asks that they
do; :func:`zarrext.codecs.filter_roundtrip.fill_value_change`) reads the fill value
in its missing chunks, but once part of such a chunk is written, the chunk's other
elements are stored as what the filters make of the fill value: 0.5 through
``cast_value(uint8)`` becomes 0.0, silently. ``zarrext.create_array`` refuses such
a fill value; an array another tool made with one is refused here, per write.

:class:`LostFillValue` refuses, before anything of a write is stored, a write
covering part of a chunk that is not stored. Where the filters are inside the
shards (zarr's ``shards=``), whether each inner chunk a write covers in part is
stored cannot be told without reading the shard: any write covering part of a
shard is refused. Writes of whole chunks (whole shards), and of parts of stored
chunks, go through: no unwritten element changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zarr.abc.codec import ArrayArrayCodec

from zarrext.codecs.filter_roundtrip import array_filters, fill_value_change
from zarrext.errors import FillValueError

if TYPE_CHECKING:
    from zarr.core.metadata import ArrayV3Metadata

__all__ = ["LostFillValue"]

CHECK_NAMES_IT = "zarrext check reports it as fill_value_lost"


@dataclass(frozen=True)
class LostFillValue:
    """An array's fill value that its filters do not give back, and the writes it forbids.

    Parameters
    ----------
    problem : str
        Why the fill value does not survive the filters, as ``zarrext check`` says it.
    in_shards : bool
        Whether (some of) the filters are inside the sharding codec: then the
        stored objects a write covers in part (shards) may hold missing inner chunks.
    """

    problem: str
    in_shards: bool

    @classmethod
    def of(cls, metadata: ArrayV3Metadata) -> LostFillValue | None:
        """The lost fill value of an array, or None (no filters, or filters that keep it)."""
        filters = array_filters(metadata.codecs)
        problem = fill_value_change(
            filters, metadata.data_type, metadata.fill_value, ndim=len(metadata.shape)
        )
        if problem is None:
            return None
        outer = 0
        for codec in metadata.codecs:
            if not isinstance(codec, ArrayArrayCodec):
                break
            outer += 1
        return cls(problem, in_shards=len(filters) > outer)

    async def refuse(
        self, batch: Sequence[tuple[Any, ...]], array: str, key_of: Callable[[Any], str | None]
    ) -> None:
        """Raise :class:`~zarrext.errors.FillValueError` if a write of ``batch`` (the
        pipeline's ``(byte_setter, spec, selection, out_selection, is_complete)``
        items) would store a chunk with elements it does not write, of a chunk not
        stored yet. ``array`` names the array, ``key_of`` a byte setter's store key."""
        partial = [item[0] for item in batch if not item[4]]
        if not partial:
            return
        if self.in_shards:
            offending = partial[0]
            what = "a shard, whose inner chunks not stored cannot be told without reading it"
            fix = "write whole shards"
        else:
            stored = await asyncio.gather(*(setter.exists() for setter in partial))
            missing = [s for s, exists in zip(partial, stored, strict=True) if not exists]
            if not missing:
                return
            offending = missing[0]
            what = "a chunk not stored yet"
            fix = "write whole chunks"
        key = key_of(offending)
        where = f" ({key})" if key else ""
        raise FillValueError(
            f"{array}: {self.problem}; this write covers part of {what}{where}, whose "
            f"unwritten elements would change: {fix}, or copy the array with a fill value "
            f"the filters keep ({CHECK_NAMES_IT})"
        )
