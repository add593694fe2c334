"""The codec pipeline's paths for stores without synchronous IO (object stores,
fsspec, icechunk): requests on the event loop, codec work in the codec threads;
and whole-shard writes to any store.

:class:`zarrext.pipeline.ZarrextCodecPipeline` runs a chunk's whole job in a codec
thread when the store serves synchronous IO. An object store does not: its
requests are coroutines on zarr's event loop. Here the two are interleaved
instead. Up to ``async.concurrency`` objects (zarr's setting) are in flight at
once, each from its request until its codec work is done, and a request goes out
as soon as one ends:

- :func:`read_chunks`: each chunk fetched, then decoded into the output in a codec
  thread;
- :func:`read_shards`: each whole shard fetched with one request, its index read
  and its inner chunks decoded straight into their place in the output in the
  codec threads (zarr-python's sharding codec decodes a shard into a buffer of its
  own on the event loop's side and copies that into the output there, one shard
  at a time);
- :func:`write_chunks`: each chunk merged and encoded in a codec thread, then
  uploaded with one request (:func:`upload`);
- :func:`write_shards`: each whole shard's inner chunks encoded in up to one job per
  codec thread, the shard laid out once they are done, then uploaded with one
  request. Whole shards of a store with synchronous IO (local disk, memory) take
  this path too, written in a codec thread: zarr-python's sharding codec would
  encode their inner chunks as tasks of the event loop, a shard at a time.

This module knows the pipeline only through the callables it is given, so the
runtime layers go one way (pipeline -> remote).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, NoReturn

from zarr.core.config import config

from zarrext.errors import DECODE_ERRORS
from zarrext.pipeline.chunk_io import joined, store_parts_sync, sync_io
from zarrext.stores import ONE_REQUEST_MAX_BYTES

if TYPE_CHECKING:
    from zarr.abc.codec import GetResult
    from zarr.core.buffer import Buffer, NDBuffer

    from zarrext.pipeline.shard_protocols import KeepShard, ShardJobs


async def upload(byte_setter: Any, value: Buffer) -> None:
    """Store ``value`` under ``byte_setter``'s key: with one request when its store
    is zarr's ``ObjectStore`` (writable, ``set`` not overridden) and the object
    is at most :data:`ONE_REQUEST_MAX_BYTES` (zarrext's own
    :class:`~zarrext.stores.RemoteObjectStore` does so in its ``set``), else through
    ``byte_setter.set``."""
    from zarr.storage import ObjectStore

    store = getattr(byte_setter, "store", None)
    if (
        isinstance(store, ObjectStore)
        and type(store).set is ObjectStore.set
        and not store.read_only
        and len(value) <= ONE_REQUEST_MAX_BYTES
    ):
        import obstore

        await obstore.put_async(
            store.store, byte_setter.path, value.as_buffer_like(), use_multipart=False
        )
        return
    await byte_setter.set(value)


def in_flight_limit() -> int:
    """Most objects in flight at once: zarr's ``async.concurrency`` (at least 1)."""
    return max(1, int(config.get("async.concurrency") or 1))


async def _all_or_cancel(coroutines: Sequence[Any]) -> list[Any]:
    """Await every coroutine as a task; the first error cancels the rest (their
    requests not yet answered) and is raised once they have ended."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return list(await asyncio.gather(*tasks))
    finally:  # failed or cancelled: stop the rest, and collect what they raise
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def read_chunks(
    batch: Sequence[Any],
    contexts: Sequence[contextvars.Context],
    decode: Callable[[Any, Buffer | None], GetResult],
    pool: Executor,
) -> tuple[GetResult, ...]:
    """Read whole chunks: fetch on the event loop, ``decode(item, bytes)`` in the
    codec threads (in the chunk's context), each chunk as soon as its bytes arrive.

    Memory: at most :func:`in_flight_limit` chunks' stored bytes are held at once,
    each from its request until it is decoded into the output.
    """
    loop = asyncio.get_running_loop()
    in_flight = asyncio.Semaphore(in_flight_limit())

    async def one(item: Any, context: contextvars.Context) -> GetResult:
        byte_getter, chunk_spec = item[0], item[1]
        async with in_flight:
            chunk = await byte_getter.get(prototype=chunk_spec.prototype)
            return await loop.run_in_executor(pool, context.run, decode, item, chunk)

    return tuple(await _all_or_cancel(
        [one(item, context) for item, context in zip(batch, contexts, strict=True)]
    ))


async def read_shards(
    batch: Sequence[Any],
    contexts: Sequence[contextvars.Context],
    out: NDBuffer,
    drop_axes: tuple[int, ...],
    *,
    codec: Any,
    groups: int,
    pool: Executor,
    on_error: Callable[[BaseException, Any], NoReturn],
) -> tuple[GetResult, ...]:
    """Read whole shards (each item's selection is its whole shard) of the runtime
    sharding codec ``codec``: one request per shard, then its inner chunks decoded
    in up to ``groups`` jobs in the codec threads, straight into the output where
    the shard's place in it is a view (else into a buffer of the shard's shape,
    copied once in a codec thread).

    Memory: at most :func:`in_flight_limit` shards' stored bytes are held at once,
    each from its request until its last inner chunk is decoded. A decoding error
    goes to ``on_error(error, byte_getter)``, which raises it named.
    """
    loop = asyncio.get_running_loop()
    in_flight = asyncio.Semaphore(in_flight_limit())

    def plan(item: Any, shard_bytes: Buffer) -> tuple[list[Callable[[], None]], Any]:
        byte_getter, shard_spec, selection, out_selection, _ = item
        into = None
        if not drop_axes and all(isinstance(s, slice) for s in out_selection):
            into = out[out_selection]  # a view: inner chunks decode straight into it
        items, target, used_into, sel_shape = codec.shard_out(selection, shard_spec, into)
        where = getattr(byte_getter, "path", None) or "?"
        jobs = codec.decode_jobs(
            shard_bytes, items, shard_spec, target, where=str(where), groups=groups
        )
        return jobs, None if used_into else (target, sel_shape)

    def place(item: Any, target: NDBuffer, sel_shape: tuple[int, ...] | None) -> None:
        shard = target if sel_shape is None else target.reshape(sel_shape)
        if drop_axes:
            shard = shard.squeeze(axis=drop_axes)
        out[item[3]] = shard

    def fill(item: Any) -> None:
        out[item[3]] = item[1].fill_value

    async def one(item: Any, context: contextvars.Context) -> GetResult:
        byte_getter, shard_spec = item[0], item[1]
        async with in_flight:
            shard_bytes = await byte_getter.get(prototype=shard_spec.prototype)
            if shard_bytes is None:
                await loop.run_in_executor(pool, fill, item)
                return {"status": "missing"}
            try:
                jobs, copy = await loop.run_in_executor(
                    pool, context.run, plan, item, shard_bytes
                )
                await asyncio.gather(*(loop.run_in_executor(pool, job) for job in jobs))
            except DECODE_ERRORS as e:
                on_error(e, byte_getter)
            if copy is not None:
                await loop.run_in_executor(pool, place, item, *copy)
            return {"status": "present"}

    return tuple(await _all_or_cancel(
        [one(item, context) for item, context in zip(batch, contexts, strict=True)]
    ))


async def write_chunks(
    batch: Sequence[Any],
    contexts: Sequence[contextvars.Context],
    encode: Callable[[Any, Buffer | None], Buffer | None],
    pool: Executor,
    *,
    encoders: int,
) -> None:
    """Write whole or partial chunks: for each, its stored bytes fetched first when
    the write covers part of it, then ``encode(item, existing)`` (merge and encode)
    in a codec thread in the chunk's context, then the result uploaded (or the
    object deleted when the encoder returns None: a chunk of fill values).

    Memory: at most :func:`in_flight_limit` chunks are between their first request
    and the end of their upload at once, so the bytes held beyond the caller's
    value are bounded by that many times (a chunk's decoded size + its encoded
    size, + its stored size for a partial write), plus what the store keeps of
    each upload in flight (s3fs: a copy of the object) and a small fixed part
    (tasks and requests' bookkeeping): not the array's size. Encoding goes on
    while other chunks upload: a chunk waits only for its own requests.

    At most ``encoders`` chunks (the codec threads' number) are being encoded at
    once, in the batch's order, so that each chunk's upload starts as soon as its
    own encoding ends instead of behind the other chunks in flight.
    """
    loop = asyncio.get_running_loop()
    in_flight = asyncio.Semaphore(in_flight_limit())
    encoding = asyncio.Semaphore(max(1, encoders))

    async def one(item: Any, context: contextvars.Context) -> None:
        byte_setter, chunk_spec, *_, is_complete = item
        async with in_flight:
            existing = None
            if not is_complete:
                existing = await byte_setter.get(prototype=chunk_spec.prototype)
            async with encoding:
                encoded = await loop.run_in_executor(pool, context.run, encode, item, existing)
            await _store(byte_setter, encoded)

    await _all_or_cancel(
        [one(item, context) for item, context in zip(batch, contexts, strict=True)]
    )


async def _store(byte_setter: Any, encoded: Buffer | None) -> None:
    """Upload a chunk's or shard's new bytes; None (only fill values): delete it."""
    if encoded is None:
        await byte_setter.delete()
    else:
        await upload(byte_setter, encoded)


def _joined(parts: list[Buffer] | None) -> Buffer | None:
    """A shard's parts as one new buffer, to upload once its staging is released."""
    return None if parts is None else joined(parts)


def _encoded_and_laid_out(
    job: Callable[[], None], lay_out: Callable[[KeepShard], Buffer | None], keep: KeepShard
) -> Buffer | None:
    job()
    return lay_out(keep)


async def write_shards(
    batch: Sequence[Any],
    contexts: Sequence[contextvars.Context],
    plan: Callable[[Any], ShardJobs | None],
    pool: Executor,
) -> None:
    """Write whole shards: for each, ``plan(item)`` in a codec thread (in the shard's
    context) gives the shard's encoding as ``(jobs, lay_out)`` (None: only fill
    values, the object is deleted); its jobs (its inner chunks, in groups) run at
    once in the codec threads, then ``lay_out`` lays the shard out in one, and
    the result is uploaded with one request (:func:`upload`). In a store with
    synchronous IO the shard is written there instead, in the codec thread, from
    its parts (:func:`zarrext.pipeline.chunk_io.store_parts_sync`: on local disk, a
    temporary file renamed over the shard's, as ``LocalStore.set`` writes it).

    A shard's inner chunks are encoded by all the codec threads, not by one: with
    fewer shards in flight than threads, or shards of uneven cost, no thread
    waits idle for another's whole shard.

    Memory: as :func:`write_chunks`, at most :func:`in_flight_limit` shards are
    between their planning and the end of their upload at once: that many times
    (a shard's decoded size + its encoded inner chunks + the laid-out shard),
    plus the store's copy of each upload in flight. Encoded inner chunks of 128 KiB
    or more are kept in staging segments (:class:`zarrext.pipeline.scratch.Staging`) until
    their shard is laid out; between writes the process keeps at most
    ``SEGMENT_BYTES * 8`` (32 MiB) of them for the next shards.

    Two shards at most are being encoded at once, in the batch's order: one
    shard's jobs already fill the codec threads, and the second keeps them busy
    while the first is laid out. A shard's upload so starts as soon as its own
    encoding ends; with every shard in flight encoding at once, the codec threads'
    queue would hold each shard's layout behind the other shards' inner chunks
    and the uploads would start together at the end.
    """
    loop = asyncio.get_running_loop()
    in_flight = asyncio.Semaphore(in_flight_limit())
    encoding = asyncio.Semaphore(2)
    here = bool(batch) and sync_io(batch[0][0], write=True)

    async def one(item: Any, context: contextvars.Context) -> None:
        byte_setter = item[0]
        async with in_flight:
            async with encoding:
                planned = await loop.run_in_executor(pool, context.run, plan, item)
                if planned is not None:
                    jobs, lay_out = planned
                    keep: KeepShard = (
                        functools.partial(store_parts_sync, byte_setter) if here else _joined
                    )
                    if len(jobs) == 1:  # encoded and laid out in one hand-off
                        encoded = await loop.run_in_executor(
                            pool, _encoded_and_laid_out, jobs[0], lay_out, keep)
                    else:
                        await asyncio.gather(*(loop.run_in_executor(pool, job) for job in jobs))
                        encoded = await loop.run_in_executor(pool, lay_out, keep)
            if planned is None:
                await byte_setter.delete()
            elif not here:
                await _store(byte_setter, encoded)

    await _all_or_cancel(
        [one(item, context) for item, context in zip(batch, contexts, strict=True)]
    )
