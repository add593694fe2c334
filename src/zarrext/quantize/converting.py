"""``zarrext.convert``: the conversion job with quantization (``max_abs_error``).

The engine is :mod:`zarrext.jobs.convert`; the planner it needs to quantize lives
here, a layer above it, so the public function is assembled here: the engine given
:func:`quantizer`, which scans a float array (:func:`zarrext.quantize.scanning.scan`)
and plans its filters (:func:`~zarrext.quantize.planning.plan_quantization`).
``zarrext quantize`` (:mod:`~zarrext.quantize.copying`) is the same engine with
quantize's defaults: it keeps the source's chunks, shards and plain zstd.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from zarrext.codecs.decisions import DecisionLike
from zarrext.jobs.convert import (
    ConvertProgress,
    ConvertReport,
    Encoding,
    Quantized,
    Quantizer,
)
from zarrext.jobs.convert import convert as _convert
from zarrext.quantize.scanning import quantized

__all__ = ["convert", "quantizer"]


def quantizer(client: Any = None, progress: ConvertProgress | None = None) -> Quantizer:
    """The :data:`~zarrext.jobs.convert.Quantizer` of ``convert``: it scans a float array
    (by its shards, or chunks; on a Dask ``client``'s workers when given) and plans
    its filters (:func:`zarrext.quantize.scanning.quantized`); ``progress(label,
    done, total)`` as the scan's blocks finish."""

    def planned(src: Any, max_abs_error: float, label: str, sharded: bool,
                regions: Sequence[tuple[slice, ...]] | None) -> Quantized:
        def scanned(done: int, total: int) -> None:
            if progress is not None:
                progress(label, done, total)

        return quantized(src, max_abs_error, label, cover_zero=sharded, client=client,
                         job_name="convert", regions=regions, progress=scanned)

    return planned


def _shape(value: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if value is None else tuple(int(n) for n in value)


def convert(
    source: Any,
    output: Any,
    *,
    codecs: Sequence[Mapping[str, Any]] | None = None,
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | Literal[False, "auto"] | None = None,
    shard_layout: Literal["fixed-slot", "append"] | None = None,
    like: Any = None,
    max_abs_error: float | None = None,
    decision: DecisionLike = None,
    arrays: Sequence[str] | None = None,
    encodings: Mapping[str, Encoding] | None = None,
    overwrite: bool = False,
    dry_run: bool = False,
    sample: int = 3,
    progress: ConvertProgress | None = None,
    scan_progress: ConvertProgress | None = None,
    storage_options: Mapping[str, Any] | None = None,
    output_storage_options: Mapping[str, Any] | None = None,
    client: Any = None,
    ome_upgrade: bool = True,
    allow_larger: bool = False,
) -> list[ConvertReport]:
    """Copy an array or a group into zarrext's encodings (Zarr format 3).

    Any array or group zarr-python opens, Zarr format 3 or 2, is copied to
    ``output``: the arrays selected (``arrays``; default every one) re-encoded, each
    output write unit (shard, or chunk) read from the source as a region; the rest
    (groups, their attributes, other arrays' chunks) copied as it is, format 2
    metadata migrated to format 3 by zarr's ``migrate_to_v3``. Attributes (OME-Zarr's
    ``ome``/``multiscales``, CF's), dimension names (format 2: xarray's
    ``_ARRAY_DIMENSIONS``) and fill values are kept (a format 2 group's OME-Zarr 0.4
    metadata upgraded to 0.5, see ``ome_upgrade``); consolidated metadata is
    written again. The output is published as ``zarrext quantize`` publishes its copy
    (:meth:`zarrext.jobs.outputs.Destination.staged`).

    Parameters
    ----------
    source, output : str, path or store
        Paths (a ``.zip`` too), URLs or stores.
    codecs : list of dict, optional
        The codec chain inside a chunk (the shard's inner chunks when sharded) as
        zarr's codec JSON. Default: the source's array->bytes codec, then
        ``conditional([shuffle, zstd])`` deciding ``compress_if_smaller`` (recorded
        in the attributes, as :func:`zarrext.create_array` records it).
    chunks, shards : tuple of int, optional
        The chunk and shard shapes (``shards=False``: no shards). Default: the
        source's. A shard shape is fitted to each array: clipped to the array
        (its extent rounded up to whole chunks), so that each level of a pyramid
        gets shards no larger than itself; ``shards="auto"`` gives each array
        shards grown from its chunks towards 64 MiB of decoded values
        (:mod:`zarrext.jobs.shard_shapes`).
    shard_layout : {"fixed-slot", "append"}, optional
        The shards' layout (a local directory only); ``None``: dense.
    like : array, path or URL, optional
        Take chunks, shards, codecs, decision and layout from this array.
    max_abs_error : float, optional
        Quantize the selected arrays (floating-point) within this bound, as
        ``zarrext quantize`` plans it (scale_offset + cast_value), then encode
        them as asked; every value is read back and checked.
    decision : Decision, str, int or callable, optional
        The decision for the ``conditional`` codecs, as :func:`zarrext.create_array`
        takes it (a built-in's spelling, e.g. ``"smallest"``, is recorded in the
        attributes). Default: ``like``'s recorded decision, else
        ``compress_if_smaller``.
    arrays : list of str, optional
        With a group: the arrays to convert (paths in the group).
    encodings : mapping of str to Encoding, optional
        Per array (by path), an encoding instead of the one the options above give.
    overwrite : bool
        Replace an existing output (locally, in one step; never on an object store).
    dry_run : bool
        Write nothing: encode ``sample`` write units of each array (spread over it)
        in memory and report the expected size and what each array becomes; a
        quantized array is planned from those units only (its whole range is read
        only by the conversion itself).
    sample : int
        How many write units of each array a dry run encodes (default 3).
    progress : callable, optional
        ``progress(array_path, done, total)`` as write units finish.
    scan_progress : callable, optional
        ``scan_progress(array_path, done, total)`` as a quantized array's first pass
        (its value range, read before anything is written) reads its blocks; the
        path is ``"/"`` for a lone array.
    storage_options, output_storage_options : mapping, optional
        For URLs: the source's (and the output's, unless ``output_storage_options``).
    client : dask.distributed.Client, optional
        Write each array's write units on this Dask cluster: one task per batch of
        them (at most :data:`zarrext.jobs.cluster.TASKS` per array), each reopening
        the source and the output from their descriptions
        (:mod:`zarrext.jobs.store_refs`: a local directory the workers reach, or a
        URL and its options; not a ``.zip``). Memory per worker: about zarr's
        ``async.concurrency`` write units. Tasks are idempotent, so a task rerun
        after its worker died writes the same bytes. A quantized array's scan runs
        on the cluster too.
    ome_upgrade : bool
        A format 2 group's OME-Zarr 0.4 metadata (valid in format 2 only) becomes
        OME-Zarr 0.5 in the format 3 copy: under the ``ome`` key, with
        ``dimension_names`` from the axes (:mod:`zarrext.jobs.ome`); each report's
        ``ome_upgrade`` says what changed. ``False`` keeps the attributes as they are.
    allow_larger : bool
        Keep a copy whose chunks take more bytes than its source's (by default the
        output is discarded and :class:`~zarrext.errors.LargerOutputError` raised,
        as ``zarrext quantize`` does).

    Returns
    -------
    list of ConvertReport
        One per array converted: bytes before and after, ratio, time.

    Raises
    ------
    ConversionError
        An array cannot be converted as asked (a dtype a codec refuses, a chunk grid
        a layout refuses...), named with the reason; nothing is written.
    LargerOutputError
        An array's copy takes more bytes of chunks than its source (without
        ``allow_larger``): nothing is published.
    OutputConflictError
        As ``zarrext quantize``: the output exists (without ``overwrite``, or on an
        object store), or is the source, inside it or around it.
    """
    encoding = Encoding(
        codecs=codecs, chunks=_shape(chunks),
        shards=shards if shards is False or isinstance(shards, str) else _shape(shards),
        shard_layout=shard_layout, like=like, max_abs_error=max_abs_error,
        decision=decision,
    )
    return _convert(
        source, output, encoding=encoding, encodings=encodings, arrays=arrays,
        overwrite=overwrite, dry_run=dry_run, sample=sample, progress=progress,
        quantizer=quantizer(client, scan_progress),
        storage_options=storage_options, output_storage_options=output_storage_options,
        client=client, ome_upgrade=ome_upgrade, allow_larger=allow_larger,
    )
