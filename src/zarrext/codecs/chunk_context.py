"""Which chunk is being encoded or decoded, for codecs that want to know.

zarr-python hands a codec an ``ArraySpec`` but never the chunk's coordinates; only
the codec pipeline knows the store key. zarrext's pipeline
(:class:`zarrext.pipeline.ZarrextCodecPipeline`) sets these context variables in a
task of its own for every chunk, so a codec running anywhere below it (including
in ``asyncio.to_thread``, which copies the context) can read them.
"""

from __future__ import annotations

from contextvars import ContextVar

ChunkIndex = tuple[int, ...]

chunk_index: ContextVar[ChunkIndex | None] = ContextVar("zarrext_chunk_index", default=None)
# Offset, in the array-wide grid of inner chunks, of the shard being written: a shard
# at coordinates s with k inner chunks per shard along each axis starts at s * k.
inner_origin: ContextVar[ChunkIndex | None] = ContextVar("zarrext_inner_origin", default=None)


def current_chunk_index() -> ChunkIndex | None:
    """Coordinates of the chunk being processed in the array's chunk grid, if known.

    Inside a shard this is the inner chunk's coordinates in the array-wide grid of
    inner chunks. ``None`` when the array was not opened through zarrext.
    """
    return chunk_index.get()


def describe_chunk(index: ChunkIndex | None) -> str:
    """A chunk's name for error messages."""
    return "chunk (index unknown)" if index is None else f"chunk {index}"
