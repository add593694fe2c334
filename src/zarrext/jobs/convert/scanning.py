"""The first pass of a quantizing conversion: an array's value range, and its plan.

A block is one of the array's write units (a shard, or in an array without shards
a chunk). :func:`scan` finds the finite range of the source and which infinities
occur in it, the planner's input (:func:`~zarrext.quantization.planning.plan_quantization`):
on threads here, or in batches on a Dask client whose tasks reopen the source
(:func:`zarrext.jobs.cluster.run_pass`, the runner of the copy pass too).
:func:`quantized` plans one array from it, for ``convert`` and ``quantize`` alike.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrext.jobs import cluster
from zarrext.jobs.convert.plans import Quantized
from zarrext.jobs.convert.sources import source_parts
from zarrext.jobs.convert.units import source_ref, unit_slices
from zarrext.quantization.planning import (
    QuantizationError,
    float_dtype,
    plan_quantization,
    range_values,
)

if TYPE_CHECKING:
    from zarrext.jobs.store_refs import ArrayRef

__all__ = ["Progress", "ValueRange", "quantized", "read_fill_value", "scan", "scan_on_worker"]

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: ``phase`` is ``"scan"`` or ``"copy"``."""


@dataclass(frozen=True)
class ValueRange:
    """The finite range of some blocks (the array's fill value left out: it is
    planned for on its own), and which infinities occur in them."""

    lo: float = math.inf
    hi: float = -math.inf
    posinf: bool = False
    neginf: bool = False

    def __or__(self, other: ValueRange) -> ValueRange:
        return ValueRange(
            min(self.lo, other.lo), max(self.hi, other.hi),
            self.posinf or other.posinf, self.neginf or other.neginf,
        )

    def plan_arguments(self, fill: float) -> dict[str, Any]:
        """:func:`~zarrext.quantization.planning.plan_quantization`'s range arguments
        (with no finite value found: the finite ``fill``, else 0)."""
        empty = (fill, fill) if math.isfinite(fill) else (0.0, 0.0)
        lo, hi = (self.lo, self.hi) if self.lo <= self.hi else empty
        return {"value_range": (lo, hi), "posinf": self.posinf, "neginf": self.neginf}


def _scan_block(src: Any, sl: tuple[slice, ...]) -> ValueRange:
    data = np.asarray(src[sl])
    finite = range_values(data, read_fill_value(src))
    return ValueRange(
        float(finite.min()) if finite.size else math.inf,
        float(finite.max()) if finite.size else -math.inf,
        bool(np.any(data == np.inf)),
        bool(np.any(data == -np.inf)),
    )


def scan_on_worker(
    source: ArrayRef, threads: int, batch: list[tuple[slice, ...]]
) -> tuple[int, ValueRange]:
    """One Dask task: the range of ``batch``'s blocks of the source."""
    src = source.open()
    found = ValueRange()
    for each in cluster.on_threads(lambda sl: _scan_block(src, sl), batch, threads):
        found |= each
    return len(batch), found


def scan(
    src: Any,
    progress: Callable[[int, int], None] | None = None,
    client: Any = None,
    *,
    job_name: str = "quantize",
    regions: Sequence[tuple[slice, ...]] | None = None,
) -> ValueRange:
    """The finite range of ``src`` and which infinities occur in it, read by its
    blocks (shards, or chunks; or the ``regions`` given): zarr's
    ``async.concurrency`` at once here, or on ``client``'s workers (a Zarr format 3
    source; a format 2 one is read here). ``progress(done, total)`` as blocks finish."""
    blocks = (
        list(regions) if regions is not None
        else unit_slices(tuple(src.shape), tuple(src.shards or src.chunks))
    )
    if src.metadata.zarr_format != 3:  # workers reopen through zarrext's pipeline
        client = None
    remote = (scan_on_worker, (source_ref(src, job_name),)) if client is not None else None
    job: cluster.Pass[tuple[slice, ...], ValueRange] = cluster.Pass(
        local=lambda sl: _scan_block(src, sl), remote=remote, combine=operator.or_,
        start=ValueRange(), what=f"{job_name} on a Dask cluster",
    )
    return cluster.run_pass(job, blocks, client=client, progress=progress)


def quantized(
    src: Any,
    max_abs_error: float,
    label: str,
    *,
    cover_zero: bool,
    progress: Callable[[int, int], None] | None = None,
    client: Any = None,
    job_name: str = "quantize",
    regions: Sequence[tuple[slice, ...]] | None = None,
) -> Quantized:
    """Scan ``src`` and plan the filters storing it within ``max_abs_error``.

    The fill value is planned for first, alone, so that a fill value the filters
    would not give back is refused before any value is read (a finite fill is the
    offset, or far from the values has its own code, as a special one does).
    ``cover_zero``: the filters go inside a sharding codec, where zarr-python 3.4.2
    checks them with 0.0 as the fill value
    (:func:`~zarrext.quantization.planning.plan_quantization`). ``regions``: scan these
    only (a dry run's sample; the plan then covers their range). The attributes
    returned are the source's (:func:`zarrext.jobs.convert.sources.source_parts`: no conditional's
    decision record, no format 2 ``_ARRAY_DIMENSIONS``) with the plan recorded, for
    later writers to check (:mod:`zarrext.codecs.quantized_writes`).

    Raises
    ------
    QuantizationError
        ``"cannot {job_name} {label}: ..."``: the fill value, or no plan meets the bound.
    """
    ftype = float_dtype(src.dtype)
    fill = read_fill_value(src)
    planned_fill = None if math.isnan(fill) else fill
    try:
        plan_quantization(max_abs_error=max_abs_error, dtype=ftype, fill_value=planned_fill,
                          value_range=(fill, fill) if math.isfinite(fill) else (0.0, 0.0))
        found = scan(src, progress, client, job_name=job_name, regions=regions)
        planned = plan_quantization(
            max_abs_error=max_abs_error, dtype=ftype, fill_value=planned_fill,
            cover_zero=cover_zero, **found.plan_arguments(fill),
        )
    except QuantizationError as e:
        raise QuantizationError(f"cannot {job_name} {label}: {e}") from None
    attributes = planned.planned.recorded_in(source_parts(src)[2])
    return Quantized(tuple(planned.filters), dict(attributes), max_abs_error,
                     str(planned.stored_dtype), planned, sampled=regions is not None)


def read_fill_value(src: Any) -> float:
    """The value ``src`` reads where a chunk is missing: its fill value, or for a
    format 2 ``fill_value`` of null, its data type's default (0.0), as zarr-python
    reads it (and as convert's copy of it says, format 3 needing a fill value)."""
    if src.fill_value is None:
        return float(src.metadata.dtype.default_scalar())
    return float(src.fill_value)
