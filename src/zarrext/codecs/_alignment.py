"""Payloads behind a header, at an address every data type can be read from.

A codec that strips a header (``conditional``'s mask, ``pad``'s bytes at the start,
an N5 block header) returns a view of the chunk that starts that many bytes in. The
array a ``bytes`` codec makes of it is then misaligned for its data type: NumPy
copes, compiled codecs need not (``cast_value``'s Rust core panics on a misaligned
``int16`` array). Such a view is copied once into fresh, aligned memory; a payload
that is already aligned (a decompressor's output, a header whose size keeps the
alignment) is passed on as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zarr.core.buffer import Buffer

__all__ = ["ALIGNMENT", "aligned"]

ALIGNMENT = 16
"""Bytes: the alignment of NumPy's own allocations, enough for every scalar type."""


def aligned(payload: Buffer) -> Buffer:
    """``payload``, or an aligned copy of it when its address is misaligned."""
    array = payload.as_numpy_array()
    if array.size == 0 or array.ctypes.data % ALIGNMENT == 0:
        return payload
    return payload.from_array_like(array.copy())
