"""What the codec pipeline calls on zarrext's runtime sharding codec, named as protocols.

The runtime sharding codec (:class:`zarrext.sharding.codec.RuntimeShardingCodec`)
runs its inner chunks through :class:`zarrext.pipeline.ZarrextCodecPipeline`; the
pipeline in turn reads and writes whole shards through the codec. It knows the
codec only by these protocols, so that the imports go one way: the sharding
package uses the pipeline, the pipeline does not import the sharding package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.indexing import SelectorTuple


@runtime_checkable
class ShardReading(Protocol):
    """A serializer that reads a local shard in one thread, or decodes a fetched one
    in jobs for the codec threads: zarrext's runtime sharding
    codec (:class:`zarrext.sharding.codec.RuntimeShardingCodec`), named here by what
    the pipeline calls so that this module need not import the sharding package."""

    def reads_sync(self, shard_spec: ArraySpec) -> bool: ...

    def read_local_sync(
        self,
        path: Path,
        selection: SelectorTuple,
        shard_spec: ArraySpec,
        *,
        into: NDBuffer | None = None,
    ) -> NDBuffer | None: ...

    def shard_out(
        self, selection: SelectorTuple, shard_spec: ArraySpec, into: NDBuffer | None
    ) -> tuple[list[Any], NDBuffer, bool, tuple[int, ...] | None]: ...

    def decode_jobs(
        self,
        shard_bytes: Buffer,
        items: list[Any],
        shard_spec: ArraySpec,
        out: NDBuffer,
        *,
        where: str,
        groups: int,
    ) -> list[Callable[[], None]]: ...


def no_decode(chunk: Buffer, spec: ArraySpec) -> NDBuffer:
    """Whole shards are written without reading what is stored."""
    raise AssertionError("a whole shard's write decodes nothing")


@runtime_checkable
class ShardWriting(Protocol):
    """A serializer that encodes a whole shard in jobs for the codec threads
    (zarrext's runtime sharding codec), named here by what the pipeline calls."""

    def writes_sync(self, shard_spec: ArraySpec) -> bool: ...

    def encode_jobs(
        self, shard_array: NDBuffer, shard_spec: ArraySpec, *, groups: int
    ) -> tuple[list[Callable[[], None]], Callable[[], Buffer | None]]: ...

    @property
    def codec_pipeline(self) -> Any: ...

    def per_shard_spec[T](
        self, what: str, shard_spec: ArraySpec, build: Callable[[ArraySpec], T]
    ) -> T: ...
