"""What is stored: chunks, their sizes, and the masks their conditional headers hold.

Works on any Zarr format 3 array. Where the array has a ``conditional`` codec
(directly, or among a shard's inner codecs) each stored chunk's header is read:
the codecs after the conditional codec are decoded (checking a crc32c, say), and
the header's mask is validated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from math import prod
from typing import Any, Literal

import numpy as np
import zarr
from zarr.abc.store import ByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.codecs.sharding import ShardingCodec
from zarr.core.array_spec import ArraySpec
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.common import concurrent_map
from zarr.core.config import config as zarr_config
from zarr.core.metadata import ArrayV3Metadata
from zarr.core.metadata.v3 import RegularChunkGridMetadata
from zarr.core.sync import sync

from zarrext._zarr_compat import (
    EMPTY_SHARD_INDEX_ENTRY,
    chunk_grid_of,
    codec_supports_sync,
    decode_shard_index,
    decode_shard_index_sync,
    shard_index_size,
)
from zarrext.codecs.chain import CodecChain, ConditionalPlacement, decode_bytes
from zarrext.codecs.chunk_context import chunk_index
from zarrext.codecs.decisions import format_mask
from zarrext.codecs.specs import array_spec
from zarrext.errors import (
    ChunkDecodeError,
    naming_chunk,
)
from zarrext.jobs.progress import ProgressCallback
from zarrext.stores import list_keys, object_sizes

__all__ = [
    "ArrayInventory",
    "ArrayProgress",
    "array_chunks_per_shard",
    "StoredChunk",
    "chunk_prefix",
    "conditional_placement",
    "codec_chain",
    "inner_chunks_inside",
    "inventory",
    "size_change",
    "stored_chunk_keys",
]

ArrayProgress = Callable[[str, int, int], None]
"""``progress(array_path, done, total)``: stored objects of one array read so far."""


def size_change(before: int, after: int) -> str:
    """How ``after`` bytes compare to ``before``, in words: "2.00x smaller", "1.28x larger".

    >>> size_change(200, 100), size_change(100, 128), size_change(0, 5)
    ('2.00x smaller', '1.28x larger', '-')
    """
    if not before or not after:
        return "-"
    if after <= before:
        return f"{before / after:.2f}x smaller"
    return f"{after / before:.2f}x larger"


def conditional_placement(metadata: ArrayV3Metadata) -> ConditionalPlacement | None:
    """Locate the (first) conditional codec of an array, at top level or inside a shard."""
    return CodecChain.from_metadata(metadata).conditional()


@dataclass(frozen=True)
class StoredChunk:
    """One stored chunk (an inner chunk when the array is sharded).

    Attributes
    ----------
    index : tuple of int
        Coordinates in the chunk grid (array-wide inner grid when sharded, in the
        axes the sharding codec sees: a transpose before it permutes them).
    key : str
        Store key of the object holding it (the shard, when sharded).
    nbytes : int
        Encoded size in bytes: a chunk's stored size; an inner chunk's bytes in its
        shard, which are decoded bytes when codecs follow ``sharding_indexed`` (the
        store holds the shard compressed as a whole: see
        :attr:`ArrayInventory.stored_bytes`).
    raw_nbytes : int
        Size of the chunk's values in memory.
    mask : int or None
        The conditional header's mask, ``None`` without a conditional codec (or
        when the chunk is damaged).
    damaged : bool
        Its header could not be read (``inventory(on_damage="mark")``).
    """

    index: tuple[int, ...]
    key: str
    nbytes: int
    raw_nbytes: int
    mask: int | None
    damaged: bool = False


@dataclass
class ArrayInventory:
    """Every stored chunk of one array, and totals.

    Bytes are counted one way in every report of zarrext (``info``, ``inspect``,
    ``check``, ``quantize``):

    - *stored* (:attr:`stored_bytes`): the bytes of the encoded chunks themselves,
      the inner chunks of a sharded array (those inside the array's shape); not
      ``zarr.json``, not a shard's index or the free space in it. Where codecs
      follow ``sharding_indexed`` the shard is encoded whole and its inner chunks
      are no separate bytes in the store: such a shard counts whole;
    - *objects* (:attr:`object_bytes`): the sizes of the chunk (shard) objects as
      the store holds them, index and free space included: what a bucket bills;
    - *on disk* (``allocated``, local directories only, :func:`node_info`): what the
      file system allocates for them, less than their sizes where fixed slots
      leave holes.

    ``object_sizes`` holds each object's size by key, ``stored_sizes`` the stored
    bytes of the chunks in it (a shard whose index does not decode has none).
    """

    path: str
    shape: tuple[int, ...]
    grid_shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    placement: ConditionalPlacement | None
    chunks: list[StoredChunk] = field(default_factory=list)
    store_keys: int = 0
    damaged: list[ChunkDecodeError] = field(default_factory=list)
    """Chunks (or whole shards) that did not decode, with ``on_damage="mark"``."""
    object_sizes: dict[str, int] = field(default_factory=dict)
    stored_sizes: dict[str, int] = field(default_factory=dict)

    @property
    def stored_bytes(self) -> int:
        """The encoded chunks' bytes: a shard's index and free space not counted
        (a shard encoded whole by codecs after ``sharding_indexed`` counts whole)."""
        return sum(self.stored_sizes.values())

    @property
    def object_bytes(self) -> int:
        """The chunk (shard) objects' sizes as the store holds them; ``zarr.json``
        is not counted."""
        return sum(self.object_sizes.values())

    @property
    def chunk_bytes(self) -> int:
        """The encoded (inner) chunks' bytes: :attr:`StoredChunk.nbytes` summed.

        For a sharded array with codecs after ``sharding_indexed`` these are bytes
        of the decoded shards, not bytes in the store.
        """
        return sum(c.nbytes for c in self.chunks)

    @property
    def raw_bytes(self) -> int:
        return sum(c.raw_nbytes for c in self.chunks)

    @property
    def mask_counts(self) -> Counter[int]:
        return Counter(c.mask for c in self.chunks if c.mask is not None)

    @property
    def n_codecs(self) -> int:
        """Nested codecs of the conditional codec (0 without one): the masks' width."""
        return len(self.placement.codec.codecs) if self.placement is not None else 0

    def mask_text(self, mask: int) -> str:
        """``mask`` in zarrext's one notation (:func:`zarrext.codecs.decisions.format_mask`)."""
        return format_mask(mask, self.n_codecs)

    def grid(self, attribute: str) -> np.ndarray:
        """A chunk-grid-shaped float array of ``mask`` or ``ratio`` (NaN where not stored)."""
        out = np.full(self.grid_shape, np.nan)
        for c in self.chunks:
            if attribute == "mask":
                out[c.index] = np.nan if c.mask is None else c.mask
            elif attribute == "ratio":
                out[c.index] = c.raw_nbytes / c.nbytes if c.nbytes else np.nan
            else:
                raise ValueError(f"unknown grid attribute {attribute!r}")
        return out


def stored_chunk_keys(
    array: zarr.Array, keys: Iterable[str] | None = None
) -> Iterator[tuple[tuple[int, ...], str]]:
    """``(chunk coordinates, store key)`` of every stored chunk (shard) of ``array``.

    ``keys``: the store's keys under the array's path, sorted (as :func:`list_keys`
    gives them, which lists them when not given); the chunk keys are picked from them.
    """
    metadata = array.metadata
    if not isinstance(metadata, ArrayV3Metadata):
        raise ValueError(f"array {array.path!r} is not a Zarr format 3 array")
    prefix = chunk_prefix(array)
    grid = chunk_grid_of(array)
    if keys is None:
        keys = list_keys(array.store_path.store, prefix)
    for key in keys:
        relative = key[len(prefix) :]
        if relative == "zarr.json" or relative.startswith("."):
            continue
        try:
            coords = metadata.chunk_key_encoding.decode_chunk_key(relative)
        except (ValueError, NotImplementedError):
            continue
        if len(coords) == len(metadata.shape) and all(
            0 <= c < s for c, s in zip(coords, grid.grid_shape, strict=True)
        ):
            yield coords, key


def chunk_prefix(array: zarr.Array) -> str:
    """The prefix of the store keys under the array's path (``""`` at the root)."""
    base = array.store_path.path
    return f"{base}/" if base else ""


def storage_block(metadata: ArrayV3Metadata) -> tuple[tuple[int, ...], ShardingCodec | None]:
    """Shape of one stored object (chunk or shard), and the sharding codec if any.

    Read from the metadata: zarr-python's ``Array.shards`` is ``None`` whenever
    codecs follow the sharding codec, though the array is still sharded.
    """
    grid = metadata.chunk_grid
    if not isinstance(grid, RegularChunkGridMetadata):
        raise ValueError("zarrext inspection needs a regular chunk grid")
    return tuple(grid.chunk_shape), CodecChain.from_metadata(metadata).sharding


def array_chunks_per_shard(array: Any) -> tuple[int, ...] | None:
    """Inner chunks per shard along each axis of ``array``, or None when it is unsharded."""
    outer, sharding = storage_block(array.metadata)
    if sharding is None:
        return None
    return tuple(o // c for o, c in zip(outer, sharding.chunk_shape, strict=True))


def _spec(shape: tuple[int, ...], metadata: ArrayV3Metadata) -> ArraySpec:
    return array_spec(metadata, shape)


def stored_mask(placement: ConditionalPlacement, data: Buffer, spec: ArraySpec) -> int:
    return placement.codec.read_mask(decode_bytes([(c, spec) for c in placement.after], data))


def _raw_nbytes(shape: tuple[int, ...], metadata: ArrayV3Metadata) -> int:
    return prod(shape) * metadata.data_type.to_native_dtype().itemsize


def inner_chunks_inside(
    metadata: ArrayV3Metadata, shard_coords: tuple[int, ...]
) -> tuple[int, ...]:
    """How many inner chunks of the shard at ``shard_coords`` lie inside the array's
    shape, along each axis (in the axes the sharding codec sees): the inner chunks
    ``[0, n)`` of each axis; those beyond the array's edge hold no data.
    """
    outer, sharding = storage_block(metadata)
    if sharding is None:
        raise ValueError("inner_chunks_inside: the array is not sharded")
    chain = CodecChain.from_metadata(metadata)
    shape = chain.to_serializer_axes(tuple(metadata.shape))
    inner = tuple(sharding.chunk_shape)
    per_shard = tuple(s // c for s, c in zip(chain.to_serializer_axes(outer), inner, strict=True))
    origin = chain.to_serializer_axes(tuple(shard_coords))
    return tuple(
        max(0, min(k, -(-s // c) - o * k))
        for s, c, k, o in zip(shape, inner, per_shard, origin, strict=True)
    )


def inventory(
    array: zarr.Array | Any,
    *,
    read_masks: bool = True,
    on_damage: Literal["raise", "mark"] = "raise",
    storage_options: Mapping[str, Any] | None = None,
    progress: ProgressCallback | None = None,
    list_chunks: bool = True,
) -> ArrayInventory:
    """List the stored chunks of ``array`` with sizes and conditional masks.

    Parameters
    ----------
    array : zarr.Array, str or StoreLike
        The array, or its path or URL (opened read-only with ``storage_options``).
    read_masks : bool
        Read each chunk's conditional header (needs the chunk's bytes).
    on_damage : {"raise", "mark"}
        A chunk whose header does not decode (or a shard whose index does not):
        ``"raise"`` a :class:`~zarrext.errors.ChunkDecodeError`; ``"mark"``: go
        on, list the chunk with ``damaged=True`` and no mask (a shard that cannot
        be read lists no chunks) and add the error to the inventory's ``damaged``.
    progress : callable, optional
        ``progress(done, total)`` stored objects read, before the first and after
        each batch.
    list_chunks : bool
        False: only the totals (:attr:`ArrayInventory.object_sizes` and
        :attr:`ArrayInventory.stored_sizes`): the objects' sizes come from one
        listing of the store where it lists sizes
        (:func:`zarrext.stores.object_sizes`), else each is asked of the store;
        of a shard only its index is read (a range of the index's size), for its
        chunks' sizes; no chunk is listed.
    """
    from zarrext.stores import open_job_array

    array = open_job_array(array, storage_options=storage_options)
    metadata = array.metadata
    if not isinstance(metadata, ArrayV3Metadata):
        raise ValueError(f"array {array.path!r} is not a Zarr format 3 array")
    chain = CodecChain.from_metadata(metadata)
    placement = chain.conditional()
    store = array.store_path.store
    prototype = default_buffer_prototype()
    outer_shape, sharding = storage_block(metadata)
    chunk_shape = sharding.chunk_shape if sharding is not None else outer_shape
    # Inner chunks are indexed in the axes the sharding codec sees (a transpose
    # before it permutes the array's axes).
    axes = chain.to_serializer_axes if sharding is not None else (lambda c: c)
    grid_shape = tuple(
        -(-s // c) for s, c in zip(axes(tuple(metadata.shape)), chunk_shape, strict=True)
    )
    result = ArrayInventory(array.path, metadata.shape, grid_shape, chunk_shape, placement)
    per_shard = tuple(s // c for s, c in zip(axes(outer_shape), chunk_shape, strict=True))
    # A shard with nothing after sharding_indexed: its index holds its chunks' sizes.
    # Else the shard is encoded whole, and counts whole.
    bare_shards = sharding is not None and not chain.bytes_bytes
    # Objects are fetched async.concurrency at a time (an object store answers
    # many requests at once), and each batch is read before the next is fetched:
    # memory stays at one batch of objects.
    needs_bytes = list_chunks and (
        sharding is not None or (placement is not None and read_masks)
    )
    index_range: ByteRequest | None = None
    if bare_shards and not needs_bytes:
        assert sharding is not None
        index_size = shard_index_size(sharding, per_shard)
        index_range = (
            RangeByteRequest(0, index_size) if sharding.index_location == "start"
            else SuffixByteRequest(index_size)
        )

    # Where only sizes are needed, they come from one listing of the store where it
    # lists them (an object store: one LIST per 1,000 objects, not a HEAD per object);
    # the chunk keys are picked from the same listing.
    listed = None if needs_bytes else object_sizes(store, chunk_prefix(array))

    async def fetch(key: str) -> Any:
        if needs_bytes:
            return await store.get(key, prototype)
        size = listed[key] if listed is not None else await store.getsize(key)
        if index_range is None:
            return size
        return size, await store.get(key, prototype, byte_range=index_range)

    mode = _ObjectReader.for_mode(index_totals=index_range is not None,
                                  list_chunks=list_chunks, sharded=sharding is not None)
    reader = mode(
        array=array, metadata=metadata, chain=chain, sharding=sharding, placement=placement,
        result=result, outer_shape=outer_shape, per_shard=per_shard, grid_shape=grid_shape,
        axes=axes, read_masks=read_masks, on_damage=on_damage, prototype=prototype,
        inner_spec=_spec(chunk_shape, metadata), raw_nbytes=_raw_nbytes(chunk_shape, metadata),
    )

    keys = list(stored_chunk_keys(array, None if listed is None else sorted(listed)))
    batch = max(1, int(zarr_config.get("async.concurrency") or 1))
    if progress is not None:
        progress(0, len(keys))
    for first in range(0, len(keys), batch):
        part = keys[first : first + batch]
        if listed is not None and index_range is None:  # the sizes alone: all listed
            fetched = [listed[key] for _, key in part]
        else:
            fetched = sync(concurrent_map([(key,) for _, key in part], fetch, batch))
        for (coords, key), got in zip(part, fetched, strict=True):
            result.store_keys += 1
            try:
                reader.add(coords, key, got)
            except ChunkDecodeError as e:  # a shard's outer codecs
                if on_damage == "raise":
                    raise
                result.damaged.append(e)
            except ValueError as e:  # a shard index that does not decode
                if on_damage == "raise" or sharding is None:
                    raise
                error = ChunkDecodeError.wrapping(e, array=array.path, key=key,
                                                  codecs=(sharding,))
                result.damaged.append(error)
        if progress is not None:
            progress(first + len(part), len(keys))
    return result


@dataclass
class _ObjectReader:
    """Adds the stored objects of one array to its inventory, one object at a time.

    One subclass per mode of :func:`inventory`: the totals of objects
    (:class:`_ObjectTotals`), the totals of bare shards from their indexes
    (:class:`_ShardIndexTotals`), the chunks of an unsharded array
    (:class:`_ChunkList`), the inner chunks of shards (:class:`_ShardChunkList`).
    """

    array: Any
    metadata: ArrayV3Metadata
    chain: CodecChain
    sharding: ShardingCodec | None
    placement: ConditionalPlacement | None
    result: ArrayInventory
    outer_shape: tuple[int, ...]
    per_shard: tuple[int, ...]
    grid_shape: tuple[int, ...]
    axes: Callable[[tuple[int, ...]], tuple[int, ...]]
    read_masks: bool
    on_damage: Literal["raise", "mark"]
    prototype: Any
    inner_spec: ArraySpec
    raw_nbytes: int

    @staticmethod
    def for_mode(*, index_totals: bool, list_chunks: bool, sharded: bool) -> type[_ObjectReader]:
        """The reader for what :func:`inventory` was asked (``index_totals``: of bare
        shards, only their indexes are fetched)."""
        if index_totals:
            return _ShardIndexTotals
        if not list_chunks:
            return _ObjectTotals
        return _ShardChunkList if sharded else _ChunkList

    @property
    def bare_shards(self) -> bool:
        """Shards with nothing after sharding_indexed: their indexes hold their chunks'
        sizes (else a shard is encoded whole, and counts whole)."""
        return self.sharding is not None and not self.chain.bytes_bytes

    def add(self, coords: tuple[int, ...], key: str, got: Any) -> None:
        """Add the chunks of one stored object (``got``: what was fetched of it; None
        when it was deleted since listed)."""
        if got is not None:
            self.add_object(tuple(coords), key, got)

    def add_object(self, coords: tuple[int, ...], key: str, got: Any) -> None:
        raise NotImplementedError

    def record_size(self, key: str, got: Any) -> int:
        """The object's size (``got``: its size or its bytes), recorded."""
        size = self.result.object_sizes[key] = got if isinstance(got, int) else len(got)
        if not self.bare_shards:  # a chunk, or a shard encoded whole
            self.result.stored_sizes[key] = size
        return size

    def array_index(self, origin: tuple[int, ...], local: tuple[int, ...]) -> tuple[int, ...]:
        """An inner chunk's index in the array-wide grid (``origin``: its shard's
        first inner chunk there, ``local``: its place in the shard)."""
        return tuple(o * k + i for o, k, i in zip(origin, self.per_shard, local, strict=True))

    def inside_mask(self, origin: tuple[int, ...]) -> np.ndarray:
        """Which inner chunks of the shard at ``origin`` lie within the array's grid
        (the others are beyond its edge)."""
        mask = np.ones(self.per_shard, dtype=bool)
        for axis, (o, k, g) in enumerate(zip(origin, self.per_shard, self.grid_shape,
                                             strict=True)):
            along = o * k + np.arange(k) < g
            mask &= along.reshape([k if a == axis else 1 for a in range(len(self.per_shard))])
        return mask

    def mask_of(self, data: Buffer, index: tuple[int, ...], key: str,
                inner: tuple[int, ...] | None) -> int | None:
        """The chunk's mask; None when it is damaged and ``on_damage="mark"``."""
        assert self.placement is not None
        token = chunk_index.set(index)
        try:
            with naming_chunk(array=self.array.path, key=key, codecs=self.placement.after,
                              inner=inner):
                return stored_mask(self.placement, data, self.inner_spec)
        except ChunkDecodeError as e:
            if self.on_damage == "raise":
                raise
            self.result.damaged.append(e)
            return None
        finally:
            chunk_index.reset(token)


class _ObjectTotals(_ObjectReader):
    """Totals only, from each object's size."""

    def add_object(self, coords: tuple[int, ...], key: str, got: Any) -> None:
        self.record_size(key, got)


class _ShardIndexTotals(_ObjectReader):
    """Totals only, of bare shards: ``got`` is the shard's size and its index's bytes,
    which give its chunks' sizes."""

    def add_object(self, coords: tuple[int, ...], key: str, got: Any) -> None:
        size, index_bytes = got
        if index_bytes is None:
            return  # deleted since listed
        size = self.record_size(key, size)
        assert self.sharding is not None
        extents = index_extents(self.sharding, index_bytes, self.per_shard, size, key)
        within = extents.present & self.inside_mask(self.axes(coords))
        self.result.stored_sizes[key] = int((extents.stops - extents.starts)[within].sum())


class _ChunkList(_ObjectReader):
    """The chunks of an unsharded array, each with its mask when asked for (``got``:
    the chunk's bytes, or its size when no mask is read)."""

    def add_object(self, coords: tuple[int, ...], key: str, got: Any) -> None:
        size = self.record_size(key, got)
        mask = None
        damaged = False
        if self.placement is not None and self.read_masks:
            mask = self.mask_of(got, coords, key, None)
            damaged = mask is None
        self.result.chunks.append(
            StoredChunk(coords, key, size, self.raw_nbytes, mask, damaged)
        )


class _ShardChunkList(_ObjectReader):
    """The inner chunks of each shard (``got``: the shard's bytes), each with its mask
    when asked for."""

    def add_object(self, coords: tuple[int, ...], key: str, got: Any) -> None:
        assert self.sharding is not None
        self.record_size(key, got)
        origin = self.axes(coords)
        shard = got
        if self.chain.bytes_bytes:
            # bytes->bytes codecs applied to whole shards, undone before reading the index
            with naming_chunk(array=self.array.path, key=key, codecs=self.chain.bytes_bytes):
                shard = self.prototype.buffer.from_bytes(self.chain.decode_stored(
                    shard.to_bytes(), _spec(self.outer_shape, self.metadata)
                ))
        within = self.inside_mask(origin)
        chunks = [
            (local, self.array_index(origin, local), start, stop)
            for local, (start, stop) in shard_entries(self.sharding, shard, self.per_shard, key)
            if within[local]
        ]
        if self.bare_shards:
            self.result.stored_sizes[key] = sum(stop - start for _, _, start, stop in chunks)
        reads_masks = (self.placement is not None and self.placement.sharding is self.sharding
                       and self.read_masks)
        for local, index, start, stop in chunks:
            mask = None
            damaged = False
            if reads_masks:
                mask = self.mask_of(shard[start:stop], index, key, local)
                damaged = mask is None
            self.result.chunks.append(
                StoredChunk(index, key, stop - start, self.raw_nbytes, mask, damaged)
            )


def shard_entries(
    sharding: ShardingCodec, shard: Buffer, chunks_per_shard: tuple[int, ...], key: str
) -> Iterator[tuple[tuple[int, ...], tuple[int, int]]]:
    """``(inner coordinates, (start, stop))`` of every inner chunk stored in a shard."""
    index_size = shard_index_size(sharding, chunks_per_shard)
    if len(shard) < index_size:
        raise ValueError(
            f"shard {key!r}: {len(shard)} bytes is shorter than its {index_size}-byte index"
        )
    if sharding.index_location == "start":
        index_bytes = shard[:index_size]
    else:
        index_bytes = shard[len(shard) - index_size :]
    return index_entries(sharding, index_bytes, chunks_per_shard, len(shard), key)


@dataclass(frozen=True)
class IndexExtents:
    """Every inner chunk's bytes in a shard, from its index: arrays of the shard's
    chunk grid (``chunks_per_shard``), C order as :func:`numpy.ndindex` walks it."""

    present: np.ndarray
    """Whether the chunk is stored (bool)."""
    starts: np.ndarray
    """Its first byte (int64; 0 where absent)."""
    stops: np.ndarray
    """One past its last byte (int64; 0 where absent)."""


def index_extents(
    sharding: ShardingCodec, index_bytes: Buffer, chunks_per_shard: tuple[int, ...],
    shard_size: int, key: str,
) -> IndexExtents:
    """Every inner chunk's extent in a shard of ``shard_size`` bytes, from its index.

    Raises ValueError (a ``shard {key}`` message) when the index does not decode or
    an entry reaches outside the shard (the first such entry in C order).
    """
    index_size = shard_index_size(sharding, chunks_per_shard)
    if len(index_bytes) != index_size or shard_size < index_size:
        raise ValueError(
            f"shard {key!r}: {shard_size} bytes is shorter than its {index_size}-byte index"
        )
    if all(codec_supports_sync(c) for c in sharding.index_codecs):
        # in this thread: a hop to zarr's event loop per shard costs more than the
        # decode (benchmarks: convert's report of its output's stored bytes)
        index = decode_shard_index_sync(sharding, index_bytes, chunks_per_shard)
    else:
        index = sync(decode_shard_index(sharding, index_bytes, chunks_per_shard))
    table = np.asarray(index.offsets_and_lengths, dtype=np.uint64).reshape(
        (*chunks_per_shard, 2))
    offsets, lengths = table[..., 0], table[..., 1]
    present = (offsets != EMPTY_SHARD_INDEX_ENTRY) | (lengths != EMPTY_SHARD_INDEX_ENTRY)
    # start <= shard_size first, so that shard_size - start cannot wrap around
    fits = (offsets <= shard_size) & (lengths <= np.uint64(shard_size) - np.minimum(
        offsets, np.uint64(shard_size)))
    outside = np.flatnonzero(present & ~fits)
    if outside.size:
        local = tuple(int(i) for i in np.unravel_index(int(outside[0]), chunks_per_shard))
        start, length = (int(v) for v in table.reshape(-1, 2)[outside[0]])
        raise ValueError(
            f"shard {key!r}: inner chunk {local} spans bytes {start}..{start + length}, "
            f"outside the {shard_size}-byte shard"
        )
    starts = np.where(present, offsets, 0).astype(np.int64)
    return IndexExtents(present, starts, starts + np.where(present, lengths, 0).astype(np.int64))


def index_entries(
    sharding: ShardingCodec, index_bytes: Buffer, chunks_per_shard: tuple[int, ...],
    shard_size: int, key: str,
) -> Iterator[tuple[tuple[int, ...], tuple[int, int]]]:
    """As :func:`shard_entries`, from the shard's index bytes and its size alone.

    Raises ValueError (a ``shard {key}`` message) when the index does not decode or
    an entry reaches outside the shard; every entry is checked before the first is
    given.
    """
    extents = index_extents(sharding, index_bytes, chunks_per_shard, shard_size, key)
    flat = np.flatnonzero(extents.present)
    coords = np.unravel_index(flat, chunks_per_shard)
    stored = list(zip(*(c.tolist() for c in coords), strict=True)) if chunks_per_shard else (
        [()] * flat.size)
    starts = extents.starts.reshape(-1)[flat].tolist()
    stops = extents.stops.reshape(-1)[flat].tolist()
    return iter(list(zip(stored, zip(starts, stops, strict=True), strict=True)))


def codec_chain(codecs: Any) -> list[str]:
    """Codec names of a chain, sharding's inner chain in brackets."""
    return CodecChain.of(codecs).names()
