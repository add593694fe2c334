"""Running the passes of a quantized copy over an array's blocks, here or on Dask workers.

A block is a shard (or, in an array without shards, a chunk). :func:`scan` is the
first pass: the finite range of the source and which infinities occur in it.
:func:`copy_block` (in a thread here) and :func:`copy_on_worker` (in a Dask task)
write blocks into the output and measure the error read back: the second pass.
:func:`run_blocks` runs either pass over the blocks, on threads or in batches on a
Dask client, reporting progress and cancelling the blocks not started on an error.
On a cluster each task reopens the source and the output from their descriptions
(:func:`described`, :class:`OutputRef`).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrext._text import counted
from zarrext.codecs.filter_roundtrip import measured_error
from zarrext.jobs import cluster

if TYPE_CHECKING:
    from zarrext.jobs.store_refs import ArrayRef, StoreRef

__all__ = ["Progress"]

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: ``phase`` is ``"scan"`` or ``"copy"``."""


def block_slices(shape: tuple[int, ...], block: tuple[int, ...]) -> list[tuple[slice, ...]]:
    ranges = [range(0, n, b) for n, b in zip(shape, block, strict=True)]
    return [
        tuple(slice(i, min(i + b, n)) for i, b, n in zip(start, block, shape, strict=True))
        for start in itertools.product(*ranges)
    ]


@dataclass(frozen=True)
class _Range:
    """The finite range of some blocks, and which infinities occur in them."""

    lo: float = math.inf
    hi: float = -math.inf
    posinf: bool = False
    neginf: bool = False

    def __or__(self, other: _Range) -> _Range:
        return _Range(
            min(self.lo, other.lo), max(self.hi, other.hi),
            self.posinf or other.posinf, self.neginf or other.neginf,
        )

    def plan_arguments(self) -> dict[str, Any]:
        lo, hi = (self.lo, self.hi) if self.lo <= self.hi else (0.0, 0.0)
        return {"value_range": (lo, hi), "posinf": self.posinf, "neginf": self.neginf}


def _scan_block(src: Any, sl: tuple[slice, ...]) -> _Range:
    data = np.asarray(src[sl])
    finite = data[np.isfinite(data)]
    return _Range(
        float(finite.min()) if finite.size else math.inf,
        float(finite.max()) if finite.size else -math.inf,
        bool(np.any(data == np.inf)),
        bool(np.any(data == -np.inf)),
    )


def copy_block(src: Any, dst: Any, sl: tuple[slice, ...]) -> float:
    """Write one block of ``src`` into ``dst``; the worst error read back from ``dst``.

    A value ``dst`` would not give back as itself (the source changed since the
    scan) is refused before the block is written
    (:class:`~zarrext.errors.UnstorableValueError`). Idempotent: a block written
    again gets the same bytes.
    """
    from zarrext.codecs.quantized_writes import StorableValues, array_label

    data = np.asarray(src[sl])
    storable = StorableValues.of_metadata(dst.metadata)
    if storable is not None:
        storable.refuse(data, array_label(str(src.store_path)))
    dst[sl] = data
    return measured_error(data, np.asarray(dst[sl]))


@dataclass(frozen=True)
class OutputRef:
    """The output array as a Dask worker reopens it: its store's description, its
    path, and its ``zarr.json`` (on an object store it is not written until the end)."""

    store: StoreRef
    path: str
    metadata: bytes

    def open(self) -> Any:
        import zarr
        from zarr.core.buffer import default_buffer_prototype

        from zarrext.jobs.outputs import MetadataLastStore

        key = f"{self.path}/zarr.json" if self.path else "zarr.json"
        document = default_buffer_prototype().buffer.from_bytes(self.metadata)
        store = MetadataLastStore(self.store.open("r+"), pending={key: document})
        return zarr.open_array(store, path=self.path, mode="r+")


def described(array: Any, what: str) -> StoreRef:
    """``array``'s store described for quantize's Dask workers."""
    from zarrext.jobs.store_refs import worker_ref

    return worker_ref(array.store_path.store, "quantize", what)


def _scan_on_worker(
    source: ArrayRef, threads: int, batch: list[tuple[slice, ...]]
) -> tuple[int, _Range]:
    """One Dask task: the range of ``batch``'s blocks of the source."""
    from zarrext.api import with_runtime

    src = with_runtime(source.open())
    found = _Range()
    for each in cluster.on_threads(lambda sl: _scan_block(src, sl), batch, threads):
        found |= each
    return len(batch), found


def copy_on_worker(
    source: ArrayRef, output: OutputRef, threads: int, batch: list[tuple[slice, ...]]
) -> tuple[int, float]:
    """One Dask task: write ``batch``'s blocks quantized; the worst error read back.

    Idempotent (each block is its own chunks or shard): a task rerun after its
    worker died writes the same bytes again.
    """
    from zarrext.api import with_runtime

    src = with_runtime(source.open())
    dst = output.open()
    worst = 0.0
    for each in cluster.on_threads(lambda sl: copy_block(src, dst, sl), batch, threads):
        worst = max(worst, each)
    return len(batch), worst


def scan(
    src: Any,
    blocks: list[tuple[slice, ...]],
    progress: Progress | None,
    client: Any,
    source_ref: ArrayRef | None,
) -> _Range:
    """The finite range of ``src`` and which infinities occur (the first pass)."""
    return run_blocks(
        "scan", lambda sl: _scan_block(src, sl), (_scan_on_worker, (source_ref,)), blocks,
        client=client, progress=progress, combine=operator.or_, start=_Range(),
    )


def run_blocks[R](
    phase: str,
    local: Callable[[tuple[slice, ...]], R],
    remote: tuple[Callable[..., tuple[int, R]], tuple[Any, ...]] | None,
    blocks: list[tuple[slice, ...]],
    *,
    client: Any,
    progress: Progress | None,
    combine: Callable[[R, R], R],
    start: R,
    stopped: str | None = None,
) -> R:
    """Run a phase over ``blocks``: on threads here, or on ``client`` in batches.

    Blocks in flight: zarr's ``async.concurrency`` per process. ``progress(phase,
    done, total)`` after each block (here) or batch (on a cluster), in this thread.
    An error or Ctrl-C cancels the blocks not started and, with ``stopped``, gets
    the note ``"{stopped} after {done} of {total} blocks"``.
    """
    total = len(blocks)
    result = start
    done = 0
    threads = cluster.concurrency()
    batches: Iterator[tuple[int, R]]
    closers: list[object] = []
    if client is not None:
        assert remote is not None
        function, args = remote
        batches = cluster.on_client(
            client, function, cluster.batches(blocks), *args, threads,
            what="quantize on a Dask cluster",
        )
    else:
        each = cluster.on_threads(local, blocks, min(threads, total))
        batches = ((1, r) for r in each)
        closers.append(each)
    closers.insert(0, batches)
    try:
        for n, found in batches:
            result = combine(result, found)
            done += n
            if progress is not None:
                progress(phase, done, total)
    except BaseException as e:
        if stopped is not None:
            e.add_note(f"{stopped} after {done} of {counted(total, 'block')}")
        raise
    finally:
        for generator in closers:  # blocks not started are cancelled, not run
            close = getattr(generator, "close", None)
            if close is not None:
                close()
    return result
