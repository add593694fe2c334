"""Spec 002's arithmetic, element by element, exactly as the spec's text says.

``scale_offset`` computes in the array's own data type (numpy scalars of that type:
one IEEE rounding per operation for floats, exact Python integers range-checked for
integers). ``cast_value`` follows the spec's order: ``scalar_map``, then exact
representability, then ``rounding`` and ``out_of_range``, else an error; rounding is
done on exact rationals (:class:`fractions.Fraction`), never through a float.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

ROUNDING_MODES = ("nearest-even", "towards-zero", "towards-positive", "towards-negative",
                  "nearest-away")


class Unrepresentable(ValueError):
    """A value the spec says MUST be an error."""


# -- scale_offset ------------------------------------------------------------------


def _int_range(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _float_op(dtype: np.dtype, result: Any, operands: Sequence[Any]) -> Any:
    """``result`` (a numpy scalar of ``dtype``), refused when finite operands overflowed."""
    if not np.isfinite(result) and all(np.isfinite(x) for x in operands):
        raise Unrepresentable(f"{result!r} from finite operands {operands!r} in {dtype}")
    return result


def scale_offset_encode(values: np.ndarray, offset: Any, scale: Any) -> np.ndarray:
    """``(in - offset) * scale`` in ``values.dtype``; unrepresentable steps raise."""
    dtype = values.dtype
    out = np.empty_like(values)
    flat = out.reshape(-1)
    if dtype.kind == "f":
        o, s = dtype.type(offset), dtype.type(scale)
        with np.errstate(over="ignore", invalid="ignore"):
            for i, x in enumerate(values.reshape(-1)):
                d = _float_op(dtype, dtype.type(x) - o, (x, o))
                flat[i] = _float_op(dtype, d * s, (d, s))
        return out
    low, high = _int_range(dtype)
    for i, x in enumerate(values.reshape(-1).tolist()):
        d = x - int(offset)
        if not low <= d <= high:
            raise Unrepresentable(f"{x} - {offset} = {d} is outside {dtype}")
        r = d * int(scale)
        if not low <= r <= high:
            raise Unrepresentable(f"({x} - {offset}) * {scale} = {r} is outside {dtype}")
        flat[i] = r
    return out


def scale_offset_decode(values: np.ndarray, offset: Any, scale: Any) -> np.ndarray:
    """``(in / scale) + offset`` in ``values.dtype``; unrepresentable steps raise."""
    dtype = values.dtype
    out = np.empty_like(values)
    flat = out.reshape(-1)
    if dtype.kind == "f":
        o, s = dtype.type(offset), dtype.type(scale)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for i, x in enumerate(values.reshape(-1)):
                q = _float_op(dtype, dtype.type(x) / s, (x, s))
                flat[i] = _float_op(dtype, q + o, (q, o))
        return out
    low, high = _int_range(dtype)
    for i, x in enumerate(values.reshape(-1).tolist()):
        q = Fraction(x, int(scale))
        if q.denominator != 1:
            raise Unrepresentable(f"{x} / {scale} is not an integer")
        r = int(q) + int(offset)
        if not low <= r <= high:
            raise Unrepresentable(f"{x} / {scale} + {offset} = {r} is outside {dtype}")
        flat[i] = r
    return out


# -- cast_value ----------------------------------------------------------------------


def _round_to_int(q: Fraction, mode: str) -> int:
    floor = q.numerator // q.denominator
    if q == floor:
        return floor
    ceil = floor + 1
    if mode == "towards-positive":
        return ceil
    if mode == "towards-negative":
        return floor
    if mode == "towards-zero":
        return floor if q > 0 else ceil
    twice = 2 * (q - floor)  # 2 * fractional part, in (0, 2)
    if twice < 1:
        return floor
    if twice > 1:
        return ceil
    if mode == "nearest-even":
        return floor if floor % 2 == 0 else ceil
    if mode == "nearest-away":
        return ceil if q > 0 else floor
    raise ValueError(f"unknown rounding mode {mode!r}")


def _float_neighbours(q: Fraction, dtype: np.dtype) -> tuple[Any, Any]:
    """The two values of float ``dtype`` around ``q`` (``q`` within its finite range)."""
    nearest = dtype.type(float(q)) if dtype.itemsize >= 8 else dtype.type(_to_float64_exact(q))
    if Fraction(float(nearest)) <= q:
        lower = nearest
        upper = np.nextafter(nearest, dtype.type(np.inf))
    else:
        upper = nearest
        lower = np.nextafter(nearest, dtype.type(-np.inf))
    return lower, upper


def _to_float64_exact(q: Fraction) -> float:
    """``q`` as float64 (exact for every value the corpus narrows to float32/16)."""
    f = float(q)
    if Fraction(f) != q:
        # float(q) rounds once; rounding that again to float32 could double-round, so
        # the corpus only narrows values that float64 holds exactly.
        raise ValueError(f"{q} is not a float64 value")
    return f


def _round_to_float(q: Fraction, dtype: np.dtype, mode: str) -> Any:
    lower, upper = _float_neighbours(q, dtype)
    lo, hi = Fraction(float(lower)), Fraction(float(upper))
    if lo == q:
        return lower
    if mode == "towards-positive":
        return upper
    if mode == "towards-negative":
        return lower
    if mode == "towards-zero":
        return lower if q > 0 else upper
    if q - lo < hi - q:
        return lower
    if q - lo > hi - q:
        return upper
    if mode == "nearest-even":
        bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
        return lower if int(np.array(lower, dtype).view(bits)) % 2 == 0 else upper
    if mode == "nearest-away":
        return upper if q > 0 else lower
    raise ValueError(f"unknown rounding mode {mode!r}")


def _as_scalar(value: Any, dtype: np.dtype) -> Any:
    """A JSON ``scalar_map`` entry (number or "NaN"/"Infinity"/"-Infinity") in ``dtype``."""
    names = {"NaN": math.nan, "Infinity": math.inf, "+Infinity": math.inf,
             "-Infinity": -math.inf}
    if isinstance(value, str):
        value = names[value]
    return dtype.type(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float | np.floating) and isinstance(b, float | np.floating):
        return bool((np.isnan(a) and np.isnan(b)) or a == b)
    return bool(a == b)


def cast_scalar(x: Any, source: np.dtype, target: np.dtype, *,
                rounding: str = "nearest-even", out_of_range: str | None = None,
                scalar_map: Sequence[tuple[Any, Any]] = ()) -> Any:
    """One element of ``source`` cast to ``target`` by spec 002's rules.

    ``scalar_map`` holds this direction's ``[input, output]`` pairs: inputs in
    ``source``, outputs in ``target``. Raises :class:`Unrepresentable`.
    """
    source_float = source.kind == "f"
    for key, mapped in scalar_map:
        if _same(x, _as_scalar(key, source)):
            return _as_scalar(mapped, target)
    if source_float and np.isnan(x):
        if target.kind == "f":
            return target.type(np.nan)
        raise Unrepresentable(f"NaN has no {target} value and scalar_map maps none")
    if source_float and np.isinf(x):
        if target.kind == "f":
            return target.type(x)
        raise Unrepresentable(f"{x} has no {target} value and scalar_map maps none")
    if target.kind == "f":
        if source_float and x == 0:
            return target.type(x)  # keeps the sign of zero
        q = Fraction(float(x)) if source_float else Fraction(int(x))
        finfo = np.finfo(target)
        biggest = Fraction(float(finfo.max))
        if abs(q) > biggest:
            if out_of_range == "clamp":
                return target.type(finfo.max if q > 0 else -finfo.max)
            raise Unrepresentable(f"{x} is outside {target}'s range")
        return _round_to_float(q, target, rounding)
    # integer target
    low, high = _int_range(target)
    q = Fraction(float(x)) if source_float else Fraction(int(x))
    n = _round_to_int(q, rounding)
    if low <= n <= high:
        return target.type(n)
    if out_of_range == "clamp":
        return target.type(low if n < low else high)
    if out_of_range == "wrap":
        span = high - low + 1
        return target.type((n - low) % span + low)
    raise Unrepresentable(f"{x} is outside {target}'s range [{low}, {high}]")


def cast_array(values: np.ndarray, target: Any, **rules: Any) -> np.ndarray:
    """Every element of ``values`` cast to ``target`` with :func:`cast_scalar`."""
    target = np.dtype(target)
    out = np.empty(values.shape, target)
    flat = out.reshape(-1)
    for i, x in enumerate(values.reshape(-1)):
        scalar = x.item() if values.dtype.kind in "iub" else x
        flat[i] = cast_scalar(scalar, values.dtype, target, **rules)
    return out
