"""Chunks decoded straight into their place in the output, with no copy.

zarr-python decodes a chunk into a buffer of its own and then copies it into the
output array. When the chunk's whole extent lands on one C-contiguous block of the
output (whole rows of a C-ordered result: chunks spanning every axis but the
first, or an output of one chunk) and its chain is ``[bytes, zstd]`` or
``[bytes, conditional([zstd])]`` in the machine's byte order, the decompressed
bytes *are* the values in their place: zstd writes them there (imagecodecs'
decoder takes an output buffer), or a ``conditional`` chunk stored raw is copied
there once, and the extra copy, a third of a local read's time beside decoding on
this project's machine, is gone.

Anything else (a partial chunk at the array's edge, a selection, a strided place,
a missing chunk, other codecs) takes the decoder it is given, as does a chunk
whose bytes do not decode to exactly its size: that decoder then raises its own
error (or overwrites whatever was written).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import imagecodecs
import numpy as np
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.core.chunk_utils import GetResult

from zarrext.codecs.conditional import ConditionalCodec
from zarrext.pipeline.scratch import ScratchConditionalCodec

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer

__all__ = ["decodes_zstd_in_place", "zstd_into_place"]


def decodes_zstd_in_place(codecs: Sequence[Any]) -> bool:
    """Whether a chain of ``codecs`` stores a chunk as its values' bytes in the
    machine's order, compressed with zstd alone (so that zstd's output is the
    chunk's values as numpy lays them out), or behind a ``conditional`` header
    whose one nested codec is zstd."""
    if len(codecs) != 2 or not (
        isinstance(codecs[1], ZstdCodec) or _is_zstd_behind_a_header(codecs[1])
    ):
        return False
    first = codecs[0]
    return isinstance(first, BytesCodec) and first.endian in (None, sys.byteorder)


def _is_zstd_behind_a_header(codec: Any) -> bool:
    """Whether ``codec`` is zarrext's ``conditional`` (not a subclass with a header
    of its own) whose one nested codec is zstd."""
    return (
        type(codec) in (ConditionalCodec, ScratchConditionalCodec)
        and len(codec.codecs) == 1
        and isinstance(codec.codecs[0], ZstdCodec)
    )


def _into(target: np.ndarray, chunk_bytes: Buffer, compressor: Any) -> bool:
    """Write the chunk's values into ``target`` (its bytes); False when they are
    not exactly its size or the chunk does not decode (nothing is raised here)."""
    source = chunk_bytes.as_numpy_array()
    if _is_zstd_behind_a_header(compressor):
        try:
            mask = compressor.read_mask(chunk_bytes)
        except ValueError:
            return False
        source = source[compressor.header_nbytes :]
        if mask == 0:  # stored raw
            if source.nbytes != target.nbytes:
                return False
            np.copyto(target, source)
            return True
        if mask != 1:
            return False
    try:
        decoded = imagecodecs.zstd_decode(source, out=memoryview(target))
    except imagecodecs.ZstdError:
        return False
    return len(decoded) == target.nbytes


def _place(
    out: NDBuffer,
    chunk_spec: ArraySpec,
    chunk_selection: Any,
    out_selection: Any,
    drop_axes: tuple[int, ...],
) -> np.ndarray | None:
    """The output's block for a whole chunk, when it is one C-contiguous run of
    the chunk's native dtype; else None."""
    if drop_axes or not isinstance(out_selection, tuple):
        return None
    shape = tuple(chunk_spec.shape)
    if not isinstance(chunk_selection, tuple) or len(chunk_selection) != len(shape):
        return None
    for s, n in zip(chunk_selection, shape, strict=True):
        if not (isinstance(s, slice) and s.indices(n) == (0, n, 1)):
            return None
    if not all(isinstance(s, slice) for s in out_selection):
        return None
    array = out.as_ndarray_like()
    if not isinstance(array, np.ndarray):
        return None
    dtype = chunk_spec.dtype.to_native_dtype()
    if array.dtype != dtype or dtype.hasobject or dtype.kind not in "biufcmM":
        return None
    place = array[out_selection]
    if place.shape != shape or not place.flags.c_contiguous or not place.flags.writeable:
        return None
    return place


def zstd_into_place(
    chunk_bytes: Buffer | None,
    out: NDBuffer,
    *,
    chunk_spec: ArraySpec,
    chunk_selection: Any,
    out_selection: Any,
    drop_axes: tuple[int, ...],
    compressor: Any,
    otherwise: Callable[..., GetResult],
) -> GetResult:
    """Decode a chunk of a ``[bytes, compressor]`` chain
    (:func:`decodes_zstd_in_place`) into its place in ``out`` when that place is
    one contiguous block (:func:`_place`); else, or when its bytes do not decode
    to exactly the chunk's size, ``otherwise(...)`` with the same arguments
    (zarr's ``decode_and_scatter_chunk``, which raises the chunk's error)."""
    if chunk_bytes is not None:
        place = _place(out, chunk_spec, chunk_selection, out_selection, drop_axes)
        if place is not None and _into(place.reshape(-1).view(np.uint8), chunk_bytes, compressor):
            return GetResult(status="present")
    return otherwise(
        chunk_bytes, out, chunk_spec=chunk_spec, chunk_selection=chunk_selection,
        out_selection=out_selection, drop_axes=drop_axes,
    )
