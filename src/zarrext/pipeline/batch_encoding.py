"""Inner chunks of one shard encoded together, where their chain allows it.

Chunk by chunk, each inner chunk of a shard passes through the chain's layers
(zarr's chunk transform, ``conditional`` and its decision, each codec) in short
calls into C. Each call that releases the GIL hands it to the other threads
encoding shards, and waits to take it back. For the chains zarrext writes most,
:class:`BatchEncoder` encodes a batch of inner chunks in three calls instead:
one numpy call copies a chunk's values into the batch as the ``bytes`` codec
writes them (one per chunk), one shuffles the whole batch, and one zstd call
(``multi_compress_to_buffer``, with the thread's kept compressor,
:func:`~zarrext.pipeline.scratch.zstd_compressor`) compresses all of them.
The chains:

- ``[bytes, zstd]``;
- ``[bytes, conditional([zstd])]`` and ``[bytes, conditional([shuffle, zstd])]``
  with the decision ``compress_if_smaller`` (``convert``'s default target) or
  ``always_apply``.

Each chunk's bytes are the ones the chain writes for it alone: zstd's frame of
the same input with the same compressor settings, behind the header of the mask
that applies every nested codec. What the batch cannot decide by itself is
handed back (None) to be encoded alone: a chunk that may hold only the fill
value (zarr leaves those unstored: :class:`~zarrext.pipeline.fill_check.FirstValue`
decides the others), and under ``compress_if_smaller`` a chunk that zstd does
not make smaller (the decision then tries less).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import zstandard

from zarrext.codecs.decisions.builtins import AlwaysApply, CompressIfSmaller
from zarrext.codecs.decisions.masks import all_bits
from zarrext.codecs.shuffle import ShuffleCodec, shuffle_rows
from zarrext.codecs.specs import chunk_nbytes
from zarrext.pipeline.fill_check import FirstValue
from zarrext.pipeline.scratch import (
    ScratchBytesCodec,
    ScratchConditionalCodec,
    ScratchZstdCodec,
    Staging,
    kept_memory,
    plain_numbers,
    written_as_they_are,
    zstd_compressor,
)

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import NDBuffer

__all__ = ["BATCH_BYTES", "MIN_CHUNKS_PER_BATCH", "BatchEncoder"]

# Values of one batch, at most. Its values and their shuffled planes each take this
# much of every thread that encodes shards, kept; larger batches were slower (the
# 400 MiB conversion of benchmarks/bench_convert.py: 16 MiB no faster than chunk by
# chunk, 8 MiB between).
BATCH_BYTES = 4 << 20
# Chunks a batch holds at least: a batch gains where a chunk's Python and GIL
# hand-offs weigh against its compression (256 KiB float32 chunks: convert 0.74x
# the chunk-by-chunk time), not for chunks of 1 MiB (0.99x; python-zstandard's batch
# call compresses them no faster than a kept context one at a time), which keep
# the chunk-by-chunk path.
MIN_CHUNKS_PER_BATCH = 8
# zstd's batch call is python-zstandard's C backend's (its CFFI backend lacks it)
_ZSTD_BATCHES = zstandard.backend == "cext"


@dataclass(frozen=True)
class BatchEncoder:
    """Encodes batches of inner chunks of one chunk spec (:meth:`of`)."""

    dtype: np.dtype[Any]
    chunk_shape: tuple[int, ...]
    chunk_nbytes: int
    element_size: int | None
    """The shuffle's element size; None: no shuffle."""
    level: int
    checksum: bool
    header: bytes | None
    """``conditional``'s header with every nested codec applied; None: no ``conditional``."""
    only_if_smaller: bool
    """Whether a chunk is stored compressed only when zstd makes it smaller."""
    first_value: FirstValue | None
    """The fill value check; None: every chunk is stored (``write_empty_chunks``)."""

    @classmethod
    def of(cls, codecs: tuple[Any, ...], chunk_spec: ArraySpec) -> BatchEncoder | None:
        """The batch encoder of the chain ``codecs`` (the pipeline's scratch forms)
        for chunks of ``chunk_spec``; None where the chain or the data type is not
        one it encodes, or a chunk is too large to gain from a batch."""
        dtype = chunk_spec.dtype.to_native_dtype()
        if not _ZSTD_BATCHES or len(codecs) != 2 or type(codecs[0]) is not ScratchBytesCodec:
            return None
        if not isinstance(dtype, np.dtype) or not plain_numbers(dtype):
            return None
        if not written_as_they_are(dtype, codecs[0].endian):
            return None
        nbytes = chunk_nbytes(chunk_spec)
        if not 0 < nbytes <= BATCH_BYTES // MIN_CHUNKS_PER_BATCH:
            return None
        first_value = FirstValue.of(chunk_spec)
        if first_value is None and not chunk_spec.config.write_empty_chunks:
            return None  # a data type whose emptiness only zarr's check tells
        chain = codecs[1]
        header = None
        only_if_smaller = False
        if type(chain) is not ScratchZstdCodec:
            nested = _conditional_nesting(chain)
            if nested is None:
                return None
            header = all_bits(len(nested)).to_bytes(chain.header_nbytes, "little")
            only_if_smaller = type(chain.decision) is CompressIfSmaller
            *filters, chain = nested
            element_size = filters[0].element_size if filters else None
            if element_size is not None and nbytes % element_size:
                return None  # a partial element: shuffle_bytes' own case
        else:
            element_size = None
        return cls(dtype, tuple(chunk_spec.shape), nbytes, element_size, chain.level,
                   chain.checksum, header, only_if_smaller, first_value)

    @property
    def per_batch(self) -> int:
        """Chunks in one batch."""
        return max(1, BATCH_BYTES // self.chunk_nbytes)

    def values(self, count: int) -> np.ndarray:
        """Memory for ``count`` chunks' values, one chunk per first index: the calling
        thread's, reused by its next batch."""
        return kept_memory("batch values", count * self.chunk_nbytes,
                           at_least=BATCH_BYTES).view(self.dtype).reshape(count, *self.chunk_shape)

    def takes(self, values: NDBuffer) -> bool:
        """Whether a chunk of ``values`` goes into the batch: it is stored, whatever
        its other values (else it is encoded alone, which may leave it unstored)."""
        if values.dtype != self.dtype or values.shape != self.chunk_shape:
            return False  # the bytes codec writes a chunk's own data type and shape
        return self.first_value is None or self.first_value.differs(values)

    def encode(self, values: np.ndarray, staging: Staging | None = None
               ) -> list[np.ndarray | None]:
        """Each chunk's stored bytes, for the chunks in ``values`` (from :meth:`values`,
        all taken); None for a chunk to encode alone. With ``staging``, the bytes
        that a header goes before are laid out in its segments (valid until it is
        released), as the chunk-by-chunk path lays them out."""
        count = values.shape[0]
        if not count:
            return []
        chunks = values.reshape(count, -1).view(np.uint8)
        if self.element_size is not None:
            chunks = shuffle_rows(chunks, self.element_size,
                                  kept_memory("batch planes", chunks.size, at_least=BATCH_BYTES))
        frames: Any = zstd_compressor(self.level, self.checksum).multi_compress_to_buffer(
            [memoryview(row) for row in chunks])
        if self.header is None:
            return [np.frombuffer(frames[k], np.uint8) for k in range(count)]
        header = np.frombuffer(self.header, np.uint8)
        limit = self.chunk_nbytes if self.only_if_smaller else math.inf
        stored: list[np.ndarray | None] = [None] * count
        for k in range(count):
            size = len(frames[k])
            if size < limit:
                nbytes = header.size + size
                chunk = None if staging is None else staging.reserve(nbytes)
                chunk = stored[k] = np.empty(nbytes, np.uint8) if chunk is None else chunk
                chunk[:header.size] = header
                chunk[header.size:] = np.frombuffer(frames[k], np.uint8)
        return stored


def _conditional_nesting(codec: Any) -> tuple[Any, ...] | None:
    """The nested codecs of ``codec`` when it is a ``conditional`` that stores every
    nested codec whenever it stores any (a decision of all bits or
    ``compress_if_smaller``) and nests zstd, after one shuffle or alone; else None."""
    if type(codec) is not ScratchConditionalCodec or type(codec.decision) not in (
        CompressIfSmaller, AlwaysApply
    ):
        return None
    nested = tuple(codec.codecs)
    if not nested or type(nested[-1]) is not ScratchZstdCodec:
        return None
    if len(nested) == 1 or (len(nested) == 2 and type(nested[0]) is ShuffleCodec):
        return nested
    return None
