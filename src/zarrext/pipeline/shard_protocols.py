"""What the codec pipeline calls on zarrext's runtime sharding codec, and what its
whole-shard paths call on the pipeline, named as protocols.

The runtime sharding codec (:class:`zarrext.sharding.codec.RuntimeShardingCodec`)
runs its inner chunks through :class:`zarrext.pipeline.ZarrextCodecPipeline`; the
pipeline in turn reads and writes whole shards through the codec. It knows the
codec only by these protocols, so that the imports go one way: the sharding
package uses the pipeline, the pipeline does not import the sharding package.
Likewise the whole-shard paths (:mod:`zarrext.pipeline.whole_shards`) know the
pipeline only as :class:`ShardPipeline`: the pipeline imports them, not the reverse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import contextvars
    from collections.abc import Callable
    from pathlib import Path
    from typing import NoReturn

    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.indexing import SelectorTuple

    Batch = list[tuple[Any, ArraySpec, SelectorTuple, SelectorTuple, bool]]
    """A batch of chunks as zarr's codec pipeline hands it over: (byte getter or
    setter, chunk spec, chunk selection, output selection, whether the chunk is whole)."""

    KeepShard = Callable[[list[Buffer] | None], Buffer | None]
    """What a shard's layout hands its stored bytes to: the buffers that, joined, are
    the shard's bytes (None: no inner chunk stored), valid only during the call.
    It stores them or returns a copy of them to store later."""

    ShardJobs = tuple[list[Callable[[], None]], Callable[[KeepShard], Buffer | None]]
    """A whole shard's encoding: jobs for the codec threads, then ``lay_out(keep)``
    (once all have run), which returns what ``keep`` returns."""


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
        self,
        shard_array: NDBuffer,
        shard_spec: ArraySpec,
        *,
        groups: int,
        within: tuple[int, ...] | None = None,
    ) -> ShardJobs: ...

    @property
    def codec_pipeline(self) -> Any: ...

    def per_shard_spec[T](
        self, what: str, shard_spec: ArraySpec, build: Callable[[ArraySpec], T]
    ) -> T: ...


class ShardPipeline(Protocol):
    """The codec pipeline as its whole-shard paths use it
    (:class:`zarrext.pipeline.ZarrextCodecPipeline`): its codecs, a chunk's context
    and how a codec's error is raised, named here so that
    :mod:`zarrext.pipeline.whole_shards` need not import the pipeline."""

    @property
    def array_array_codecs(self) -> tuple[ArrayArrayCodec, ...]: ...

    @property
    def array_bytes_codec(self) -> ArrayBytesCodec: ...

    @property
    def bytes_bytes_codecs(self) -> tuple[BytesBytesCodec, ...]: ...

    def context_of(
        self, item: Any, caller: contextvars.Context | None = None
    ) -> contextvars.Context: ...

    def raise_decode_error(self, error: BaseException, key_holder: object) -> NoReturn: ...
