"""The runtime sharding codec: zarr-python's ``sharding_indexed`` with zarrext's pipeline.

:class:`RuntimeShardingCodec` is zarr-python's ``ShardingCodec`` whose inner chunks
go through :class:`zarrext.pipeline.ZarrextCodecPipeline` (so inner codecs know their
array-wide chunk index): same metadata, same bytes, same reader. Local shards are
read by :meth:`RuntimeShardingCodec.read_local_sync` in one codec thread per shard;
the pipeline calls it through ``reads_sync`` / ``read_local_sync`` without
importing this module (the runtime layers go pipeline <- sharding).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from zarr.codecs.sharding import ShardingCodec

from zarrext._zarr_compat import (
    chunks_per_shard,
    inner_chunk_spec,
    sharding_codec_fields,
)
from zarrext.codecs.chunk_context import chunk_index, inner_origin
from zarrext.errors import DECODE_ERRORS, ChunkDecodeError, is_decode_error
from zarrext.pipeline.chunk_reads import scatter_into
from zarrext.pipeline.codec_pipeline import ZarrextCodecPipeline
from zarrext.pipeline.shard_encoder import ShardEncoder

if TYPE_CHECKING:
    from pathlib import Path

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.indexing import SelectorTuple

    from zarrext.pipeline.shard_protocols import ShardJobs

# A whole shard is read as its referenced bytes in pieces of up to this size, each
# decoded while it is still in cache (an inner chunk larger than this is a piece of
# its own). One read of all of a 64 MiB shard's bytes left them in memory to be
# read back for decoding: bench_sharding (64 KiB inner chunks, two threads) read
# 10 % faster in 1 MiB pieces, and as fast in 2-4 MiB ones.
SHARD_PIECE_BYTES = 1 << 20


class RuntimeShardingCodec(ShardingCodec):
    """``sharding_indexed`` whose inner chunks go through :class:`ZarrextCodecPipeline`.

    Metadata, encoded bytes and equality are those of zarr-python's ``ShardingCodec``.
    """

    def _fields(self) -> tuple[Any, ...]:
        return tuple(sharding_codec_fields(self).values())

    def __eq__(self, other: object) -> bool:
        # The dataclass __eq__ inherited from ShardingCodec requires the exact same
        # class; runtime settings are not metadata, so compare as the stock codec.
        if not isinstance(other, ShardingCodec):
            return NotImplemented
        return self._fields() == RuntimeShardingCodec._fields(other)  # type: ignore[arg-type]

    def __hash__(self) -> int:
        return hash(self._fields())

    def __getstate__(self) -> dict[str, Any]:
        # ShardingCodec pickles its metadata (to_dict), which drops the runtime
        # decisions of nested conditional codecs; carry the codec objects along.
        return {**super().__getstate__(), "zarrext_codecs": self.codecs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        codecs = state.pop("zarrext_codecs", None)
        super().__setstate__(state)
        if codecs is not None:
            object.__setattr__(self, "codecs", codecs)

    @property
    def codec_pipeline(self) -> ZarrextCodecPipeline:
        return ZarrextCodecPipeline.from_codecs(self.codecs)

    def per_shard_spec[T](
        self, what: str, shard_spec: ArraySpec, build: Callable[[ArraySpec], T]
    ) -> T:
        """``build(shard_spec)``, built once per ``what`` and shard spec for this codec
        object (kept past the frozen dataclass's ``__setattr__``; a copy by
        ``dataclasses.replace`` starts afresh)."""
        cache: dict[tuple[str, ArraySpec], Any] | None = getattr(
            self, "_zarrext_per_shard_spec", None
        )
        if cache is None:
            cache = {}
            object.__setattr__(self, "_zarrext_per_shard_spec", cache)
        key = (what, shard_spec)
        if key not in cache:
            cache[key] = build(shard_spec)
        return cast("T", cache[key])

    def _get_inner_pipeline(self, shard_spec: ArraySpec) -> ZarrextCodecPipeline:
        return self.per_shard_spec(
            "inner pipeline",
            shard_spec,
            lambda spec: self.codec_pipeline.evolve_from_array_spec(inner_chunk_spec(self, spec)),
        )

    @property
    def _sync_capable(self) -> bool:
        # The synchronous shard path bypasses the inner pipeline, and with it the
        # chunk indices; keep this codec on the asynchronous path.
        return False

    def writes_sync(self, shard_spec: ArraySpec) -> bool:
        """Whether :meth:`encode_jobs` can encode whole shards of ``shard_spec``:
        the inner codecs have a synchronous path, and the shard's layout is
        zarr-python's (a shard layout codec writes its own)."""
        return (
            type(self)._encode_partial_single is RuntimeShardingCodec._encode_partial_single
            and self._get_inner_pipeline(shard_spec).transform is not None
        )

    def encode_jobs(
        self,
        shard_array: NDBuffer,
        shard_spec: ArraySpec,
        *,
        groups: int,
        within: tuple[int, ...] | None = None,
    ) -> ShardJobs:
        """A whole shard's encoding as ``(jobs, lay_out)``: the jobs encode its inner
        chunks in up to ``groups`` runs of neighbouring inner chunks, each to run in
        a codec thread (with a copy of this caller's context: it carries the
        shard's origin), in any order or at once; ``lay_out(keep)``, once all have
        run, hands the shard's stored bytes to ``keep``
        (:data:`~zarrext.pipeline.shard_protocols.KeepShard`). Inner chunks that
        start beyond ``within`` (an edge shard's extent inside the array) are not
        stored.

        Encoded by :class:`zarrext.pipeline.shard_encoder.ShardEncoder`: each inner
        chunk by the inner pipeline's chain with its array-wide chunk index set, as
        the inner pipeline's own writes do, the shard laid out by zarr-python's
        sharding codec: the same bytes as its path.
        """
        return ShardEncoder.of(self, shard_spec).jobs(shard_array, groups=groups, within=within)

    def reads_sync(self, shard_spec: ArraySpec) -> bool:
        """Whether :meth:`read_local_sync` can read shards of ``shard_spec``."""
        return self._get_inner_pipeline(shard_spec).transform is not None

    def _inner_decoder(
        self, shard_spec: ArraySpec, out: NDBuffer
    ) -> Callable[[Any, Buffer | None], None]:
        """How one inner chunk is decoded into ``out`` (the selection's buffer): a
        function of ``(indexer item, chunk bytes or None)``, run with the inner
        chunk's array-wide index set (from the shard's origin in the caller's
        context, :data:`zarrext.codecs.chunk_context.inner_origin`)."""
        pipeline = self._get_inner_pipeline(shard_spec)
        chunk_spec = inner_chunk_spec(self, shard_spec)
        origin = inner_origin.get()
        assert pipeline.transform is not None
        scatter = scatter_into(pipeline.transform, out)
        codecs = pipeline.transform.codecs if pipeline.transform is not None else ()

        def decode(item: Any, chunk: Buffer | None) -> None:
            coords, chunk_selection, out_selection, _ = item
            index = (
                tuple(o + c for o, c in zip(origin, coords, strict=True))
                if origin is not None and len(origin) == len(coords) else None
            )
            token = chunk_index.set(index)
            try:
                scatter(
                    chunk,
                    out,
                    chunk_spec=chunk_spec,
                    chunk_selection=chunk_selection,
                    out_selection=out_selection,
                    drop_axes=(),
                )
            except DECODE_ERRORS as e:
                if not is_decode_error(e):
                    raise
                # The shard's key is the outer pipeline's to add.
                raise ChunkDecodeError.wrapping(e, inner=tuple(coords), codecs=codecs) from e
            finally:
                chunk_index.reset(token)

        return decode

    def shard_out(
        self, selection: SelectorTuple, shard_spec: ArraySpec, into: NDBuffer | None
    ) -> tuple[list[Any], NDBuffer, bool, tuple[int, ...] | None]:
        """Where a read of ``selection`` from a shard goes: ``(indexer items, buffer,
        whether the buffer is into, the shape to give it after)``; ``into`` (a view of
        the caller's output) is used when it has the selection's shape."""
        from zarr.core.chunk_grids import ChunkGrid
        from zarr.core.indexing import get_indexer

        indexer = get_indexer(
            selection,
            shape=shard_spec.shape,
            chunk_grid=ChunkGrid.from_sizes(shard_spec.shape, self.chunk_shape),
        )
        if into is not None and tuple(into.shape) == tuple(indexer.shape):
            return list(indexer), into, True, None
        out = shard_spec.prototype.nd_buffer.empty(
            shape=indexer.shape,
            dtype=shard_spec.dtype.to_native_dtype(),
            order=shard_spec.order,
        )
        return list(indexer), out, False, getattr(indexer, "sel_shape", None)

    def decode_jobs(
        self,
        shard_bytes: Buffer,
        items: list[Any],
        shard_spec: ArraySpec,
        out: NDBuffer,
        *,
        where: str,
        groups: int,
    ) -> list[Callable[[], None]]:
        """Jobs that decode the inner chunks ``items`` (indexer items of
        :meth:`shard_out`) of a whole shard's bytes into ``out``, in up to ``groups``
        runs of neighbouring inner chunks, each to run in a codec thread (with a
        copy of this caller's context: it carries the shard's origin).

        The index is decoded and checked here (``where`` names the shard in
        errors): an entry past the end of the bytes raises ``ShardCorruptError``.
        Inner chunk bytes are views of ``shard_bytes``: nothing is copied before
        decoding.
        """
        from zarrext.sharding.geometry import EMPTY
        from zarrext.sharding.reader import index_format
        from zarrext.sharding.state import ShardCorruptError, check_entries

        per_shard = tuple(chunks_per_shard(self, shard_spec))
        fmt = index_format(self, per_shard)
        raw = shard_bytes.as_numpy_array()
        if len(raw) < fmt.size:
            raise ShardCorruptError(
                f"shard {where}: {len(raw)} bytes is shorter than its {fmt.size}-byte index"
            )
        at = len(raw) - fmt.size if fmt.at_end else 0
        try:
            table = np.asarray(fmt.decode(raw[at : at + fmt.size].tobytes()), dtype=np.uint64)
        except ValueError as e:
            raise ShardCorruptError(f"shard {where}: index does not decode: {e}") from e
        table = table.reshape(-1, 2)
        check_entries(table, len(raw), where)
        decode = self._inner_decoder(shard_spec, out)
        buffer = inner_chunk_spec(self, shard_spec).prototype.buffer
        entries = table.tolist()

        def run(part: list[Any]) -> None:
            for item in part:
                coords = item[0]
                flat = int(np.ravel_multi_index(coords, per_shard)) if coords else 0
                offset, length = entries[flat]
                chunk = None
                if offset != EMPTY:
                    chunk = buffer.from_array_like(raw[offset : offset + length])
                decode(item, chunk)

        size = max(1, math.ceil(len(items) / max(1, groups)))
        return [
            functools.partial(contextvars.copy_context().run, run, items[k : k + size])
            for k in range(0, len(items), size)
        ]

    def read_local_sync(
        self,
        path: Path,
        selection: SelectorTuple,
        shard_spec: ArraySpec,
        *,
        into: NDBuffer | None = None,
    ) -> NDBuffer | None:
        """``selection`` of the local shard at ``path``, read and decoded in this thread.

        As zarr-python's partial shard decode, with zarrext's reader: one open
        under a shared lock (:func:`zarrext.sharding.reader.open_shared`), only the
        bytes the index references read (a whole shard in pieces, see
        :data:`SHARD_PIECE_BYTES`), and each inner chunk decoded by the inner
        pipeline with its array-wide index set. None if there is no shard.

        ``into``: where the selection goes (a view of the caller's output with the
        selection's shape); returned when used, else a new buffer is.
        """
        from zarrext.sharding.geometry import EMPTY
        from zarrext.sharding.reader import index_format, open_shared

        per_shard = tuple(chunks_per_shard(self, shard_spec))
        fmt = index_format(self, per_shard)
        handle = open_shared(path, fmt)
        if handle is None:
            return None
        try:
            indexed, out, used_into, sel_shape = self.shard_out(selection, shard_spec, into)
            whole = len({c for c, *_ in indexed}) == math.prod(per_shard)
            table = handle.index_table(path.name)
            buffer = inner_chunk_spec(self, shard_spec).prototype.buffer
            decode = self._inner_decoder(shard_spec, out)
            flats = [
                int(np.ravel_multi_index(coords, per_shard)) if coords else 0
                for coords, *_ in indexed
            ]
            if whole and handle.overlay is None:  # the referenced bytes, in pieces
                items_of: dict[int, list[Any]] = {}
                for flat, item in zip(flats, indexed, strict=True):
                    items_of.setdefault(flat, []).append(item)
                lengths = table[:, 1].tolist()
                for raw, members in handle.referenced_pieces(table, SHARD_PIECE_BYTES):
                    for flat, start in members:
                        chunk = buffer.from_array_like(raw[start : start + lengths[flat]])
                        for item in items_of.pop(flat):
                            decode(item, chunk)
                for items in items_of.values():  # absent inner chunks: the fill value
                    for item in items:
                        decode(item, None)
            else:
                for flat, item in zip(flats, indexed, strict=True):
                    offset, length = (int(v) for v in table[flat])
                    chunk = None
                    if offset != EMPTY:
                        chunk = buffer.from_bytes(handle.read(offset, offset + length))
                    decode(item, chunk)
        finally:
            handle.close()
        if used_into or sel_shape is None:
            return out
        return out.reshape(sel_shape)

    async def _decode_partial_single(
        self, byte_getter: Any, selection: SelectorTuple, shard_spec: ArraySpec
    ) -> NDBuffer | None:
        # A local shard is read from one open file under a shared lock, so that
        # no writer, compact or expand changes it between index and chunk reads
        # (see zarrext.sharding.reader); other stores take zarr-python's path.
        from zarrext.pipeline.chunk_io import local_file
        from zarrext.sharding.reader import index_format, open_shared

        path = local_file(byte_getter)
        if path is None:
            return await super()._decode_partial_single(byte_getter, selection, shard_spec)
        # With the index format, a whole-shard read reads only the referenced bytes.
        index = index_format(self, self._get_chunks_per_shard(shard_spec))
        handle = await asyncio.to_thread(open_shared, path, index)
        if handle is None:
            return None
        try:
            return await super()._decode_partial_single(handle, selection, shard_spec)
        finally:
            handle.close()
