"""Write a Dask array into a sharded array, one task per group of inner chunks.

Every Dask block must cover whole inner chunks, so tasks never share an inner
chunk; tasks that share a shard are serialized only around the shard's index
(see :mod:`zarrext.sharding.writer`), on threads, processes or cluster workers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore

from zarrext.codecs.conditional import ConditionalCodec
from zarrext.decisions import Decision
from zarrext.sharding.layout import LayoutShardingCodec, ShardLayoutError, shards_of

__all__ = ["write_dask"]


@dataclass(frozen=True)
class _ArrayRef:
    """What a task needs to reopen the target array (picklable, unlike its codecs)."""

    root: str
    path: str
    shard_layout: str | None
    decision: Decision | None

    def open(self) -> zarr.Array:
        from zarrext.api import with_runtime

        array = zarr.open_array(LocalStore(self.root), path=self.path, mode="r+")
        return with_runtime(array, decision=self.decision, shard_layout=self.shard_layout)


def _runtime_of(array: zarr.Array) -> tuple[str | None, Decision | None]:
    layout = None
    decision = None
    for codec in getattr(array.metadata, "codecs", ()):
        if isinstance(codec, LayoutShardingCodec):
            layout = codec.shard_layout
        for inner in getattr(codec, "codecs", ()):
            if isinstance(inner, ConditionalCodec):
                decision = inner.decision
    return layout, decision


def _write_block(ref: _ArrayRef, block: np.ndarray, region: tuple[slice, ...]) -> int:
    ref.open()[region] = block
    return int(block.nbytes)


def _check_aligned(
    chunks: tuple[tuple[int, ...], ...], inner: tuple[int, ...], shape: tuple[int, ...]
) -> None:
    for axis, (sizes, step, extent) in enumerate(zip(chunks, inner, shape, strict=True)):
        edges = np.cumsum((0, *sizes))
        bad = [int(e) for e in edges[1:-1] if e % step]
        if bad or edges[-1] != extent:
            raise ShardLayoutError(
                f"write_dask: Dask chunks along axis {axis} end at {bad or [int(edges[-1])]}, "
                f"not on inner-chunk boundaries (multiples of {step}); rechunk the Dask array "
                f"to multiples of the inner chunk shape {inner}"
            )


def write_dask(
    source: Any,
    array: zarr.Array,
    *,
    client: Any = None,
    scheduler: str = "threads",
) -> int:
    """Store a chunk-aligned Dask array into a sharded zarr array, in place.

    Parameters
    ----------
    source : dask.array.Array
        Same shape as ``array``; every block boundary on an inner-chunk boundary.
    array : zarr.Array
        Target, from :func:`zarrext.open_array` / :func:`zarrext.create_array` with a
        ``shard_layout`` (usually ``"fixed-slot"``), in a local directory store.
    client : dask.distributed.Client, optional
        Run the tasks on this cluster; else Dask's local ``scheduler``.
    scheduler : str
        Local scheduler when no client is given (``"threads"`` or ``"processes"``).

    Returns
    -------
    int
        Bytes written (uncompressed).
    """
    import dask

    shards = shards_of(array)
    if source.shape != array.shape:
        raise ShardLayoutError(
            f"write_dask: source shape {source.shape} differs from the array's {array.shape}"
        )
    _check_aligned(source.chunks, shards.codec.chunk_shape, array.shape)
    store_path = array._async_array.store_path
    if not isinstance(store_path.store, LocalStore):
        raise ShardLayoutError("write_dask writes into arrays in a local directory store")
    layout, decision = _runtime_of(array)
    ref = _ArrayRef(str(store_path.store.root), store_path.path, layout, decision)
    blocks = source.to_delayed()
    starts = [np.cumsum((0, *c))[:-1] for c in source.chunks]
    tasks = []
    for idx in itertools.product(*(range(n) for n in blocks.shape)):
        region = tuple(
            slice(int(starts[a][i]), int(starts[a][i]) + source.chunks[a][i])
            for a, i in enumerate(idx)
        )
        tasks.append(dask.delayed(_write_block)(ref, blocks[idx], region))
    if client is not None:
        results = client.gather(client.compute(tasks))
    else:
        results = dask.compute(*tasks, scheduler=scheduler)
    return int(sum(results))
