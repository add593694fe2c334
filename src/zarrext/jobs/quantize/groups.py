"""Copying a group quantized (behind ``zarrext quantize`` given a group).

:func:`floating_arrays` chooses the arrays to quantize; :func:`copy_group_quantized`
converts each of them as :func:`~zarrext.jobs.quantize.copying.copy_quantized` converts
one, copies every other object of the group as it is, and consolidates again the
consolidated metadata in the copy and in the groups that hold it: the conversion
engine's group copy (:func:`zarrext.jobs.convert.running.run_conversion`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import zarr

from zarrext.jobs.convert.groups import group_members
from zarrext.jobs.convert.plans import Target
from zarrext.jobs.convert.sources import source_parts
from zarrext.jobs.quantize.copying import CopyReport, collecting, quantized_target
from zarrext.quantization.planning import float_dtype

__all__ = ["copy_group_quantized", "floating_arrays"]

def _dimension_coordinate(name: str, array: Any) -> bool:
    """A 1-D array named after its own dimension (xarray's ``x``, ``time``, ``lat``)."""
    dims = source_parts(array)[3]  # format 2: xarray's _ARRAY_DIMENSIONS
    return dims is not None and tuple(dims) == (name.rsplit("/", 1)[-1],)


def floating_arrays(
    group: Any, names: Sequence[str] | None = None, *, excluding: str | None = None
) -> list[Any]:
    """The arrays of ``group`` that quantize copies: the ones named, or every float one.

    ``names`` are paths relative to the group (``"temp"``, ``"sub/temp"``); the
    members at and under ``excluding`` (a path relative to the group) are left out. Without
    names, every floating-point array but dimension coordinates (1-D arrays named
    after their dimension, whose values label positions and are not measurements)
    is chosen; name one to quantize it too.

    Raises
    ------
    ValueError
        If a name is not an array of the group, or not of a floating-point type, or
        (without names) the group holds no floating-point array.
    """
    arrays = {
        name: member
        for name, member in group_members(group).items()
        if isinstance(member, zarr.Array)
        and not (excluding and (name == excluding or name.startswith(f"{excluding}/")))
    }
    where = group.path or str(group.store)
    if names is None:
        chosen = [
            a for name, a in sorted(arrays.items())
            if a.dtype.kind == "f" and not _dimension_coordinate(name, a)
        ]
        if not chosen:
            raise ValueError(f"group {where} holds no floating-point array to quantize")
        return chosen
    chosen = []
    for name in dict.fromkeys(n.strip("/") for n in names):
        if name not in arrays:
            known = ", ".join(sorted(arrays)) or "none"
            raise ValueError(f"no array {name!r} in group {where} (its arrays: {known})")
        try:
            float_dtype(arrays[name].dtype)
        except TypeError as e:
            raise ValueError(f"array {name!r}: {e}") from None
        chosen.append(arrays[name])
    return chosen


def copy_group_quantized(
    source: Any,
    output: Any,
    *,
    max_abs_error: float,
    arrays: Sequence[str] | None = None,
    overwrite: bool = False,
    allow_larger: bool = False,
    progress: Callable[[str, str, int, int], None] | None = None,
    client: Any = None,
    storage_options: Mapping[str, Any] | None = None,
    output_storage_options: Mapping[str, Any] | None = None,
) -> list[CopyReport]:
    """Copy a zarr group with its floating-point arrays stored quantized.

    Every array named in ``arrays`` (paths relative to the group; default: every
    floating-point array) is copied as :func:`copy_quantized` copies one; every
    other object of the group (metadata, other arrays' chunks) is copied byte for
    byte. Consolidated metadata, in the copy and in the groups holding ``output``,
    is consolidated again. In an icechunk session the output may be inside the
    source group (``StorePath(session.store, "q")`` for the session's root group):
    the copy then holds every member but the output itself.

    Parameters
    ----------
    source, output : store-like
        The group to copy, and where to create the copy.
    max_abs_error, overwrite, allow_larger, client, storage_options, output_storage_options
        As for :func:`copy_quantized`; the bound applies to every array quantized.
    arrays : sequence of str, optional
        Which arrays to quantize (:func:`floating_arrays`).
    progress : callable, optional
        ``progress(array_path, phase, done, total)`` as blocks finish.

    Returns
    -------
    list of CopyReport
        One per array quantized, in the order of ``arrays`` (else sorted by path).

    Raises
    ------
    ValueError
        As :func:`floating_arrays` and :func:`copy_quantized` raise; nothing is written.
    """
    from zarrext.api import readable
    from zarrext.jobs.convert.running import run_conversion
    from zarrext.jobs.convert.sources import open_source
    from zarrext.jobs.ome import planned_upgrade
    from zarrext.jobs.outputs import resolve_destination
    from zarrext.stores import refuse_read_only

    out_options = storage_options if output_storage_options is None else output_storage_options
    destination = resolve_destination(output, overwrite=overwrite, storage_options=out_options)
    refuse_read_only(output, "quantize")  # a store or StorePath given read-only
    # in one icechunk session, an output inside the source group: its copy leaves it out
    excluded = destination.path_within(source)
    if excluded is None:
        destination.refuse_overlap(source)
    group = open_source(source, storage_options)
    if not isinstance(group, zarr.Group):
        raise ValueError(f"{source} is an array, not a group: quantize it as an array")
    chosen = floating_arrays(group, arrays, excluding=excluded)

    def targets() -> list[Target]:
        planned = []
        for array in chosen:
            name = array.path[len(group.path):].strip("/")
            scanned = None
            if progress is not None:
                scanned = (lambda n: lambda done, total: progress(n, "scan", done, total))(name)
            planned.append(quantized_target(
                # read through zarrext's pipeline: decode errors name the chunk
                readable(array), name, max_abs_error=max_abs_error, progress=scanned,
                client=client,
            ))
        return planned

    copies: list[CopyReport] = []
    members = group_members(group)
    run_conversion(
        group, targets, destination, members=members, overwrite=overwrite,
        ome_upgrade=planned_upgrade(group, members),  # format 3 needs OME-Zarr 0.5
        output_storage_options=out_options,
        progress=None if progress is None else lambda name, done, total: progress(
            name, "copy", done, total),
        client=client, excluded=[excluded] if excluded else [],
        written=collecting(copies, allow_larger), job_name="quantize", unit="block",
    )
    return copies
