"""The codec pipeline's whole-shard paths: shards of the runtime sharding codec read and
written as one job each, not inner chunk by inner chunk through zarr-python's path.

They apply when the runtime sharding codec stands alone in the chain (no codec around
it) and its inner codecs have a synchronous path:

- a local shard is read whole in a codec thread, under its lock, its inner chunks
  decoded in turn (:func:`reads_local_shards`, :func:`read_local_shard`);
- whole shards of a store without synchronous IO are fetched with one request each and
  decoded in the codec threads (:func:`remote_shards`, :func:`read_remote_shards`,
  through :func:`zarrext.pipeline.remote.read_shards`);
- whole shards written to any store are encoded in the codec threads, each shard's
  inner chunks spread over them, and stored with one ``set`` each: one request to an
  object store, a temporary file renamed over the shard's on local disk
  (:func:`whole_shard_writes`, :func:`write_whole_shards`, :func:`plan_shard`, through
  :func:`zarrext.pipeline.remote.write_shards`).

Each function takes the pipeline (:class:`zarrext.pipeline.ZarrextCodecPipeline`),
known here by what it is asked (:class:`~zarrext.pipeline.shard_protocols.ShardPipeline`),
and calls the sharding codec through
:mod:`zarrext.pipeline.shard_protocols`, so that the pipeline imports this module and
not the reverse.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from zarr.core.chunk_utils import merge_and_encode_chunk

from zarrext._zarr_compat import inner_chunk_spec
from zarrext.codecs.specs import chunk_nbytes
from zarrext.errors import DECODE_ERRORS
from zarrext.pipeline.chunk_io import local_file, store_parts_sync, sync_io
from zarrext.pipeline.codec_threads import codec_pool, codec_workers, run_chunk_jobs
from zarrext.pipeline.shard_protocols import (
    ShardPipeline,
    ShardReading,
    ShardWriting,
    no_decode,
)

if TYPE_CHECKING:
    from zarr.abc.codec import GetResult
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer

    from zarrext.pipeline.shard_protocols import Batch, ShardJobs

__all__ = [
    "plan_shard",
    "read_local_shard",
    "read_remote_shards",
    "reads_local_shards",
    "remote_shards",
    "shard_reader",
    "shard_writer",
    "whole_shard_writes",
    "write_shard_sync",
    "write_whole_shards",
]


def shard_reader(pipeline: ShardPipeline, batch: Batch) -> ShardReading | None:
    """The runtime sharding codec, when ``batch`` reads its shards with no other
    codec around it (the case the whole-shard read paths take); else None."""
    codec = pipeline.array_bytes_codec
    if (
        not batch
        or not isinstance(codec, ShardReading)
        or pipeline.array_array_codecs
        or pipeline.bytes_bytes_codecs
    ):
        return None
    return codec


def reads_local_shards(pipeline: ShardPipeline, batch: Batch) -> bool:
    """Whether ``batch`` reads local shards, each whole shard's read one thread job.

    zarr-python's sharding path decodes a shard's inner chunks as asynchronous
    tasks per shard; with each shard one job in the codec threads (read under
    its lock, inner chunks decoded in turn) two threads keep two shards busy.
    """
    codec = shard_reader(pipeline, batch)
    if codec is None:
        return False
    return local_file(batch[0][0]) is not None and codec.reads_sync(batch[0][1])


def read_local_shard(
    pipeline: ShardPipeline, item: Any, out: NDBuffer, drop_axes: tuple[int, ...]
) -> GetResult:
    """Read the local shard of ``item`` into ``out`` (a job of the codec threads)."""
    byte_getter, shard_spec, selection, out_selection, _ = item
    codec = pipeline.array_bytes_codec
    assert isinstance(codec, ShardReading)
    path = local_file(byte_getter)
    assert path is not None
    into = None
    if not drop_axes and all(isinstance(s, slice) for s in out_selection):
        into = out[out_selection]  # a view: inner chunks decode straight into it
    try:
        shard = codec.read_local_sync(path, selection, shard_spec, into=into)
    except DECODE_ERRORS as e:
        pipeline.raise_decode_error(e, byte_getter)
    if shard is into is not None:
        return {"status": "present"}
    if shard is None:
        out[out_selection] = shard_spec.fill_value
        return {"status": "missing"}
    if drop_axes:
        shard = shard.squeeze(axis=drop_axes)
    out[out_selection] = shard
    return {"status": "present"}


def remote_shards(pipeline: ShardPipeline, batch: Batch) -> tuple[Batch, Batch] | None:
    """``batch`` split into whole shards and the rest, when it reads shards of the
    runtime sharding codec from a store without synchronous IO (else None).

    Whole shards take :func:`zarrext.pipeline.remote.read_shards`; parts of shards keep
    zarr-python's path (an index request, then the inner chunks' byte ranges).
    """
    codec = shard_reader(pipeline, batch)
    if (
        codec is None
        or sync_io(batch[0][0], write=False)
        or not codec.reads_sync(batch[0][1])
    ):
        return None
    return _whole_and_rest(batch)


def read_remote_shards(
    pipeline: ShardPipeline,
    whole: Batch,
    out: NDBuffer,
    drop_axes: tuple[int, ...],
    *,
    min_parallel_bytes: int,
) -> Awaitable[tuple[GetResult, ...]]:
    """The reads of the whole shards ``whole`` into ``out``, each fetched with one
    request and decoded in the codec threads; shards whose inner chunks are
    smaller than ``min_parallel_bytes`` (decoded) are each decoded in one job."""
    from zarrext.pipeline.remote import read_shards

    codec: Any = pipeline.array_bytes_codec
    workers = codec_workers()
    small = bool(whole) and chunk_nbytes(inner_chunk_spec(codec, whole[0][1])) < (
        min_parallel_bytes
    )
    return read_shards(
        whole, [pipeline.context_of(item) for item in whole], out, drop_axes,
        codec=codec, groups=1 if small else workers, pool=codec_pool(workers),
        on_error=pipeline.raise_decode_error,
    )


def shard_writer(pipeline: ShardPipeline, shard_spec: ArraySpec) -> ShardWriting | None:
    """The runtime sharding codec, when it writes whole shards of ``shard_spec`` with
    no other codec around it and zarr-python's layout (the case the whole-shard
    write paths take); else None."""
    codec = pipeline.array_bytes_codec
    if (
        not isinstance(codec, ShardWriting)
        or pipeline.array_array_codecs
        or pipeline.bytes_bytes_codecs
        or not codec.writes_sync(shard_spec)
    ):
        return None
    return codec


def whole_shard_writes(pipeline: ShardPipeline, batch: Batch) -> tuple[Batch, Batch] | None:
    """``batch`` split into whole shards and the rest, when it writes shards of the
    runtime sharding codec with zarr-python's layout, to any store (else None).

    Whole shards take :func:`write_whole_shards`; writes of part of a shard keep
    zarr-python's path (the stored shard read, merged, written).
    """
    if not batch or shard_writer(pipeline, batch[0][1]) is None:
        return None
    return _whole_and_rest(batch)


def _whole_and_rest(batch: Batch) -> tuple[Batch, Batch]:
    """``batch``'s whole shards (zarr's "complete chunk" flag), and the others."""
    return [item for item in batch if item[4]], [item for item in batch if not item[4]]


def write_whole_shards(
    pipeline: ShardPipeline,
    whole: Batch,
    value: NDBuffer,
    drop_axes: tuple[int, ...],
    *,
    min_parallel_bytes: int,
) -> Awaitable[Any]:
    """The writes of the whole shards ``whole`` from ``value``: each shard encoded in
    the codec threads and stored with one ``set``
    (:func:`zarrext.pipeline.remote.write_shards`), as zarr-python's sharding codec
    stores it (which encodes the inner chunks as tasks of the event loop, a shard
    at a time). A shard smaller than ``min_parallel_bytes`` (decoded) is encoded
    in one job, a larger one by all the codec threads; small shards of a store
    with synchronous IO are each written whole by one job
    (:func:`write_shard_sync`), the threads taking the next shard when done."""
    from zarrext.pipeline.remote import write_shards

    workers = codec_workers()
    small = bool(whole) and chunk_nbytes(whole[0][1]) < min_parallel_bytes
    if small and sync_io(whole[0][0], write=True):
        return run_chunk_jobs(
            functools.partial(write_shard_sync, pipeline), whole, value, drop_axes,
            contexts=[pipeline.context_of(item) for item in whole],
        )
    return write_shards(
        whole, [pipeline.context_of(item) for item in whole],
        functools.partial(plan_shard, pipeline, value=value, drop_axes=drop_axes,
                          groups=1 if small else workers),
        codec_pool(workers),
    )


def write_shard_sync(
    pipeline: ShardPipeline, item: Any, value: NDBuffer, drop_axes: tuple[int, ...]
) -> None:
    """Write the whole shard of ``item`` from ``value`` in the calling thread (in the
    shard's context), with its store's synchronous IO: its inner chunks encoded in
    turn, its parts written (:func:`~zarrext.pipeline.chunk_io.store_parts_sync`),
    or the shard deleted when only fill values are left."""
    byte_setter = item[0]
    planned = plan_shard(pipeline, item, value=value, drop_axes=drop_axes, groups=1)
    if planned is None:
        byte_setter.delete_sync()
        return
    jobs, lay_out = planned
    for job in jobs:
        job()
    lay_out(functools.partial(store_parts_sync, byte_setter))


def _reach(selector: Any, length: int) -> int:
    """How far along an axis of ``length`` a whole shard's selection reaches: an
    edge shard's selection ends at the array's edge."""
    if isinstance(selector, numbers.Integral):
        return int(selector) + 1
    if isinstance(selector, slice) and selector.stop is not None:
        return min(int(selector.stop), length)
    return length


def plan_shard(
    pipeline: ShardPipeline,
    item: Any,
    *,
    value: NDBuffer,
    drop_axes: tuple[int, ...],
    groups: int,
) -> ShardJobs | None:
    """A whole shard's encoding as jobs for the codec threads and the step that
    lays it out (:meth:`~zarrext.pipeline.shard_protocols.ShardWriting.encode_jobs`), or
    None when the shard is only fill values (not stored), in a codec thread.
    The shard's values are taken from ``value`` and checked for emptiness as
    zarr's ``merge_and_encode_chunk`` does: its encoder here plans, encodes
    nothing."""
    _, shard_spec, chunk_selection, out_selection, is_complete = item
    codec = pipeline.array_bytes_codec
    assert isinstance(codec, ShardWriting)
    planned: list[ShardJobs] = []

    within = tuple(_reach(s, n) for s, n in zip(chunk_selection, shard_spec.shape, strict=True))

    def plan(shard_array: NDBuffer, spec: ArraySpec) -> Buffer | None:
        planned.append(codec.encode_jobs(shard_array, spec, groups=groups, within=within))
        return spec.prototype.buffer.create_zero_length()  # "not empty"

    stored = merge_and_encode_chunk(
        None,
        value,
        chunk_spec=shard_spec,
        chunk_selection=chunk_selection,
        out_selection=out_selection,
        is_complete=is_complete,
        drop_axes=drop_axes,
        decode=no_decode,
        encode=plan,
    )
    return None if stored is None else planned[0]
