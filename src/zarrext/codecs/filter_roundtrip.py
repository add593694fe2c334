"""Verification: run the real ``scale_offset`` + ``cast_value`` codecs and measure errors.

zarr-python's own codecs encode and decode the data (:func:`roundtrip`); the plans
of :mod:`~zarrext.quantization.planning` are accepted only when :func:`worst_error`
meets the bound.

:func:`fill_value_change` runs an array's array->array codecs (:func:`array_filters`)
on its fill value: spec 002 asks that the fill value survive them. One that does not
reads back as itself only while its chunk is missing; once one element of the chunk
is written, the others read what the codecs make of the fill. ``zarrext.create_array``,
the planner and ``zarrext check`` ask it.

This module imports nothing of zarrext.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
from zarr.abc.codec import ArrayArrayCodec
from zarr.codecs import ShardingCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import ZDType, get_data_type_from_native_dtype

if TYPE_CHECKING:
    from zarr.abc.codec import Codec, SupportsSyncCodec
    from zarr.core.buffer import NDBuffer

__all__ = [
    "array_filters",
    "fill_value_change",
    "fill_value_read_back",
    "measured_error",
    "roundtrip",
    "worst_error",
]


def _spec(
    shape: tuple[int, ...], dtype: np.dtype[Any] | ZDType[Any, Any], fill_value: Any
) -> ArraySpec:
    return ArraySpec(
        shape=shape,
        dtype=dtype if isinstance(dtype, ZDType) else get_data_type_from_native_dtype(dtype),
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
    """Worst absolute error over finite values; ``inf`` if a special value was lost.

    Measured in slabs of :data:`MEASURE_SLAB` elements: the temporaries (float64
    differences, masks) stay a few MiB whatever the arrays' size, so a job measuring
    each write unit it writes holds no more than the unit and its read-back.
    """
    x = np.asarray(data).reshape(-1)
    y = np.asarray(decoded).reshape(-1)
    worst = 0.0
    for start in range(0, x.size, MEASURE_SLAB):
        stop = start + MEASURE_SLAB
        worst = max(worst, _measured_slab(x[start:stop], y[start:stop]))
        if math.isinf(worst):
            break
    return worst


MEASURE_SLAB = 1 << 16
"""Elements :func:`measured_error` compares at once (float64 temporaries of 512 KiB)."""


def _measured_slab(x: npt.NDArray[Any], y: npt.NDArray[Any]) -> float:
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


# --- the fill value through the array's filters (spec 002) ------------------------


def array_filters(codecs: Sequence[Codec]) -> list[ArrayArrayCodec]:
    """The array->array codecs an array's stored values go through, outermost first.

    ``codecs`` is an array's codec list (``metadata.codecs``): its filters, then,
    when the serializer is ``sharding_indexed``, the inner chunks' filters (zarr's
    ``shards=`` puts an array's filters there), nested shards too. Empty for an
    array without filters.
    """
    found: list[ArrayArrayCodec] = []
    for codec in codecs:
        if isinstance(codec, ArrayArrayCodec):
            found.append(codec)
            continue
        if isinstance(codec, ShardingCodec):
            found.extend(array_filters(codec.codecs))
        break  # the serializer: after it come bytes
    return found


def _encoded(codec: ArrayArrayCodec, buf: NDBuffer, spec: ArraySpec) -> NDBuffer:
    if hasattr(codec, "_encode_sync"):
        out = cast("SupportsSyncCodec[NDBuffer, NDBuffer]", codec)._encode_sync(buf, spec)
    else:  # a codec with only the asynchronous interface
        from zarr.core.sync import sync

        (out,) = sync(codec.encode([(buf, spec)]))
    if out is None:
        raise ValueError(f"{_codec_name(codec)} returned no data")
    return out


def _decoded(codec: ArrayArrayCodec, buf: NDBuffer, spec: ArraySpec) -> NDBuffer:
    if hasattr(codec, "_decode_sync"):
        return cast("SupportsSyncCodec[NDBuffer, NDBuffer]", codec)._decode_sync(buf, spec)
    from zarr.core.sync import sync

    (out,) = sync(codec.decode([(buf, spec)]))
    if out is None:
        raise ValueError(f"{_codec_name(codec)} returned no data")
    return out


def _codec_name(codec: Any) -> str:
    try:
        return str(codec.to_dict()["name"])
    except (AttributeError, KeyError, TypeError):  # no JSON form: its class names it
        return type(codec).__name__


def fill_value_read_back(
    filters: Sequence[ArrayArrayCodec],
    dtype: npt.DTypeLike | ZDType[Any, Any],
    fill_value: Any,
    *,
    ndim: int = 1,
) -> np.ndarray[Any, Any]:
    """What an element left at ``fill_value`` reads back as once its chunk is stored.

    A chunk with some elements written holds the fill value everywhere else; the
    whole chunk goes through ``filters`` (encode) and is read back through them
    (decode). This does that to a one-element chunk (of ``ndim`` dimensions, for
    codecs such as ``transpose`` that need them), with each codec evolved and its
    fill value resolved as in an array's metadata.

    Returns
    -------
    numpy.ndarray
        The one element read back, shape ``(1,) * ndim``, of the array's data type.

    Raises
    ------
    ValueError (or another error of the codecs)
        When the codecs cannot encode or decode the fill value.
    """
    zdtype = dtype if isinstance(dtype, ZDType) else get_data_type_from_native_dtype(
        np.dtype(dtype)
    )
    shape = (1,) * ndim
    specs = [_spec(shape, zdtype, zdtype.cast_scalar(fill_value))]
    evolved = []
    for codec in filters:
        codec = codec.evolve_from_array_spec(specs[-1])
        evolved.append(codec)
        specs.append(codec.resolve_metadata(specs[-1]))
    buf = specs[0].prototype.nd_buffer.from_numpy_array(
        np.full(shape, specs[0].fill_value, dtype=zdtype.to_native_dtype())
    )
    for codec, spec in zip(evolved, specs, strict=False):
        buf = _encoded(codec, buf, spec)
    for codec, spec in reversed(list(zip(evolved, specs, strict=False))):
        buf = _decoded(codec, buf, spec)
    return np.asarray(buf.as_numpy_array())


def _same_element(before: np.ndarray[Any, Any], after: np.ndarray[Any, Any]) -> bool:
    """Bit for bit equal, except that any NaN matches a NaN fill value."""
    if after.dtype != before.dtype:
        after = after.astype(before.dtype)
    if before.dtype.kind in "fc" and bool(np.isnan(before).all() and np.isnan(after).all()):
        return True
    if before.dtype.hasobject:
        return bool(np.all(before == after))
    return before.tobytes() == after.tobytes()


def fill_value_change(
    filters: Sequence[ArrayArrayCodec],
    dtype: npt.DTypeLike | ZDType[Any, Any],
    fill_value: Any,
    *,
    ndim: int = 1,
) -> str | None:
    """Why ``fill_value`` does not survive ``filters``, in one line; None when it does.

    It survives when :func:`fill_value_read_back` gives it back bit for bit (any NaN
    for a NaN fill value; ``-0.0`` read back as ``0.0`` does not survive). An array
    whose fill value does not survive reads the fill value in its missing chunks but
    what the filters make of it in the unwritten elements of a stored chunk. No
    filters: None, without running anything.
    """
    if not filters:
        return None
    zdtype = dtype if isinstance(dtype, ZDType) else get_data_type_from_native_dtype(
        np.dtype(dtype)
    )
    fill = np.full((1,) * ndim, zdtype.cast_scalar(fill_value), dtype=zdtype.to_native_dtype())
    names = ", ".join(_codec_name(c) for c in filters)
    shown = _shown(fill)
    try:
        back = fill_value_read_back(filters, zdtype, fill_value, ndim=ndim)
    except (ValueError, TypeError, ArithmeticError) as e:  # the codecs' own refusal
        reason = " ".join(str(e).split()) or type(e).__name__
        return f"fill value {shown} cannot go through the filters ({names}): {reason}"
    if _same_element(fill, back):
        return None
    return (
        f"fill value {shown} does not survive the filters ({names}): it reads back as "
        f"{_shown(back)} (a stored chunk's elements never written read {_shown(back)}, "
        f"missing chunks {shown})"
    )


def _shown(element: np.ndarray[Any, Any]) -> str:
    """A one-element array's value as numpy prints its scalar (``0.5``, ``-0.0``, ``nan``)."""
    return str(element.reshape(-1)[0])
