"""Reading a source's chunk objects and decoding them in the calling thread.

:class:`ChunkObjectReader` reads a region made of whole chunks of an unsharded
source straight from its chunk objects, each decoded by the source's own codec
chain; :class:`UndecodableChunk` is what it raises where a chunk does not decode
(the region is then read through ``src[region]``, whose error names the chunk).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ChunkObjectReader", "UndecodableChunk"]

@dataclass(frozen=True)
class ChunkObjectReader:
    """Reads a region made of whole chunks of an unsharded source straight from its
    chunk objects (:meth:`chunks`: local chunk files read in the calling thread, other
    stores' objects fetched at once), each decoded in the calling thread by the
    source's own codec chain and copied into its place, missing ones left at the
    fill value, as ``src[region]`` reads them.

    ``src[region]`` hands each chunk to the event loop and to codec threads and
    back; converting, every thread already has a write unit of its own, so the whole
    unit stays in its thread (with :class:`~zarrext.jobs.convert.shards.ShardWriter`):
    a conversion is bound by decoding, encoding and writing, not idle.
    """

    store: Any
    prefix: str
    metadata: Any
    spec: Any
    transform: Any
    chunk_shape: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fill: Any
    local: bool = False
    """Whether chunk files are read in the calling thread (a ``LocalStore``)."""
    format_2: Any = None
    """A format 2 source's blosc or zstd chunks decoded into scratch memory
    (:class:`~zarrext.pipeline.format2_scratch.Format2IntoScratch`), if they are."""

    @classmethod
    def of(cls, src: Any, unit: Sequence[int]) -> ChunkObjectReader | None:
        """The reader of ``src`` for write units of shape ``unit``; None when the
        source is sharded, its chunk grid irregular or not a divisor of ``unit``, or
        a codec has no synchronous path (then ``src[region]`` reads it)."""
        from dataclasses import replace

        from zarr.codecs.sharding import ShardingCodec
        from zarr.core.array_spec import ArraySpec
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.chunk_utils import ChunkTransform, fill_value_or_default
        from zarr.core.metadata.v3 import RegularChunkGridMetadata
        from zarr.storage import LocalStore

        from zarrext.pipeline.format2_scratch import Format2IntoScratch
        from zarrext.pipeline.scratch import plain_numbers

        metadata = src.metadata
        if metadata.zarr_format == 3 and (
            not isinstance(metadata.chunk_grid, RegularChunkGridMetadata)
            or any(isinstance(c, ShardingCodec) for c in metadata.codecs)
        ):
            return None
        chunk_shape = tuple(src.chunks)
        if len(chunk_shape) != len(unit) or any(
            c <= 0 or u % c for c, u in zip(chunk_shape, unit, strict=True)
        ):
            return None
        native = metadata.dtype.to_native_dtype()
        if (
            not type(metadata.dtype).__module__.startswith("zarr.")  # zarrext's own (optional)
            or not plain_numbers(native)
        ):
            return None
        config = src.async_array.config
        if getattr(config, "read_missing_chunks", True) is False:  # src[region] refuses them
            return None
        if metadata.zarr_format == 2:  # as zarr reads format 2: in the metadata's order
            config = replace(config, order=metadata.order)
        spec = ArraySpec(shape=chunk_shape, dtype=metadata.dtype, fill_value=metadata.fill_value,
                         config=config, prototype=default_buffer_prototype())
        pipeline = src.async_array.codec_pipeline.evolve_from_array_spec(spec)
        transform = getattr(pipeline, "transform", None)
        if transform is None:
            try:
                transform = ChunkTransform(codecs=tuple(pipeline))
            except TypeError:  # a codec without a synchronous path
                return None
        store = src.store_path.store
        return cls(store, src.store_path.path, metadata, spec, transform, chunk_shape,
                   tuple(src.shape), native, fill_value_or_default(spec),
                   local=type(store) is LocalStore, format_2=Format2IntoScratch.of(metadata, spec))

    def chunks(self, region: tuple[slice, ...]) -> list[tuple[tuple[int, ...], Callable[[], Any]]]:
        """Every chunk of ``region`` in C order: its coordinates, and a function
        giving its stored bytes (None: missing). A chunk file of a local store is
        read when asked, in the calling thread, into the thread's read memory
        (valid until it reads its next chunk file:
        :func:`~zarrext.pipeline.chunk_io.get_chunk_sync`); other stores' chunk
        objects are all fetched here, at once (one event-loop round trip).

        Read in the unit's thread, a local chunk costs neither a trip through the
        event loop and a file thread nor fresh memory: convert's CPU outside the
        unit threads was a third of theirs before (bench_convert, 256 MiB).
        """
        import asyncio
        import itertools

        from zarr.core.sync import sync
        from zarr.storage import StorePath

        from zarrext.pipeline.chunk_io import get_chunk_sync

        first = [r.start // c for r, c in zip(region, self.chunk_shape, strict=True)]
        last = [-(-r.stop // c) for r, c in zip(region, self.chunk_shape, strict=True)]
        every = list(itertools.product(*(range(a, b) for a, b in zip(first, last, strict=True))))
        inside = f"{self.prefix}/" if self.prefix else ""
        keys = [f"{inside}{self.metadata.encode_chunk_key(c)}" for c in every]
        prototype = self.spec.prototype
        if self.local:
            return [
                (c, functools.partial(get_chunk_sync, StorePath(self.store, k), prototype))
                for c, k in zip(every, keys, strict=True)
            ]

        async def fetch() -> list[Any]:
            return await asyncio.gather(*(self.store.get(k, prototype=prototype) for k in keys))

        return [(c, functools.partial(_given, chunk))
                for c, chunk in zip(every, sync(fetch()), strict=True)]

    def decode(self, coords: tuple[int, ...], chunk: Any) -> np.ndarray:
        """A fetched chunk's values, of the chunk's shape (the fill value where it is
        missing), as the source's pipeline decodes it. They may live in the
        thread's scratch memory: valid until the thread decodes its next chunk.

        Raises
        ------
        UndecodableChunk
            Where the chunk does not decode (``src[region]`` then raises the error
            naming it).
        """
        from zarrext.codecs.chunk_context import chunk_index

        if chunk is None:
            return np.full(self.chunk_shape, self.fill, dtype=self.dtype)
        token = chunk_index.set(coords)  # as the source's pipeline decodes it
        try:
            if self.format_2 is not None:
                return self.format_2.decode(chunk)
            return np.asarray(self.transform.decode_chunk(chunk, self.spec).as_ndarray_like())
        except Exception as e:  # src[region] raises the error, naming the chunk and codec
            raise UndecodableChunk(coords) from e
        finally:
            chunk_index.reset(token)

    def read(self, region: tuple[slice, ...]) -> np.ndarray | None:
        """The values of ``region`` (whole chunks, but at the array's edge); None if a
        chunk does not decode (``src[region]`` then raises the error naming it)."""
        out = np.empty(tuple(r.stop - r.start for r in region), dtype=self.dtype)
        for coords, stored in self.chunks(region):
            starts = [i * c for i, c in zip(coords, self.chunk_shape, strict=True)]
            extent = tuple(
                slice(0, min(c, n - s)) for s, c, n in zip(starts, self.chunk_shape, self.shape,
                                                           strict=True)
            )
            place = tuple(
                slice(s - r.start, s - r.start + e.stop)
                for s, r, e in zip(starts, region, extent, strict=True)
            )
            chunk = stored()
            if chunk is None:
                out[place] = self.fill
                continue
            try:
                values = self.decode(coords, chunk)
            except UndecodableChunk:
                return None
            out[place] = values[extent]
        return out


def _given(chunk: Any) -> Any:
    return chunk


class UndecodableChunk(Exception):
    """A source chunk :meth:`ChunkObjectReader.decode` could not decode (the region
    path then reads it again, and raises the error naming the chunk and codec)."""
