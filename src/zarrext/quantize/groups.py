"""Copying a group quantized (behind ``zarrext quantize`` given a group).

:func:`floating_arrays` chooses the arrays to quantize; :func:`copy_group_quantized`
copies each of them as :func:`~zarrext.quantize.copying.copy_quantized` copies one,
every other object of the group byte for byte, and consolidates again the
consolidated metadata in the copy and in the groups that hold it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from zarrext.errors import naming_codec_holder
from zarrext.jobs import cluster
from zarrext.quantize.blocks import Progress
from zarrext.quantize.copying import CopyReport, opened, quantize_array
from zarrext.quantize.planning import float_dtype

__all__ = ["copy_group_quantized", "floating_arrays"]

def _dimension_coordinate(name: str, array: Any) -> bool:
    """A 1-D array named after its own dimension (xarray's ``x``, ``time``, ``lat``)."""
    dims = getattr(array.metadata, "dimension_names", None)
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
    import zarr

    from zarrext.jobs.group_metadata import is_staging

    with naming_codec_holder(group=group):
        members = group.members(max_depth=None)
    arrays = {
        name: member
        for name, member in members
        if isinstance(member, zarr.Array)
        and not is_staging(name)  # an earlier zarrext's temporary copy: no member
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


def _excluded_output(source: Any, output: Any) -> str | None:
    """The output's path relative to ``source`` when both are in one icechunk session
    and the output is inside the source group (its copy leaves the output out)."""
    from zarrext.jobs.outputs import in_session

    ss, so = in_session(source), in_session(output)
    if ss is None or so is None or ss[0] != so[0]:
        return None
    inside = f"{ss[1]}/" if ss[1] else ""
    if so[1] == ss[1] or not so[1].startswith(inside):
        return None
    return so[1][len(inside):]


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
    import zarr

    from zarrext.api import with_runtime
    from zarrext.jobs.group_metadata import consolidate_within
    from zarrext.jobs.outputs import check_disjoint
    from zarrext.stores import refuse_read_only

    refuse_read_only(output, "quantize")  # a store or StorePath given read-only
    excluded = _excluded_output(source, output)
    if excluded is None:
        check_disjoint(source, output)
    group = zarr.open_group(opened(source, storage_options), mode="r", use_consolidated=False)
    chosen = [
        a for a in floating_arrays(group, arrays, excluding=excluded)
    ]

    def job(target: Any) -> list[CopyReport]:
        made = zarr.open_group(target, mode="w")
        store, base = made.store, made.path
        names = [a.path[len(group.path):].strip("/") for a in chosen]
        _copy_objects(group, store, base, [*names, *([excluded] if excluded else [])])
        reports = []
        for array, name in zip(chosen, names, strict=True):
            each: Progress | None = None
            if progress is not None:
                each = (lambda n: lambda phase, done, total: progress(n, phase, done, total))(
                    name
                )
            reports.append(
                quantize_array(
                    # read through zarrext's pipeline: decode errors name the chunk
                    with_runtime(array), store, f"{base}/{name}" if base else name,
                    max_abs_error=max_abs_error, allow_larger=allow_larger, progress=each,
                    client=client, report_path=name,
                )
            )
        consolidate_within(store, base)
        return reports

    out_options = storage_options if output_storage_options is None else output_storage_options
    from zarrext.jobs.outputs import run_staged

    reports: list[CopyReport] = run_staged(output, overwrite, out_options, job)
    return reports


def _copy_objects(group: Any, store: Any, base: str, skip: Iterable[str]) -> None:
    """Copy every object under ``group`` to ``base`` in ``store``, but the ``skip`` nodes.

    Many objects in flight at once (zarr's ``async.concurrency``).
    """
    import asyncio

    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from zarrext.jobs.outputs import STAGING_MARKER

    source = group.store
    prefix = f"{group.path}/" if group.path else ""
    into = f"{base}/" if base else ""
    skipped = tuple(f"{s}/" for s in skip)
    prototype = default_buffer_prototype()

    async def copy_all() -> None:
        limit = asyncio.Semaphore(cluster.concurrency())

        async def copy(key: str) -> None:
            async with limit:
                value = await source.get(key, prototype)
                if value is not None:
                    await store.set(f"{into}{key[len(prefix):]}", value)

        keys = [
            k async for k in source.list_prefix(prefix)
            if not k[len(prefix):].startswith(skipped) and STAGING_MARKER not in k[len(prefix):]
        ]
        await asyncio.gather(*(copy(k) for k in keys))

    sync(copy_all())
