"""Copying a whole array quantized (behind ``zarrext quantize``): the only part doing I/O."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrext.quantize.planning import (
    QuantizationError,
    QuantizationPlan,
    float_dtype,
    plan_quantization,
)
from zarrext.quantize.verification import measured_error

__all__ = ["CopyReport", "copy_quantized"]


@dataclass(frozen=True)
class CopyReport:
    """What :func:`copy_quantized` did.

    Attributes
    ----------
    plan : QuantizationPlan
    source_bytes, output_bytes : int
        Bytes stored (chunks and metadata) by the source and the output array.
    worst_error : float
        Largest ``|output - source|`` over the finite values, read back from the
        output store block by block.
    blocks : int
        Number of blocks copied.
    """

    plan: QuantizationPlan
    source_bytes: int
    output_bytes: int
    worst_error: float
    blocks: int

    @property
    def size_ratio(self) -> float:
        """``source_bytes / output_bytes`` (how many times smaller the output is)."""
        return self.source_bytes / self.output_bytes if self.output_bytes else math.inf


def _blocks(shape: tuple[int, ...], block: tuple[int, ...]) -> list[tuple[slice, ...]]:
    ranges = [range(0, n, b) for n, b in zip(shape, block, strict=True)]
    return [
        tuple(slice(i, min(i + b, n)) for i, b, n in zip(start, block, shape, strict=True))
        for start in itertools.product(*ranges)
    ]


def copy_quantized(
    source: Any,
    output: Any,
    *,
    max_abs_error: float,
    overwrite: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> CopyReport:
    """Copy a floating-point zarr array into a new one stored quantized.

    Two passes over the source, one block (shard, or chunk) at a time: the first
    finds the finite range and which of NaN/+Inf/-Inf occur, then the filters are
    planned for that range (:func:`plan_quantization`); the second writes each
    block and reads it back from the output store to measure the error.

    Parameters
    ----------
    source, output : store-like
        Paths or stores of the source array and of the array to create.
    max_abs_error : float
        The bound every finite value must meet.
    overwrite : bool
        Replace an existing Zarr array at ``output`` (a path that is not a Zarr
        node is never replaced).
    progress : callable, optional
        Called as ``progress(phase, done, total)`` after each block; ``phase`` is
        ``"scan"`` or ``"copy"``.

    The output is built under a temporary name and renamed into place at the end
    (:func:`zarrext.outputs.staged_output`): if the copy fails or is interrupted,
    nothing appears at ``output`` and the exception carries a note saying how far
    it got.

    Raises
    ------
    QuantizationError
        If no plan meets the bound, or a block read back exceeds it.
    OutputConflictError
        If ``output`` is, is inside, or contains ``source``, or exists (without
        ``overwrite``).
    """
    import zarr

    from zarrext.api import open_array
    from zarrext.outputs import check_disjoint, staged_output

    check_disjoint(source, output)
    # Read through zarrext's pipeline: a chunk it cannot decode fails with an error
    # naming the array, the chunk's key and the codec (zarr's names none of them).
    src = open_array(source, mode="r")
    ftype = float_dtype(src.dtype)
    block = tuple(src.shards or src.chunks)
    blocks = _blocks(tuple(src.shape), block)
    lo, hi = math.inf, -math.inf
    posinf = neginf = False
    for i, sl in enumerate(blocks):
        data = np.asarray(src[sl])
        finite = data[np.isfinite(data)]
        if finite.size:
            lo, hi = min(lo, float(finite.min())), max(hi, float(finite.max()))
        posinf = posinf or bool(np.any(data == np.inf))
        neginf = neginf or bool(np.any(data == -np.inf))
        if progress is not None:
            progress("scan", i + 1, len(blocks))
    if lo > hi:
        lo = hi = 0.0
    fill = float(src.fill_value)
    planned = plan_quantization(
        value_range=(lo, hi),
        max_abs_error=max_abs_error,
        dtype=ftype,
        fill_value=None if math.isnan(fill) else fill,
        posinf=posinf,
        neginf=neginf,
    )
    dims = getattr(src.metadata, "dimension_names", None)
    layout: dict[str, Any] = {"chunks": src.chunks}
    if src.shards is not None:
        from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

        # The filters go before (outside) the sharding codec: zarr-python 3.4.2
        # validates inner codecs with fill value 0, which a plan for a range that
        # excludes 0 cannot encode; outside, they see the real fill value.
        layout = {
            "chunks": src.shards,
            "serializer": ShardingCodec(
                chunk_shape=src.chunks, codecs=[BytesCodec(), ZstdCodec()]
            ),
            "compressors": None,
        }
    worst = 0.0
    done = 0
    # Built under a temporary name and renamed at the end: an interrupted copy
    # never leaves something that opens as a finished array.
    with staged_output(output, overwrite=overwrite) as target:
        try:
            dst = zarr.create_array(
                target,
                shape=src.shape,
                dtype=ftype,
                fill_value=fill,
                filters=list(planned.filters),
                attributes=dict(src.attrs),
                dimension_names=dims,
                zarr_format=3,
                overwrite=overwrite,
                **layout,
            )
            for sl in blocks:
                data = np.asarray(src[sl])
                dst[sl] = data
                worst = max(worst, measured_error(data, np.asarray(dst[sl])))
                done += 1
                if progress is not None:
                    progress("copy", done, len(blocks))
            if worst > max_abs_error:
                raise QuantizationError(
                    f"quantized copy of {source!r} exceeds max_abs_error={max_abs_error!r}: "
                    f"worst error read back is {worst!r}"
                )
            output_bytes = int(dst.nbytes_stored())
        except BaseException as e:
            e.add_note(
                f"quantize stopped after {done} of {len(blocks)} blocks; "
                f"nothing was written at {output}"
            )
            raise
    return CopyReport(
        plan=planned,
        source_bytes=int(src.nbytes_stored()),
        output_bytes=output_bytes,
        worst_error=worst,
        blocks=len(blocks),
    )
