"""``zarrext.convert``: copying an array or a group into the encoding the user names.

:func:`convert` copies any array or group zarr-python opens (Zarr format 3 or 2)
into Zarr format 3 arrays encoded as asked, and publishes the copy as ``quantize``
publishes its own (:meth:`zarrext.jobs.outputs.Destination.staged`: built under a
temporary name, published last, the groups holding it consolidated again). Three
steps, in this order, so that what cannot be converted is refused before anything
is written:

1. :func:`~zarrext.jobs.convert.targets.plan_targets`: each selected array's
   target, checked (a quantized array's filters planned from a scan of its values);
2. the output's groups and the arrays not selected, copied as they are (format 2
   ones migrated to format 3 metadata: :mod:`zarrext.jobs.convert.groups`);
3. each selected array, one output write unit (shard, or chunk) at a time, read
   from the source as a region (:mod:`zarrext.jobs.convert.units`): memory is
   about a write unit per thread.

Steps 2 and 3 are :func:`~zarrext.jobs.convert.running.run_conversion`. A dry run
encodes a sample of each array's write units in memory instead (:func:`_sampled`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from zarrext.api import readable
from zarrext.codecs.decisions import DecisionLike
from zarrext.jobs.convert.groups import chosen_arrays, group_members
from zarrext.jobs.convert.plans import Encoding, Target
from zarrext.jobs.convert.reports import (
    ArraySelectionError,
    ConvertProgress,
    ConvertReport,
    stored_bytes,
)
from zarrext.jobs.convert.running import run_conversion
from zarrext.jobs.convert.sources import open_source
from zarrext.jobs.convert.targets import plan_targets
from zarrext.jobs.convert.units import spread, unit_slices, write_units

__all__ = ["convert"]


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
    from dataclasses import replace

    import zarr

    from zarrext.jobs.outputs import resolve_destination
    from zarrext.stores import refuse_read_only

    base_encoding = Encoding(
        codecs=codecs, chunks=_shape(chunks),
        shards=shards if shards is False or isinstance(shards, str) else _shape(shards),
        shard_layout=shard_layout, like=like, max_abs_error=max_abs_error,
        decision=decision,
    )
    out_options = storage_options if output_storage_options is None else output_storage_options
    destination = resolve_destination(output, overwrite=overwrite, storage_options=out_options)
    if not dry_run:
        refuse_read_only(output, "convert")
        destination.refuse_overlap(source)
        # before any value is read: planning a quantized array scans it whole
        destination.refuse_taken()
    node = open_source(source, storage_options)
    per_array: dict[str, Encoding] = {}
    if isinstance(node, zarr.Array):
        if arrays:
            raise ArraySelectionError(f"{source} is an array, not a group: it has no arrays "
                                      "to select")
        selected = {"": node}
        members: dict[str, Any] = {}
    else:
        members = group_members(node)
        chosen = chosen_arrays(members, arrays, node.path or str(source))
        selected = {name: members[name] for name in chosen}
    for name in selected:
        per_array[name] = (encodings or {}).get(name, base_encoding)
        if arrays is None and selected[name].dtype.kind != "f":
            # every array of a group, quantizing: the floats; the rest converted exactly
            per_array[name] = replace(per_array[name], max_abs_error=None)
    targets = plan_targets(
        {name: readable(a) for name, a in selected.items()}, per_array,
        output_in_place=dry_run or destination.shard_layouts_in_place,
        storage_options=storage_options, sample=sample if dry_run else None, client=client,
        scan_progress=scan_progress,
    )
    import dataclasses

    from zarrext.jobs.ome import planned_upgrade

    upgrade = planned_upgrade(node, members) if ome_upgrade else None
    if dry_run:
        return [dataclasses.replace(_sampled(t, sample), ome_upgrade=upgrade) for t in targets]
    from zarrext.jobs.larger import refusing_larger

    return run_conversion(
        node, targets, destination, members=members, overwrite=overwrite,
        output_storage_options=out_options, progress=progress, client=client,
        ome_upgrade=upgrade, written=refusing_larger(allow_larger, source),
    )


def _sampled(target: Target, sample: int) -> ConvertReport:
    """A dry run: encode up to ``sample`` write units in memory; the size scaled up."""
    import dataclasses

    from zarr.storage import MemoryStore

    from zarrext.api import create_array

    kwargs = {k: v for k, v in target.kwargs.items() if k != "shard_layout"}
    dst = create_array(MemoryStore(), **kwargs)
    regions = unit_slices(target.kwargs["shape"], target.write_unit)
    picked = spread(regions, sample)
    started = time.perf_counter()
    write_units(readable(target.source), dst, picked, measure=target.quantized is not None)
    seconds = time.perf_counter() - started
    from zarrext.jobs.inspection import inventory

    written = inventory(dst, read_masks=False, list_chunks=False).stored_bytes
    size = sum(_region_size(r) for r in regions)
    sampled = sum(_region_size(r) for r in picked)
    expected = round(written * size / sampled) if sampled else 0
    report = ConvertReport(
        target.path, target.describe(), stored_bytes(target.source), expected, seconds,
        len(picked), len(regions), dry_run=True,
    )
    return dataclasses.replace(report)


def _region_size(region: tuple[slice, ...]) -> int:
    return math.prod(s.stop - s.start for s in region)
