"""Copying an array's write units (shards, or chunks), in threads here or on Dask.

:func:`unit_slices` cuts an array into its write units' regions;
:func:`write_units` copies them from the source into the output, each whole in one
thread (reading source chunks with
:class:`~zarrext.jobs.convert.source_chunks.ChunkObjectReader` and writing shards
with :class:`~zarrext.jobs.convert.shards.ShardWriter` where they apply), or in
batches on a Dask cluster (:func:`copy_units_on_worker`), whose workers reopen the
arrays from their descriptions (:func:`source_ref`, :func:`output_ref`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrext.jobs import cluster
from zarrext.jobs.convert.plans import Layout, Target
from zarrext.jobs.convert.shards import ShardWriter
from zarrext.jobs.convert.source_chunks import ChunkObjectReader, UndecodableChunk
from zarrext.jobs.store_refs import ArrayRef, StoreRef, array_ref

if TYPE_CHECKING:
    from zarrext.jobs.outputs import Destination

__all__ = [
    "OutputUnitsRef",
    "copy_units_on_worker",
    "output_ref",
    "refuse_zip_output",
    "source_ref",
    "spread",
    "unit_slices",
    "write_units",
]

def unit_slices(shape: Sequence[int], unit: Sequence[int]) -> list[tuple[slice, ...]]:
    """The regions of an array's write units (shards, or chunks), in C order."""
    import itertools

    starts = itertools.product(*(range(0, n, u) for n, u in zip(shape, unit, strict=True)))
    return [
        tuple(slice(s, min(s + u, n)) for s, u, n in zip(start, unit, shape, strict=True))
        for start in starts
    ]


def spread[T](items: Sequence[T], n: int) -> list[T]:
    """Up to ``n`` items spread over ``items`` (first and last included)."""
    if len(items) <= n:
        return list(items)
    step = (len(items) - 1) / (n - 1) if n > 1 else 0
    return [items[round(i * step)] for i in range(n)]


def _copy_unit(src: Any, dst: Any, region: tuple[slice, ...], measure: bool,
               reader: ChunkObjectReader | None = None,
               writer: ShardWriter | None = None,
               storable: Any = None) -> float:
    """Copy one write unit; the worst error read back from ``dst`` (with ``measure``).

    A value ``dst``'s filters would not give back within their plan (a quantized
    copy whose source changed since its scan) is refused before anything of the
    unit is written, naming the source (:class:`~zarrext.errors.UnstorableValueError`).
    Idempotent: a unit written again gets the same bytes.
    """
    from zarrext.codecs.filter_roundtrip import measured_error
    from zarrext.codecs.quantized_writes import array_label

    # chunk to chunk: no unit of values to check (quantizing filters) or measure
    if not measure and storable is None and reader is not None and writer is not None:
        try:
            if writer.write_chunks(region, reader):
                return 0.0
        except UndecodableChunk:
            pass  # the region path below raises the error naming the chunk
    data = reader.read(region) if reader is not None else None
    if data is None:
        data = np.asarray(src[region])
    if not data.dtype.isnative:  # a format 2 '>f8': filters (cast_value) take native values
        data = data.astype(data.dtype.newbyteorder("="))
    if storable is not None:
        storable.refuse(data, array_label(str(src.store_path)))
    if writer is None or not writer.write(region, data):
        dst[region] = data
    return measured_error(data, np.asarray(dst[region])) if measure else 0.0


@dataclass(frozen=True)
class OutputUnitsRef:
    """The output array as a Dask worker reopens it to write write units.

    Its store's description and path, its ``zarr.json`` (on an object store it is
    not written until the end: :class:`~zarrext.jobs.outputs.MetadataLastStore`),
    and the runtime settings zarrext writes it with (decision, shard layout).
    """

    store: StoreRef
    path: str
    metadata: bytes
    decision: Any = None
    shard_layout: Layout = None

    def open(self) -> Any:
        import zarr
        from zarr.core.buffer import default_buffer_prototype

        from zarrext.api import with_runtime
        from zarrext.jobs.outputs import MetadataLastStore

        key = f"{self.path}/zarr.json" if self.path else "zarr.json"
        document = default_buffer_prototype().buffer.from_bytes(self.metadata)
        store = MetadataLastStore(self.store.open("r+"), pending={key: document})
        array = zarr.open_array(store, path=self.path, mode="r+")
        return with_runtime(array, decision=self.decision, shard_layout=self.shard_layout)


def _described(store: Any, what: str, job_name: str) -> StoreRef:
    """A store's description for Dask workers; one line when it has none, or when it
    is a writable icechunk session (whose commits only this process makes)."""
    from zarrext.jobs.outputs import MetadataLastStore
    from zarrext.jobs.store_refs import worker_ref
    from zarrext.jobs.transactions import is_session_store
    from zarrext.stores import StoreOpenError

    inner: Any = store.wrapped if isinstance(store, MetadataLastStore) else store
    if is_session_store(inner) and not inner.session.read_only:
        raise StoreOpenError(
            f"{job_name} on a Dask cluster: the {what} is in a writable icechunk session; "
            f"{job_name} into a repository without the client (or --scheduler)"
        )
    return worker_ref(store, job_name, what)


def refuse_zip_output(destination: Destination, job_name: str) -> None:
    """Refuse a Dask cluster's job into a ``destination`` only this process can write."""
    from zarrext.stores import StoreOpenError

    if destination.only_this_process:
        raise StoreOpenError(
            f"{job_name} on a Dask cluster: the output is a zip archive, which only this "
            "process can write; give a directory or URL, or leave out the client"
        )


def source_ref(src: Any, job_name: str = "convert") -> ArrayRef:
    """The source array as a Dask worker reopens it (read-only; zarrext's pipeline for
    a format 3 array, with its runtime codecs); ``job_name`` names the job in errors."""
    ref = array_ref(src, "r") if src.metadata.zarr_format == 3 else None
    store = _described(src.store_path.store, "source", job_name)
    if ref is None:
        return ArrayRef(store, src.store_path.path, "r")
    return ArrayRef(store, ref.path, "r", codecs=ref.codecs)


def output_ref(dst: Any, target: Target, job_name: str = "convert") -> OutputUnitsRef:
    from zarr.core.buffer import default_buffer_prototype

    document = dst.metadata.to_buffer_dict(default_buffer_prototype())["zarr.json"]
    return OutputUnitsRef(
        _described(dst.store_path.store, "output", job_name), dst.store_path.path,
        document.to_bytes(),
        target.kwargs.get("decision"), target.kwargs.get("shard_layout"),
    )


def copy_units_on_worker(
    source: ArrayRef,
    output: OutputUnitsRef,
    measure: bool,
    threads: int,
    batch: list[tuple[slice, ...]],
) -> tuple[int, float]:
    """One Dask task: copy ``batch``'s write units; the worst error read back.

    Idempotent (each region is whole write units of the output): a task rerun after
    its worker died writes the same bytes again.
    """
    from zarrext.codecs.quantized_writes import StorableValues

    src = source.open()
    if src.metadata.zarr_format == 2:  # a damaged chunk named, as in this process
        from zarrext.pipeline.format2 import format_2_reader

        src = format_2_reader(src)
    dst = output.open()
    storable = StorableValues.of_metadata(dst.metadata)
    worst = 0.0
    for each in cluster.on_threads(
        lambda r: _copy_unit(src, dst, r, measure, storable=storable), batch, threads
    ):
        worst = max(worst, each)
    return len(batch), worst


def _write_unit(array: Any) -> tuple[int, ...]:
    return tuple(array.shards or array.chunks)


def write_units(
    src: Any,
    dst: Any,
    regions: Sequence[tuple[slice, ...]],
    *,
    measure: bool = False,
    progress: Callable[[int, int], None] | None = None,
    client: Any = None,
    on_workers: tuple[ArrayRef, OutputUnitsRef] | None = None,
    job_name: str = "convert",
    where: str = "",
    unit: str = "write unit",
) -> float:
    """Copy ``regions`` of ``src`` into ``dst``, zarr's ``async.concurrency`` at once.

    Each region is one of ``dst``'s write units, written whole by one thread: memory
    is about a unit's values per thread (per process). With a Dask ``client``, the
    regions run in batches (:func:`zarrext.jobs.cluster.batches`), one task each,
    on the workers, which reopen the arrays from ``on_workers`` (:func:`source_ref`,
    :func:`output_ref`): memory is then about ``async.concurrency`` units per
    worker. Returns the worst error read back (with ``measure``; else 0). An error
    or Ctrl-C cancels the units not started, and gets the note ``"{job_name} stopped
    in {where} after {done} of {total} {unit}s"``.
    """
    from zarrext.codecs.quantized_writes import StorableValues
    from zarrext.pipeline.codec_threads import codec_workers

    reader = writer = None
    threads = cluster.concurrency()
    if client is None:
        reader = ChunkObjectReader.of(src, _write_unit(dst))
        writer = ShardWriter.of(dst)
        # A unit's thread that encodes its shard itself keeps a core busy: more of
        # them than codec threads only share the cores (and each holds a shard),
        # 10-25 % slower here than as many as the codec threads.
        threads = cluster.concurrency() if writer is None else codec_workers()
    storable = StorableValues.of_metadata(dst.metadata)
    job: cluster.Pass[tuple[slice, ...], float] = cluster.Pass(
        local=lambda region: _copy_unit(src, dst, region, measure, reader, writer, storable),
        remote=(copy_units_on_worker, (*on_workers, measure)) if on_workers else None,
        combine=max, start=0.0, threads=threads, what=f"{job_name} on a Dask cluster",
        stopped=f"{job_name} stopped in {where}" if where else f"{job_name} stopped",
        unit=unit,
    )
    return cluster.run_pass(job, regions, client=client, progress=progress)
