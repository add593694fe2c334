"""Plan ``scale_offset`` + ``cast_value`` filters that store floats as small integers.

zarr-python 3.4.2 ships both codecs (``zarr.codecs.ScaleOffset`` and
``zarr.codecs.CastValue``); this module only *chooses* their configuration:

- :func:`plan` returns the filter list for ``zarr.create_array(filters=...)`` that
  stores floating-point data in the smallest integer type while every finite value
  decodes within ``max_abs_error``. The bound is not only derived on paper: the
  candidate filters are run over the data (or, for a value range, over probe values
  that include the worst-case points between quantization levels) and the scale is
  tightened until the decoded values meet it.
- :func:`from_cf` converts netCDF/CF packing attributes (``scale_factor``,
  ``add_offset``, ``_FillValue``, ``missing_value``) into equivalent filters.

Layout of the integer codes: the offset is the smallest value (or the array's fill
value when that is finite, so that it round-trips exactly), data codes count up from
there, and the codes reserved for NaN, +Inf and -Inf sit at the far end of the
integer type, mapped in both directions through ``cast_value``'s ``scalar_map``.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
from zarr.abc.codec import ArrayArrayCodec
from zarr.codecs.cast_value import CastValue
from zarr.codecs.scale_offset import ScaleOffset
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.dtype import get_data_type_from_native_dtype

if TYPE_CHECKING:
    from zarr.abc.codec import SupportsSyncCodec
    from zarr.core.buffer import NDBuffer

__all__ = [
    "CFConversion",
    "InexactConversionWarning",
    "QuantizationError",
    "QuantizationPlan",
    "CopyReport",
    "copy_quantized",
    "from_cf",
    "plan",
    "plan_quantization",
    "roundtrip",
    "worst_error",
]

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


class InexactConversionWarning(UserWarning):
    """A CF packing cannot be expressed exactly with ``scale_offset`` + ``cast_value``."""


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


@dataclass(frozen=True)
class CFConversion:
    """The outcome of :func:`from_cf`.

    Attributes
    ----------
    filters : tuple of ArrayArrayCodec
        Filters for an array of ``dtype`` that store what the CF packing stores.
    dtype : numpy.dtype
        The unpacked floating-point type (CF: the type of ``scale_factor``).
    packed_dtype : numpy.dtype
        The packed (stored) type.
    fill_value : float
        The fill value to give the zarr array: NaN when the CF variable has a
        ``_FillValue``/``missing_value`` (they decode to NaN), else 0.
    exact : bool
        Whether decoding gives bit-for-bit what CF's ``packed * scale_factor +
        add_offset`` gives in ``dtype``.
    notes : tuple of str
        Why the conversion is not exact, and which attributes were ignored.
    """

    filters: tuple[ArrayArrayCodec, ...]
    dtype: np.dtype[Any]
    packed_dtype: np.dtype[Any]
    fill_value: float
    exact: bool
    notes: tuple[str, ...] = field(default=())


# ---------------------------------------------------------------------------
# Running the real codecs
# ---------------------------------------------------------------------------


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


def _errors(data: npt.NDArray[Any], decoded: npt.NDArray[Any]) -> float:
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
        worst = max(worst, _errors(slab, decoded))
        if math.isinf(worst):
            break
    return worst


# ---------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------


def _float_dtype(dtype: npt.DTypeLike) -> np.dtype[Any]:
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
        exactly, as the spec requires.
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
        If no integer type up to 64 bits meets the bound.
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
        ftype = _float_dtype(dtype if dtype is not None else arr.dtype)
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
        ftype = _float_dtype(dtype if dtype is not None else np.float64)
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

    return _search(
        ftype, lo_cov, hi_cov, (lo, hi), offset, float(max_abs_error), special, fill, measure
    )


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


# ---------------------------------------------------------------------------
# netCDF / CF packing
# ---------------------------------------------------------------------------


def _scalar(value: Any, name: str) -> npt.NDArray[Any]:
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"CF attribute {name} must be a single value, got {value!r}")
    return arr.reshape(())


def _cf_unpacked_dtype(attrs: Mapping[str, Any]) -> np.dtype[Any]:
    # CF: the unpacked type is the type of scale_factor/add_offset; Python floats
    # (as netCDF readers of JSON attributes give) mean float64.
    for name in ("scale_factor", "add_offset"):
        if name in attrs:
            dt = np.asarray(attrs[name]).dtype
            if dt.kind == "f":
                return dt.newbyteorder("=")
    return np.dtype(np.float64)


def from_cf(
    attrs: Mapping[str, Any],
    *,
    packed_dtype: npt.DTypeLike | None = None,
    dtype: npt.DTypeLike | None = None,
    warn: bool = True,
) -> CFConversion:
    """Filters equivalent to a netCDF/CF packed variable.

    CF unpacks with ``unpacked = packed * scale_factor + add_offset`` and treats
    packed values equal to ``_FillValue`` or ``missing_value`` as missing. The
    equivalent zarr array has the unpacked type and the filters
    ``scale_offset(offset=add_offset, scale=1/scale_factor)`` and
    ``cast_value(data_type=<packed>, scalar_map=NaN <-> _FillValue)``.

    Parameters
    ----------
    attrs : mapping
        The variable's attributes (or an xarray ``encoding`` dict): ``scale_factor``,
        ``add_offset``, ``_FillValue``, ``missing_value``, ``_Unsigned``, ``dtype``.
    packed_dtype : dtype, optional
        The packed integer type; default ``attrs["dtype"]``, else the type of
        ``_FillValue``/``missing_value``.
    dtype : dtype, optional
        The unpacked type; default the type of ``scale_factor``/``add_offset``.
    warn : bool
        Emit :class:`InexactConversionWarning` when the conversion is not exact.

    Returns
    -------
    CFConversion
        ``notes`` says what is not exact and which attributes were not used.
    """
    notes: list[str] = []
    if packed_dtype is None:
        packed_dtype = attrs.get("dtype")
    if packed_dtype is None:
        for name in ("_FillValue", "missing_value"):
            if name in attrs and np.asarray(attrs[name]).dtype.kind in "iu":
                packed_dtype = np.asarray(attrs[name]).dtype
                break
    if packed_dtype is None:
        raise ValueError(
            "from_cf: the packed data type is unknown; pass packed_dtype= or include "
            "'dtype' (or an integer _FillValue) in attrs"
        )
    packed = np.dtype(packed_dtype).newbyteorder("=")
    unsigned = str(attrs.get("_Unsigned", "false")).lower() == "true"
    if unsigned and packed.kind == "i":
        packed = np.dtype(f"u{packed.itemsize}")
    if packed.kind not in "iuf":
        raise ValueError(f"from_cf: packed data type {packed} is not an integer or float type")
    unpacked = _float_dtype(dtype) if dtype is not None else _cf_unpacked_dtype(attrs)

    sf = unpacked.type(_scalar(attrs.get("scale_factor", 1.0), "scale_factor"))
    ao = unpacked.type(_scalar(attrs.get("add_offset", 0.0), "add_offset"))
    if sf == 0 or not np.isfinite(sf) or not np.isfinite(ao):
        raise ValueError(f"from_cf: scale_factor={sf!r}, add_offset={ao!r} cannot be inverted")
    with np.errstate(over="ignore"):
        inv = unpacked.type(1) / sf
    exact = True
    mantissa, _ = math.frexp(float(sf))
    if abs(mantissa) != 0.5 or not np.isfinite(inv) or unpacked.type(1) / inv != sf:
        # Decoding divides by 1/scale_factor where CF multiplies by scale_factor: the
        # two agree bit for bit only when scale_factor is a power of two.
        exact = False
        notes.append(
            f"scale_factor={float(sf)!r} is not a power of two: scale_offset decodes "
            f"code / {float(inv)!r} where CF computes code * {float(sf)!r}; results may "
            f"differ by about one ulp of {unpacked}"
        )

    # Packed values that mean "missing": decode them to NaN; encode NaN to _FillValue.
    missing: list[Any] = []
    for name in ("_FillValue", "missing_value"):
        if attrs.get(name) is None:
            continue
        for v in np.atleast_1d(np.asarray(attrs[name])).tolist():
            if packed.kind in "iu":
                value: Any = int(v)
                if unsigned and value < 0:
                    # _Unsigned variables keep their fill in the signed type's bits.
                    value += 1 << (8 * packed.itemsize)
            else:
                value = float(v)
            if value not in missing:
                missing.append(value)
    if packed.kind in "iu":
        info = np.iinfo(packed)
        for value in missing:
            if not int(info.min) <= value <= int(info.max):
                raise ValueError(
                    f"from_cf: missing/fill value {value} does not fit packed type {packed}"
                )
    scalar_map: Any = None
    fill_value = 0.0
    if missing and packed.kind in "iu":
        scalar_map = {
            "encode": [("NaN", missing[0])],
            "decode": [(m, "NaN") for m in missing],
        }
        fill_value = math.nan
    elif missing:
        fill_value = math.nan
        notes.append("float packed type: missing values stay as they are (no NaN mapping)")
    for name in ("valid_min", "valid_max", "valid_range"):
        if name in attrs:
            notes.append(f"{name} is not applied (values outside it are kept, not masked)")
    if packed.kind in "iu":
        notes.append(
            "encoding rounds (x - add_offset) * (1/scale_factor) to nearest-even and raises "
            f"for values outside {packed}"
        )

    filters: list[ArrayArrayCodec] = []
    if sf != 1 or ao != 0:
        filters.append(ScaleOffset(offset=float(ao), scale=float(inv)))
    filters.append(CastValue(data_type=packed.name, scalar_map=scalar_map))
    if not exact and warn:
        warnings.warn(
            "from_cf: conversion is not exact: " + "; ".join(notes[:1]),
            InexactConversionWarning,
            stacklevel=2,
        )
    return CFConversion(
        filters=tuple(filters),
        dtype=unpacked,
        packed_dtype=packed,
        fill_value=fill_value,
        exact=exact,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------------
# Copying a whole array quantized (behind ``zarrext quantize``)
# ---------------------------------------------------------------------------


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

    from zarrext.outputs import check_disjoint, staged_output

    check_disjoint(source, output)
    src = zarr.open_array(source, mode="r")
    ftype = _float_dtype(src.dtype)
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
                worst = max(worst, _errors(data, np.asarray(dst[sl])))
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
