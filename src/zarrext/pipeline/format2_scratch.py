"""Format 2 chunks compressed by numcodecs' ``Blosc`` or ``Zstd`` decoded into scratch memory.

zarr-python's format 2 codec decodes a chunk into fresh memory, then views and
reshapes it through several layers. A chunk read to be encoded again at once
(``convert``'s chunk-to-chunk path) needs its values only until the next chunk:
:class:`Format2IntoScratch` decodes it into the thread's read scratch
(:func:`~zarrext.pipeline.scratch.decode_scratch`) and views it as zarr does (the
array's data type, shape and order). A chunk that does not decode to the chunk's
size raises; the caller then reads it as zarr does, which names it.

blosc 1 frames (numcodecs' ``Blosc``, zarr's format 2 ``blosc``) are decoded by
imagecodecs' c-blosc (:func:`~zarrext.pipeline.scratch.blosc_decode_into`), which
keeps its rate on two codec threads where numcodecs' does not; zstd frames by the
thread's kept decompressor (:func:`~zarrext.pipeline.scratch.zstd_decode_into`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrext.pipeline.scratch import (
    SCRATCH_MAX_BYTES,
    DecodeInto,
    decode_scratch,
    numcodecs_decoder,
    plain_numbers,
)

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = ["Format2IntoScratch"]


@dataclass(frozen=True)
class Format2IntoScratch:
    """Decodes one format 2 array's chunks (``Blosc`` or ``Zstd``, no filters) into
    scratch memory."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    order: Any
    nbytes: int
    decode_into: DecodeInto
    """The compressor's decoder into given memory
    (:func:`~zarrext.pipeline.scratch.numcodecs_decoder`)."""

    @classmethod
    def of(cls, metadata: Any, spec: ArraySpec) -> Format2IntoScratch | None:
        """The decoder of a format 2 array's chunks of ``spec``; None unless its
        compressor is numcodecs' ``Blosc`` or ``Zstd`` with no filters, its data type
        of fixed-size numbers, and a chunk fits the scratch memory."""
        if metadata.zarr_format != 2 or metadata.filters:
            return None
        decode_into = numcodecs_decoder(metadata.compressor)
        if decode_into is None:
            return None
        dtype = spec.dtype.to_native_dtype()
        if not plain_numbers(dtype):
            return None
        nbytes = math.prod(spec.shape) * dtype.itemsize
        if nbytes > SCRATCH_MAX_BYTES:
            return None
        return cls(dtype, tuple(spec.shape), spec.order, nbytes, decode_into)

    def decode(self, chunk_bytes: Buffer) -> np.ndarray:
        """The chunk's values, as zarr's format 2 codec gives them; valid until the
        thread decodes its next chunk.

        Raises
        ------
        ValueError
            The chunk is not one whole frame of the chunk's size (for blosc:
            :func:`~zarrext.codecs.blosc_frames.check_blosc_frame`), or does not decode.
        """
        source = chunk_bytes.as_numpy_array()
        out = decode_scratch(self.nbytes, source)
        if self.decode_into(source, out) != self.nbytes:
            raise ValueError(f"not one whole frame of the chunk's {self.nbytes} bytes")
        return out.view(self.dtype).reshape(self.shape, order=self.order)
