"""Arrays whose chunks are TIFF files: their ``pad`` codec (:func:`pad_codec`) and
``create_array`` arguments (:func:`create_kwargs`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.codecs.numcodecs import Zlib

from zarrext.codecs.pad import PadCodec
from zarrext.formats.tiff.headers import (
    Compression,
    Endian,
    TiffHeaderError,
    dynamic_header,
    header,
    header_nbytes,
)
from zarrext.formats.tiff.templates import template_function

if TYPE_CHECKING:
    from numpy.typing import DTypeLike
    from zarr.abc.codec import BytesBytesCodec

__all__ = ["create_kwargs", "pad_codec"]


def pad_codec(
    dtype: DTypeLike,
    *,
    chunk_shape: Sequence[int] | None = None,
    endian: Endian = "little",
    compression: Compression | None = None,
) -> PadCodec:
    """The ``pad`` codec that makes each chunk a TIFF file.

    With a known ``chunk_shape``: ``zarr.json`` records the header for that shape
    as static ``padding`` (strip byte count 0 when compressed: no one size fits
    every chunk), and the codec carries :func:`template_function` of it, which
    writes each chunk's own header (its strip byte count, and its size when the
    chunks are not ``chunk_shape``). Without: a header function only
    (:func:`dynamic_header`; ``zarr.json`` keeps ``nbytes``).

    The function is a runtime setting of this codec object: an array opened later
    writes ``zarr.json``'s header literally unless given the function again
    (``zarrext.open_array(path, padding=dynamic_header(dtype, compression=...))``);
    zarrext warns when that header does not fit the chunks.
    """
    if chunk_shape is not None:
        static = header(
            chunk_shape, dtype, endian=endian, compression=compression,
            strip_byte_count=None if compression is None else 0,
        )
        return PadCodec(
            location="start", nbytes=len(static), padding=static,
            padding_func=template_function(static),
        )
    return PadCodec(
        location="start",
        nbytes=header_nbytes(dtype),
        padding=dynamic_header(dtype, endian=endian, compression=compression),
    )


def _compressor(compression: Compression, level: int | None) -> BytesBytesCodec:
    if compression == "zstd":
        return ZstdCodec(level=0 if level is None else level)
    # TIFF's deflate strips are zlib streams (RFC 1950), not gzip ones.
    return Zlib(level=6 if level is None else level)


def create_kwargs(
    chunk_shape: Sequence[int],
    dtype: DTypeLike,
    *,
    endian: Endian = "little",
    compression: Compression | None = None,
    level: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``zarr.create_array``/``zarrext.create_array``: TIFF chunks.

    ``chunk_shape`` ``(rows, columns)`` gives one-page TIFFs; ``(z, rows, columns)``
    gives ``z``-page TIFFs (uncompressed only; see :func:`header`). Returns
    ``chunks``, ``dtype``, ``serializer`` and ``compressors`` (compressor, then the
    TIFF ``pad`` of :func:`pad_codec`, which carries the header function); add
    ``store`` and ``shape``. Writes through the array these create write a TIFF
    header per chunk; reopened, give the function again (:func:`pad_codec`).
    """
    compressors: list[Any] = []
    if compression is not None:
        if compression not in ("zstd", "deflate"):
            raise TiffHeaderError(
                f"tiff: compression must be None, 'zstd' or 'deflate', got {compression!r}"
            )
        compressors.append(_compressor(compression, level))
    compressors.append(
        pad_codec(dtype, chunk_shape=chunk_shape, endian=endian, compression=compression)
    )
    return {
        "chunks": tuple(chunk_shape),
        "dtype": np.dtype(dtype),
        "serializer": BytesCodec(endian=endian),
        "compressors": compressors,
    }
