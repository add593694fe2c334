"""The codec threads: one shared pool that runs chunks' codec work in parallel.

:class:`zarrext.pipeline.ZarrextCodecPipeline` runs a chunk's whole job (fetch,
decode and scatter; or merge, encode and store) as one task in these threads, and
the remote paths (:mod:`zarrext.pipeline.remote`) decode and encode in them: compressors
such as numcodecs' zstd release the GIL, so chunks are worked on in parallel. The
pool has ``codec_pipeline.max_workers`` threads (zarr's config; else
``threading.max_workers``; else one per CPU), and grows when more are asked for.
:func:`run_chunk_jobs` runs one job per chunk of a batch in them.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from zarr.core.config import config

from zarrext.codecs.specs import chunk_nbytes

_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def codec_workers() -> int:
    """Threads that run codec work: zarr's ``codec_pipeline.max_workers``, else
    ``threading.max_workers``, else one per CPU."""
    for key in ("codec_pipeline.max_workers", "threading.max_workers"):
        value = config.get(key, None)
        if value is not None:
            return max(1, int(value))
    return os.cpu_count() or 1


def codec_pool(workers: int) -> ThreadPoolExecutor:
    """The shared pool of codec threads, grown to at least ``workers`` threads.

    A grown pool replaces the old one without shutting it down: a caller may be
    about to submit to it; it ends once its work is done and nothing refers to it.
    """
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < workers:
            _pool = ThreadPoolExecutor(workers, thread_name_prefix="zarrext-codec")
            _pool_size = workers
        return _pool


async def run_chunk_jobs(
    job: Callable[..., Any],
    batch: Sequence[Any],
    *args: Any,
    contexts: Sequence[contextvars.Context] | None,
    min_parallel_bytes: int = 0,
) -> list[Any]:
    """``job(item, *args)`` for every chunk of ``batch`` (items as zarr's pipeline gets
    them: a chunk's spec second), in the codec threads; the results in ``batch``'s order.

    Each thread takes the next chunk when done with one: no event-loop round
    trip per chunk. The first error stops the taking and is raised. Chunks of
    fewer than ``min_parallel_bytes`` (decoded) run in one thread.

    With ``contexts``, each job runs in its chunk's context; without, in none,
    as ``job(item, *args, caller)`` (``caller`` a copy of the caller's context).
    """
    if contexts is None:
        args = (*args, contextvars.copy_context())
    results: list[Any] = [None] * len(batch)
    todo = iter(range(len(batch)))
    take = threading.Lock()
    failed = threading.Event()

    def worker() -> None:
        while not failed.is_set():
            with take:
                k = next(todo, None)
            if k is None:
                return
            try:
                if contexts is not None:
                    results[k] = contexts[k].run(job, batch[k], *args)
                else:
                    results[k] = job(batch[k], *args)
            except BaseException:
                failed.set()
                raise

    threads = min(codec_workers(), len(batch))
    if batch and chunk_nbytes(batch[0][1]) < min_parallel_bytes:
        threads = 1
    if threads == 1:
        await asyncio.to_thread(worker)
        return results
    loop = asyncio.get_running_loop()
    pool = codec_pool(threads)
    futures = [loop.run_in_executor(pool, worker) for _ in range(threads)]
    try:
        await asyncio.gather(*futures)
    finally:
        failed.set()  # cancelled or failed: the other threads stop taking chunks
    return results


def _forget_pool() -> None:
    # A forked child inherits the pool object but none of its threads.
    global _pool, _pool_size, _pool_lock
    _pool, _pool_size, _pool_lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)
