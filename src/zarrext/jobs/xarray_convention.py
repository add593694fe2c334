"""A format 2 array's attributes as xarray reads them again in Zarr format 3.

xarray's zarr backend keeps a variable's dimensions and CF fill value in different
places in the two formats. In format 2 the dimensions are the ``_ARRAY_DIMENSIONS``
attribute and ``_FillValue`` is the array's ``fill_value`` (whatever a reader finds
equal to it is missing). In format 3 the dimensions are the array's
``dimension_names`` and ``_FillValue`` is an attribute of its own, encoded as
``xarray.backends.zarr.FillValueCoder`` encodes it; the array's ``fill_value`` masks
nothing. A copy from format 2 to 3 that moved only the values would turn every
missing value of a CF-packed variable into what its packed fill decodes to.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["DIMENSIONS_KEY", "FILL_VALUE_KEY", "as_format_3", "encoded_fill_value"]

DIMENSIONS_KEY = "_ARRAY_DIMENSIONS"
"""xarray's dimension names in a format 2 array's attributes."""

FILL_VALUE_KEY = "_FillValue"
"""CF's fill value: a format 3 attribute for xarray."""


def _float_text(value: float) -> str:
    # xarray keeps a float fill as the base64 of its little-endian float64 bytes,
    # so that NaN and the infinities survive JSON
    return base64.standard_b64encode(struct.pack("<d", value)).decode()


def encoded_fill_value(fill_value: Any, dtype: np.dtype[Any]) -> Any:
    """``fill_value`` as xarray writes the ``_FillValue`` attribute of a format 3 array
    of ``dtype`` (``FillValueCoder.encode``), or ``None`` for a type whose fill xarray
    cannot read back from that attribute (strings and bytes, whose ``_FillValue``
    xarray's format 3 reader refuses; datetimes, structured types)."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return bool(fill_value)
    if kind in "iu":
        return int(fill_value)
    if kind == "f":
        return _float_text(float(fill_value))
    if kind == "c":
        value = complex(fill_value)
        return [_float_text(value.real), _float_text(value.imag)]
    return None


def as_format_3(
    attributes: Mapping[str, Any], fill_value: Any, dtype: np.dtype[Any]
) -> tuple[dict[str, Any], tuple[str, ...] | None]:
    """The attributes and dimension names that make xarray decode a format 3 copy of
    a format 2 array (``attributes``, ``fill_value``, ``dtype``) as it decodes the
    array itself.

    xarray's ``_ARRAY_DIMENSIONS`` become the dimension names. An array xarray reads
    (one that has them) and whose ``fill_value`` is not null gets the ``_FillValue``
    attribute xarray took from that fill value, unless it has one already; other
    arrays keep their attributes as they are.
    """
    out = dict(attributes)
    dims = out.pop(DIMENSIONS_KEY, None)
    if dims is None:
        return out, None
    if fill_value is not None and FILL_VALUE_KEY not in out:
        encoded = encoded_fill_value(fill_value, dtype)
        if encoded is not None:
            out[FILL_VALUE_KEY] = encoded
    return out, tuple(dims)
