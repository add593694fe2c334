"""Write a Dask array into a sharded array, one task per group of inner chunks.

With a shard layout (a local directory), every Dask block must cover whole inner
chunks, so tasks never share an inner chunk; tasks that share a shard are
serialized only around the shard's index (see :mod:`zarrext.sharding.writer`), on
threads, processes or cluster workers. Without one (any store, object stores
included), zarr writes whole shards: every block must cover whole shards, so no
two tasks ever write one object.

Tasks carry a picklable description of the target (:mod:`zarrext.jobs.store_refs`),
never a live store or client; each process reopens the array once per call.
"""

from __future__ import annotations

import functools
import itertools
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore

from zarrext._extras import needs
from zarrext._zarr_compat import async_array_of
from zarrext.api import with_runtime
from zarrext.codecs.chain import CodecChain
from zarrext.codecs.decisions import Decision
from zarrext.codecs.quantized_writes import StorableValues, array_label
from zarrext.jobs.store_refs import ArrayRef, store_ref
from zarrext.sharding.array_shards import ArrayShards
from zarrext.sharding.geometry import ShardLayoutError
from zarrext.sharding.layout import LayoutShardingCodec
from zarrext.stores import open_job_array

__all__ = ["write_dask"]


@dataclass(frozen=True)
class _ArrayRef:
    """What a task needs to reopen the target array (picklable, unlike its codecs).

    Equal (and hashed) by ``token`` alone, one per :func:`write_dask` call: each
    process opens the array once per call (:func:`_opened`), not once per task.
    """

    target: ArrayRef = field(compare=False)
    shard_layout: str | None = field(compare=False)
    decision: Decision | None = field(compare=False)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def open(self) -> zarr.Array:
        return _opened(self)


_OPEN_LOCK = threading.Lock()


def _opened(ref: _ArrayRef) -> zarr.Array:
    with _OPEN_LOCK:  # threads of one worker: the first opens, the others wait for it
        return _open_once(ref)


@functools.lru_cache(maxsize=4)
def _open_once(ref: _ArrayRef) -> zarr.Array:
    # Opening (read zarr.json, parse metadata, build the codec pipeline, set the
    # runtime) took about as long as writing a 64x64 float32 inner chunk; a
    # worker reuses the array for every task of the same write_dask call.
    array = zarr.open_array(ref.target.store.open("r+"), path=ref.target.path, mode="r+")
    return with_runtime(array, decision=ref.decision, shard_layout=ref.shard_layout)


def _runtime_of(chain: CodecChain) -> tuple[str | None, Decision | None]:
    layout = None
    if isinstance(chain.sharding, LayoutShardingCodec):
        layout = chain.sharding.shard_layout
    placement = chain.conditional()
    return layout, None if placement is None else placement.codec.decision


def _write_unit(shards: ArrayShards, layout: str | None) -> tuple[tuple[int, ...], str]:
    """The blocks a task may write alone, in array axes, and their name.

    With a layout, tasks write disjoint inner chunks of a shard in place; without
    one, zarr rewrites whole shards, so two tasks in one shard would overwrite each
    other's chunks: a task must cover whole shards.
    """
    if layout is None:
        return tuple(shards.stored_spec.shape), "shard"
    # a transpose before the sharding codec: inner chunks are in its axes
    return shards.chain.to_array_axes(tuple(shards.codec.chunk_shape)), "inner-chunk"


def _write_block(ref: _ArrayRef, block: np.ndarray, region: tuple[slice, ...]) -> int:
    ref.open()[region] = block
    return int(block.nbytes)


def _check_aligned(
    chunks: tuple[tuple[int, ...], ...], unit: tuple[int, ...], shape: tuple[int, ...],
    name: str = "inner-chunk",
) -> None:
    for axis, (sizes, step, extent) in enumerate(zip(chunks, unit, shape, strict=True)):
        edges = np.cumsum((0, *sizes))
        bad = [int(e) for e in edges[1:-1] if e % step]
        if bad or edges[-1] != extent:
            raise ShardLayoutError(
                f"write_dask: Dask chunks along axis {axis} end at {bad or [int(edges[-1])]}, "
                f"not on {name} boundaries (multiples of {step}); rechunk the Dask array "
                f"to multiples of the {name} shape {unit}"
            )


def write_dask(
    source: Any,
    array: zarr.Array,
    *,
    client: Any = None,
    scheduler: str = "threads",
    storage_options: Mapping[str, Any] | None = None,
) -> int:
    """Store a chunk-aligned Dask array into a sharded zarr array, in place.

    Parameters
    ----------
    source : dask.array.Array or array-like
        Same shape as ``array``; a NumPy (or other) array is split into blocks of the
        array's write unit (inner chunks with a layout, else shards). Every block
        boundary on an inner-chunk boundary (with a layout; in the array's axes,
        through a transpose) or on a shard boundary (without one). Misaligned blocks
        are refused before any write.
    array : zarr.Array, str or StoreLike
        Target (a path or URL is opened for writing, with ``storage_options``),
        from :func:`zarrext.open_array` / :func:`zarrext.create_array`:
        with a ``shard_layout`` (usually ``"fixed-slot"``) in a local directory
        store, blocks of whole inner chunks; without one, in any store a worker
        can reopen (a local directory, an object-store URL), blocks of whole shards:
        one task per block, and no two tasks on one shard object.
    client : dask.distributed.Client, optional
        Run the tasks on this cluster; else Dask's local ``scheduler``.
    scheduler : str
        Local scheduler when no client is given (``"threads"`` or ``"processes"``).

    Notes
    -----
    Prefer ``"threads"`` locally: encoding (zstd, crc32c) and file writes release
    the GIL, and threads share the source blocks. Dask's ``"processes"`` scheduler
    starts a new pool of spawned interpreters for every call, and each must import
    numpy, dask, zarr and zarrext (and the calling script's module) before its
    first task; every block is also pickled to a worker. On a loaded 2-core machine,
    16 MB (2048x2048 float32, 64x64 inner chunks, fixed-slot, conditional zstd):
    spawning 2 workers and importing took 2.8 s of a 5.6 s write against 0.9 s
    with threads (64 tasks); 10.0 s against 4.6 s with 1024 tasks. Each process
    opens the target array once per call, not once per task (that reopening was
    half of each task's time: 1024 tasks took 9.0 s with threads before). To pay
    the start-up once for many calls, reuse a pool
    (``dask.config.set(pool=ProcessPoolExecutor(...))``) or a distributed ``client``.

    A ``dask.distributed`` nanny starts its workers with
    ``MALLOC_TRIM_THRESHOLD_=65536`` (``distributed.nanny.pre-spawn-environ``), so
    that workers hand freed memory back to the system. glibc then serves every
    buffer over 128 KiB as fresh memory, faulted in page by page, which can double
    a sharded write's CPU (``benchmarks/bench_remote.py --rows ingest`` shows it).
    zarrext reuses its codec threads' memory for large inner chunks
    (:class:`zarrext.pipeline.scratch.Staging`), which halves those page faults; zstd's own
    buffers remain. Whether to trade the setting's memory behaviour for that CPU is
    the cluster owner's choice: set ``distributed.nanny.pre-spawn-environ`` before
    the cluster starts.

    An array quantized by ``scale_offset`` + ``cast_value`` gets its source checked
    first (:mod:`zarrext.codecs.quantized_writes`): a finite value it would not give back
    as itself (a reserved code, outside the integer type, beyond the planned bound)
    is refused before any task writes. For a Dask source that is one more pass
    over its inputs (each block computed twice, the first time only to be
    checked); persist an expensive source first.

    Returns
    -------
    int
        Bytes written (uncompressed).

    Raises
    ------
    UnstorableValueError
        A value of ``source`` the quantized array would not give back as itself.
    """
    with needs("dask", "zarrext.write_dask"):
        import dask
        import dask.array as da

    array = open_job_array(array, writes="write_dask", storage_options=storage_options)
    shards = ArrayShards.of(array)
    in_memory = None
    if not isinstance(source, da.Array):
        source = in_memory = np.asarray(source)
    if source.shape != array.shape:
        raise ShardLayoutError(
            f"write_dask: source shape {source.shape} differs from the array's {array.shape}"
        )
    layout, decision = _runtime_of(shards.chain)
    unit, name = _write_unit(shards, layout)
    if not isinstance(source, da.Array):  # one block per write unit
        source = da.from_array(source, chunks=unit)
    _check_aligned(source.chunks, unit, array.shape, name)
    store_path = async_array_of(array).store_path
    if layout is not None and not isinstance(store_path.store, LocalStore):
        raise ShardLayoutError(
            f"write_dask with shard_layout={layout!r} writes inner chunks in place, in a "
            f"local directory store; this one is a {type(store_path.store).__name__} "
            "(open the array without shard_layout: whole shards per task)"
        )
    storable = StorableValues.of_metadata(array.metadata)
    if storable is not None:  # refused before any task writes (tasks check their block too)
        where = array_label(str(store_path))
        if in_memory is not None:
            storable.refuse(in_memory, where)
        else:
            storable.refuse_dask(source, where)
    ref = _ArrayRef(ArrayRef(store_ref(store_path.store), store_path.path), layout, decision)
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
