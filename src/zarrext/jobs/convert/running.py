"""The conversion engine: writing planned targets into an output published last.

:func:`run_conversion` builds the output under a temporary name
(:meth:`zarrext.jobs.outputs.Destination.run_staged`), copies a group's other objects as they
are (:func:`~zarrext.jobs.convert.groups.copy_as_is`), creates each target and
copies its write units (:func:`~zarrext.jobs.convert.units.write_units`), and
writes the consolidated metadata again. Every conversion runs here: ``zarrext
convert`` (:mod:`zarrext.jobs.convert.converting`) and ``zarrext quantize``
(:mod:`zarrext.jobs.quantize`), which plans its own targets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zarrext.jobs.convert.groups import copy_as_is, v2_consolidated
from zarrext.jobs.convert.plans import Target
from zarrext.jobs.convert.reports import (
    ConversionError,
    ConvertProgress,
    ConvertReport,
    stored_bytes,
)
from zarrext.jobs.convert.units import (
    output_ref,
    refuse_zip_output,
    source_ref,
    unit_slices,
    write_units,
)

if TYPE_CHECKING:
    from zarrext.jobs.ome import OmeUpgrade

__all__ = ["run_conversion"]

def run_conversion(
    node: Any,
    targets: Sequence[Target] | Callable[[], Sequence[Target]],
    output: Any,
    *,
    members: Mapping[str, Any],
    overwrite: bool,
    output_storage_options: Mapping[str, Any] | None,
    progress: ConvertProgress | None = None,
    client: Any = None,
    excluded: Sequence[str] = (),
    written: Callable[[Target, ConvertReport], None] | None = None,
    job_name: str = "convert",
    unit: str = "write unit",
    ome_upgrade: OmeUpgrade | None = None,
) -> list[ConvertReport]:
    """Write the planned ``targets`` of ``node`` (an array, or a group and its
    ``members``) at ``output`` and publish it
    (:meth:`zarrext.jobs.outputs.Destination.run_staged`). ``output`` is a path, URL or
    store (resolved with ``overwrite`` and ``output_storage_options``), or the
    :class:`~zarrext.jobs.outputs.Destination` the caller resolved (which carries its own).

    ``targets`` may be a function planning them (a quantizing form scans its
    arrays): it is called once the output is known to be free, so that an existing
    output is refused before any value is read, and before anything is written.

    A group's objects but the targets' (and the ``excluded`` members': an output
    inside its source group, in one icechunk session) are copied as they are; each
    target is created and its write units copied
    (:func:`~zarrext.jobs.convert.units.write_units`); the consolidated metadata is
    written again. ``written(target, report)`` is called
    as each array is done, before anything is published: an error it raises
    discards the output. ``job_name`` and ``unit`` word the messages: the note on
    an interrupted array (``"convert stopped in {path} after {done} of {total}
    write units"``), and a store Dask workers cannot reach. ``ome_upgrade``: the
    OME-Zarr metadata upgrade to make in the output (:mod:`zarrext.jobs.ome`),
    recorded in each report.
    """
    import zarr

    from zarrext.jobs.outputs import resolve_destination

    destination = resolve_destination(output, overwrite=overwrite,
                                      storage_options=output_storage_options)
    kept = {name: m for name, m in members.items()
            if not any(name == e or name.startswith(f"{e}/") for e in excluded)}
    if client is not None:  # refused before anything is written, as the source is
        refuse_zip_output(destination, job_name)

    def job(target_store: Any) -> list[ConvertReport]:
        from zarrext.api import create_array
        from zarrext.jobs.group_metadata import consolidate_within

        planned = list(targets() if callable(targets) else targets)
        skipped = [*(t.path for t in planned), *excluded]
        sources = (
            {t.path: source_ref(t.source, job_name) for t in planned} if client is not None
            else {}
        )
        if isinstance(node, zarr.Array):
            store, base = target_store, None
        else:
            made = zarr.open_group(target_store, mode="w", zarr_format=3)
            store, base = made.store, made.path
            copy_as_is(node, kept, store, base, skipped)
        reports = []
        for t in planned:
            name = (f"{base}/{t.path}" if base else t.path) if t.path else None
            started = time.perf_counter()
            dst = create_array(store, name=name, overwrite=True, **t.kwargs)
            regions = unit_slices(t.kwargs["shape"], t.write_unit)
            each = None
            if progress is not None:
                each = (lambda p: lambda done, total: progress(p, done, total))(t.path)
            worst = write_units(
                t.source, dst, regions, measure=t.quantized is not None, progress=each,
                client=client,
                on_workers=(
                    (sources[t.path], output_ref(dst, t, job_name)) if client is not None
                    else None
                ),
                job_name=job_name, where=t.path, unit=unit,
            )
            if t.quantized is not None and worst > t.quantized.max_abs_error:
                raise ConversionError(
                    f"converted {t.path or '/'} exceeds max_abs_error="
                    f"{t.quantized.max_abs_error!r}: worst error read back is {worst!r}"
                )
            seconds = time.perf_counter() - started
            report = ConvertReport(
                t.path, t.describe(), stored_bytes(t.source), stored_bytes(dst), seconds,
                len(regions), len(regions),
                worst_error=worst if t.quantized is not None else None,
                ome_upgrade=ome_upgrade,
            )
            if written is not None:
                written(t, report)
            reports.append(report)
        if not isinstance(node, zarr.Array):
            if ome_upgrade is not None:
                from zarrext.jobs.ome import apply_upgrade

                apply_upgrade(ome_upgrade, store, base or "")
            consolidate_within(store, base or "")
            if node.metadata.zarr_format == 2 and v2_consolidated(node):
                from zarrext.jobs.group_metadata import consolidate

                consolidate(store, base or "")
        return reports

    return destination.run_staged(job)
