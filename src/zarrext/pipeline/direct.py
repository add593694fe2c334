"""``[bytes, zstd]`` and ``[bytes, blosc]`` chunks decoded into the output, one copy at most.

zarr-python decodes a chunk into a buffer of its own, through one codec object
after another, and then copies it into the output array. For a chain of
``[bytes, zstd]`` or ``[bytes, conditional([zstd])]`` in the machine's byte
order (or ``blosc`` in place of ``zstd``), the decompressed bytes *are* the chunk's
values, so :class:`DirectDecoder` does the whole decode itself:

- when the chunk's whole extent lands on one C-contiguous block of the output
  (whole rows of a C-ordered result: chunks spanning every axis but the first,
  or an output of one chunk), zstd writes the values there (the thread's kept
  decompressor, :func:`zarrext.pipeline.scratch.zstd_decode_into`; blosc:
  :func:`zarrext.pipeline.scratch.blosc_decode_into`), or a
  ``conditional`` chunk stored raw is copied there once: the extra copy, a third
  of a local read's time beside decoding on this project's machine, is gone;
- anywhere else (a strided place, a selection, an edge chunk) the chunk is
  decoded into the thread's read scratch memory (:mod:`zarrext.pipeline.scratch`)
  and its selected part copied into the output, as zarr's scatter does, or
  copied from the stored bytes themselves when stored raw.

Either way a chunk costs a few Python calls between its reading and its copy,
where zarr's decode path costs some forty: on two cores the codec threads take
the GIL back after every decode, read and copy, and that Python work between
them is what kept them waiting for each other.

A missing chunk, other codecs, another byte order, a data type that is not plain
numbers, or bytes that do not decode to exactly the chunk's size take the
decoder it is given (zarr's ``decode_and_scatter_chunk``), which raises its own
error for a damaged chunk (or overwrites whatever was written).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.codecs import BloscCodec, BytesCodec, ZstdCodec
from zarr.core.chunk_utils import GetResult

from zarrext._zarr_compat import V2Codec
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.pipeline.scratch import (
    DecodeInto,
    ScratchConditionalCodec,
    blosc_decode_into,
    decode_scratch,
    numcodecs_decoder,
    plain_numbers,
    zstd_decode_into,
)

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer

__all__ = ["DirectDecoder", "in_place_decoder"]


def in_place_decoder(codecs: Sequence[Any]) -> DecodeInto | None:
    """How a chain of ``codecs`` is decoded here: when it stores a chunk as its values'
    bytes in the machine's order, compressed with zstd or blosc alone (so that the
    compressor's output is the chunk's values as numpy lays them out), or behind a
    ``conditional`` header whose one nested codec is one of them, that compressor's
    decoder into given memory; else None. A format 2 array's codec with numcodecs'
    ``Blosc`` or ``Zstd`` and no filters too (its chunks in C order only: see
    :class:`DirectDecoder`)."""
    if len(codecs) == 1 and isinstance(codecs[0], V2Codec) and not codecs[0].filters:
        return numcodecs_decoder(codecs[0].compressor)
    if len(codecs) != 2:
        return None
    first = codecs[0]
    if not isinstance(first, BytesCodec) or first.endian not in (None, sys.byteorder):
        return None
    compressor = codecs[1]
    if _is_conditional_of_one(compressor):
        compressor = compressor.codecs[0]
    return _decoder_of(compressor)


def _decoder_of(codec: Any) -> DecodeInto | None:
    if isinstance(codec, ZstdCodec):
        return zstd_decode_into
    if isinstance(codec, BloscCodec):
        return blosc_decode_into
    return None


def _is_conditional_of_one(codec: Any) -> bool:
    """Whether ``codec`` is zarrext's ``conditional`` (not a subclass with a header
    of its own) whose one nested codec decodes here."""
    return (
        type(codec) in (ConditionalCodec, ScratchConditionalCodec)
        and len(codec.codecs) == 1
        and _decoder_of(codec.codecs[0]) is not None
    )


# A chunk's data type, shape, size in bytes, and whether its whole extent can be
# one contiguous block of the output (else no chunk's place is looked for).
_Layout = tuple[np.dtype[Any], tuple[int, ...], int, bool]


def _into(target: np.ndarray, source: np.ndarray, header: int, decode: DecodeInto) -> bool:
    """Write the values of the stored chunk ``source`` (bytes) into ``target``
    (bytes) with ``decode``; False when they are not exactly its size or the chunk
    does not decode (nothing is raised here). ``header``: the conditional header's
    size, 0 for a plain compressor."""
    if header:
        mask = _mask(source, header)
        source = source[header:]
        if mask == 0:  # stored raw
            if source.nbytes != target.nbytes:
                return False
            np.copyto(target, source)
            return True
        if mask != 1:
            return False
    return decode(source, target) == target.nbytes


def _mask(source: np.ndarray, header: int) -> int | None:
    """The conditional header's mask (None: the chunk is shorter than its header)."""
    if source.nbytes < header:
        return None
    return int.from_bytes(source[:header].tobytes(), "little")


def _can_be_contiguous(shape: tuple[int, ...], array: np.ndarray) -> bool:
    """Whether a whole chunk of ``shape`` can be one C-contiguous block of ``array``:
    after its leading axes of length 1, it spans the array's trailing axes."""
    if not array.flags.c_contiguous or len(shape) != array.ndim:
        return False
    k = next((axis for axis, n in enumerate(shape) if n != 1), len(shape))
    return shape[k + 1 :] == array.shape[k + 1 :]


def _place(
    array: np.ndarray,
    shape: tuple[int, ...],
    chunk_selection: Any,
    out_selection: Any,
    drop_axes: tuple[int, ...],
) -> np.ndarray | None:
    """The output's block for a whole chunk of ``shape``, when it is one
    C-contiguous run; else None."""
    if drop_axes or not isinstance(out_selection, tuple):
        return None
    if not isinstance(chunk_selection, tuple) or len(chunk_selection) != len(shape):
        return None
    for s, n in zip(chunk_selection, shape, strict=True):
        if not (isinstance(s, slice) and s.indices(n) == (0, n, 1)):
            return None
    if not all(isinstance(s, slice) for s in out_selection):
        return None
    place = array[(*out_selection, Ellipsis)]  # a view, also of a 0-d output
    if place.shape != shape or not place.flags.c_contiguous:
        return None
    return place


class DirectDecoder:
    """One read's decoder of ``[bytes, compressor]`` chunks into ``out`` with
    ``decode`` (:func:`in_place_decoder` of ``codecs``), called as zarr's
    ``decode_and_scatter_chunk`` is (with ``decode`` bound): for a chunk it cannot
    decode itself (see the module docstring), ``otherwise(...)`` with the same
    arguments.

    :meth:`decode_bytes` takes a chunk's stored bytes as a NumPy array (a chunk
    file read into the thread's memory). Each thread decodes into its own
    scratch memory, and every chunk's values are in the output when a call
    returns: nothing the caller gets back refers to scratch memory.
    """

    __slots__ = ("_layout", "array", "decode", "format_2", "header", "otherwise", "out")

    def __init__(
        self,
        out: NDBuffer,
        codecs: Sequence[Any],
        decode: DecodeInto,
        otherwise: Callable[..., GetResult],
    ):
        self.out = out
        array = out.as_ndarray_like()
        self.array: np.ndarray | None = (
            array if isinstance(array, np.ndarray) and array.flags.writeable else None
        )
        self.decode = decode  # in_place_decoder(codecs), which the caller has asked
        # a format 2 chunk is laid out in the array's order, C or F
        self.format_2 = isinstance(codecs[0], V2Codec)
        compressor = codecs[-1]
        self.header = compressor.header_nbytes if _is_conditional_of_one(compressor) else 0
        self.otherwise = otherwise
        # the last spec seen and its layout (None: not decoded here); a regular
        # grid passes one spec object for every chunk of a read
        self._layout: tuple[object, _Layout | None] = (None, None)

    def __call__(
        self,
        chunk_bytes: Buffer | None,
        out: NDBuffer,
        *,
        chunk_spec: ArraySpec,
        chunk_selection: Any,
        out_selection: Any,
        drop_axes: tuple[int, ...],
    ) -> GetResult:
        if (
            chunk_bytes is not None
            and out is self.out
            and self.decode_bytes(
                chunk_bytes.as_numpy_array(), chunk_spec, chunk_selection, out_selection,
                drop_axes,
            )
        ):
            return GetResult(status="present")
        return self.otherwise(
            chunk_bytes, out, chunk_spec=chunk_spec, chunk_selection=chunk_selection,
            out_selection=out_selection, drop_axes=drop_axes,
        )

    def decode_bytes(
        self,
        source: np.ndarray,
        chunk_spec: ArraySpec,
        chunk_selection: Any,
        out_selection: Any,
        drop_axes: tuple[int, ...],
    ) -> bool:
        """Decode the stored chunk ``source`` (bytes) into its part of the output;
        False, with nothing written, where this decoder does not apply or the
        bytes do not decode to exactly the chunk's size (the caller then takes
        zarr's decoder, which raises the chunk's error)."""
        array = self.array
        layout = self._chunk_layout(chunk_spec)
        if array is None or layout is None:
            return False
        dtype, shape, nbytes, whole_rows = layout
        place = (
            _place(array, shape, chunk_selection, out_selection, drop_axes) if whole_rows else None
        )
        if place is not None:
            return _into(place.reshape(-1).view(np.uint8), source, self.header, self.decode)
        header = self.header
        if header and _mask(source, header) == 0:  # stored raw: its bytes are the values
            values = source[header:]
            if values.nbytes != nbytes:
                return False
        else:
            values = decode_scratch(nbytes, source)
            if not _into(values, source, header, self.decode):
                return False
        chunk = values.view(dtype).reshape(shape)
        # as zarr's NDBuffer.__getitem__: a trailing Ellipsis keeps a 0-d view
        key = chunk_selection
        if isinstance(key, tuple) and not any(k is Ellipsis for k in key):
            key = (*key, Ellipsis)
        selected = chunk[key]
        if drop_axes:
            selected = selected.squeeze(axis=drop_axes)
        array[out_selection] = selected
        return True

    def _chunk_layout(self, chunk_spec: ArraySpec) -> _Layout | None:
        """The data type, shape and byte size of a chunk of ``chunk_spec``, when
        its values can be decoded here: numbers in the machine's byte order, of
        the output's data type (a format 2 chunk: in C order). None otherwise."""
        seen, cached = self._layout
        if seen is chunk_spec:
            return cached
        dtype = chunk_spec.dtype.to_native_dtype()
        layout: _Layout | None = None
        if (
            self.array is not None
            and not (self.format_2 and chunk_spec.order != "C")
            and self.array.dtype == dtype
            and plain_numbers(dtype)
            and dtype.isnative
        ):
            shape = tuple(chunk_spec.shape)
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            layout = (dtype, shape, nbytes, _can_be_contiguous(shape, self.array))
        self._layout = (chunk_spec, layout)  # one tuple: threads see the pair whole
        return layout
