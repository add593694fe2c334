"""A Zarr format 2 array's numcodecs filters in format 3 form, for ``convert``.

``convert`` reads a format 2 source's values through its filters and compressor and
encodes them again; the filters it gives the copy (:func:`format3_filters`):

- ``FixedScaleOffset(offset, scale, dtype, astype)`` storing floats as integers is
  spec 002's ``scale_offset(offset, scale)`` + ``cast_value(astype, nearest-even)``
  (the spec's encoding is numcodecs', and ``np.around`` rounds half to even). It
  is translated where the two give the same values and integers
  (:func:`_same_as_numcodecs`): every code of a 16-bit or smaller type, a spread
  of codes of a 32-bit one. float64 computes as numcodecs does (the same operations
  on the same doubles); float32 does not (numcodecs decodes in float64, then
  rounds): it is kept as numcodecs' codec, as is any other form.
- Every other filter zarr-python has a ``numcodecs.*`` codec for (``delta``,
  ``bitround``, ``quantize``, ``astype``, ``packbits``, ...) is kept as that codec.
- A filter with none (the object codecs, ``vlen-utf8`` and the like, which are
  the format 2 form of what format 3's string data types serialize themselves) is
  left out.

The copy's values are the source's either way: a filter left out costs only bytes
(``convert`` refuses a copy larger than its source, unless ``allow_larger``). If the
filters do not give the fill value back (spec 002), none is kept: the copy must
read the fill value where the source does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["encoded_itemsize", "format3_filters"]

# Codes checked of a FixedScaleOffset whose integer type has more (a spread of them).
_CHECKED_CODES = 1 << 16


def format3_filters(src: Any) -> list[Any]:
    """The format 3 filters for the copy of ``src``, a Zarr format 2 array (see the
    module docstring); empty when it has none, or none that keeps its fill value."""
    from zarr.abc.codec import ArrayArrayCodec

    from zarrext.codecs.filter_roundtrip import fill_value_change

    filters: list[Any] = []
    for codec in getattr(src.metadata, "filters", None) or ():
        if codec.codec_id == "fixedscaleoffset":
            translated = _scale_offset_cast(codec)
            if translated is not None:
                filters.extend(translated)
                continue
        kept = _numcodecs_codec(codec)
        if isinstance(kept, ArrayArrayCodec):
            filters.append(kept)
    if filters and src.fill_value is not None and fill_value_change(
        filters, src.dtype, src.fill_value, ndim=len(src.shape)
    ) is not None:
        return []
    return filters


def encoded_itemsize(filters: list[Any], dtype: Any) -> int:
    """The item size of the values ``filters`` hand on to the serializer (the
    ``cast_value`` target's, or ``dtype``'s)."""
    from zarr.codecs import CastValue

    itemsize = int(np.dtype(dtype).itemsize)
    for codec in filters:
        if isinstance(codec, CastValue):
            itemsize = int(codec.dtype.to_native_dtype().itemsize)
        elif codec.to_dict().get("name") in ("numcodecs.fixedscaleoffset", "numcodecs.astype"):
            config = codec.to_dict().get("configuration", {})
            encoded = config.get("astype") or config.get("encode_dtype")
            if encoded:
                itemsize = int(np.dtype(encoded).itemsize)
    return itemsize


def _numcodecs_codec(codec: Any) -> Any:
    """zarr-python's format 3 codec for numcodecs ``codec`` (``numcodecs.<id>``), or None."""
    import warnings

    from zarr.errors import UnknownCodecError
    from zarr.registry import get_codec_class

    name = f"numcodecs.{codec.codec_id}"
    try:
        cls = get_codec_class(name)
    except (UnknownCodecError, KeyError):
        return None
    with warnings.catch_warnings():  # "not in the Zarr version 3 specification": known
        warnings.simplefilter("ignore")
        return cls.from_dict({"name": name, "configuration": codec.get_config()})


def _scale_offset_cast(codec: Any) -> list[Any] | None:
    """``[scale_offset, cast_value]`` giving what ``FixedScaleOffset`` ``codec`` gives,
    or None where it stores no floats as integers or would give something else."""
    from zarr.codecs import CastValue, ScaleOffset

    dtype, astype = np.dtype(codec.dtype), np.dtype(codec.astype)
    if dtype.kind != "f" or astype.kind not in "iu" or astype.itemsize > 4:
        return None  # (a 64-bit code is not a double's exactly)
    offset, scale = float(codec.offset), float(codec.scale)
    if not (np.isfinite(offset) and np.isfinite(scale) and scale != 0):
        return None
    filters = [ScaleOffset(offset=offset, scale=scale),
               CastValue(data_type=astype.name, rounding="nearest-even")]
    return filters if _same_as_numcodecs(codec, filters, dtype, astype) else None


def _same_as_numcodecs(codec: Any, filters: list[Any], dtype: np.dtype[Any],
                       astype: np.dtype[Any]) -> bool:
    """Whether ``filters`` decode each code as ``codec`` does, bit for bit, and encode
    what ``codec`` decodes back into the same code (checked on every code of a type of
    up to 16 bits, else on a spread of them and its extremes)."""
    from zarrext.codecs.filter_roundtrip import roundtrip

    info = np.iinfo(astype)
    if astype.itemsize <= 2:
        codes = np.arange(int(info.min), int(info.max) + 1, dtype=np.int64)
    else:
        spread = np.linspace(int(info.min), int(info.max), _CHECKED_CODES)
        codes = np.unique(np.concatenate([
            spread.astype(np.int64), np.arange(-1024, 1025), [int(info.min), int(info.max)],
        ]))
        codes = codes[(codes >= int(info.min)) & (codes <= int(info.max))]
    codes = codes.astype(astype.newbyteorder("="))
    values = np.asarray(codec.decode(codes.astype(astype).tobytes()), dtype=dtype)
    values = values.astype(dtype.newbyteorder("="))
    try:
        with np.errstate(all="ignore"):
            encoded, decoded = roundtrip(filters, values, fill_value=float(codec.offset))
    except (ValueError, TypeError, ArithmeticError):  # a value cast_value refuses
        return False
    return bool(np.array_equal(encoded, codes)) and decoded.tobytes() == values.tobytes()
