"""zarrext's codec pipeline: zarr-python's batched pipeline that knows chunk indices.

zarr-python gives codecs no chunk coordinates, but the spec's decision functions
take the chunk index. :class:`ZarrextCodecPipeline` reads each chunk's coordinates
from its store key (or, inside a shard, from the inner chunk's position) and runs
that chunk's work in a task of its own with :mod:`zarrext._context` set, so every
codec below it can ask :func:`zarrext._context.current_chunk_index`.

:class:`RuntimeShardingCodec` is zarr-python's ``ShardingCodec`` with this pipeline
for its inner chunks: same metadata, same bytes, same reader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from zarr.codecs.sharding import ShardingCodec
from zarr.core.chunk_key_encodings import ChunkKeyEncoding
from zarr.core.codec_pipeline import BatchedCodecPipeline
from zarr.core.common import concurrent_map
from zarr.core.config import config

from zarrext._context import ChunkIndex, _chunk_index, _inner_origin

if TYPE_CHECKING:
    from typing import Self

    from zarr.abc.codec import GetResult
    from zarr.abc.store import ByteGetter, ByteSetter
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import NDBuffer
    from zarr.core.indexing import SelectorTuple

    Batch = list[tuple[Any, ArraySpec, SelectorTuple, SelectorTuple, bool]]


@dataclass(frozen=True)
class ZarrextCodecPipeline(BatchedCodecPipeline):
    """Batched codec pipeline that tells codecs which chunk they work on.

    Parameters
    ----------
    array_path : str
        The array's path in its store; chunk keys are relative to it.
    chunk_key_encoding : ChunkKeyEncoding or None
        Decodes a chunk key into coordinates. ``None`` for a shard's inner
        pipeline, whose chunks carry their coordinates.
    """

    array_path: str = ""
    chunk_key_encoding: ChunkKeyEncoding | None = None

    def evolve_from_array_spec(self, array_spec: ArraySpec) -> Self:
        evolved = super().evolve_from_array_spec(array_spec)
        return replace(
            evolved, array_path=self.array_path, chunk_key_encoding=self.chunk_key_encoding
        )

    def chunk_index_of(self, key_holder: object) -> ChunkIndex | None:
        """Coordinates of the chunk a byte getter/setter addresses, if they can be told."""
        local = getattr(key_holder, "chunk_coords", None)
        if local is not None:  # an inner chunk of a shard
            origin = _inner_origin.get()
            if origin is None or len(origin) != len(local):
                # Shard-local coordinates would collide across shards; say unknown.
                return None
            return tuple(o + c for o, c in zip(origin, local, strict=True))
        path = getattr(key_holder, "path", None)
        if path is None or self.chunk_key_encoding is None:
            return None
        prefix = f"{self.array_path}/" if self.array_path else ""
        if not path.startswith(prefix):
            return None
        try:
            return self.chunk_key_encoding.decode_chunk_key(path[len(prefix) :])
        except (ValueError, NotImplementedError):
            return None

    def _inner_origin_for(self, index: ChunkIndex | None, spec: ArraySpec) -> ChunkIndex | None:
        codec = self.array_bytes_codec
        if index is None or not isinstance(codec, ShardingCodec) or self.array_array_codecs:
            return None
        per_shard = tuple(s // c for s, c in zip(spec.shape, codec.chunk_shape, strict=True))
        return tuple(i * k for i, k in zip(index, per_shard, strict=True))

    async def _per_chunk(
        self,
        batch: Batch,
        run: Callable[[Batch], Any],
    ) -> list[Any]:
        """Run ``run`` on every chunk of ``batch`` in its own task, with its index set."""

        async def one(item: Any) -> Any:
            index = self.chunk_index_of(item[0])
            index_token = _chunk_index.set(index)
            origin_token = _inner_origin.set(self._inner_origin_for(index, item[1]))
            try:
                return await run([item])
            finally:
                _inner_origin.reset(origin_token)
                _chunk_index.reset(index_token)

        if len(batch) == 1:
            # The parent's write()/read() already runs each batch in a task of its
            # own (batch_size is 1 by default), so no extra task is needed.
            return [await one(batch[0])]
        return await concurrent_map(
            [(item,) for item in batch], one, config.get("async.concurrency")
        )

    async def write_batch(
        self,
        batch_info: Iterable[tuple[ByteSetter, ArraySpec, SelectorTuple, SelectorTuple, bool]],
        value: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> None:
        async def run(batch: Batch) -> None:
            await BatchedCodecPipeline.write_batch(self, batch, value, drop_axes)

        await self._per_chunk(list(batch_info), run)

    async def read_batch(
        self,
        batch_info: Iterable[tuple[ByteGetter, ArraySpec, SelectorTuple, SelectorTuple, bool]],
        out: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> tuple[GetResult, ...]:
        async def run(batch: Batch) -> tuple[GetResult, ...]:
            return await BatchedCodecPipeline.read_batch(self, batch, out, drop_axes)

        results = await self._per_chunk(list(batch_info), run)
        return tuple(r for chunk_results in results for r in chunk_results)


class RuntimeShardingCodec(ShardingCodec):
    """``sharding_indexed`` whose inner chunks go through :class:`ZarrextCodecPipeline`.

    Metadata, encoded bytes and equality are those of zarr-python's ``ShardingCodec``.
    """

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.chunk_shape,
            self.codecs,
            self.index_codecs,
            self.index_location,
            self.subchunk_write_order,
        )

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

    def _get_inner_pipeline(self, shard_spec: ArraySpec) -> ZarrextCodecPipeline:
        cache: dict[ArraySpec, ZarrextCodecPipeline] | None = getattr(
            self, "_zarrext_inner_pipelines", None
        )
        if cache is None:
            cache = {}
            object.__setattr__(self, "_zarrext_inner_pipelines", cache)
        pipeline = cache.get(shard_spec)
        if pipeline is None:
            pipeline = self.codec_pipeline.evolve_from_array_spec(self._get_chunk_spec(shard_spec))
            cache[shard_spec] = pipeline
        return pipeline

    @property
    def _sync_capable(self) -> bool:
        # The synchronous shard path bypasses the inner pipeline, and with it the
        # chunk indices; keep this codec on the asynchronous path.
        return False
