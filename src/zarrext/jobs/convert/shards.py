"""Writing whole shards of a conversion's output in the calling thread.

:class:`ShardWriter` encodes and stores one whole shard of a zarrext-written output
from its values, or straight from the source chunks a
:class:`~zarrext.jobs.convert.source_chunks.ChunkObjectReader` reads where those are
its inner chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrext.jobs.convert.source_chunks import ChunkObjectReader

if TYPE_CHECKING:
    from zarrext.pipeline.shard_encoder import WholeShards

__all__ = ["ShardWriter"]


@dataclass(frozen=True)
class ShardWriter:
    """Writes whole shards of a zarrext-written output in the unit's thread
    (:class:`~zarrext.pipeline.shard_encoder.WholeShards`): the same bytes as
    ``dst[region] = values``, without its round trips to the event loop.

    Where the source's chunks are the output's inner chunks (:meth:`write_chunks`),
    each decoded source chunk is encoded as its inner chunk at once, on local disk
    and on object stores: no shard of values is assembled and cut up again.
    """

    shards: WholeShards

    @classmethod
    def of(cls, dst: Any) -> ShardWriter | None:
        """The writer of ``dst``'s shards; None when it has none, or another pipeline."""
        from zarrext.pipeline.shard_encoder import WholeShards

        shards = WholeShards.of(dst)
        return None if shards is None else cls(shards)

    def write(self, region: tuple[slice, ...], values: np.ndarray) -> bool:
        """Write ``values`` into ``region``, one whole shard; False (nothing written)
        where the whole-shard path does not apply."""
        return self.shards.write(region, values)

    def write_chunks(self, region: tuple[slice, ...], reader: ChunkObjectReader) -> bool:
        """Write ``region``, one whole shard inside the array whose inner chunks are
        ``reader``'s source chunks, each decoded and encoded in turn; False
        (nothing written) where that does not apply: a shard at the array's edge,
        other chunks, another data type, a chain that cannot be encoded so.

        Raises
        ------
        UndecodableChunk
            A source chunk does not decode (nothing written).
        """
        shards = self.shards
        if (
            reader.chunk_shape != shards.inner_shape
            or reader.dtype != shards.dtype
            or not shards.takes_chunks(region)
        ):
            return False
        chunks = reader.chunks(region)
        nd_buffer = shards.spec.prototype.nd_buffer
        per_shard = [s // c for s, c in zip(shards.shard_shape, shards.inner_shape, strict=True)]
        inner_order = {c: k for k, c in enumerate(np.ndindex(*per_shard))}

        def chunk_values(coords: tuple[int, ...]) -> Any:
            # the shard's inner chunks and the region's source chunks, both in C order
            source_coords, stored = chunks[inner_order[coords]]
            return nd_buffer.from_ndarray_like(reader.decode(source_coords, stored()))

        shards.write_chunks(region, chunk_values)
        return True
