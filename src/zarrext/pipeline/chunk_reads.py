"""A chunk's read in a codec thread: its bytes fetched (or given) and decoded into the output.

:class:`zarrext.pipeline.ZarrextCodecPipeline` runs these as jobs of the codec threads
for chains with a synchronous path: a chunk of a store with synchronous IO is fetched
and decoded in one job (:func:`read_chunk`), a local chunk file of a chain
:class:`~zarrext.pipeline.direct.DirectDecoder` decodes goes straight to it
(:func:`read_chunk_directly`), a chunk an object store fetched is decoded there
(:func:`decode_fetched`). How the bytes are decoded into the output is
:func:`scatter_into`'s choice. A codec's error is raised through the pipeline's
``on_error``, which names the array and the chunk.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from zarr.core.buffer import cpu
from zarr.core.chunk_utils import decode_and_scatter_chunk

from zarrext.codecs.optional import OptionalCodec
from zarrext.errors import DECODE_ERRORS
from zarrext.pipeline.chunk_io import get_chunk_sync, local_chunk_file, read_chunk_file
from zarrext.pipeline.direct import DirectDecoder, in_place_decoder
from zarrext.pipeline.masked_read import SplitOptionalBuffer
from zarrext.pipeline.optional_decode import decode_split_into

if TYPE_CHECKING:
    from zarr.abc.codec import GetResult
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.chunk_utils import ChunkTransform

__all__ = ["decode_fetched", "read_chunk", "read_chunk_directly", "scatter_into"]

OnError = Callable[[BaseException, object], NoReturn]
"""Raises a codec's error for the chunk of a byte getter (the pipeline's)."""


def scatter_into(transform: ChunkTransform, out: NDBuffer) -> Callable[..., GetResult]:
    """How a chunk's bytes are decoded into ``out``: zarr's
    ``decode_and_scatter_chunk`` with ``transform``'s chain; for a chain that
    is the ``optional`` codec alone and an output that takes the fields apart,
    :func:`~zarrext.pipeline.optional_decode.decode_split_into` (no interleaved chunk
    is built); for a ``[bytes, zstd]`` or ``[bytes, conditional([zstd])]`` chain (or
    blosc in place of zstd), by :class:`zarrext.pipeline.direct.DirectDecoder`
    (straight into the chunk's place where it is one contiguous block)."""
    codecs = transform.codecs
    if (
        len(codecs) == 1
        and isinstance(codecs[0], OptionalCodec)
        and (isinstance(out, SplitOptionalBuffer) or type(out) is cpu.NDBuffer)
    ):
        return functools.partial(decode_split_into, codecs[0])
    scatter = functools.partial(decode_and_scatter_chunk, decode=transform.decode_chunk)
    decode = in_place_decoder(codecs)
    if decode is not None and type(out) is cpu.NDBuffer:
        return DirectDecoder(out, codecs, decode, scatter)
    return scatter


def decode_fetched(
    item: Any,
    chunk: Buffer | None,
    out: NDBuffer,
    drop_axes: tuple[int, ...],
    scatter: Callable[..., GetResult],
    on_error: OnError,
) -> GetResult:
    """Decode one fetched chunk's bytes into ``out`` (in a codec thread)."""
    byte_getter, chunk_spec, chunk_selection, out_selection, _ = item
    try:
        return scatter(
            chunk,
            out,
            chunk_spec=chunk_spec,
            chunk_selection=chunk_selection,
            out_selection=out_selection,
            drop_axes=drop_axes,
        )
    except DECODE_ERRORS as e:
        on_error(e, byte_getter)


def read_chunk(
    item: Any,
    out: NDBuffer,
    drop_axes: tuple[int, ...],
    scatter: Callable[..., GetResult],
    on_error: OnError,
) -> GetResult:
    """Fetch the chunk of ``item`` with the store's synchronous IO and decode it into
    ``out``, in its chunk's context."""
    chunk = get_chunk_sync(item[0], item[1].prototype)
    return decode_fetched(item, chunk, out, drop_axes, scatter, on_error)


def read_chunk_directly(
    item: Any,
    out: NDBuffer,
    drop_axes: tuple[int, ...],
    decoder: DirectDecoder,
    caller: contextvars.Context,
    *,
    in_context: Callable[[Any, contextvars.Context], contextvars.Context],
    on_error: OnError,
) -> GetResult:
    """:func:`read_chunk` for a chain :class:`DirectDecoder` decodes, run
    outside any context: a local chunk file's bytes go straight to the
    decoder, no Buffer between; a chunk the decoder leaves (missing, damaged,
    not a local file) takes :func:`read_chunk`'s path in its chunk's context
    (``in_context(item, caller)``, copied from ``caller``), where its codecs see
    its index."""
    path = local_chunk_file(item[0])
    if path is None:
        return in_context(item, caller).run(
            read_chunk, item, out, drop_axes, decoder, on_error
        )
    source = read_chunk_file(path)
    if source is not None and decoder.decode_bytes(
        source, item[1], item[2], item[3], drop_axes
    ):
        return {"status": "present"}
    chunk = None if source is None else item[1].prototype.buffer.from_array_like(source)
    return in_context(item, caller).run(
        decode_fetched, item, chunk, out, drop_axes, decoder.otherwise, on_error
    )
