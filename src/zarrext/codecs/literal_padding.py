"""Static ``pad`` padding that does not describe the chunks it is written with.

``pad`` writes its ``padding`` literally (spec 004). A header in it made for other
chunks (a TIFF header for 256x256 chunks on an array of 128x128 ones, or with a
compressor before ``pad``) is still written byte for byte; zarrext says so once
per opened array: :func:`warn_padding_mismatches` when :func:`zarrext.create_array`
or :func:`zarrext.open_array` opens an array for writing, the codec itself at its
first such chunk otherwise (plain ``zarr``), and ``zarrext inspect`` lists
:func:`padding_notes`. What a padding must hold is up to the format that
recognises it (:func:`zarrext.codecs.pad.register_literal_check`).

Here each ``pad`` codec is seen in its chain, from the array's metadata: the chunk
shape and data type after the array->array codecs, the ``bytes`` codec's byte
order, and the codecs between it and ``pad`` (their fixed sizes added, the names
of those whose output varies kept).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec
from zarr.codecs import BytesCodec, ShardingCodec
from zarr.core.array_spec import ArraySpec
from zarr.core.metadata import ArrayV3Metadata

from zarrext.codecs.pad import PadCodec, PaddedChunks, PaddingMismatch, literal_mismatch
from zarrext.codecs.specs import array_spec, regular_chunk_shape

__all__ = ["padding_mismatches", "padding_notes", "warn_padding_mismatches"]


def _chain_mismatches(
    codecs: Sequence[Any], spec: ArraySpec
) -> Iterator[tuple[PadCodec, PaddingMismatch]]:
    """Each ``pad`` codec of one chain (a shard's inner chain too) whose static
    padding, written literally, does not describe the chunks, with how."""
    endian: str | None = None
    nbytes: int | None = None
    compressors: list[str] = []
    serialized = False
    for codec in codecs:
        if isinstance(codec, ShardingCodec):
            inner = ArraySpec(
                shape=tuple(codec.chunk_shape), dtype=spec.dtype, fill_value=spec.fill_value,
                config=spec.config, prototype=spec.prototype,
            )
            yield from _chain_mismatches(codec.codecs, inner)
            return  # the shard itself is no run of samples a header could describe
        if isinstance(codec, ArrayArrayCodec):
            spec = codec.resolve_metadata(spec)
            continue
        if isinstance(codec, ArrayBytesCodec):
            if not isinstance(codec, BytesCodec):
                return  # another serializer: its bytes are not the chunk's samples
            serialized = True
            endian = None if codec.endian is None else str(getattr(codec.endian, "value",
                                                                     codec.endian))
            nbytes = math.prod(spec.shape) * spec.dtype.to_native_dtype().itemsize
            continue
        if (
            serialized and isinstance(codec, PadCodec) and codec.padding is not None
            and codec.padding_func is None
        ):
            chunks = PaddedChunks(
                shape=tuple(spec.shape), dtype=np.dtype(spec.dtype.to_native_dtype()),
                location=codec.location, nbytes=None if compressors else nbytes,
                endian=endian, compressors=tuple(compressors),
            )
            mismatch = literal_mismatch(codec.padding, chunks)
            if mismatch is not None:
                yield codec, mismatch
        if getattr(codec, "is_fixed_size", False) and nbytes is not None:
            nbytes = codec.compute_encoded_size(nbytes, spec)
        else:
            compressors.append(str(codec.to_dict().get("name", type(codec).__name__)))


def padding_mismatches(metadata: Any) -> list[tuple[PadCodec, PaddingMismatch]]:
    """Every ``pad`` codec of the array whose static padding, written literally (no
    padding function bound), does not describe its chunks, with how (see
    :class:`~zarrext.codecs.pad.PaddingMismatch`). Empty for a Zarr format 2 array
    or an irregular chunk grid."""
    if not isinstance(metadata, ArrayV3Metadata):
        return []
    shape = regular_chunk_shape(metadata)
    if shape is None:
        return []
    return list(_chain_mismatches(metadata.codecs, array_spec(metadata, shape)))


def warn_padding_mismatches(array: Any, where: str) -> None:
    """Warn, once per opened array, for each ``pad`` codec of ``array`` whose padding
    does not fit (then its codec, which shares the record, does not warn again)."""
    for codec, mismatch in padding_mismatches(array.metadata):
        if codec.mismatch_said.first():
            warnings.warn(mismatch.message(where), mismatch.category, stacklevel=3)


def padding_notes(metadata: Any) -> list[str]:
    """What ``zarrext inspect`` says of the array's padding: one line per misfit."""
    return [mismatch.describe() for _, mismatch in padding_mismatches(metadata)]
