"""One whole shard's encoding: its inner chunks encoded in turn, then laid out with its index.

Wherever zarrext writes a shard of the runtime sharding codec whole (zarr-python's
layout, no codec around the sharding codec), :class:`ShardEncoder` encodes it: each
inner chunk by the inner pipeline's synchronous chain, in a copy of the shard's
context with the inner chunk's array-wide index set (:class:`ChunkInShard`), as the
inner pipeline's own writes do; the shard laid out by zarr-python's sharding codec.
So every path stores the same bytes as zarr-python's (zstd frames aside: the
pipeline's zstd is a newer build, :func:`zarrext.pipeline.scratch.zstd_compressor`,
whose frames may differ from numcodecs' for the same input):

- the pipeline's whole-shard writes to object stores, in jobs for the codec threads
  (:meth:`ShardEncoder.jobs`, through the sharding codec's ``encode_jobs``,
  :mod:`zarrext.pipeline.shard_protocols`);
- ``convert``'s writes of a whole shard in the unit's thread (:class:`WholeShards`):
  from the shard's values, or from its inner chunks' values handed over one at a
  time (:meth:`ShardEncoder.encode_from_chunks`), so that a source whose chunks are
  the inner chunks is never assembled into a shard and cut up again.

Where the inner chain allows it, inner chunks are encoded in batches instead, into
the same bytes (:mod:`zarrext.pipeline.batch_encoding`). Large inner chunks are
encoded in the codec thread's arena and their encoded bytes
kept in staging segments until the shard is laid out
(:class:`zarrext.pipeline.scratch.Staging`), when no decision keeps chunk bytes.
"""

from __future__ import annotations

import contextvars
import functools
import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from zarr.core.chunk_utils import encode_or_elide_chunk

from zarrext._zarr_compat import (
    chunks_per_shard,
    encode_shard_parts_sync,
    inner_chunk_spec,
)
from zarrext.pipeline.batch_encoding import BatchEncoder
from zarrext.pipeline.chunk_io import joined, store_parts_sync
from zarrext.pipeline.codec_pipeline import ZarrextCodecPipeline
from zarrext.pipeline.fill_check import FirstValue
from zarrext.pipeline.scratch import Staging, staged_encoding
from zarrext.pipeline.shard_protocols import ShardWriting
from zarrext.pipeline.whole_shards import shard_writer, write_shard_sync

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer

    from zarrext.pipeline.shard_protocols import KeepShard, ShardJobs

__all__ = ["ChunkInShard", "ShardEncoder", "WholeShards"]

Coords = tuple[int, ...]


@dataclass(frozen=True)
class ChunkInShard:
    """What the inner pipeline reads an inner chunk's index from (as from zarr's byte
    setter of a chunk in a shard): its coordinates in the shard."""

    chunk_coords: Coords


class ShardEncoder:
    """Encodes whole shards of one shard spec of the runtime sharding codec.

    Built once per codec object and shard spec (:meth:`of`); holds no shard's data.
    """

    def __init__(self, codec: ShardWriting, shard_spec: ArraySpec) -> None:
        sharding: Any = codec  # the runtime sharding codec, a ShardingCodec
        self.codec = sharding
        self.shard_spec = shard_spec
        self.chunk_spec = inner_chunk_spec(sharding, shard_spec)
        self.per_shard = tuple(chunks_per_shard(sharding, shard_spec))
        self.inner: ZarrextCodecPipeline = codec.codec_pipeline.evolve_from_array_spec(
            self.chunk_spec
        )
        transform = self.inner.transform
        assert transform is not None, "a shard encoder needs inner codecs with a synchronous path"
        self._encode = transform.encode_chunk
        self._encode_or_elide = functools.partial(encode_or_elide_chunk, encode=self._encode)
        # most chunks differ from the fill value at their first element: zarr's
        # emptiness check (a tenth of a chunk's CPU) only runs for the others
        self._first_value = FirstValue.of(self.chunk_spec)
        self._batch = BatchEncoder.of(tuple(transform.codecs), self.chunk_spec)

    @classmethod
    def of(cls, codec: ShardWriting, shard_spec: ArraySpec) -> ShardEncoder:
        """The encoder of ``codec``'s shards of ``shard_spec`` (``codec.writes_sync``)."""
        return codec.per_shard_spec("shard encoder", shard_spec, lambda spec: cls(codec, spec))

    def _staging(self) -> Staging | None:
        """Segments for one run's encoded inner chunks when they are encoded in the
        thread's arena (no decision keeps chunk bytes, chunks large enough), else None."""
        return Staging() if self.inner.encodes_into_arena_for(self.chunk_spec) else None

    def encode_chunk(
        self, coords: Coords, values: NDBuffer, staging: Staging | None, *, reused: bool
    ) -> Buffer | None:
        """The stored bytes of the inner chunk at ``coords`` (None: not stored, its
        values are all the fill value), encoded with its index set, in the calling
        thread, whose context carries the shard's origin.

        With ``staging``, encoded in the thread's arena and kept in ``staging``'s
        segments (valid until it is released). ``reused``: ``values`` live in
        memory the caller reuses, so bytes that are a view of them (a chain that
        stores the values' bytes as they are) are copied.
        """
        context = self.inner.context_of((ChunkInShard(coords), self.chunk_spec))
        encode = (
            self._encode
            if self._first_value is not None and self._first_value.differs(values)
            else self._encode_or_elide
        )
        with staged_encoding(staging) if staging is not None else nullcontext():
            chunk = context.run(encode, values, self.chunk_spec)
            if chunk is None:
                return None
            if staging is not None:  # out of the arena, if there
                kept = staging.keep(chunk.as_numpy_array())
                return self.chunk_spec.prototype.buffer.from_array_like(kept)
        if reused:
            stored = chunk.as_numpy_array()
            if np.may_share_memory(stored, values.as_ndarray_like()):
                return self.chunk_spec.prototype.buffer.from_array_like(stored.copy())
        return cast("Buffer", chunk)

    def encode_chunks(
        self,
        every: list[Coords],
        chunk_values: Callable[[Coords], NDBuffer],
        staging: Staging | None,
        *,
        reused: bool,
    ) -> dict[Coords, Buffer | None]:
        """The stored bytes of the inner chunks at ``every`` (as :meth:`encode_chunk`
        gives them), their values asked for one at a time (``chunk_values``, the
        same rules as :meth:`encode_chunk`'s ``values`` and ``reused``): in batches
        where the chain allows it (:class:`~zarrext.pipeline.batch_encoding.BatchEncoder`),
        else each alone."""
        batch = self._batch
        if batch is None:
            return {c: self.encode_chunk(c, chunk_values(c), staging, reused=reused) for c in every}
        encoded: dict[Coords, Buffer | None] = {}
        nd_buffer = self.chunk_spec.prototype.nd_buffer
        buffer = self.chunk_spec.prototype.buffer
        for start in range(0, len(every), batch.per_batch):
            run = every[start:start + batch.per_batch]
            values = batch.values(len(run))
            taken: list[Coords] = []
            for coords in run:
                chunk = chunk_values(coords)
                if batch.takes(chunk):
                    values[len(taken)] = chunk.as_ndarray_like()
                    taken.append(coords)
                else:
                    encoded[coords] = self.encode_chunk(coords, chunk, staging, reused=reused)
            for k, stored in enumerate(batch.encode(values[:len(taken)], staging)):
                encoded[taken[k]] = (
                    self.encode_chunk(taken[k], nd_buffer.from_ndarray_like(values[k]), staging,
                                      reused=True)
                    if stored is None else buffer.from_array_like(stored)
                )
        return {c: encoded[c] for c in every}

    def jobs(
        self, shard_array: NDBuffer, *, groups: int, within: Coords | None = None
    ) -> ShardJobs:
        """A whole shard's encoding as ``(jobs, lay_out)``: the jobs encode its inner
        chunks in up to ``groups`` runs of neighbouring inner chunks, each to run in
        a codec thread (with a copy of this caller's context: it carries the
        shard's origin), in any order or at once; ``lay_out(keep)``, once all have
        run, hands the shard's stored bytes to ``keep`` as the buffers that, joined,
        make them (:data:`~zarrext.pipeline.shard_protocols.KeepShard`; the same
        however the inner chunks were split among the jobs) and returns what
        ``keep`` returns.

        ``within``: the shard's extent inside the array on each axis (an edge
        shard's is less than its shape). Inner chunks that start beyond it are not
        stored, even with ``write_empty_chunks``, as zarr-python writes an edge shard.
        """
        every = list(np.ndindex(*self.per_shard))
        inner_shape = tuple(self.codec.chunk_shape)
        inside = every if within is None else list(np.ndindex(*(
            min(per, math.ceil(extent / n))
            for per, extent, n in zip(self.per_shard, within, inner_shape, strict=True)
        )))
        # Each job writes its own inner chunks' entries: no two jobs share a key.
        encoded: dict[Coords, Buffer | None] = {}
        size = max(1, math.ceil(len(inside) / max(1, groups)))
        parts = [inside[k : k + size] for k in range(0, len(inside), size)]
        stagings = [self._staging() for _ in parts]

        def inner_chunk(coords: Coords) -> NDBuffer:
            return shard_array[tuple(
                slice(c * n, (c + 1) * n) for c, n in zip(coords, inner_shape, strict=True)
            )]

        def run(part: list[Coords], staging: Staging | None) -> None:
            encoded.update(self.encode_chunks(part, inner_chunk, staging, reused=False))

        def lay_out(keep: KeepShard) -> Buffer | None:
            in_order = {coords: encoded.get(coords) for coords in every}  # zarr's order
            encoded.clear()
            try:
                return keep(encode_shard_parts_sync(self.codec, in_order, self.per_shard))
            finally:
                for staging in stagings:
                    if staging is not None:
                        staging.release()

        jobs: list[Callable[[], None]] = [
            functools.partial(contextvars.copy_context().run, run, part, staging)
            for part, staging in zip(parts, stagings, strict=True)
        ]
        return jobs, lay_out

    def encode_from_chunks(
        self,
        chunk_values: Callable[[Coords], NDBuffer],
        store: Callable[[list[Buffer] | None], None],
    ) -> None:
        """Encode a whole shard given its inner chunks' values one at a time, in the
        calling thread (whose context carries the shard's origin), and hand its
        stored bytes to ``store``.

        ``chunk_values(coords)`` is the inner chunk at ``coords`` in the shard, of
        the inner chunk's shape; it is encoded before the next is asked for, so it
        may live in memory the caller reuses. ``store(parts)`` gets the buffers
        that, joined, are the shard's bytes (``None``: no inner chunk stored, the
        shard is not stored); they are valid only during the call. The same bytes
        as :meth:`jobs` give for a shard array of those values.
        """
        staging = self._staging()
        try:
            encoded = self.encode_chunks(list(np.ndindex(*self.per_shard)), chunk_values,
                                         staging, reused=True)
            store(encode_shard_parts_sync(self.codec, encoded, self.per_shard))
        finally:
            if staging is not None:
                staging.release()


@dataclass(frozen=True)
class WholeShards:
    """Writes whole shards of one array zarrext opened, in the calling thread: the
    same bytes as ``array[region] = values``, without its round trips to the event
    loop and the codec threads, for a caller that keeps a thread per shard busy
    already (``convert``, :class:`zarrext.jobs.convert.ShardWriter`)."""

    array: Any
    pipeline: ZarrextCodecPipeline
    spec: ArraySpec
    """A whole shard's spec."""
    shard_shape: Coords
    inner_shape: Coords
    dtype: np.dtype[Any]
    local: bool
    """Whether the store has synchronous IO (else :meth:`write` declines)."""

    @classmethod
    def of(cls, array: Any) -> WholeShards | None:
        """The writer of ``array``'s shards; None when it has none, or another pipeline."""
        from zarr.core.array_spec import ArraySpec
        from zarr.core.buffer import default_buffer_prototype

        from zarrext.pipeline.chunk_io import sync_io

        pipeline = array.async_array.codec_pipeline
        if array.shards is None or not isinstance(pipeline, ZarrextCodecPipeline):
            return None
        shard_shape = tuple(array.shards)
        spec = ArraySpec(shape=shard_shape, dtype=array.metadata.dtype,
                         fill_value=array.metadata.fill_value, config=array.async_array.config,
                         prototype=default_buffer_prototype())
        return cls(array, pipeline, spec, shard_shape, tuple(array.chunks),
                   array.metadata.dtype.to_native_dtype(),
                   sync_io(array.store_path, write=True))

    def _item(self, region: tuple[slice, ...]) -> tuple[Any, ...] | None:
        """``region``'s shard as an item of the pipeline's batch; None unless
        ``region`` starts a shard."""
        coords = tuple(r.start // n for r, n in zip(region, self.shard_shape, strict=True))
        if any(r.start != c * n for r, c, n in zip(region, coords, self.shard_shape,
                                                   strict=True)):
            return None
        selection = tuple(slice(0, r.stop - r.start) for r in region)
        return (self.array.store_path / self.array.metadata.encode_chunk_key(coords), self.spec,
                selection, selection, True)

    def _encoder(self) -> ShardEncoder | None:
        """The encoder of a whole shard: the runtime sharding codec alone, with
        zarr-python's layout and inner codecs that have a synchronous path."""
        codec = shard_writer(self.pipeline, self.spec)
        return None if codec is None else ShardEncoder.of(codec, self.spec)

    def write(self, region: tuple[slice, ...], values: np.ndarray) -> bool:
        """Write ``values`` into ``region``, one whole shard, with the store's
        synchronous IO; False (nothing written) where that does not apply: a region
        that is not a whole shard, a shard layout, codecs around the sharding codec,
        a store without synchronous IO (then ``array[region] = values``)."""
        item = self._item(region) if self.local else None
        if item is None or self._encoder() is None:
            return False
        pipeline = self.pipeline
        value = self.spec.prototype.nd_buffer.from_ndarray_like(values)
        if pipeline.storable is not None:
            pipeline.storable.refuse(value.as_numpy_array(), pipeline.written_array([item]))
        pipeline.context_of(item).run(write_shard_sync, pipeline, item, value, ())
        return True

    def takes_chunks(self, region: tuple[slice, ...]) -> bool:
        """Whether :meth:`write_chunks` writes ``region``: a whole shard inside the
        array, nothing quantized (whose values are checked, all of them, before
        any chunk is encoded), a chain encoded as :meth:`write` encodes it."""
        return (
            self._item(region) is not None
            and all(r.stop - r.start == n for r, n in zip(region, self.shard_shape, strict=True))
            and self.pipeline.storable is None
            and self._encoder() is not None
        )

    def write_chunks(
        self, region: tuple[slice, ...], chunk_values: Callable[[Coords], NDBuffer]
    ) -> None:
        """Write ``region`` (where :meth:`takes_chunks`) from its inner chunks' values,
        ``chunk_values(coords)`` (as :meth:`ShardEncoder.encode_from_chunks` asks for
        them): the same bytes as :meth:`write` of a shard of those values."""
        from zarr.core.sync import sync

        item = self._item(region)
        encoder = self._encoder()
        assert item is not None
        assert encoder is not None
        byte_setter = item[0]

        def store(parts: list[Buffer] | None) -> None:
            if self.local:
                store_parts_sync(byte_setter, parts)
            elif parts is None:
                sync(byte_setter.delete())
            else:
                sync(byte_setter.set(joined(parts)))

        self.pipeline.context_of(item).run(encoder.encode_from_chunks, chunk_values, store)
