"""Copying one floating-point array quantized (behind ``zarrext quantize``).

``zarrext quantize`` is ``zarrext convert``'s quantizing form with quantize's own
defaults: the source's chunks and shards kept, plain zstd, and a copy larger than
its source refused. :func:`quantized_target` scans an array, plans its filters and
makes the conversion's :class:`~zarrext.jobs.convert.plans.Target`; the conversion
engine (:func:`zarrext.jobs.convert.running.run_conversion`) writes it, reading every
block back to measure the error, and publishes it.

:func:`copy_quantized` refuses, before scanning any data, an output over its input or
one that exists (without ``overwrite``); builds the output under a temporary name and
moves it into place only when it is complete and not larger than its source
(:func:`zarrext.jobs.larger.is_larger`; unless ``allow_larger``), refreshing the
consolidated metadata of the groups that hold the new output so that readers
trusting it (xarray) see it, and never a mix of the old and the new
(:meth:`zarrext.jobs.outputs.Destination.staged`). :func:`quantized_target` also serves
:mod:`~zarrext.jobs.quantize.groups`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import zarr

from zarrext import errors
from zarrext.jobs.convert.plans import Target
from zarrext.jobs.convert.reports import ConvertReport
from zarrext.jobs.convert.scanning import Progress, quantized, read_fill_value
from zarrext.jobs.convert.sources import source_parts
from zarrext.jobs.larger import refuse_larger
from zarrext.jobs.ome import OmeUpgrade
from zarrext.quantization.planning import QuantizationError, QuantizationPlan, float_dtype

__all__ = [
    "CopyReport",
    "LargerOutputError",
    "collecting",
    "copy_quantized",
    "quantized_codecs",
    "quantized_target",
    "source_sharding",
]

class LargerOutputError(QuantizationError, errors.LargerOutputError):
    """The quantized copy would take more bytes than its source: it was not written."""


@dataclass(frozen=True)
class CopyReport:
    """What :func:`copy_quantized` did to one array.

    Attributes
    ----------
    plan : QuantizationPlan
    source_bytes, output_bytes : int
        Bytes of stored chunks (as ``zarrext info`` counts them) of the source and
        the output array: ``zarr.json`` is not counted, nor a shard's index or free space.
    worst_error : float
        Largest ``|output - source|`` over the finite values, read back from the
        output store block by block.
    blocks : int
        Number of blocks copied.
    path : str
        The array's path inside the group copied ("" for a lone array).
    ome_upgrade : OmeUpgrade, optional
        The OME-Zarr metadata upgrade made in the copy of a format 2 group
        (:mod:`zarrext.jobs.ome`), the same in every report of one copy.
    """

    plan: QuantizationPlan
    source_bytes: int
    output_bytes: int
    worst_error: float
    blocks: int
    path: str = ""
    ome_upgrade: OmeUpgrade | None = field(default=None, compare=False)

    @property
    def size_ratio(self) -> float:
        """``source_bytes / output_bytes`` (how many times smaller the output is)."""
        return self.source_bytes / self.output_bytes if self.output_bytes else math.inf


def source_sharding(codecs: Sequence[Any]) -> Any:
    """The ``sharding_indexed`` codec that serializes an array's chunks (its array->bytes
    codec), or None: with ``shards=`` or ``serializer=ShardingCodec(...)``, whatever
    codecs come before or after it."""
    from zarr.abc.codec import ArrayBytesCodec
    from zarr.codecs import ShardingCodec

    for codec in codecs:
        if isinstance(codec, ArrayBytesCodec):
            return codec if isinstance(codec, ShardingCodec) else None
    return None


def quantized_codecs(
    sharding: Any,
    filters: Sequence[Any],
    compressors: Sequence[Any] | None = None,
) -> list[Any]:
    """The codec list of a quantized copy of an array sharded by ``sharding`` (None: not
    sharded): ``filters``, ``bytes`` and ``compressors`` (default zstd) encode each
    (innermost) chunk; each sharding codec keeps its inner chunk shape, index codecs
    and index location, and is the only codec of its level.

    Inside the sharding codec, the filters work on one inner chunk at a time: zarr-python
    reads and writes the inner chunks a selection touches (filters outside it would make
    zarr-python read and write whole shards, and warn so), and so can every reader that
    knows the codecs. Codecs the source has after its sharding codec (which disable
    partial reads as well) are not kept. Such filters need 0.0 encodable with
    zarr-python 3.4.2 (:func:`~zarrext.quantize.plan_quantization`'s ``cover_zero``).
    """
    from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

    if sharding is None:
        chosen = [ZstdCodec()] if compressors is None else list(compressors)
        return [*filters, BytesCodec(), *chosen]
    inner = quantized_codecs(source_sharding(sharding.codecs), filters, compressors)
    return [ShardingCodec(
        chunk_shape=sharding.chunk_shape,
        codecs=inner,
        index_codecs=sharding.index_codecs,
        index_location=sharding.index_location,
    )]


def _layout(
    src: Any, sharding: Any, filters: Sequence[Any], compressors: Sequence[Any] | None
) -> dict[str, Any]:
    """``zarr.create_array``'s arguments for the codecs of ``src``'s quantized copy
    (``sharding``: the source's sharding codec, :func:`source_sharding`, or None)."""
    codecs = quantized_codecs(sharding, filters, compressors)
    if sharding is not None:  # chunks: the shard shape, the source's chunk grid's
        return {"chunks": src.metadata.chunk_grid.chunk_shape, "filters": None,
                "serializer": codecs[0], "compressors": None}
    return {"chunks": src.chunks, "filters": codecs[: len(filters)],
            "serializer": codecs[len(filters)], "compressors": codecs[len(filters) + 1:]}


def quantized_target(
    src: Any,
    path: str,
    *,
    max_abs_error: float,
    progress: Callable[[int, int], None] | None = None,
    client: Any = None,
    compressors: Sequence[Any] | None = None,
) -> Target:
    """Scan ``src``, plan its filters, and the conversion target that stores it quantized.

    The copy keeps ``src``'s chunks and shards: the filters go inside its sharding
    codec, ahead of ``compressors`` (default zstd) on each inner chunk
    (:func:`quantized_codecs`), planned with 0.0 encodable (``cover_zero``) there.
    ``progress(done, total)`` as the scan's blocks finish; with a Dask ``client``
    the scan runs on its workers.

    Raises
    ------
    QuantizationError
        A fill value the filters would not give back (before any value is read), or
        no plan meets the bound.
    """
    sharding = source_sharding(getattr(src.metadata, "codecs", ()))  # format 2: none
    planned = quantized(
        src, max_abs_error, path or "/", progress=progress, client=client,
        cover_zero=sharding is not None,
    )
    kwargs = {
        "shape": tuple(src.shape),
        "dtype": float_dtype(src.dtype),
        "fill_value": read_fill_value(src),
        # no conditional codec in the copy: no decision recorded, the plan instead
        "attributes": planned.attributes,
        "dimension_names": source_parts(src)[3],
        "zarr_format": 3,
        **_layout(src, sharding, planned.filters, compressors),
    }
    return Target(path, src, kwargs, planned)


def collecting(
    copies: list[CopyReport], allow_larger: bool
) -> Callable[[Target, ConvertReport], None]:
    """The check run on each quantized array written, before the output is published:
    its :class:`CopyReport` appended to ``copies``, and a copy larger than its source
    refused (:class:`LargerOutputError`) unless ``allow_larger``."""

    def written(target: Target, report: ConvertReport) -> None:
        quantized = target.quantized
        assert quantized is not None
        assert report.worst_error is not None
        refuse_larger(
            report, allow_larger=allow_larger, copy=f"the quantized copy of {target.path or '/'}",
            detail=f"{quantized.stored_dtype} codes for max_abs_error={quantized.max_abs_error!r}",
            remedy="raise the bound", error=LargerOutputError, margin=False,
        )
        copies.append(CopyReport(
            plan=quantized.plan, source_bytes=report.source_bytes,
            output_bytes=report.output_bytes, worst_error=report.worst_error,
            blocks=report.units, path=report.path, ome_upgrade=report.ome_upgrade,
        ))

    return written


def copy_quantized(
    source: Any,
    output: Any,
    *,
    max_abs_error: float,
    overwrite: bool = False,
    allow_larger: bool = False,
    progress: Progress | None = None,
    client: Any = None,
    storage_options: Mapping[str, Any] | None = None,
    output_storage_options: Mapping[str, Any] | None = None,
) -> CopyReport:
    """Copy a floating-point zarr array into a new one stored quantized.

    Two passes over the source, by block (shard, or chunk): the first finds the
    finite range and which of NaN/+Inf/-Inf occur, then the filters are planned
    for that range (:func:`~zarrext.quantization.planning.plan_quantization`); the
    second writes each block and reads it back from the output store to measure the
    error. Blocks are read
    and written many at a time (zarr's ``async.concurrency``), each output block
    once.

    Parameters
    ----------
    source, output : store-like
        Paths, URLs or stores of the source array and of the array to create.
    max_abs_error : float
        The bound every finite value must meet.
    overwrite : bool
        Replace an existing Zarr array at ``output`` (a path that is not a Zarr
        node is never replaced, nor an output on an object store: there a
        replacement could not keep the old output readable until the new one is
        complete, so write to a new prefix instead).
    allow_larger : bool
        Keep a copy whose chunks take more bytes than the source's, beyond the
        margin of :func:`zarrext.jobs.larger.is_larger` (by default it is
        discarded and :class:`LargerOutputError` raised).
    progress : callable, optional
        Called as ``progress(phase, done, total)`` as blocks finish; ``phase`` is
        ``"scan"`` or ``"copy"``.
    client : dask.distributed.Client, optional
        Run both passes on this Dask cluster: one task per batch of blocks (at most
        :data:`zarrext.jobs.cluster.TASKS`), each reopening the source and the output
        from their descriptions (:mod:`zarrext.jobs.store_refs`: a local directory the
        workers reach, or a URL and its options); tasks are idempotent, so a task
        rerun after its worker died writes the same bytes. The error bound is
        checked on what the workers read back.
    storage_options : mapping, optional
        For ``source`` and ``output`` given as URLs (endpoint, credentials...).
    output_storage_options : mapping, optional
        For an ``output`` URL whose store wants other options than the source's
        (another endpoint or account); by default ``storage_options``.

    Notes
    -----
    Where the output is built (:meth:`zarrext.jobs.outputs.Destination.staged`): a local
    directory or zip archive under a temporary name, renamed into place at the
    end; a new output on an object store at its final keys, its ``zarr.json``
    written last; in an icechunk session, in place (the commit publishes it).
    If the copy fails or is interrupted, nothing opens at ``output`` and the
    exception carries a note saying how far it got. Groups above ``output`` that
    hold consolidated metadata are consolidated again.

    Raises
    ------
    QuantizationError
        If no plan meets the bound, or a block read back exceeds it.
    LargerOutputError
        If the copy would be larger than the source and not ``allow_larger``.
    OutputConflictError
        If ``output`` is, is inside, or contains ``source``, or exists (without
        ``overwrite``, or on an object store).
    """
    from zarrext.api import readable
    from zarrext.jobs.convert.running import run_conversion
    from zarrext.jobs.convert.sources import open_source
    from zarrext.jobs.outputs import resolve_destination
    from zarrext.stores import refuse_read_only

    out_options = storage_options if output_storage_options is None else output_storage_options
    destination = resolve_destination(output, overwrite=overwrite, storage_options=out_options)
    refuse_read_only(output, "quantize")  # a store or StorePath given read-only
    destination.refuse_overlap(source)
    # Read through zarrext's pipeline: a chunk it cannot decode fails with an error
    # naming the array, the chunk's key and the codec (zarr's names none of them).
    src = open_source(source, storage_options)
    if not isinstance(src, zarr.Array):
        raise ValueError(f"{source} is a group, not an array: quantize it as a group")
    src = readable(src)
    float_dtype(src.dtype)
    scanned = None if progress is None else lambda done, total: progress("scan", done, total)
    copies: list[CopyReport] = []
    run_conversion(
        src,
        lambda: [quantized_target(src, "", max_abs_error=max_abs_error, progress=scanned,
                                  client=client)],
        destination, members={}, overwrite=overwrite, output_storage_options=out_options,
        progress=None if progress is None else lambda _, done, total: progress(
            "copy", done, total),
        client=client, written=collecting(copies, allow_larger), job_name="quantize",
        unit="block",
    )
    return copies[0]
