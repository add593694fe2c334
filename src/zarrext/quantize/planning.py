"""Planning: the smallest integer type and a scale that meet ``max_abs_error``.

:func:`plan_quantization` (for a value range) and :func:`plan` (for data) choose the
``scale_offset`` + ``cast_value`` configuration and verify it with the real codecs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from zarr.abc.codec import ArrayArrayCodec
from zarr.codecs.cast_value import CastValue
from zarr.codecs.scale_offset import ScaleOffset

from zarrext.quantize.verification import fill_value_change, worst_error

__all__ = ["QuantizationError", "QuantizationPlan", "float_dtype", "plan", "plan_quantization"]


# Candidate storage types, smallest first; at equal size unsigned comes first because
# with a free offset the codes start at 0.
_INT_TYPES: tuple[np.dtype[Any], ...] = tuple(
    np.dtype(n)
    for n in ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64")
)
_FLOAT_TYPES = frozenset({np.dtype("float16"), np.dtype("float32"), np.dtype("float64")})
# JSON names of the special values, as zarr v3 encodes float fill values.
_SPECIAL_JSON = {"nan": "NaN", "posinf": "+Infinity", "neginf": "-Infinity"}
_MAX_ATTEMPTS = 60
_PROBE_LEVELS = 4096


class QuantizationError(ValueError):
    """No integer type up to 64 bits can store the values within the requested bound."""


@dataclass(frozen=True)
class QuantizationPlan:
    """The outcome of :func:`plan_quantization`.

    Attributes
    ----------
    filters : tuple of ArrayArrayCodec
        ``(ScaleOffset, CastValue)``, ready for ``zarr.create_array(filters=...)``.
    dtype : numpy.dtype
        The floating-point data type of the array the filters apply to.
    stored_dtype : numpy.dtype
        The integer type the values are stored as.
    scale, offset : float
        The ``scale_offset`` parameters (exact values of ``dtype``).
    fill_value : float
        The array fill value the plan was made for (NaN unless one was given).
    reserved : dict of str to int
        Integer codes reserved for ``"NaN"``, ``"+Infinity"``, ``"-Infinity"``.
    max_abs_error : float
        The requested bound.
    worst_error : float
        The largest decode error measured while verifying the plan.
    value_range : tuple of float
        The finite range the plan covers.
    """

    filters: tuple[ArrayArrayCodec, ...]
    dtype: np.dtype[Any]
    stored_dtype: np.dtype[Any]
    scale: float
    offset: float
    fill_value: float
    reserved: dict[str, int]
    max_abs_error: float
    worst_error: float
    value_range: tuple[float, float]


def float_dtype(dtype: npt.DTypeLike) -> np.dtype[Any]:
    """``dtype`` in native byte order, if it is a type quantize plans for (float16/32/64)."""
    dt = np.dtype(dtype).newbyteorder("=")
    if dt not in _FLOAT_TYPES:
        raise TypeError(f"quantize plans floating-point data (float16/32/64), got {dt}")
    return dt


def _pick_int_type(
    cmin: int, cmax: int, n_reserved: int, min_index: int
) -> tuple[np.dtype[Any], list[int]] | None:
    """Smallest integer type holding codes ``[cmin, cmax]`` plus reserved codes.

    Reserved codes go at the far end of the type, away from the data codes, so that
    values slightly beyond a planned range do not alias them.
    """
    for int_type in _INT_TYPES[min_index:]:
        info = np.iinfo(int_type)
        if cmin < int(info.min) or cmax > int(info.max):
            continue
        if int(info.max) - cmax >= n_reserved:
            return int_type, [int(info.max) - i for i in range(n_reserved)]
        if cmin - int(info.min) >= n_reserved:
            return int_type, [int(info.min) + i for i in range(n_reserved)]
    return None


def _build_filters(
    dtype: np.dtype[Any],
    offset: float,
    scale: float,
    stored: np.dtype[Any],
    reserved: dict[str, int],
) -> tuple[ArrayArrayCodec, ...]:
    scalar_map: Any = None
    if reserved:
        scalar_map = {
            "encode": [(name, code) for name, code in reserved.items()],
            "decode": [(code, name) for name, code in reserved.items()],
        }
    return (
        ScaleOffset(offset=offset, scale=scale),
        CastValue(data_type=stored.name, rounding="nearest-even", scalar_map=scalar_map),
    )


def _code_bounds(
    dtype: np.dtype[Any], lo: float, hi: float, offset: float, scale: float
) -> tuple[int, int]:
    """Integer codes of ``lo`` and ``hi``, computed with the codec's own arithmetic."""
    with np.errstate(over="ignore", invalid="ignore"):
        ends = (np.array([lo, hi], dtype=dtype) - dtype.type(offset)) * dtype.type(scale)
        if not np.isfinite(ends).all():
            raise OverflowError
        rounded = np.rint(ends.astype(np.float64))
    # Float multiplication and rounding are monotonic, so every value in [lo, hi]
    # gets a code between these two (which are exactly what the codecs compute).
    return int(rounded.min()), int(rounded.max())


def _range_probe(
    dtype: np.dtype[Any], lo: float, hi: float, offset: float, scale: float, n_codes: int
) -> npt.NDArray[Any]:
    """Values of ``dtype`` in ``[lo, hi]`` where quantization error peaks.

    The worst points lie midway between consecutive decode levels, and the
    floating-point rounding is largest where ``|x|`` is largest, i.e. at the ends of
    the range; we take both ends' levels, random levels between, and random values.
    """
    rng = np.random.default_rng(0)
    # Level indices as float64: the code count can exceed the int64 range.
    n = float(n_codes)
    first = np.arange(min(n_codes, _PROBE_LEVELS), dtype=np.float64)
    ks = np.unique(np.concatenate([first, n - 1 - first, np.floor(rng.random(_PROBE_LEVELS) * n)]))
    start = (dtype.type(lo) - dtype.type(offset)) * dtype.type(scale)
    levels = (ks + np.floor(float(start))) / float(scale) + float(offset)
    mids = levels + 0.5 / float(scale)
    values = np.concatenate(
        [
            [lo, hi],
            levels,
            mids,
            rng.uniform(lo, hi, size=_PROBE_LEVELS) if hi > lo else [lo],
        ]
    )
    values = values[(values >= lo) & (values <= hi)].astype(dtype)
    # Neighbours in ``dtype`` of each probe, still inside the range.
    up = np.nextafter(values, dtype.type(np.inf))
    down = np.nextafter(values, dtype.type(-np.inf))
    out = np.concatenate([values, up, down])
    return out[(out >= dtype.type(lo)) & (out <= dtype.type(hi))]


def plan_quantization(
    data: npt.ArrayLike | None = None,
    *,
    max_abs_error: float,
    value_range: tuple[float, float] | None = None,
    dtype: npt.DTypeLike | None = None,
    fill_value: float | None = None,
    nan: bool = True,
    posinf: bool | None = None,
    neginf: bool | None = None,
) -> QuantizationPlan:
    """Plan ``scale_offset`` + ``cast_value`` for the smallest integer storage type.

    Parameters
    ----------
    data : array-like of floats, optional
        The values to store. The plan is verified by encoding and decoding exactly
        these values through zarr-python's codecs.
    max_abs_error : float
        Every finite value must decode within this absolute error (``> 0``).
    value_range : (float, float), optional
        Instead of ``data``: the finite range ``[lo, hi]`` the values will lie in.
        The plan is then verified on probe values across that range, including the
        worst-case points midway between quantization levels. Values written later
        outside the range raise on write, except within a few codes of the reserved
        NaN/Inf codes, which they alias: plan from data when in doubt.
    dtype : dtype, optional
        The array's floating-point type (default: ``data``'s, or float64).
    fill_value : float, optional
        The array's fill value. NaN (the default) uses the reserved NaN code; a
        finite fill becomes the offset, so it is stored as code 0 and round-trips
        exactly, as the spec requires. A fill value the planned filters would not
        give back bit for bit (``-0.0``, which reads back as ``0.0``) is refused.
    nan : bool
        Reserve a code for NaN (default True; needed for a NaN fill value).
    posinf, neginf : bool, optional
        Reserve codes for +Inf / -Inf. Default: if ``data`` contains them.

    Returns
    -------
    QuantizationPlan

    Raises
    ------
    QuantizationError
        If no integer type up to 64 bits meets the bound, or the fill value does
        not survive the filters (:func:`~zarrext.quantize.verification.fill_value_change`).
    """
    if not (isinstance(max_abs_error, int | float) and math.isfinite(max_abs_error)) or (
        max_abs_error <= 0
    ):
        raise ValueError(f"max_abs_error must be a finite number > 0, got {max_abs_error!r}")
    if (data is None) == (value_range is None):
        raise ValueError("give exactly one of data or value_range")

    fill = math.nan if fill_value is None else float(fill_value)
    arr: npt.NDArray[Any] | None = None
    if data is not None:
        arr = np.asarray(data)
        ftype = float_dtype(dtype if dtype is not None else arr.dtype)
        arr = arr.astype(ftype, copy=False)
        finite = arr[np.isfinite(arr)]
        if finite.size:
            lo, hi = float(finite.min()), float(finite.max())
        else:
            lo = hi = 0.0
        if posinf is None:
            posinf = bool(np.any(arr == np.inf))
        if neginf is None:
            neginf = bool(np.any(arr == -np.inf))
    else:
        assert value_range is not None
        ftype = float_dtype(dtype if dtype is not None else np.float64)
        lo, hi = (float(ftype.type(v)) for v in value_range)
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
            raise ValueError(f"value_range must be finite with lo <= hi, got {value_range!r}")
    if math.isnan(fill):
        nan = True
    elif math.isinf(fill):
        posinf = posinf or fill > 0
        neginf = neginf or fill < 0
    special = [
        k
        for k, wanted in (("nan", nan), ("posinf", posinf), ("neginf", neginf))
        if wanted
    ]

    if math.isfinite(fill):
        offset = float(ftype.type(fill))
        lo_cov, hi_cov = min(lo, offset), max(hi, offset)
    else:
        offset = lo
        lo_cov, hi_cov = lo, hi

    probe_fill: Any = fill if not math.isnan(fill) else np.nan

    def measure(filters: tuple[ArrayArrayCodec, ...], n_codes: int, scale: float) -> float:
        if arr is not None:
            values = arr
        else:
            values = _range_probe(ftype, lo, hi, offset, scale, n_codes)
            extra = [ftype.type(v) for v, k in ((np.nan, "nan"), (np.inf, "posinf"),
                                                (-np.inf, "neginf")) if k in special]
            values = np.concatenate([values, np.array(extra, dtype=ftype)])
        try:
            return worst_error(filters, values, fill_value=probe_fill)
        except ValueError:
            return math.inf

    planned = _search(
        ftype, lo_cov, hi_cov, (lo, hi), offset, float(max_abs_error), special, fill, measure
    )
    # Spec 002: the fill value must survive the filters. A finite fill is the offset
    # (code 0) and a special one has a reserved code: -0.0 is what gets lost (to 0.0).
    problem = fill_value_change(planned.filters, ftype, fill)
    if problem is not None:
        raise QuantizationError(problem)
    return planned


def _search(
    ftype: np.dtype[Any],
    lo: float,
    hi: float,
    value_range: tuple[float, float],
    offset: float,
    bound: float,
    special: list[str],
    fill: float,
    measure: Callable[[tuple[ArrayArrayCodec, ...], int, float], float],
) -> QuantizationPlan:
    """Tighten the scale, and widen the integer type, until ``measure`` meets ``bound``."""
    finfo = np.finfo(ftype)
    # Float rounding of the decode (a division and an addition) costs about one ulp of
    # the largest magnitude; start with that much margin so one attempt usually does.
    ulp = float(np.spacing(ftype.type(max(abs(lo), abs(hi), abs(offset)))))
    margin = bound - 2 * ulp if bound > 4 * ulp else bound / 2
    scale_f = 1.0 / (2.0 * margin)
    min_index = 0
    best = math.inf
    for _ in range(_MAX_ATTEMPTS):
        scale = float(ftype.type(min(max(scale_f, float(finfo.tiny)), float(finfo.max))))
        try:
            cmin, cmax = _code_bounds(ftype, lo, hi, offset, scale)
        except OverflowError:
            break
        picked = _pick_int_type(cmin, cmax, len(special), min_index)
        if picked is None:
            break
        stored, codes = picked
        reserved = dict(zip([_SPECIAL_JSON[k] for k in special], codes, strict=True))
        filters = _build_filters(ftype, offset, scale, stored, reserved)
        worst = measure(filters, cmax - cmin + 1, scale)
        if worst <= bound:
            return QuantizationPlan(
                filters=filters,
                dtype=ftype,
                stored_dtype=stored,
                scale=scale,
                offset=offset,
                fill_value=fill,
                reserved=reserved,
                max_abs_error=bound,
                worst_error=worst,
                value_range=value_range,
            )
        best = min(best, worst)
        if math.isinf(worst):
            # Encoding failed (a code fell outside the type): try the next type.
            min_index = _INT_TYPES.index(stored) + 1
            continue
        scale_f = scale * min(max(worst / bound, 1.001), 4.0)
        if scale == float(finfo.max):
            break
    needed = (hi - lo) / (2 * bound) + 1 + len(special)
    raise QuantizationError(
        f"no integer type up to 64 bits stores {ftype} values in [{lo!r}, {hi!r}] within "
        f"max_abs_error={bound!r}: that needs about {needed:.3g} distinct codes "
        f"(2**64 = {2.0**64:.3g}) and {ftype} arithmetic adds rounding of about "
        f"{ulp:.3g}; the best worst-case error reached was {best:.3g}"
    )


def plan(
    data: npt.ArrayLike | None = None,
    *,
    max_abs_error: float,
    value_range: tuple[float, float] | None = None,
    dtype: npt.DTypeLike | None = None,
    fill_value: float | None = None,
    nan: bool = True,
    posinf: bool | None = None,
    neginf: bool | None = None,
) -> list[ArrayArrayCodec]:
    """The filter list that quantizes ``data`` (or ``value_range``) within a bound.

    A shortcut for ``list(plan_quantization(...).filters)``; see
    :func:`plan_quantization` for the parameters. Pass the result as
    ``zarr.create_array(..., filters=plan(...), fill_value=<same fill_value>)``
    (the default fill_value, NaN, matches an array created with ``fill_value=np.nan``).

    With sharding, put the filters outside the sharding codec
    (``serializer=ShardingCodec(chunk_shape=..., codecs=[...])``, ``chunks=<shard
    shape>``): zarr-python 3.4.2's ``shards=`` places them inside, and validates the
    inner codecs with fill value 0, which a plan for a range excluding 0 rejects.
    """
    return list(
        plan_quantization(
            data,
            max_abs_error=max_abs_error,
            value_range=value_range,
            dtype=dtype,
            fill_value=fill_value,
            nan=nan,
            posinf=posinf,
            neginf=neginf,
        ).filters
    )
