"""``shuffle``: byte shuffle (bytes -> bytes), as HDF5's and blosc's shuffle filter.

Configuration ``{"element_size": N}``: byte ``j`` of every ``N``-byte element is
gathered into the ``j``-th plane. Trailing bytes that do not fill an element are
left in place at the end, as blosc does (numcodecs' ``Shuffle`` refuses such
buffers, and chunk byte counts need not be multiples of the element size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from zarr.abc.codec import BytesBytesCodec
from zarr.core.common import JSON, parse_named_configuration

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer


def shuffle_bytes(data: np.ndarray, element_size: int) -> np.ndarray:
    """Gather byte ``j`` of every element into plane ``j``; a partial element stays last."""
    whole = (data.size // element_size) * element_size
    planes = data[:whole].reshape(-1, element_size).T
    return np.concatenate([planes.ravel(), data[whole:]])


def unshuffle_bytes(data: np.ndarray, element_size: int) -> np.ndarray:
    """Invert :func:`shuffle_bytes`."""
    whole = (data.size // element_size) * element_size
    elements = data[:whole].reshape(element_size, -1).T
    return np.concatenate([elements.ravel(), data[whole:]])


def parse_element_size(data: object) -> int:
    """Validate ``element_size``: a positive integer."""
    if isinstance(data, bool) or not isinstance(data, int):
        raise ValueError(f"shuffle: element_size must be an integer, got {data!r}")
    if data < 1:
        raise ValueError(f"shuffle: element_size must be >= 1, got {data}")
    return data


@dataclass(frozen=True)
class ShuffleCodec(BytesBytesCodec):
    """Byte shuffle of fixed-size elements.

    Parameters
    ----------
    element_size : int
        Size in bytes of one element (4 for float32).
    """

    is_fixed_size = True

    element_size: int

    def __init__(self, *, element_size: int) -> None:
        object.__setattr__(self, "element_size", parse_element_size(element_size))

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        _, configuration = parse_named_configuration(data, "shuffle")
        if set(configuration) != {"element_size"}:
            raise ValueError(
                f"shuffle: configuration must be exactly {{'element_size': N}}, got {configuration}"
            )
        return cls(element_size=configuration["element_size"])  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, JSON]:
        return {"name": "shuffle", "configuration": {"element_size": self.element_size}}

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        data = chunk_bytes.as_numpy_array()
        return chunk_spec.prototype.buffer.from_array_like(shuffle_bytes(data, self.element_size))

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        data = chunk_bytes.as_numpy_array()
        return chunk_spec.prototype.buffer.from_array_like(
            unshuffle_bytes(data, self.element_size)
        )

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return self._encode_sync(chunk_bytes, chunk_spec)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return self._decode_sync(chunk_bytes, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, _chunk_spec: ArraySpec) -> int:
        return input_byte_length
