"""zarrext's codec pipeline: zarr-python's batched pipeline that knows chunk indices.

zarr-python gives codecs no chunk coordinates, but the spec's decision functions
take the chunk index. :class:`ZarrextCodecPipeline` reads each chunk's coordinates
from its store key (or, inside a shard, from the inner chunk's position) and runs
that chunk's work with :mod:`zarrext.codecs.chunk_context` set, so every codec below it can
ask :func:`zarrext.codecs.chunk_context.current_chunk_index`.

When every codec has a synchronous path and the store synchronous IO (a local or
memory store, a shard's inner chunks), each chunk's whole job (fetch, decode and
scatter into the output; or merge, encode and store) runs as one task in a thread
pool, in a copy of the caller's context with the chunk's index set: compressors
such as numcodecs' zstd release the GIL, so chunks decode and encode in parallel
instead of one at a time through the event loop. Other pipelines take zarr-python's
batched path. The pool, its size and the running of one job per chunk are
:mod:`zarrext.pipeline.codec_threads`'s; a chunk's read job,
:mod:`zarrext.pipeline.chunk_reads`'s; a local chunk file is read by
:mod:`zarrext.pipeline.chunk_io`. Chunks too small to pay for the
GIL handoffs between threads (:data:`PARALLEL_READ_MIN_BYTES`,
:data:`PARALLEL_WRITE_MIN_BYTES`) run in one of them.

A write whose chain quantizes floats (``scale_offset`` + ``cast_value``) is checked
first, all of it, before any chunk is encoded: a finite value that would be stored
as a reserved code, outside the integer type, or (with the plan the attributes
record) farther than the planned bound is refused and nothing is stored
(:mod:`zarrext.codecs.quantized_writes`; zarr-python passes one write's chunks and values
in one call).

An array whose whole chain is the ``optional`` codec decodes each chunk's values
and validity apart (:meth:`~zarrext.codecs.optional.OptionalCodec.decode_split`) and
copies them once, into the fields of the structured output or into the separate
arrays of :func:`zarrext.read_masked`: the interleaved chunk is never built
(:mod:`zarrext.pipeline.optional_decode`).

In those jobs codecs decode, and encode for a local store, into memory each
thread keeps (:mod:`zarrext.pipeline.scratch`): a fresh buffer per chunk would make the
allocator hand memory back to the system and fault it in again for every chunk.

The runtime sharding codec, zarr-python's ``ShardingCodec`` with this pipeline for
its inner chunks, is :class:`zarrext.sharding.codec.RuntimeShardingCodec`; this
module knows it only by what it calls on it (:mod:`zarrext.pipeline.shard_protocols`), so
the import goes one way. Whole shards read and written as one job each are
:mod:`zarrext.pipeline.whole_shards`'s. What a write encodes, a chunk's merged bytes or a
shard layout's part through filters, is :mod:`zarrext.pipeline.write_encoding`'s; a whole
shard, :mod:`zarrext.pipeline.shard_encoder`'s (through the codec's ``encode_jobs``).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn

from zarr.codecs.sharding import ShardingCodec
from zarr.core.chunk_key_encodings import ChunkKeyEncoding
from zarr.core.chunk_utils import ChunkTransform
from zarr.core.codec_pipeline import BatchedCodecPipeline
from zarr.core.common import concurrent_map
from zarr.core.config import config
from zarr.storage import LocalStore

from zarrext.codecs.blosc_frames import checked_codecs
from zarrext.codecs.chunk_context import ChunkIndex, chunk_index, inner_origin
from zarrext.codecs.quantized_writes import PlannedRange, StorableValues, array_label
from zarrext.codecs.specs import array_spec, chunk_nbytes, regular_chunk_shape
from zarrext.errors import DECODE_ERRORS, ChunkDecodeError, is_decode_error
from zarrext.pipeline.chunk_io import (
    sync_io,
)
from zarrext.pipeline.chunk_reads import (
    decode_fetched,
    read_chunk,
    read_chunk_directly,
    scatter_into,
)
from zarrext.pipeline.codec_threads import codec_pool, codec_workers, run_chunk_jobs
from zarrext.pipeline.direct import DirectDecoder
from zarrext.pipeline.lost_fill import LostFillValue
from zarrext.pipeline.scratch import (
    encode_arena,
    keeps_no_chunk_bytes,
    scratch_codecs,
)
from zarrext.pipeline.whole_shards import (
    read_local_shard,
    read_remote_shards,
    reads_local_shards,
    remote_shards,
    whole_shard_writes,
    write_whole_shards,
)
from zarrext.pipeline.write_encoding import merged_and_encoded, through_filters

if TYPE_CHECKING:
    from typing import Self

    from zarr.abc.codec import Codec, GetResult
    from zarr.abc.store import ByteGetter, ByteSetter
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.indexing import SelectorTuple
    from zarr.core.metadata import ArrayV3Metadata

    from zarrext.pipeline.shard_protocols import Batch


# Chunks smaller than these (decoded bytes) are read / written by one codec thread:
# their codec work is too short to pay for the GIL handoffs between threads. On a
# 2-core machine, 16 and 64 KiB chunks read at 0.55-0.7x and write at 0.67-0.87x
# the one-thread speed with two threads; 128 KiB chunks read at 1.3x but write at
# 0.73x; 256 KiB chunks read at 1.24-1.78x and write at 1.04x.
PARALLEL_READ_MIN_BYTES = 128 << 10
PARALLEL_WRITE_MIN_BYTES = 256 << 10

# Chunks from this size (decoded bytes) are encoded into the write arena
# (zarrext.pipeline.scratch). Smaller buffers come from malloc's free lists without page
# faults (glibc hands blocks from 128 KiB on to mmap): there the arena only adds
# work, 2 % on 16 KiB chunks written to tmpfs here, and is neutral from 64 KiB on.
ARENA_MIN_BYTES = 128 << 10


@dataclass(frozen=True)
class ZarrextCodecPipeline(BatchedCodecPipeline):
    """Batched codec pipeline that tells codecs which chunk they work on.

    Parameters
    ----------
    array_path : str or None
        The array's path in its store; chunk keys are relative to it. ``None``
        when zarr-python built the pipeline from ``codec_pipeline.path`` (it
        passes no path): coordinates are read from the end of each key.
    chunk_key_encoding : ChunkKeyEncoding or None
        Decodes a chunk key into coordinates. ``None`` for a shard's inner
        pipeline, whose chunks carry their coordinates.
    ndim : int or None
        The array's number of dimensions (to read keys when ``array_path`` is None).

    Notes
    -----
    zarrext registers this class under zarr's ``zarr.codec_pipeline`` entry point,
    so ``zarr.config.set({"codec_pipeline.path":
    "zarrext.pipeline.ZarrextCodecPipeline"})`` makes every array zarr-python opens
    use it (:meth:`from_array_metadata_and_store`). :func:`zarrext.open_array`
    gives it to one array only, without touching zarr's global configuration.
    """

    # zarr registers a pipeline under its class's module and name: the path users set
    # (codec_pipeline.path) names the package, which re-exports the class.
    __module__ = "zarrext.pipeline"

    array_path: str | None = ""
    chunk_key_encoding: ChunkKeyEncoding | None = None
    ndim: int | None = None
    # The codecs as one synchronous chain, when all of them have a synchronous
    # path; set by evolve_from_array_spec (a pipeline not evolved yet has none).
    transform: ChunkTransform | None = field(default=None, compare=False, repr=False)
    # Whether a write job may encode into its thread's arena (zarrext.pipeline.scratch): no
    # decision in the chain keeps chunk bytes. Set by evolve_from_array_spec.
    encodes_into_arena: bool = field(default=False, compare=False, repr=False)
    # The quantization plan the array's attributes record (set by build_pipeline),
    # and what the chain stores, checked before every write (set by
    # evolve_from_array_spec; None for a chain that quantizes nothing).
    planned: PlannedRange | None = field(default=None, repr=False)
    storable: StorableValues | None = field(default=None, compare=False, repr=False)
    # A fill value the array's filters do not give back (set by build_pipeline):
    # writes that would store it in part of a chunk are refused.
    lost_fill_value: LostFillValue | None = field(default=None, repr=False)

    @classmethod
    def from_codecs(cls, codecs: Iterable[Codec], *, batch_size: int | None = None) -> Self:
        """zarr's pipeline of ``codecs``, its blosc codecs checking each frame against
        the chunk that holds it (:mod:`zarrext.codecs.blosc_frames`)."""
        return super().from_codecs(checked_codecs(codecs), batch_size=batch_size)

    @classmethod
    def from_array_metadata_and_store(cls, array_metadata: Any, store: Any) -> Self:
        """The pipeline of an array, as zarr-python asks for it through ``codec_pipeline.path``.

        Raises
        ------
        NotImplementedError
            For Zarr format 2 metadata: zarr-python then builds the pipeline from
            the codecs (chunk indices unknown, codecs work as usual).
        """
        from zarr.core.metadata import ArrayV3Metadata

        if not isinstance(array_metadata, ArrayV3Metadata):
            raise NotImplementedError
        return build_pipeline(array_metadata, None, cls)  # type: ignore[return-value]

    def evolve_from_array_spec(self, array_spec: ArraySpec) -> Self:
        evolved = super().evolve_from_array_spec(array_spec)
        byte_codecs = [evolved.array_bytes_codec, *evolved.bytes_bytes_codecs]
        try:
            transform: ChunkTransform | None = ChunkTransform(
                codecs=(*evolved.array_array_codecs, *scratch_codecs(byte_codecs))
            )
        except TypeError:  # a codec without a synchronous path
            transform = None
        try:
            native = array_spec.dtype.to_native_dtype()
        except Exception:  # a data type without a NumPy form quantizes nothing
            native = None
        storable = None if native is None else StorableValues.of_codecs(
            (*evolved.array_array_codecs, *byte_codecs), native, array_spec.fill_value,
            self.planned,
        )
        return replace(
            evolved,
            array_path=self.array_path,
            chunk_key_encoding=self.chunk_key_encoding,
            ndim=self.ndim,
            transform=transform,
            encodes_into_arena=keeps_no_chunk_bytes(byte_codecs),
            planned=self.planned,
            storable=storable,
            lost_fill_value=self.lost_fill_value,
        )

    def chunk_index_of(self, key_holder: object) -> ChunkIndex | None:
        """Coordinates of the chunk a byte getter/setter addresses, if they can be told."""
        local = getattr(key_holder, "chunk_coords", None)
        if local is not None:  # an inner chunk of a shard
            origin = inner_origin.get()
            if origin is None or len(origin) != len(local):
                # Shard-local coordinates would collide across shards; say unknown.
                return None
            return tuple(o + c for o, c in zip(origin, local, strict=True))
        path = getattr(key_holder, "path", None)
        if path is None or self.chunk_key_encoding is None:
            return None
        if self.array_path is None:
            return self._index_from_key_end(path)
        prefix = f"{self.array_path}/" if self.array_path else ""
        if not path.startswith(prefix):
            return None
        try:
            return self.chunk_key_encoding.decode_chunk_key(path[len(prefix) :])
        except (ValueError, NotImplementedError):
            return None

    def _index_from_key_end(self, path: str) -> ChunkIndex | None:
        """Coordinates from the last parts of a key whose array path is unknown.

        A tail counts only if it encodes back to itself with the array's number
        of dimensions (``c/1/2``, ``c.1.2``, ``1.2``, ``1/2``).
        """
        encoding, ndim = self.chunk_key_encoding, self.ndim
        if encoding is None or ndim is None:
            return None
        parts = path.split("/")
        for n in sorted({1, ndim, ndim + 1} - {0}):
            tail = "/".join(parts[-n:])
            try:
                index = tuple(encoding.decode_chunk_key(tail))
            except (ValueError, NotImplementedError):
                continue
            if len(index) == ndim and encoding.encode_chunk_key(index) == tail:
                return index
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
            index_token = chunk_index.set(index)
            origin_token = inner_origin.set(self._inner_origin_for(index, item[1]))
            try:
                return await run([item])
            finally:
                inner_origin.reset(origin_token)
                chunk_index.reset(index_token)

        if len(batch) == 1:
            # The parent's write()/read() already runs each batch in a task of its
            # own (batch_size is 1 by default), so no extra task is needed.
            return [await one(batch[0])]
        return await concurrent_map(
            [(item,) for item in batch], one, config.get("async.concurrency")
        )

    # -- chunk jobs in threads ------------------------------------------------------

    def context_of(
        self, item: Any, caller: contextvars.Context | None = None
    ) -> contextvars.Context:
        """A copy of the caller's context (``caller``, else the current one) with
        ``item``'s chunk index set."""
        context = caller.copy() if caller is not None else contextvars.copy_context()
        index = self.chunk_index_of(item[0])
        origin = self._inner_origin_for(index, item[1])
        context.run(chunk_index.set, index)
        context.run(inner_origin.set, origin)
        return context

    async def _run_chunk_jobs(
        self,
        job: Callable[..., Any],
        batch: Batch,
        *args: Any,
        min_parallel_bytes: int = 0,
        in_context: bool = True,
    ) -> list[Any]:
        """``job(item, *args)`` for every chunk of ``batch``, in the codec threads
        (:func:`~zarrext.pipeline.codec_threads.run_chunk_jobs`). Chunks of fewer than
        ``min_parallel_bytes`` (decoded) run in one thread.

        Each job runs in a copy of the caller's context with its chunk's index
        set; with ``in_context`` False, outside it, as ``job(item, *args,
        caller)`` (``caller`` the caller's context): a job that runs no codec
        makes its chunk's context only where it needs one (:meth:`context_of`).
        """
        # Contexts are made here, before any job runs: a job sets the variables
        # its chunk's codecs read, and must not see another chunk's.
        contexts = [self.context_of(item) for item in batch] if in_context else None
        return await run_chunk_jobs(
            job, batch, *args, contexts=contexts, min_parallel_bytes=min_parallel_bytes
        )

    def _where(self, key_holder: object) -> tuple[str | None, str | None]:
        """The array path and the store key of the chunk ``key_holder`` addresses
        (either None if unknown; an inner chunk of a shard has no key of its own)."""
        if hasattr(key_holder, "chunk_coords"):  # the shard's pipeline knows both
            return None, None
        key = getattr(key_holder, "path", None)
        if not isinstance(key, str):
            return self.array_path, None
        array = self.array_path
        if array is None and self.chunk_key_encoding is not None:
            index = self._index_from_key_end(key)
            if index is not None:  # the key less its chunk part
                tail = self.chunk_key_encoding.encode_chunk_key(index)
                array = key[: -len(tail)].rstrip("/")
        return array, key

    def written_array(self, batch: Batch) -> str:
        """The array ``batch`` writes to, as a refusal names it (its store and path)."""
        if not batch:
            return array_label(self.array_path)
        holder = batch[0][0]
        array, key = self._where(holder)
        text = str(holder)
        if key and array is not None and text.endswith(key):
            return f"array {(text[: len(text) - len(key)] + array).rstrip('/')!r}"
        return array_label(array)

    def raise_decode_error(self, error: BaseException, key_holder: object) -> NoReturn:
        """Raise ``error``, raised decoding the chunk of ``key_holder``, as a
        ChunkDecodeError naming the array, the chunk's key and the codec, ``from`` the
        codec's own error. (Only called on failure: the chunk's place is worked out
        then, not for every chunk read.) An error that is no codec's (the store's
        ``OSError``: :func:`~zarrext.errors.is_decode_error`) is raised as it is."""
        if not is_decode_error(error):
            raise error
        array, key = self._where(key_holder)
        codecs = self.transform.codecs if self.transform is not None else tuple(self)
        inner = getattr(key_holder, "chunk_coords", None)
        wrapped = ChunkDecodeError.wrapping(
            error, array=array, key=key, codecs=codecs,
            inner=tuple(inner) if inner is not None else None,
        )
        raise wrapped from wrapped.__cause__

    def _write_chunk(self, item: Any, value: NDBuffer, drop_axes: tuple[int, ...]) -> None:
        byte_setter, chunk_spec, _, _, is_complete = item
        assert self.transform is not None
        existing = None if is_complete else byte_setter.get_sync(prototype=chunk_spec.prototype)
        # The arena's bytes are reused by the thread's next chunk: only for a store
        # that has copied them into a file when set_sync returns (that exact class;
        # a subclass may keep the buffer, as MemoryStore does).
        into_arena = (
            type(getattr(byte_setter, "store", None)) is LocalStore
            and self.encodes_into_arena_for(chunk_spec)
        )
        with encode_arena() if into_arena else nullcontext():
            encoded = merged_and_encoded(self.transform, item, existing, value, drop_axes)
            if encoded is None:
                byte_setter.delete_sync()
            else:
                byte_setter.set_sync(encoded)

    def encodes_into_arena_for(self, chunk_spec: ArraySpec) -> bool:
        """Whether chunks of ``chunk_spec`` may be encoded in the thread's arena: no
        decision keeps chunk bytes, and they are large enough for fresh memory to
        fault (:data:`ARENA_MIN_BYTES`). The caller still sees that the arena's
        bytes are copied out before the job ends."""
        return self.encodes_into_arena and chunk_nbytes(chunk_spec) >= ARENA_MIN_BYTES

    def _writes_remote(self, batch: Batch) -> bool:
        """Whether ``batch`` writes whole objects (no codec writing parts of one) to a
        store without synchronous IO: encoded in the codec threads, uploaded on the
        event loop (:func:`zarrext.pipeline.remote.write_chunks`)."""
        return (
            self.transform is not None
            and bool(batch)
            and not self.supports_partial_encode
            and not sync_io(batch[0][0], write=True)
        )

    def _encode_merged(
        self, item: Any, existing: Buffer | None, *, value: NDBuffer, drop_axes: tuple[int, ...]
    ) -> Buffer | None:
        """A chunk's new stored bytes (None: only fill values), from its ``existing``
        bytes and its part of ``value``: in :meth:`_write_chunk` (inside an arena
        where the store copies the bytes at once) and in the remote writes' codec
        threads (with the chunk's index set; no arena: the bytes outlive it)."""
        assert self.transform is not None
        return merged_and_encoded(self.transform, item, existing, value, drop_axes)

    def _threaded(self, batch: Batch, *, write: bool) -> bool:
        """Whether ``batch`` takes the thread-pool path (else zarr's batched one)."""
        if self.transform is None or not batch:
            return False
        # A codec that reads or writes parts of a chunk (sharding) does its own IO.
        partial = self.supports_partial_encode if write else self.supports_partial_decode
        return not partial and sync_io(batch[0][0], write=write)

    def _reads_remote(self, batch: Batch) -> bool:
        """Whether ``batch`` is whole chunks of a store without synchronous IO (an
        object store, fsspec, icechunk) that the codec threads can decode."""
        return (
            self.transform is not None
            and bool(batch)
            and not self.supports_partial_decode
            and not sync_io(batch[0][0], write=False)
        )

    async def read(
        self,
        batch_info: Iterable[tuple[ByteGetter, ArraySpec, SelectorTuple, SelectorTuple, bool]],
        out: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> tuple[GetResult, ...]:
        batch = list(batch_info)
        if reads_local_shards(self, batch):
            return tuple(await self._run_chunk_jobs(
                functools.partial(read_local_shard, self), batch, out, drop_axes
            ))
        if self._reads_remote(batch):
            from zarrext.pipeline.remote import read_chunks

            assert self.transform is not None
            scatter = scatter_into(self.transform, out)
            return await read_chunks(
                batch, [self.context_of(item) for item in batch],
                functools.partial(decode_fetched, out=out, drop_axes=drop_axes,
                                  scatter=scatter, on_error=self.raise_decode_error),
                codec_pool(codec_workers()),
            )
        split = remote_shards(self, batch)
        if split is not None:
            whole, rest = split
            shards = read_remote_shards(
                self, whole, out, drop_axes, min_parallel_bytes=PARALLEL_READ_MIN_BYTES
            )
            if not rest:
                return await shards
            got, others = await asyncio.gather(shards, super().read(rest, out, drop_axes))
            return (*got, *others)
        if not self._threaded(batch, write=False):
            return await super().read(batch, out, drop_axes)
        assert self.transform is not None
        scatter = scatter_into(self.transform, out)
        if isinstance(scatter, DirectDecoder):
            read_directly = functools.partial(
                read_chunk_directly, in_context=self.context_of,
                on_error=self.raise_decode_error,
            )
            return tuple(
                await self._run_chunk_jobs(
                    read_directly, batch, out, drop_axes, scatter,
                    min_parallel_bytes=PARALLEL_READ_MIN_BYTES, in_context=False,
                )
            )
        return tuple(
            await self._run_chunk_jobs(
                read_chunk, batch, out, drop_axes, scatter, self.raise_decode_error,
                min_parallel_bytes=PARALLEL_READ_MIN_BYTES,
            )
        )

    async def write(
        self,
        batch_info: Iterable[tuple[ByteSetter, ArraySpec, SelectorTuple, SelectorTuple, bool]],
        value: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> None:
        batch = list(batch_info)
        if self.storable is not None and batch:
            # the whole write's values, before any chunk of it is encoded
            self.storable.refuse(value.as_numpy_array(), self.written_array(batch))
        if self.lost_fill_value is not None:
            await self.lost_fill_value.refuse(
                batch, self.written_array(batch), lambda setter: self._where(setter)[1]
            )
        if self._writes_through_filters(batch):
            await self._per_chunk(batch, functools.partial(self._write_filtered, value=value))
            return
        split = whole_shard_writes(self, batch)
        if split is not None and split[0]:
            whole, rest = split
            shards = write_whole_shards(
                self, whole, value, drop_axes, min_parallel_bytes=PARALLEL_WRITE_MIN_BYTES
            )
            if rest:
                await asyncio.gather(shards, super().write(rest, value, drop_axes))
            else:
                await shards
            return
        if self._writes_remote(batch):
            from zarrext.pipeline.remote import write_chunks

            workers = codec_workers()
            await write_chunks(
                batch, [self.context_of(item) for item in batch],
                functools.partial(self._encode_merged, value=value, drop_axes=drop_axes),
                codec_pool(workers), encoders=workers,
            )
            return
        if not self._threaded(batch, write=True):
            await super().write(batch, value, drop_axes)
            return
        await self._run_chunk_jobs(
            self._write_chunk, batch, value, drop_axes, min_parallel_bytes=PARALLEL_WRITE_MIN_BYTES
        )

    def _writes_through_filters(self, batch: Batch) -> bool:
        """Whether ``batch`` goes to a serializer that writes parts of a shard in
        place (a shard layout) through filters before it.

        zarr-python rewrites whole shards whenever a filter stands before the
        sharding codec, which would lose concurrent writers' chunks; filters that
        keep each inner chunk's values in that inner chunk (the only ones a layout
        accepts, :meth:`zarrext.codecs.chain.CodecChain.local_filters`) are applied to the
        written part alone instead.
        """
        return (
            bool(batch)
            and bool(self.array_array_codecs)
            and not self.bytes_bytes_codecs
            and getattr(self.array_bytes_codec, "partial_writes_through_filters", False)
        )

    async def _write_filtered(self, batch: Batch, *, value: NDBuffer) -> None:
        byte_setter, shard_spec, selection, out_selection, _ = batch[0]
        block, selection, spec = await through_filters(
            self.array_array_codecs, shard_spec, selection, value, out_selection
        )
        codec: Any = self.array_bytes_codec
        await codec.encode_partial([(byte_setter, block, selection, spec)])

    # -- zarr's batched path (codecs without a synchronous path, other stores) --------

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
            try:
                return await BatchedCodecPipeline.read_batch(self, batch, out, drop_axes)
            except DECODE_ERRORS as e:
                self.raise_decode_error(e, batch[0][0])

        results = await self._per_chunk(list(batch_info), run)
        return tuple(r for chunk_results in results for r in chunk_results)


def build_pipeline(
    metadata: ArrayV3Metadata,
    array_path: str | None,
    cls: type[ZarrextCodecPipeline] | None = None,
) -> ZarrextCodecPipeline:
    """The pipeline zarr-python would build for ``metadata``, as a ZarrextCodecPipeline.

    ``array_path`` None: unknown (zarr's ``codec_pipeline.path`` route), chunk
    coordinates are read from the end of each key.
    """
    pipeline = replace(
        (cls or ZarrextCodecPipeline).from_codecs(metadata.codecs),
        array_path=array_path,
        chunk_key_encoding=metadata.chunk_key_encoding,
        ndim=len(metadata.shape),
        planned=PlannedRange.recorded(metadata.attributes),
        lost_fill_value=LostFillValue.of(metadata),
    )
    # As zarr-python's create_codec_pipeline: the spec's shape is a placeholder for
    # irregular grids (the actual chunk shape is passed per call).
    chunk_shape = regular_chunk_shape(metadata) or (1,) * len(metadata.shape)
    return pipeline.evolve_from_array_spec(array_spec(metadata, chunk_shape))
