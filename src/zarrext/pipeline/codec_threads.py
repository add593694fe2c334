"""The codec threads: one shared pool that runs chunks' codec work in parallel.

:class:`zarrext.pipeline.ZarrextCodecPipeline` runs a chunk's whole job (fetch,
decode and scatter; or merge, encode and store) as one task in these threads, and
the remote paths (:mod:`zarrext.pipeline.remote`) decode and encode in them: compressors
such as numcodecs' zstd release the GIL, so chunks are worked on in parallel. The
pool has ``codec_pipeline.max_workers`` threads (zarr's config; else
``threading.max_workers``; else one per CPU), and grows when more are asked for.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from zarr.core.config import config

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


def _forget_pool() -> None:
    # A forked child inherits the pool object but none of its threads.
    global _pool, _pool_size, _pool_lock
    _pool, _pool_size, _pool_lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)
