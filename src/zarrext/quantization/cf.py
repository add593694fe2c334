"""netCDF / CF packing: ``scale_factor``, ``add_offset``, ``_FillValue`` as filters."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from zarr.abc.codec import ArrayArrayCodec
from zarr.codecs.cast_value import CastValue
from zarr.codecs.scale_offset import ScaleOffset

from zarrext.quantization.planning import float_dtype

__all__ = ["CFConversion", "InexactConversionWarning", "from_cf"]


class InexactConversionWarning(UserWarning):
    """A CF packing cannot be expressed exactly with ``scale_offset`` + ``cast_value``."""


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
        ``_FillValue``/``missing_value`` (they decode to NaN), else ``add_offset``
        (what packed 0 decodes to): either survives the filters, as spec 002 asks.
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
    unpacked = float_dtype(dtype) if dtype is not None else _cf_unpacked_dtype(attrs)

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
    # Without missing values, the fill value is what packed 0 decodes to (0 / scale +
    # add_offset, exactly; + 0.0 makes -0.0 the 0.0 it decodes as): spec 002 wants a
    # fill value that survives the filters, and 0.0 may not (0.25 with add_offset 0.25
    # and scale_factor 0.5 packs to 0, decoded as 0.25) or may not pack at all.
    fill_value = float(ao) + 0.0
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
