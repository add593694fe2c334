"""Verification: run the real ``scale_offset`` + ``cast_value`` codecs and measure errors.

zarr-python's own codecs encode and decode the data (:func:`roundtrip`); the plans
of :mod:`~zarrext.quantize.planning` are accepted only when :func:`worst_error`
meets the bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
from zarr.abc.codec import ArrayArrayCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import get_data_type_from_native_dtype

if TYPE_CHECKING:
    from zarr.abc.codec import SupportsSyncCodec
    from zarr.core.buffer import NDBuffer

__all__ = ["measured_error", "roundtrip", "worst_error"]


def _spec(shape: tuple[int, ...], dtype: np.dtype[Any], fill_value: Any) -> ArraySpec:
    return ArraySpec(
        shape=shape,
        dtype=get_data_type_from_native_dtype(dtype),
        fill_value=fill_value,
        config=ArrayConfig(order="C", write_empty_chunks=False),
        prototype=default_buffer_prototype(),
    )


def roundtrip(
    filters: Sequence[ArrayArrayCodec],
    data: npt.ArrayLike,
    *,
    fill_value: Any = None,
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Encode then decode ``data`` through ``filters`` with zarr-python's own codecs.

    Returns ``(encoded, decoded)``. ``fill_value`` (default NaN for floats, else 0)
    goes through ``resolve_metadata`` exactly as in a real array.
    """
    arr = np.ascontiguousarray(data)
    if fill_value is None:
        fill_value = np.nan if arr.dtype.kind == "f" else 0
    specs = [_spec(arr.shape, arr.dtype, fill_value)]
    for codec in filters:
        specs.append(codec.resolve_metadata(specs[-1]))
    buf = specs[0].prototype.nd_buffer.from_numpy_array(arr)
    sync = [cast("SupportsSyncCodec[NDBuffer, NDBuffer]", c) for c in filters]
    for sync_codec, spec in zip(sync, specs, strict=False):
        out = sync_codec._encode_sync(buf, spec)
        if out is None:  # pragma: no cover - these codecs always return data
            raise ValueError(f"{type(sync_codec).__name__} returned no data")
        buf = out
    encoded = buf.as_numpy_array().copy()
    for sync_codec, spec in reversed(list(zip(sync, specs, strict=False))):
        buf = sync_codec._decode_sync(buf, spec)
    return encoded, buf.as_numpy_array()


def measured_error(data: npt.NDArray[Any], decoded: npt.NDArray[Any]) -> float:
    """Worst absolute error over finite values; ``inf`` if a special value was lost."""
    x = np.asarray(data)
    y = np.asarray(decoded)
    nan = np.isnan(x)
    if not np.array_equal(np.isnan(y), nan) and not np.isnan(y[nan]).all():
        return math.inf
    finite = np.isfinite(x)
    special = ~finite & ~nan
    if special.any() and not np.array_equal(x[special], y[special]):
        return math.inf
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(y.astype(np.float64) - x.astype(np.float64))
    # A finite value decoded as NaN makes the maximum NaN: count it as unbounded.
    worst = float(np.max(diff, where=finite, initial=0.0))
    return math.inf if math.isnan(worst) else worst


# Elements per slab when measuring: bounds the temporaries of a large array.
_SLAB = 1 << 22


def worst_error(
    filters: Sequence[ArrayArrayCodec], data: npt.ArrayLike, *, fill_value: Any = None
) -> float:
    """Largest ``|decoded - data|`` over the finite values of ``data``.

    ``data`` goes through the codecs in slabs of a few million elements. Returns
    ``inf`` if a NaN or infinity does not come back as itself.
    """
    flat = np.ascontiguousarray(data).reshape(-1)
    worst = 0.0
    for start in range(0, flat.size, _SLAB):
        slab = flat[start : start + _SLAB]
        _, decoded = roundtrip(filters, slab, fill_value=fill_value)
        worst = max(worst, measured_error(slab, decoded))
        if math.isinf(worst):
            break
    return worst
