"""Run a whole-store job object by object: on local threads or a Dask cluster.

A job is split into batches of store objects (chunks or shards; never one object
in two batches). Locally, batches run on a thread pool; on a ``dask.distributed``
client, each batch is one task that reopens the array from an
:class:`~zarrext.jobs.store_refs.ArrayRef` and runs its objects on threads of its own.
Results come back in the calling thread as batches finish, so progress moves from
the first object to the last.

How many objects are in flight: zarr's ``async.concurrency`` (default 10) per
process, the same number zarr-python keeps requests in flight with. On an object
store that hides the latency of each request behind the others'.

In an icechunk repository (an array in a writable session's store), each task
writes through a fork of the session of its own (``session.fork()``, pickled to the
worker and back with the task's changes); once every task has finished, the forks
are merged into the session, which the job's caller commits once
(:func:`zarrext.jobs.transactions.transaction`). A task that fails merges nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import zarr

from zarrext._extras import needs
from zarrext._text import counted
from zarrext.jobs.store_refs import ArrayRef, forked, writable_session_of

__all__ = ["Pass", "batches", "concurrency", "on_client", "on_threads", "run_pass"]

T = TypeVar("T")
R = TypeVar("R")

TASKS = 64
"""Batches a job is split into (at most): enough for progress to move steadily and
for a lost worker to cost a small part of the job."""


def concurrency() -> int:
    """Objects one process works on at once: zarr's ``async.concurrency``."""
    return max(1, int(zarr.config.get("async.concurrency") or 10))


def batches[T](items: Sequence[T], tasks: int = TASKS) -> list[list[T]]:
    """``items`` in at most ``tasks`` consecutive batches of equal size (the last shorter)."""
    size = max(1, -(-len(items) // max(1, tasks)))
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def on_threads[T, R](fn: Callable[[T], R], items: Iterable[T], threads: int) -> Iterator[R]:
    """``fn`` over ``items`` on ``threads`` threads; results in order, as they come."""
    with ThreadPoolExecutor(max(1, threads)) as pool:
        yield from pool.map(fn, items)


def on_client[R, T](
    client: Any, fn: Callable[..., R], work: Iterable[list[T]], *args: Any, what: str
) -> Iterator[R]:
    """``fn(*args, batch)`` as one Dask task per batch; results as tasks complete.

    A worker that dies mid-task has its task rerun elsewhere (the scheduler's
    ``allowed-failures``): ``fn`` must be idempotent.

    When ``args[0]`` is an :class:`~zarrext.jobs.store_refs.ArrayRef` in a writable
    icechunk session, each task gets it on a fork of the session
    (:func:`~zarrext.jobs.store_refs.forked`) and the forks are merged into the session
    after the last result (nothing is merged if a task fails or the caller stops
    early); the caller commits.
    """
    with needs("dask", what):
        from dask.distributed import as_completed

    session = writable_session_of(args[0]) if args and isinstance(args[0], ArrayRef) else None
    if session is None:
        futures = [client.submit(fn, *args, batch, pure=False) for batch in work]
    else:
        futures = [
            client.submit(_in_fork, fn, forked(args[0]), *args[1:], batch, pure=False)
            for batch in work
        ]
    forks = []
    try:
        for future in as_completed(futures):
            result = future.result()
            if session is not None:
                fork, result = result
                forks.append(fork)
            yield result
    finally:
        for future in futures:  # a failed job leaves no tasks running on the cluster
            future.cancel()
    if session is not None and forks:
        session.merge(*forks)


def _in_fork[R](fn: Callable[..., R], ref: ArrayRef, *args: Any) -> tuple[Any, R]:
    """One task in a fork: ``fn(ref, *args)``, then the fork with what it wrote."""
    result = fn(ref, *args)
    return ref.store.session, result


@dataclass(frozen=True)
class Pass[T, R]:
    """A pass of a whole-store job over regions of an array, as :func:`run_pass` runs it.

    Attributes
    ----------
    local : callable
        ``local(region)`` in a thread of this process: the region's result.
    remote : tuple, optional
        ``(fn, args)``: on a Dask client, ``fn(*args, threads, batch)`` as one task
        per batch of regions, returning ``(regions done, result)``; idempotent.
    combine : callable
        Folds two results into one (``max``, ``operator.or_``...).
    start : object
        The result of no region.
    threads : int, optional
        Threads of the local pass (default zarr's ``async.concurrency``).
    what : str
        The job, in the error said when Dask is missing (``"convert on a Dask cluster"``).
    stopped : str, optional
        With it, an error or Ctrl-C gets the note ``"{stopped} after {done} of {total}
        {unit}s"``.
    unit : str
        What a region is called in that note (``"block"``, ``"write unit"``).
    """

    local: Callable[[T], R]
    combine: Callable[[R, R], R]
    start: R
    remote: tuple[Callable[..., tuple[int, R]], tuple[Any, ...]] | None = None
    threads: int | None = None
    what: str = "a job on a Dask cluster"
    stopped: str | None = None
    unit: str = "region"


def run_pass[T, R](
    job: Pass[T, R],
    regions: Sequence[T],
    *,
    client: Any = None,
    progress: Callable[[int, int], None] | None = None,
) -> R:
    """Run ``job`` over ``regions``: on threads here, or on ``client`` in batches.

    Here, ``job.threads`` regions in flight (default zarr's ``async.concurrency``),
    the results folded in this thread as they come; on a client, one task per batch
    (:func:`batches`). ``progress(done, total)`` after each region (here) or batch (on
    a cluster), in this thread. An error or Ctrl-C cancels the regions not started
    (and the tasks on the cluster).
    """
    total = len(regions)
    result = job.start
    done = 0
    running: Iterator[tuple[int, R]]
    closers: list[Iterator[Any]] = []
    if client is not None:
        if job.remote is None:
            raise ValueError(f"{job.what}: this pass runs only here, without a client")
        fn, args = job.remote
        running = on_client(client, fn, batches(list(regions)), *args, concurrency(),
                            what=job.what)
    else:
        threads = job.threads if job.threads is not None else concurrency()
        each = on_threads(job.local, regions, max(1, min(threads, total)))
        closers.append(each)
        running = ((1, r) for r in each)
    try:
        for n, found in running:
            result = job.combine(result, found)
            done += n
            if progress is not None:
                progress(done, total)
    except BaseException as e:
        if job.stopped is not None:
            e.add_note(f"{job.stopped} after {done} of {counted(total, job.unit)}")
        raise
    finally:
        for generator in (running, *closers):  # regions not started are cancelled
            close = getattr(generator, "close", None)
            if close is not None:
                close()
    return result
