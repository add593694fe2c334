"""Planning: the smallest integer type and a scale that meet ``max_abs_error``.

:func:`plan_quantization` (for a value range) and :func:`plan` (for data) choose the
``scale_offset`` + ``cast_value`` configuration and verify it with the real codecs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from zarr.abc.codec import ArrayArrayCodec
from zarr.codecs.cast_value import CastValue
from zarr.codecs.scale_offset import ScaleOffset

from zarrext.codecs.filter_roundtrip import fill_value_change, fill_value_read_back, worst_error
from zarrext.codecs.quantized_writes import PlannedFilters, PlannedRange

__all__ = [
    "HEADROOM_FRACTION",
    "HEADROOM_MIN_CODES",
    "QuantizationError",
    "QuantizationPlan",
    "float_dtype",
    "headroom_codes",
    "plan",
    "plan_quantization",
    "range_values",
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
# In the list of special values: a finite fill value with a code of its own.
_FILL = "fill"
# How far from its scaled value a fill's decode-map value is looked for (in ulps).
_FILL_NEIGHBOURS = 16
_PROBE_LEVELS = 4096

HEADROOM_FRACTION = 0.125
"""Headroom on each side of the planned range, as a fraction of its codes."""
HEADROOM_MIN_CODES = 8
"""Headroom on each side of the planned range, at least (in codes, quantization steps)."""


def headroom_codes(range_codes: int) -> int:
    """Codes left free on each side of a planned range ``range_codes`` codes wide:
    ``max(HEADROOM_MIN_CODES, ceil(HEADROOM_FRACTION * range_codes))``."""
    return max(HEADROOM_MIN_CODES, math.ceil(HEADROOM_FRACTION * range_codes))


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
        Integer codes reserved for ``"NaN"``, ``"+Infinity"``, ``"-Infinity"``, and
        for a finite fill value with a code of its own (named as its type prints it,
        ``"-9999.0"``).
    max_abs_error : float
        The requested bound.
    worst_error : float
        The largest decode error measured while verifying the plan.
    value_range : tuple of float
        The finite range the plan covers.
    headroom : tuple of float
        How far below and above ``value_range`` values still decode within
        ``max_abs_error`` (verified like the range itself) and stay clear of the
        reserved codes, whoever writes them.
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
    headroom: tuple[float, float] = (0.0, 0.0)

    @property
    def planned(self) -> PlannedRange:
        """The range, bound and headroom, as an array's attributes record them
        (``PlannedRange.recorded_in(attributes)``)."""
        return PlannedRange(self.value_range, self.max_abs_error, self.headroom)


def range_values(values: npt.NDArray[Any], fill: float) -> npt.NDArray[Any]:
    """The elements of ``values`` a plan's range covers: the finite ones, less those
    equal to a finite ``fill`` (planned for on their own: the offset, or a code of
    their own)."""
    finite = values[np.isfinite(values)]
    if math.isfinite(fill):
        finite = finite[finite != values.dtype.type(fill)]
    return finite


def float_dtype(dtype: npt.DTypeLike) -> np.dtype[Any]:
    """``dtype`` in native byte order, if it is a type quantize plans for (float16/32/64)."""
    dt = np.dtype(dtype).newbyteorder("=")
    if dt not in _FLOAT_TYPES:
        raise TypeError(f"quantize plans floating-point data (float16/32/64), got {dt}")
    return dt


def _safe_codes(int_type: np.dtype[Any], n_reserved: int, top: bool) -> tuple[int, int, list[int]]:
    """``(lowest, highest, reserved)``: the codes of ``int_type`` left for values when
    ``n_reserved`` codes are reserved at its top (or bottom) end, and those codes."""
    info = np.iinfo(int_type)
    low, high = int(info.min), int(info.max)
    if top:
        return low, high - n_reserved, [high - i for i in range(n_reserved)]
    return low + n_reserved, high, [low + i for i in range(n_reserved)]


def _fits(lowest: int, highest: int, data: tuple[int, int], cover: tuple[int, int],
          headroom: int) -> bool:
    """Whether the data codes, ``headroom`` codes on each side of them, and the codes
    ``cover`` (the data and a finite fill) lie within ``[lowest, highest]``."""
    return (lowest <= min(data[0] - headroom, cover[0])
            and max(data[1] + headroom, cover[1]) <= highest)


def _shift(lowest: int, highest: int, data: tuple[int, int], cover: tuple[int, int],
           headroom: int) -> int | None:
    """The shift of the codes closest to 0 that fits the data and its headroom, and the
    codes ``cover``, within ``[lowest, highest]`` (a free offset moves by ``-shift /
    scale``), with a code of slack each side for the rounding of the moved offset; None
    if none does."""
    if _fits(lowest, highest, data, cover, headroom):
        return 0
    least = lowest - min(data[0] - headroom, cover[0]) + 1
    most = highest - max(data[1] + headroom, cover[1]) - 1
    if least > most:
        return None
    return least if least > 0 else most


class _Placement(NamedTuple):
    """Where :func:`_place` puts the codes."""

    stored: np.dtype[Any]
    reserved: list[int]  # the reserved codes, in the order of the special values
    offset: float
    data: tuple[int, int]  # the data's codes
    headroom: int
    fill_map: tuple[float, float] | None  # a fill with its own code: _fill_mapping's


def _place(
    ftype: np.dtype[Any],
    scale: float,
    offset: float,
    ranges: tuple[tuple[float, float], tuple[float, float]],
    n_reserved: int,
    free_offset: bool,
    min_index: int,
    own_fill: float | None = None,
) -> _Placement | None:
    """The smallest integer type holding the data's codes, headroom on each side, the
    fill's code and ``n_reserved`` reserved codes.

    ``ranges`` is ``((lo, hi), (lo_cov, hi_cov))``: the data's range and the range
    covering the data, a finite fill and (``cover_zero``) 0. Reserved codes go at the
    far end of the type, after the headroom. With ``free_offset`` (a NaN fill, or a
    fill with a code of its own) the offset moves the codes where they fit, as little
    as it can (a moved offset adds float rounding). ``own_fill``: the finite fill
    given one of the reserved codes; the offset moves by a few ulps, if it must, for
    ``scale_offset`` to give the fill back exactly (:func:`_fill_mapping`).
    """
    (lo, hi), (lo_cov, hi_cov) = ranges
    data = _code_bounds(ftype, lo, hi, offset, scale)
    cover = _code_bounds(ftype, lo_cov, hi_cov, offset, scale)
    headroom = headroom_codes(data[1] - data[0])

    def at(o: float) -> tuple[float, tuple[int, int], tuple[int, int],
                              tuple[float, float] | None] | None:
        fill_map = None
        if own_fill is not None:
            found = _fill_mapping(ftype, own_fill, o, scale)
            if found is None:
                return None
            o, fill_map = found
        try:
            return (o, _code_bounds(ftype, lo, hi, o, scale),
                    _code_bounds(ftype, lo_cov, hi_cov, o, scale), fill_map)
        except OverflowError:
            return None

    unmoved = at(offset)  # whatever the type
    for int_type in _INT_TYPES[min_index:]:
        for top in (True, False):
            lowest, highest, reserved = _safe_codes(int_type, n_reserved, top)
            candidates = [unmoved]
            if free_offset:
                shift = _shift(lowest, highest, data, cover, headroom)
                if shift is not None and shift != 0:
                    candidates.append(at(float(ftype.type(offset - shift / scale))))
            for placed in candidates:
                if placed is not None and _fits(lowest, highest, *placed[1:3], headroom):
                    o, placed_data, _, fill_map = placed
                    return _Placement(int_type, reserved, o, placed_data, headroom, fill_map)
    return None


def _headroom_ends(
    ftype: np.dtype[Any], data: tuple[int, int], headroom: int, offset: float, scale: float
) -> tuple[float, float]:
    """The values of the codes ``headroom`` beyond the data's, as the decoder gives
    them (``code / scale + offset`` in ``ftype``)."""
    finfo = np.finfo(ftype)
    codes = np.array([data[0] - headroom, data[1] + headroom], dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        ends = (codes.astype(ftype) / ftype.type(scale)) + ftype.type(offset)
    ends = np.clip(np.nan_to_num(ends, posinf=finfo.max, neginf=-finfo.max), -finfo.max,
                   finfo.max)
    return float(ends[0]), float(ends[1])


def _fill_mapping(
    ftype: np.dtype[Any], fill: float, offset: float, scale: float
) -> tuple[float, tuple[float, float]] | None:
    """``(offset, (key, back))`` for a fill with a code of its own: ``key`` is what
    ``scale_offset`` makes of the fill (``cast_value``'s encode map sees that), ``back``
    what the decode map gives for its code so that ``scale_offset`` decodes it to the
    fill bit for bit: ``key`` or a neighbour of it, with ``offset`` or a neighbour of
    it (the decode's rounding reaches some floats only from some offsets). None if
    none near them does, or ``key`` is not finite."""
    f, s = ftype.type(fill), ftype.type(scale)
    lower = higher = ftype.type(offset)
    for _ in range(_FILL_NEIGHBOURS):
        for o in (lower, higher):
            with np.errstate(all="ignore"):
                key = (f - o) * s
            if not np.isfinite(key):
                return None
            below = above = key
            for _ in range(_FILL_NEIGHBOURS):
                for back in (below, above):
                    with np.errstate(all="ignore"):
                        if (back / s + o).tobytes() == f.tobytes():  # -0.0 is not 0.0
                            return float(o), (float(key), float(back))
                below = np.nextafter(below, ftype.type(-np.inf))
                above = np.nextafter(above, ftype.type(np.inf))
        lower = np.nextafter(lower, ftype.type(-np.inf))
        higher = np.nextafter(higher, ftype.type(np.inf))
    return None


def _build_filters(
    dtype: np.dtype[Any],
    offset: float,
    scale: float,
    stored: np.dtype[Any],
    reserved: dict[str, int],
    fill_map: tuple[float, float] | None = None,
) -> tuple[ArrayArrayCodec, ...]:
    """``(scale_offset, cast_value)``; ``reserved``: the special values' codes (and the
    fill's, mapped as ``fill_map`` says, when it has a code of its own)."""
    scalar_map: Any = None
    if reserved:
        encode: list[Any] = []
        decode: list[Any] = []
        for name, code in reserved.items():
            key: str | float
            back: str | float
            if name in _SPECIAL_JSON.values():
                key = back = name
            else:  # the fill's own code
                assert fill_map is not None
                key, back = fill_map
            encode.append((key, code))
            decode.append((code, back))
        scalar_map = {"encode": encode, "decode": decode}
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
    cover_zero: bool = False,
) -> QuantizationPlan:
    """Plan ``scale_offset`` + ``cast_value`` for the smallest integer storage type.

    The integer codes are laid out as: the planned range's codes, **headroom** on
    each side of them, and the codes reserved for NaN/+Inf/-Inf at the far end of
    the type. The headroom is ``max(HEADROOM_MIN_CODES, ceil(HEADROOM_FRACTION *
    n))`` codes on each side for a range ``n`` codes wide: an eighth of the range,
    at least 8 quantization steps (about ``16 * max_abs_error``). The smallest
    integer type that holds all three is chosen, a wider one when the headroom does
    not fit (the offset moves the codes within the type, as little as it can, when
    the fill value is NaN). The headroom is verified like the range: values up to
    ``headroom`` beyond either end decode within ``max_abs_error``, whoever writes
    them, zarr-python without zarrext included. Farther out a plain writer may still
    meet free codes (stored within about half a step), then ``cast_value``'s
    out-of-range error at one end and, at the other, the reserved codes (read back
    as NaN or an infinity); zarrext's writers refuse every value that would not
    come back within the bound (:mod:`zarrext.codecs.quantized_writes`), once the plan is
    recorded in the array's attributes (:attr:`QuantizationPlan.planned`), from the
    filters alone otherwise.

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
        beyond the range and its headroom may meet the reserved codes or
        ``cast_value``'s out-of-range error (see above): plan from data, or for a
        range wide enough, when in doubt.
    dtype : dtype, optional
        The array's floating-point type (default: ``data``'s, or float64).
    fill_value : float, optional
        The array's fill value. NaN (the default) uses the reserved NaN code; a
        finite fill becomes the offset, so it is stored as code 0 and round-trips
        exactly, as the spec requires. A finite fill outside the values' range that
        would thus take a wider integer type (netCDF's ``-9999`` beside values in
        ``[900, 1100]``) gets a reserved code of its own instead, beside NaN's:
        ``cast_value``'s ``scalar_map`` maps its scaled value to that code and back
        to a value ``scale_offset`` decodes to the fill bit for bit (the offset
        moved by a few ulps where the division's rounding needs it). ``data``'s
        elements equal to a finite fill are not part of its range: they are stored
        as the fill. A fill value the planned filters would not give back bit for
        bit (``-0.0``, which reads back as ``0.0``) is refused.
    nan : bool
        Reserve a code for NaN (default True; needed for a NaN fill value).
    posinf, neginf : bool, optional
        Reserve codes for +Inf / -Inf. Default: if ``data`` contains them.
    cover_zero : bool
        Also give 0.0 a code of the integer type, outside the reserved ones (the
        planned range, its headroom and the bound are unchanged). Needed for filters
        inside a sharding codec (``shards=``, or ``ShardingCodec(codecs=[*filters,
        ...])``): zarr-python 3.4.2 checks a sharding codec's inner codecs with fill
        value 0.0, whatever the array's, each time it creates or opens the array, and
        ``cast_value`` refuses a 0.0 whose code lies outside its type. For a range far
        from 0 (measured in steps of ``2 * max_abs_error``) the codes then need a wider
        integer type. A writer without zarrext storing a value between 0 and the range
        gets a free code (within about half a step); zarrext's writers still refuse
        values beyond the planned range's headroom that do not come back within the
        bound.

    Returns
    -------
    QuantizationPlan

    Raises
    ------
    QuantizationError
        If no integer type up to 64 bits holds the range and its headroom within
        the bound, or the fill value does not survive the filters
        (:func:`~zarrext.codecs.filter_roundtrip.fill_value_change`).
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
        finite = range_values(arr, fill)
        if finite.size:
            lo, hi = float(finite.min()), float(finite.max())
        else:
            lo = hi = float(ftype.type(fill)) if math.isfinite(fill) else 0.0
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

    probe_fill: Any = fill if not math.isnan(fill) else np.nan
    extra = np.array(
        [v for v, k in ((np.nan, "nan"), (np.inf, "posinf"), (-np.inf, "neginf"))
         if k in special] + ([fill] if math.isfinite(fill) else []),
        dtype=ftype,
    )

    def measure(
        filters: tuple[ArrayArrayCodec, ...],
        scale: float,
        offset: float,
        ends: tuple[float, float],
        codes: tuple[int, int],
        headroom: int,
    ) -> float:
        """The worst error over the data (or probes of the range) and probes of the
        headroom on each side (``ends``: its outer values)."""
        if arr is not None:  # the data as it is (no copy), then the headroom's probes
            parts = [
                arr,
                np.concatenate([
                    _range_probe(ftype, ends[0], lo, offset, scale, headroom + 1),
                    _range_probe(ftype, hi, ends[1], offset, scale, headroom + 1),
                ]),
            ]
        else:
            n_codes = codes[1] - codes[0] + 2 * headroom + 1
            parts = [np.concatenate(
                [_range_probe(ftype, ends[0], ends[1], offset, scale, n_codes), extra]
            )]
        try:
            return max(worst_error(filters, part, fill_value=probe_fill) for part in parts)
        except ValueError:
            return math.inf

    def search(fill_code: bool) -> QuantizationPlan:
        """The plan with a finite fill as the offset (code 0), or (``fill_code``, or a
        special fill) with a reserved code of its own and the offset free."""
        at_offset = math.isfinite(fill) and not fill_code
        offset = float(ftype.type(fill)) if at_offset else lo
        lo_cov, hi_cov = (min(lo, offset), max(hi, offset)) if at_offset else (lo, hi)
        if cover_zero:
            lo_cov, hi_cov = min(lo_cov, 0.0), max(hi_cov, 0.0)
        # cover_zero adds about max|value| / (2 * bound) codes at most: for a bound
        # above the float rounding of the largest value, fewer than 2**53, in 64 bits
        return _search(
            ftype, (lo_cov, hi_cov), (lo, hi), offset, not at_offset, float(max_abs_error),
            special + ([_FILL] if fill_code else []), fill, measure,
        )

    try:
        planned: QuantizationPlan | None = search(fill_code=False)
        refusal = None
    except QuantizationError as e:
        planned, refusal = None, e
    if math.isfinite(fill) and not lo <= fill <= hi:
        # a fill far from the values: a code of its own may take a narrower type
        try:
            own = search(fill_code=True)
        except QuantizationError as e:
            own = None
            if refusal is not None:
                refusal = QuantizationError(
                    f"{refusal}; nor with a code of its own for the fill value: {e}")
        if own is not None and (
            planned is None or own.stored_dtype.itemsize < planned.stored_dtype.itemsize
        ):
            planned = own
    if planned is None:
        assert refusal is not None
        raise refusal
    # Spec 002: the fill value must survive the filters. A finite fill is the offset
    # (code 0) or has a reserved code, as a special one: -0.0 is what gets lost (to 0.0).
    problem = fill_value_change(planned.filters, ftype, fill)
    if problem is None and cover_zero:
        problem = _zero_problem(planned.filters, ftype)
    if problem is not None:
        raise QuantizationError(problem)
    return planned


def _zero_problem(filters: tuple[ArrayArrayCodec, ...], ftype: np.dtype[Any]) -> str | None:
    """Why ``filters`` cannot take 0.0 as zarr-python validates a sharding codec's inner
    codecs (the fill value 0.0 through each codec's ``resolve_metadata``, which
    ``fill_value_read_back`` runs too), or why it would read back as NaN or an
    infinity; None when it reads back finite."""
    try:
        back = fill_value_read_back(filters, ftype, 0.0)
    except (ValueError, TypeError, ArithmeticError) as e:  # pragma: no cover - planned away
        return f"the planned filters cannot encode 0.0 (cover_zero): {e}"
    if not np.isfinite(back).all():  # pragma: no cover - the cover excludes reserved codes
        return f"the planned filters store 0.0 on a reserved code (cover_zero): it reads {back}"
    return None


def _search(
    ftype: np.dtype[Any],
    cover: tuple[float, float],
    value_range: tuple[float, float],
    offset: float,
    free_offset: bool,
    bound: float,
    special: list[str],
    fill: float,
    measure: Callable[..., float],
) -> QuantizationPlan:
    """Tighten the scale, and widen the integer type, until ``measure`` meets ``bound``."""
    finfo = np.finfo(ftype)
    lo, hi = value_range
    # Float rounding of the decode (a division and an addition) costs about one ulp of
    # the largest magnitude, headroom included; start with that much margin so one
    # attempt usually does.
    reach = (hi - lo) * HEADROOM_FRACTION + 2 * HEADROOM_MIN_CODES * bound
    largest = max(abs(cover[0]), abs(cover[1]), abs(offset)) + 2 * reach
    ulp = float(np.spacing(ftype.type(min(largest, float(finfo.max)))))
    margin = bound - 2 * ulp if bound > 4 * ulp else bound / 2
    scale_f = 1.0 / (2.0 * margin)
    min_index = 0
    best = math.inf
    own_fill = fill if _FILL in special else None
    for _ in range(_MAX_ATTEMPTS):
        scale = float(ftype.type(min(max(scale_f, float(finfo.tiny)), float(finfo.max))))
        try:
            placed = _place(ftype, scale, offset, (value_range, cover), len(special),
                            free_offset, min_index, own_fill)
        except OverflowError:
            break
        if placed is None:
            if own_fill is not None and _fill_mapping(ftype, fill, offset, scale) is None:
                raise QuantizationError(
                    f"scale_offset (scale {scale!r}) takes the fill value {fill!r} where "
                    f"{ftype} cannot give it back exactly")
            break
        stored, codes, moved, data_codes, headroom, fill_map = placed
        names = [str(ftype.type(fill)) if k == _FILL else _SPECIAL_JSON[k] for k in special]
        reserved = dict(zip(names, codes, strict=True))
        filters = _build_filters(ftype, moved, scale, stored, reserved, fill_map)
        ends = _headroom_ends(ftype, data_codes, headroom, moved, scale)
        worst = measure(filters, scale, moved, ends, data_codes, headroom)
        if worst <= bound:
            return QuantizationPlan(
                filters=filters,
                dtype=ftype,
                stored_dtype=stored,
                scale=scale,
                offset=moved,
                fill_value=fill,
                reserved=reserved,
                max_abs_error=bound,
                worst_error=worst,
                value_range=value_range,
                headroom=(max(lo - ends[0], 0.0), max(ends[1] - hi, 0.0)),
            )
        best = min(best, worst)
        if math.isinf(worst):
            # Encoding failed (a code fell outside the type): try the next type.
            min_index = _INT_TYPES.index(stored) + 1
            continue
        scale_f = scale * min(max(worst / bound, 1.001), 4.0)
        if scale == float(finfo.max):
            break
    codes_needed = (cover[1] - cover[0]) / (2 * bound)
    needed = codes_needed + 2 * max(HEADROOM_MIN_CODES, codes_needed * HEADROOM_FRACTION)
    needed += 1 + len(special)
    raise QuantizationError(
        f"no integer type up to 64 bits stores {ftype} values in [{cover[0]!r}, {cover[1]!r}] "
        f"within max_abs_error={bound!r}: that needs about {needed:.3g} distinct codes, "
        f"headroom included (2**64 = {2.0**64:.3g}), and {ftype} arithmetic adds rounding "
        f"of about {ulp:.3g}; the best worst-case error reached was {best:.3g}"
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
    cover_zero: bool = False,
) -> PlannedFilters:
    """The filter list that quantizes ``data`` (or ``value_range``) within a bound.

    ``plan_quantization(...).filters`` as a list; see :func:`plan_quantization` for
    the parameters. Pass the result as ``zarrext.create_array(..., filters=plan(...),
    fill_value=<same fill_value>)`` (the default fill_value, NaN, matches an array
    created with ``fill_value=np.nan``): the list carries the plan
    (:class:`~zarrext.codecs.quantized_writes.PlannedFilters`), which
    :func:`zarrext.create_array` and xarray's ``to_zarr`` record in the array's
    attributes so that zarrext's later writers check the planned bound too.
    ``zarr.create_array`` takes it as well, and records nothing (add
    ``attributes=plan_quantization(...).planned.recorded_in({})`` to record it).

    With sharding, pass ``cover_zero=True`` and ``shards=`` (zarr-python puts the
    filters inside the sharding codec, where they belong: each inner chunk is read on
    its own). Without it, zarr-python 3.4.2 refuses to create (or open) the array for
    a plan whose range excludes 0 (:func:`plan_quantization`'s ``cover_zero``).
    Filters outside the sharding codec work without it, but then zarr-python warns
    that partial reads are disabled, and reads and writes whole shards.
    """
    planned = plan_quantization(
        data,
        max_abs_error=max_abs_error,
        value_range=value_range,
        dtype=dtype,
        fill_value=fill_value,
        nan=nan,
        posinf=posinf,
        neginf=neginf,
        cover_zero=cover_zero,
    )
    return PlannedFilters(planned.filters, planned.planned, planned.fill_value)
