"""Shard write layouts: which bytes of a ``sharding_indexed`` shard a writer uses.

The shard format is zarr-python's ``sharding_indexed``; a layout only decides where
a writer puts each inner chunk, so every layout reads with any reader.

``fixed-slot``
    Inner chunk ``i`` (C order in the shard) owns a slot of ``S`` bytes at
    ``data_start + i * S``, where ``data_start`` is the index size when the index is
    at the start, else 0. ``S`` is the bound of an inner chunk's encoded size
    (:func:`zarrext.sharding.bounds.slot_bound`: the chain's worst-case encoded
    size, in whole blocks when it compresses). The spare area after the ``n`` slots
    holds chunks that are being replaced (see :mod:`zarrext.sharding.writer`) or do
    not fit. Shards written by earlier versions of zarrext, whose ``S`` was
    smaller (:data:`zarrext.sharding.bounds.SLOT_RULES`), keep their own ``S``:
    writers, ``inspect``, ``recompress`` and ``compact`` read it from where each
    shard's index puts its chunks (:meth:`ShardGeometry.for_shard`).
``append``
    New and updated chunks go to the end of the shard, followed by a fresh index
    when the index is at the end (the spec's append-only strategy).

Layouts are runtime settings, never written to ``zarr.json``. Which arrays take
them is decided by the array's codec chain (:class:`zarrext.codecs.chain.CodecChain`):

- supported: ``sharding_indexed`` as the serializer with nothing after it, with any
  inner codecs (``fixed-slot`` needs their encoded size bounded), nested sharding,
  and filters before it that keep each inner chunk's values in that inner chunk
  (``transpose``, ``scale_offset``, ``cast_value``: quantized arrays);
- refused at open, with the fix: bytes->bytes codecs after the sharding codec (the
  stored object is then a compressed shard, rewritten whole by every write), other
  filters, and arrays that are not sharded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from zarr.core.array_spec import ArraySpec
from zarr.core.metadata import ArrayV3Metadata
from zarr.storage import LocalStore

from zarrext._zarr_compat import (
    ShardingByteSetter,
    codec_supports_sync,
    inner_chunk_spec,
    inner_chunk_transform,
    shard_indexer_and_value,
    sharding_codec_fields,
)
from zarrext.codecs.chain import CodecChain
from zarrext.sharding import writer
from zarrext.sharding.array_shards import ArrayShards, geometry_of, stored_spec_of
from zarrext.sharding.bounds import slot_bound
from zarrext.sharding.codec import RuntimeShardingCodec
from zarrext.sharding.geometry import ShardGeometry, ShardLayoutError
from zarrext.sharding.journal import (
    JOURNAL_SUFFIX,
    TMP_MARK,
    dead_writer_temp,
    journal_pending,
    locked_shard,
)

if TYPE_CHECKING:
    from zarr.abc.codec import Codec
    from zarr.abc.store import ByteSetter
    from zarr.codecs.sharding import ShardingCodec
    from zarr.core.buffer import NDBuffer
    from zarr.core.indexing import SelectorTuple

__all__ = [
    "LAYOUTS",
    "LayoutShardingCodec",
    "bind_layout",
    "recover_array",
    "writable_local_file",
]

ShardLayout = Literal["fixed-slot", "append"]
LAYOUTS: tuple[str, ...] = ("fixed-slot", "append")


def writable_local_file(byte_setter: object) -> Path | None:
    """The file behind a store path, when its store writes local files in place."""
    store = getattr(byte_setter, "store", None)
    path = getattr(byte_setter, "path", None)
    if isinstance(store, LocalStore) and isinstance(path, str) and not store.read_only:
        return store.root / path
    return None


@dataclass(frozen=True, init=False, eq=False)
class LayoutShardingCodec(RuntimeShardingCodec):
    """``sharding_indexed`` that writes shards with a runtime layout, in place.

    Same metadata, same reader as zarr-python's ``ShardingCodec``. On a
    ``LocalStore`` a write touches only the inner chunks it changes (see
    :mod:`zarrext.sharding.writer`); on any other store it falls back to
    zarr-python's whole-shard rewrite. ``shard_layout`` is a runtime setting: not
    compared, never in metadata, kept by ``dataclasses.replace`` (and so by
    zarr-python's ``evolve_from_array_spec``).
    """

    shard_layout: str = field(default="fixed-slot", compare=False)
    # zarrext's pipeline hands this codec partial writes through the array's filters
    # (transpose, scale_offset, cast_value) instead of whole-shard rewrites.
    partial_writes_through_filters = True

    def __init__(self, *, shard_layout: str = "fixed-slot", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if shard_layout not in LAYOUTS:
            raise ShardLayoutError(f"shard_layout must be one of {LAYOUTS}, got {shard_layout!r}")
        object.__setattr__(self, "shard_layout", shard_layout)

    @classmethod
    def from_codec(cls, codec: ShardingCodec, shard_layout: str) -> LayoutShardingCodec:
        return cls(shard_layout=shard_layout, **sharding_codec_fields(codec))

    def __getstate__(self) -> dict[str, Any]:
        # zarr-python pickles the codec's metadata, which has no runtime settings.
        return {"shard_layout": self.shard_layout, **super().__getstate__()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        object.__setattr__(self, "shard_layout", state["shard_layout"])

    # zarr's whole-shard encodes (and its own partial write) under a layout would
    # mean a read-modify-write of the whole shard, which loses concurrent writers'
    # chunks: never let one happen silently.
    def _whole_shard_refusal(self) -> ShardLayoutError:
        return ShardLayoutError(
            f"shard_layout={self.shard_layout!r}: zarr asked for a whole-shard rewrite, "
            "which would overwrite concurrent writers' inner chunks; the array's codecs "
            "should have been refused when it was opened (please report this)"
        )

    async def _encode_single(self, shard_array: NDBuffer, shard_spec: ArraySpec) -> Any:
        raise self._whole_shard_refusal()

    def _encode_sync(self, shard_array: NDBuffer, shard_spec: ArraySpec) -> Any:
        raise self._whole_shard_refusal()

    def _encode_partial_sync(self, *args: Any, **kwargs: Any) -> Any:
        raise self._whole_shard_refusal()

    def geometry(self, shard_spec: ArraySpec) -> ShardGeometry:
        return self.per_shard_spec(
            "geometry", shard_spec, lambda spec: geometry_of(self, spec)
        )

    def _sync_inner_transform(self, shard_spec: ArraySpec) -> Any:
        """zarr-python's synchronous transform of the inner codecs, if they have one."""
        if not all(codec_supports_sync(c) for c in self.codecs):
            return None
        try:
            return inner_chunk_transform(self, shard_spec)
        except (TypeError, ValueError, NotImplementedError):
            return None

    def _write_shard_sync(
        self,
        target: Path,
        shard_spec: ArraySpec,
        indexer: list[Any],
        value: NDBuffer,
        transform: Any,
        origin: tuple[int, ...] | None,
    ) -> None:
        """Merge, encode and write the touched inner chunks, all in this thread."""
        from zarr.core.chunk_utils import merge_and_encode_chunk

        from zarrext.codecs.chunk_context import chunk_index

        geometry = self.geometry(shard_spec)
        chunk_spec = inner_chunk_spec(self, shard_spec)
        partial = sorted({coords for coords, _, _, complete in indexer if not complete})

        def merge(existing: Mapping[tuple[int, ...], Any]) -> dict[tuple[int, ...], Any]:
            updates: dict[tuple[int, ...], Any] = {}
            for coords, chunk_sel, out_sel, complete in indexer:
                # Decision functions ask which chunk they encode: its array-wide index.
                chunk_index.set(
                    coords
                    if origin is None
                    else tuple(o + c for o, c in zip(origin, coords, strict=True))
                )
                updates[coords] = merge_and_encode_chunk(
                    None if complete else updates.get(coords, existing.get(coords)),
                    value,
                    chunk_spec=chunk_spec,
                    chunk_selection=chunk_sel,
                    out_selection=out_sel,
                    is_complete=complete,
                    drop_axes=(),
                    decode=transform.decode_chunk,
                    encode=transform.encode_chunk,
                )
            return updates

        writer.update_chunks(target, self, geometry, self.shard_layout, partial, merge)

    async def _encode_partial_single(
        self,
        byte_setter: ByteSetter,
        shard_array: NDBuffer,
        selection: SelectorTuple,
        shard_spec: ArraySpec,
    ) -> None:
        import asyncio

        from zarrext.codecs.chunk_context import inner_origin

        target = writable_local_file(byte_setter)
        if target is None:
            await super()._encode_partial_single(byte_setter, shard_array, selection, shard_spec)
            return
        indexer, shard_array = shard_indexer_and_value(self, selection, shard_spec, shard_array)
        transform = self._sync_inner_transform(shard_spec)
        if transform is not None:
            # One worker thread does encode and IO: no task per inner chunk.
            await asyncio.to_thread(
                self._write_shard_sync,
                target,
                shard_spec,
                indexer,
                shard_array,
                transform,
                inner_origin.get(),
            )
            return
        geometry = self.geometry(shard_spec)
        chunk_spec = inner_chunk_spec(self, shard_spec)
        touched = list(dict.fromkeys(coords for coords, *_ in indexer))
        partial = sorted({coords for coords, _, _, complete in indexer if not complete})
        inner = self._get_inner_pipeline(shard_spec)

        def merge(existing: Mapping[tuple[int, ...], Any]) -> dict[tuple[int, ...], Any]:
            # Runs in a worker thread (under the shard's lock when chunks merge):
            # the inner codecs' asynchronous path gets an event loop of its own.
            shard_dict: dict[tuple[int, ...], Any] = dict.fromkeys(touched)
            shard_dict.update(existing)
            asyncio.run(inner.write(
                [
                    (ShardingByteSetter(shard_dict, coords), chunk_spec, chunk_sel, out_sel,
                     complete)
                    for coords, chunk_sel, out_sel, complete in indexer
                ],
                shard_array,
            ))
            return {coords: shard_dict.get(coords) for coords in touched}

        await asyncio.to_thread(
            writer.update_chunks, target, self, geometry, self.shard_layout, partial, merge
        )


def bind_layout(
    codecs: tuple[Codec, ...], shard_layout: str, metadata: ArrayV3Metadata
) -> tuple[Codec, ...]:
    """``codecs`` with the array's sharding codec writing in ``shard_layout``.

    Raises
    ------
    ShardLayoutError
        When the layout is unknown or cannot keep its promise for this chain
        (:func:`layout_refusal`), or ``fixed-slot`` is asked for inner codecs whose
        encoded size has no bound.
    """
    if shard_layout not in LAYOUTS:
        raise ShardLayoutError(f"shard_layout must be one of {LAYOUTS}, got {shard_layout!r}")
    chain = CodecChain.of(codecs)
    refusal = layout_refusal(chain, shard_layout)
    if refusal is not None:
        raise ShardLayoutError(refusal)
    assert chain.sharding is not None
    bound = LayoutShardingCodec.from_codec(chain.sharding, shard_layout)
    if shard_layout == "fixed-slot":
        spec = chain.filtered_spec(stored_spec_of(metadata))
        slot_bound(bound.codecs, inner_chunk_spec(bound, spec))
    return (*chain.array_array, bound, *chain.bytes_bytes)


def layout_refusal(chain: CodecChain, shard_layout: str) -> str | None:
    """Why ``shard_layout`` cannot write an array with codecs ``chain``, with the fix;
    None when it can."""
    if chain.sharding is None:
        return (
            f"shard_layout={shard_layout!r} needs a sharded array (sharding_indexed as its "
            f"serializer); this one's codecs are {chain.names()}"
        )
    if chain.bytes_bytes:
        return (
            f"shard_layout={shard_layout!r}: {chain.outer_names()} after sharding_indexed "
            "encode each shard whole, so its inner chunks cannot be written in place "
            "(every write would rewrite the shard and lose concurrent writers' chunks); "
            "create the array with compressors=None, or put the compressors inside the "
            "ShardingCodec (codecs=[BytesCodec(), ZstdCodec()]), or use shards= instead "
            "of serializer=ShardingCodec(...)"
        )
    filters = chain.local_filters()
    if filters is not None:
        return f"shard_layout={shard_layout!r}: {filters}"
    return None


def recover_array(array: Any) -> int:
    """Roll back interrupted shard writes of ``array``; returns how many were.

    Temporary files of writers provably gone (:func:`dead_writer_temp`:
    this host's, their process no longer running) are deleted with them; a live
    writer's are kept. A no-op for arrays that are not sharded or not on a local
    store. Safe while other writers run: each shard is recovered under its lock.
    """
    try:
        shards = ArrayShards.of(array)
    except ShardLayoutError:
        return 0
    if shards.directory is None or not shards.directory.is_dir():
        return 0
    count = 0
    for dirpath, _, files in os.walk(shards.directory):
        for name in files:
            if TMP_MARK in name and dead_writer_temp(name):
                (Path(dirpath) / name).unlink(missing_ok=True)
                continue
            if not name.endswith(JOURNAL_SUFFIX):
                continue
            shard = Path(dirpath) / name[: -len(JOURNAL_SUFFIX)]
            if not journal_pending(shard):
                continue
            if not shard.exists():
                (Path(dirpath) / name).unlink(missing_ok=True)
                count += 1
                continue
            with locked_shard(shard):
                count += 1  # locked_shard rolled it back (or another writer did)
    return count
