"""What a job knows of a sharded array's shards, read from its metadata in one place.

:meth:`ArrayShards.of` reads an array's ``zarr.json`` once and derives, in order:
its codec chain and sharding codec, the shape and spec of one stored object, the
spec the sharding codec sees after the filters, the shards' geometry (slots,
index, and the slot sizes earlier versions of zarrext wrote,
:data:`zarrext.sharding.bounds.SLOT_RULES`), the array's directory on a local
store and the store key of every shard. The jobs on shards (check, compact,
expand, inspect, Dask writes) and the layouts' crash recovery start from it.

:func:`stored_spec_of` and :func:`geometry_of` are the two steps others take
alone: the spec of a stored object of an array that may not be sharded, and the
geometry of a sharding codec other than the array's own (a runtime codec, or the
codec a recompression bounds its slots with).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zarr.core.metadata import ArrayV3Metadata

from zarrext._zarr_compat import (
    async_array_of,
    chunks_per_shard,
    inner_chunk_spec,
    shard_index_size,
)
from zarrext.codecs.chain import CodecChain
from zarrext.codecs.specs import array_spec, regular_chunk_shape
from zarrext.pipeline.chunk_io import local_file
from zarrext.sharding.bounds import slot_sizes
from zarrext.sharding.geometry import ShardGeometry, ShardLayoutError

if TYPE_CHECKING:
    from pathlib import Path

    from zarr.codecs.sharding import ShardingCodec
    from zarr.core.array_spec import ArraySpec

__all__ = ["ArrayShards", "geometry_of", "stored_spec_of"]


def stored_spec_of(metadata: ArrayV3Metadata) -> ArraySpec:
    """The ``ArraySpec`` of one stored object of the array as the array gives it: a
    whole shard when it is sharded, else a chunk.

    Raises
    ------
    ShardLayoutError
        When the chunk grid is not regular.
    """
    shape = regular_chunk_shape(metadata)
    if shape is None:
        raise ShardLayoutError("shard layouts need a regular chunk grid")
    return array_spec(metadata, shape)


def geometry_of(codec: ShardingCodec, shard_spec: ArraySpec) -> ShardGeometry:
    """The geometry of a shard encoded by ``codec``; ``slot_size`` is None when unbounded.

    ``shard_spec`` is the shard as ``codec`` sees it (after the array's filters). Its
    ``earlier_slot_sizes`` are the other slot sizes of
    :data:`zarrext.sharding.bounds.SLOT_RULES` for these codecs: shards written by
    earlier versions of zarrext keep theirs (:meth:`ShardGeometry.for_shard`).
    """
    per_shard = chunks_per_shard(codec, shard_spec)
    slot, *earlier = slot_sizes(codec.codecs, inner_chunk_spec(codec, shard_spec))
    return ShardGeometry(
        chunks_per_shard=per_shard,
        index_size=shard_index_size(codec, per_shard),
        index_location=codec.index_location,
        slot_size=slot,
        earlier_slot_sizes=tuple(dict.fromkeys(
            s for s in earlier if s is not None and s != slot
        )),
    )


@dataclass(frozen=True)
class ArrayShards:
    """The shards of a sharded array and what is needed to parse them.

    Built by :meth:`of`.

    Attributes
    ----------
    chain : CodecChain
        The array's codec chain (filters, sharding, codecs after it).
    codec : ShardingCodec
        The array's sharding codec (the chain's serializer).
    stored_spec : ArraySpec
        The spec of one stored object as the array gives it.
    shard_spec : ArraySpec
        The spec of a shard as the sharding codec sees it, after the filters.
    geometry : ShardGeometry
        Layout facts shared by every shard of the array.
    directory : Path or None
        The array's directory when it lives in a ``LocalStore``.
    keys : list of str
        Store keys of every shard in the grid, present or not.
    """

    chain: CodecChain
    codec: ShardingCodec
    stored_spec: ArraySpec
    shard_spec: ArraySpec
    geometry: ShardGeometry
    directory: Path | None
    keys: list[str]

    @classmethod
    def of(cls, array: Any) -> ArrayShards:
        """The shards of a zarr (or zarrext) array.

        Raises
        ------
        ShardLayoutError
            When the array is not a sharded Zarr format 3 array, or its chunk grid
            is not regular.
        """
        metadata = array.metadata
        if not isinstance(metadata, ArrayV3Metadata):
            raise ShardLayoutError("shard layouts need a Zarr format 3 array")
        chain = CodecChain.from_metadata(metadata)
        codec = chain.sharding
        if codec is None:
            raise ShardLayoutError(f"array {array.path!r} is not sharded")
        stored_spec = stored_spec_of(metadata)
        shard_spec = chain.filtered_spec(stored_spec)
        store_path = async_array_of(array).store_path
        directory = local_file(store_path)
        grid = (-(-s // c) for s, c in zip(metadata.shape, stored_spec.shape, strict=True))
        keys = [metadata.encode_chunk_key(c) for c in itertools.product(*map(range, grid))]
        return cls(
            chain=chain,
            codec=codec,
            stored_spec=stored_spec,
            shard_spec=shard_spec,
            geometry=geometry_of(codec, shard_spec),
            directory=directory,
            keys=keys,
        )

    @property
    def bare(self) -> bool:
        """Whether each stored object is a bare shard (no codecs after sharding)."""
        return self.chain.stores_bare_shards

    def shard_bytes(self, stored: bytes) -> bytes:
        """A shard's bytes from its stored object (codecs after sharding undone)."""
        return self.chain.decode_stored(stored, self.stored_spec)

    def stored_bytes(self, shard: bytes) -> bytes:
        """The stored object for a shard's bytes (codecs after sharding applied)."""
        return self.chain.encode_stored(shard, self.stored_spec)

    def path(self, key: str) -> Path:
        """The file of the shard at store key ``key`` (a local store only)."""
        if self.directory is None:
            raise ShardLayoutError("the array is not in a local store")
        return self.directory / key
