"""Each converted array's shard shape, from the one shape (or ``"auto"``) given for all.

One ``shards`` given to a conversion applies to arrays of different sizes (an
OME-Zarr pyramid's levels, a group's variables): each array gets a shape that
suits it. A shape given is clipped to the array (each dimension to the array's
extent rounded up to whole chunks), so that a small level is not given shards
larger than itself; ``"auto"`` grows each array's shards from its chunk shape
towards :data:`AUTO_SHARD_BYTES` of decoded values, doubling dimensions from the
last, within the array. Either way a shard dimension stays a multiple of its
chunk dimension, as sharding needs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["AUTO_SHARD_BYTES", "auto_shards", "fitted_shards"]

AUTO_SHARD_BYTES = 64 * 2**20
"""The decoded size ``shards="auto"`` aims each shard at (at most)."""


def _extent(shape: Sequence[int], chunks: Sequence[int]) -> list[int]:
    """The array's extent in whole chunks, per dimension (one chunk at least)."""
    return [max(c, math.ceil(n / c) * c) for n, c in zip(shape, chunks, strict=True)]


def auto_shards(shape: Sequence[int], chunks: Sequence[int], itemsize: int,
                target_bytes: int = AUTO_SHARD_BYTES) -> tuple[int, ...]:
    """Shards of whole chunks, as large as ``target_bytes`` allows within the array."""
    extent = _extent(shape, chunks)
    shard = list(chunks)
    grew = True
    while grew:
        grew = False
        for d in reversed(range(len(shard))):
            if shard[d] < extent[d] and math.prod(shard) * 2 * itemsize <= target_bytes:
                shard[d] = min(shard[d] * 2, extent[d])
                grew = True
    return tuple(shard)


def fitted_shards(shards: Any, shape: Sequence[int], chunks: Sequence[int],
                  itemsize: int) -> Any:
    """The shard shape one array gets from ``shards`` as given for all (a shape,
    ``"auto"``, or ``False`` for none). A shape that does not fit the array's
    dimensions or chunks is returned as it is, for the array's creation to refuse
    with its reason."""
    if shards is False:
        return False
    if len(chunks) != len(shape):
        return shards
    if isinstance(shards, str) and shards == "auto":
        return auto_shards(shape, chunks, itemsize)
    shards = tuple(shards)
    if len(shards) != len(shape) or any(s % c for s, c in zip(shards, chunks, strict=True)):
        return shards
    return tuple(min(s, e) for s, e in zip(shards, _extent(shape, chunks), strict=True))
