"""The ``optional`` codec's split decode: a chunk's values and validity copied apart.

An array whose whole chain is the ``optional`` codec decodes each chunk's values
and validity apart (:meth:`~zarrext.codecs.optional.OptionalCodec.decode_split`)
and copies them once, into the fields of the structured output or into the
separate arrays of :func:`zarrext.read_masked`: the interleaved chunk is never built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zarr.core.chunk_utils import scatter_chunk

from zarrext.pipeline.masked_read import SplitOptionalBuffer

if TYPE_CHECKING:
    from zarr.abc.codec import GetResult
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.indexing import SelectorTuple

    from zarrext.codecs.optional import OptionalCodec


def decode_split_into(
    codec: OptionalCodec,
    chunk_bytes: Buffer | None,
    out: NDBuffer,
    *,
    chunk_spec: ArraySpec,
    chunk_selection: SelectorTuple,
    out_selection: SelectorTuple,
    drop_axes: tuple[int, ...],
) -> GetResult:
    """zarr's ``decode_and_scatter_chunk`` for an ``optional`` chain: the chunk's
    values and validity are decoded apart and each copied once into ``out`` (a
    masked read's buffer, or the fields of a numpy-backed structured output),
    without building the interleaved chunk."""
    if chunk_bytes is None:
        return scatter_chunk(
            None, out, chunk_spec=chunk_spec, out_selection=out_selection, drop_axes=()
        )
    values, valid = (part[chunk_selection] for part in codec.decode_split(
        chunk_bytes, chunk_spec
    ))
    if drop_axes:
        values, valid = values.squeeze(axis=drop_axes), valid.squeeze(axis=drop_axes)
    if isinstance(out, SplitOptionalBuffer):
        out.put(out_selection, values, valid)
    else:
        target = out.as_numpy_array()  # a view of the output (a numpy-backed buffer)
        target["value"][out_selection] = values
        target["valid"][out_selection] = valid
    return {"status": "present"}
