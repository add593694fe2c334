"""What a write encodes: a chunk's new stored bytes, a shard layout's part through filters.

The codec pipeline decides where a write's work runs (codec threads, the event
loop); the encoding steps themselves are here: a chunk's stored bytes merged with
its written part and encoded by the pipeline's synchronous chain, and the written
part of a shard passed through the elementwise filters before a shard layout's
serializer writes it in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.core.chunk_utils import merge_and_encode_chunk

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.indexing import SelectorTuple


def merged_and_encoded(
    transform: Any, item: Any, existing: Buffer | None, value: NDBuffer,
    drop_axes: tuple[int, ...],
) -> Buffer | None:
    """The new stored bytes of the chunk of batch ``item`` (None: only fill values):
    its ``existing`` bytes merged with its part of ``value``, encoded by ``transform``."""
    _, chunk_spec, chunk_selection, out_selection, is_complete = item
    return merge_and_encode_chunk(
        existing,
        value,
        chunk_spec=chunk_spec,
        chunk_selection=chunk_selection,
        out_selection=out_selection,
        is_complete=is_complete,
        drop_axes=drop_axes,
        decode=transform.decode_chunk,
        encode=transform.encode_chunk,
    )


async def through_filters(
    filters: tuple[Any, ...],
    spec: ArraySpec,
    selection: SelectorTuple,
    value: NDBuffer,
    out_selection: SelectorTuple,
) -> tuple[NDBuffer, tuple[Any, ...], ArraySpec]:
    """The written part of one chunk as the serializer sees it: ``(block, selection,
    spec)`` after elementwise filters and transposes.

    ``selection`` selects the part in a chunk of ``spec``; ``value[out_selection]``
    holds its values (a scalar value fills it). Integer selections become
    one-element slices, so the block keeps every axis and a transpose permutes
    selection and block alike.
    """
    from zarr.codecs import TransposeCodec
    from zarr.core.array_spec import ArraySpec as Spec

    parts: tuple[Any, ...] = selection if isinstance(selection, tuple) else (selection,)
    sel = tuple(slice(int(s), int(s) + 1) if isinstance(s, int | np.integer) else s
                for s in parts)
    # the selection's shape, from a view of the chunk that allocates nothing
    zeros = np.lib.stride_tricks.as_strided(np.zeros(1, np.bool_), spec.shape, (0,) * len(sel))
    shape = zeros[sel].shape
    values = value.as_numpy_array()
    block = np.empty(shape, dtype=values.dtype)
    if values.shape == ():
        block[...] = values
    else:
        part = values[out_selection]
        block[...] = part.reshape(shape) if part.size == block.size else part
    buffer = spec.prototype.nd_buffer.from_numpy_array(block)
    block_spec = Spec(shape=shape, dtype=spec.dtype, fill_value=spec.fill_value,
                      config=spec.config, prototype=spec.prototype)
    for codec in filters:
        if isinstance(codec, TransposeCodec):
            if not all(isinstance(s, slice) for s in sel):
                raise ValueError(
                    "a shard layout writes through 'transpose' only rectangular selections "
                    "(slices and integers); write this selection without shard_layout"
                )
            sel = tuple(sel[axis] for axis in codec.order)
        (encoded,) = await codec.encode([(buffer, block_spec)])
        buffer = encoded
        block_spec = codec.resolve_metadata(block_spec)
        spec = codec.resolve_metadata(spec)
    return buffer, sel, spec
