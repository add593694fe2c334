"""The ``ArraySpec`` of a chunk (or shard) of an array, built from its metadata.

zarr-python hands codecs an ``ArraySpec`` per chunk: shape, data type, fill value,
memory order and buffer prototype. zarrext's runtime, jobs and inspection build
the same spec outside an array's read/write path; they do it here, in one way.

The bytes such a chunk takes in memory (:func:`chunk_nbytes`) are measured here too.
"""

from __future__ import annotations

import math

from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.metadata import ArrayV3Metadata
from zarr.core.metadata.v3 import RegularChunkGridMetadata

__all__ = ["array_spec", "chunk_nbytes", "regular_chunk_shape"]


def regular_chunk_shape(metadata: ArrayV3Metadata) -> tuple[int, ...] | None:
    """The shape of every chunk (a shard, when sharded), or None for an irregular grid."""
    if isinstance(metadata.chunk_grid, RegularChunkGridMetadata):
        return tuple(metadata.chunk_grid.chunk_shape)
    return None


def array_spec(metadata: ArrayV3Metadata, shape: tuple[int, ...]) -> ArraySpec:
    """The spec zarr-python gives codecs for a chunk of ``shape`` of this array.

    Default array configuration (C order) and zarr's default buffer prototype, as
    ``zarr.core.array.create_codec_pipeline`` uses.
    """
    return ArraySpec(
        shape=shape,
        dtype=metadata.data_type,
        fill_value=metadata.fill_value,
        config=ArrayConfig.from_dict({}),
        prototype=default_buffer_prototype(),
    )


def chunk_nbytes(chunk_spec: ArraySpec) -> int:
    """Bytes of a chunk of ``chunk_spec`` in memory (an object item counts its pointer)."""
    return math.prod(chunk_spec.shape) * chunk_spec.dtype.to_native_dtype().itemsize
