"""Format 2 chunks compressed by numcodecs' ``Blosc`` decoded into a thread's scratch memory.

zarr-python's format 2 codec decodes a chunk into fresh memory, then views and
reshapes it through several layers. A chunk read to be encoded again at once
(``convert``'s chunk-to-chunk path) needs its values only until the next chunk:
:class:`Format2IntoScratch` decodes it into the thread's read scratch
(:func:`~zarrext.pipeline.scratch.decode_scratch`) and views it as zarr does (the
array's data type, shape and order). A chunk whose blosc header does not give the
chunk's size, or that blosc cannot decode, raises; the caller then reads it as
zarr does, which names it.

The frames are blosc 1's (numcodecs' ``Blosc``, zarr's format 2 ``blosc``), decoded
by imagecodecs' c-blosc (:func:`~zarrext.pipeline.scratch.blosc_decode_into`), which
keeps its rate on two codec threads where numcodecs' does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numcodecs import Blosc

from zarrext.pipeline.scratch import SCRATCH_MAX_BYTES, blosc_decode_into, decode_scratch

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

__all__ = ["Format2IntoScratch"]


@dataclass(frozen=True)
class Format2IntoScratch:
    """Decodes one format 2 array's chunks (``Blosc``, no filters) into scratch memory."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    order: Any
    nbytes: int

    @classmethod
    def of(cls, metadata: Any, spec: ArraySpec) -> Format2IntoScratch | None:
        """The decoder of a format 2 array's chunks of ``spec``; None unless its
        compressor is numcodecs' ``Blosc`` (that exact class) with no filters, its
        data type of fixed-size numbers, and a chunk fits the scratch memory."""
        if (
            metadata.zarr_format != 2
            or metadata.filters
            or type(metadata.compressor) is not Blosc
        ):
            return None
        dtype = spec.dtype.to_native_dtype()
        if dtype.hasobject or dtype.kind not in "biufcmM":
            return None
        nbytes = math.prod(spec.shape) * dtype.itemsize
        if nbytes > SCRATCH_MAX_BYTES:
            return None
        return cls(dtype, tuple(spec.shape), spec.order, nbytes)

    def decode(self, chunk_bytes: Buffer) -> np.ndarray:
        """The chunk's values, as zarr's format 2 codec gives them; valid until the
        thread decodes its next chunk.

        Raises
        ------
        ValueError
            The chunk is not one whole blosc frame of the chunk's size
            (:func:`~zarrext.codecs.blosc_frames.check_blosc_frame`), or blosc cannot
            decode it.
        """
        source = chunk_bytes.as_numpy_array()
        out = decode_scratch(self.nbytes, source)
        if blosc_decode_into(source, out) != self.nbytes:
            raise ValueError(f"blosc: not one whole frame of the chunk's {self.nbytes} bytes")
        return out.view(self.dtype).reshape(self.shape, order=self.order)
