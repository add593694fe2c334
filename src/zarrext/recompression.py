"""Compress later: rewrite every stored chunk with freshly decided conditional masks.

The spec's "write fast, compress later" workflow. Only chunks that are stored are
touched; ``zarr.json`` is never written. Work is split by store object (a chunk,
or a whole shard), run on a thread pool by default or on a Dask cluster when a
``dask.distributed`` client is given.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import zarr
from rich.progress import Progress
from rich.table import Table
from zarr.storage import LocalStore

from zarrext.api import with_runtime
from zarrext.decisions import DecisionLike
from zarrext.inspection import ArrayInventory, inventory, storage_block, stored_chunk_keys

__all__ = ["RecompressReport", "recompress"]


@dataclass
class RecompressReport:
    """What :func:`recompress` did to one array.

    Attributes
    ----------
    path : str
    chunks : int
        Stored chunks rewritten (inner chunks, for a sharded array).
    objects : int
        Store objects rewritten (chunks, or shards).
    bytes_before, bytes_after : int
        Stored bytes of those chunks before and after.
    masks_before, masks_after : Counter
        How many chunks used each conditional mask.
    seconds : float
    """

    path: str
    chunks: int
    objects: int
    bytes_before: int
    bytes_after: int
    masks_before: Counter[int] = field(default_factory=Counter)
    masks_after: Counter[int] = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def ratio(self) -> float:
        """``bytes_before / bytes_after``."""
        return self.bytes_before / self.bytes_after if self.bytes_after else float("inf")

    def table(self) -> Table:
        """A rich table of the report."""
        table = Table(title=f"recompress {self.path or '/'}")
        table.add_column("")
        table.add_column("before", justify="right")
        table.add_column("after", justify="right")
        table.add_row("chunks", str(self.chunks), str(self.chunks))
        table.add_row("bytes", f"{self.bytes_before:,}", f"{self.bytes_after:,}")
        masks = sorted(set(self.masks_before) | set(self.masks_after))
        for mask in masks:
            table.add_row(
                f"mask {mask:#06b}",
                str(self.masks_before.get(mask, 0)),
                str(self.masks_after.get(mask, 0)),
            )
        table.caption = f"{self.ratio:.2f}x smaller in {self.seconds:.2f} s"
        return table


def _region(
    coords: tuple[int, ...], block: tuple[int, ...], shape: tuple[int, ...]
) -> tuple[slice, ...]:
    return tuple(
        slice(c * b, min((c + 1) * b, s)) for c, b, s in zip(coords, block, shape, strict=True)
    )


def _rewrite(array: zarr.Array, units: Sequence[tuple[int, ...]]) -> int:
    """Read and write back each unit (chunk or shard) of ``array``; returns the count."""
    block, _ = storage_block(array.metadata)  # type: ignore[arg-type]
    for coords in units:
        region = _region(coords, block, array.shape)
        array[region] = array[region]
    return len(units)


def _runtime_array(
    array: zarr.Array, decision: DecisionLike, trial_encode: bool | None
) -> zarr.Array:
    # Unsharded: keep chunks that hold only the fill value stored, so the set of
    # stored chunks does not change. Sharded: inner chunks absent from a shard read
    # as fill and must stay absent, which write_empty_chunks=False gives.
    write_empty = storage_block(array.metadata)[1] is None  # type: ignore[arg-type]
    return with_runtime(
        array.with_config({"write_empty_chunks": write_empty}),
        decision=decision,
        trial_encode=trial_encode,
    )


def _rewrite_on_worker(
    root: str, path: str, decision: DecisionLike, trial_encode: bool | None,
    units: list[tuple[int, ...]],
) -> int:
    array = zarr.open_array(LocalStore(root), path=path, mode="r+")
    return _rewrite(_runtime_array(array, decision, trial_encode), units)


def _batches(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def recompress(
    array: zarr.Array | Any,
    decision: DecisionLike = "compress_if_smaller",
    trial_encode: bool | None = None,
    *,
    client: Any = None,
    workers: int | None = None,
    progress: bool = True,
    on_progress: Callable[[int], None] | None = None,
) -> RecompressReport:
    """Rewrite every stored chunk of ``array`` in place with a new conditional decision.

    Parameters
    ----------
    array : zarr.Array or StoreLike
        The array (a store or path is opened with ``zarr.open_array``).
    decision : Decision, str, int or callable
        The decision for the array's conditional codec(s).
    trial_encode : bool, optional
        Trial encoding for a decision function.
    client : dask.distributed.Client, optional
        Run on this Dask cluster (the array must be in a local directory the
        workers can reach).
    workers : int, optional
        Threads for the local pool (default: ``min(8, number of objects)``).
    progress : bool
        Show a progress bar.
    on_progress : callable, optional
        Called with the number of store objects finished, after each batch.

    Returns
    -------
    RecompressReport
    """
    if not isinstance(array, zarr.Array):
        array = zarr.open_array(array, mode="r+")
    start_time = time.perf_counter()
    before = inventory(array)
    if before.placement is None:
        raise ValueError(f"array {array.path!r} has no conditional codec to recompress")
    units = [coords for coords, _ in stored_chunk_keys(array)]
    runtime = _runtime_array(array, decision, trial_encode)
    batch_size = max(1, len(units) // 64)
    batches = list(_batches(units, batch_size))

    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(f"recompress {array.path or '/'}", total=len(units))

        def advance(n: int) -> None:
            bar.advance(task, n)
            if on_progress is not None:
                on_progress(n)

        if client is not None:
            store = array.store_path.store
            if not isinstance(store, LocalStore):
                raise ValueError(
                    "recompress on a Dask cluster needs an array in a local directory "
                    f"(LocalStore); this one is in {type(store).__name__}"
                )
            from dask.distributed import as_completed

            futures = [
                client.submit(
                    _rewrite_on_worker, str(store.root), array.path, decision, trial_encode,
                    batch, pure=False,
                )
                for batch in batches
            ]
            for future in as_completed(futures):
                advance(future.result())
        else:
            n_workers = workers or max(1, min(8, len(batches)))
            with ThreadPoolExecutor(n_workers) as pool:
                for done in pool.map(lambda b: _rewrite(runtime, b), batches):
                    advance(done)

    after: ArrayInventory = inventory(array)
    return RecompressReport(
        path=array.path,
        chunks=len(after.chunks),
        objects=len(units),
        bytes_before=before.stored_bytes,
        bytes_after=after.stored_bytes,
        masks_before=before.mask_counts,
        masks_after=after.mask_counts,
        seconds=time.perf_counter() - start_time,
    )
