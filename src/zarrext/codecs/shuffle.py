"""``shuffle``: byte shuffle (bytes -> bytes), as HDF5's and blosc's shuffle filter.

Configuration ``{"element_size": N}``: byte ``j`` of every ``N``-byte element is
gathered into the ``j``-th plane. Trailing bytes that do not fill an element are
left in place at the end, as blosc does (numcodecs' ``Shuffle`` refuses such
buffers, and chunk byte counts need not be multiples of the element size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.codec import BytesBytesCodec
from zarr.core.common import JSON, parse_named_configuration

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer


# Element sizes whose planes are taken, and whose elements are rebuilt, with integer
# shifts (for other sizes, 8 bytes included, one strided copy is the cheaper). Taking
# them is one numpy call that shifts every element by each plane's 8*j bits and
# narrows the result into that plane (buffered, so cache-sized), where a transposed
# copy gathers byte by byte. One call also means one release of the GIL per chunk:
# each release is a hand-off to the other codec threads, paid again when the call
# returns.
_AS_INTEGERS: dict[int, np.dtype[Any]] = {2: np.dtype("<u2"), 4: np.dtype("<u4")}
_PLANE_SHIFTS: dict[int, np.ndarray] = {
    size: (np.arange(size, dtype=dtype) * 8)[:, None] for size, dtype in _AS_INTEGERS.items()}


def shuffle_rows(
    rows: np.ndarray, element_size: int, out: np.ndarray | None = None
) -> np.ndarray:
    """Each row of ``rows`` shuffled: byte ``j`` of every element into plane ``j``.

    ``rows`` is a C-contiguous two-dimensional ``uint8`` array whose rows are
    whole elements; the result has its shape, each row the row's planes in turn,
    in ``out`` (contiguous ``uint8`` of ``rows.size`` bytes) if given. One numpy
    call for all the rows (a batch of chunks, or one chunk).
    """
    count, size = rows.shape[0], rows.shape[1] // element_size
    planes = (np.empty((count, element_size, size), np.uint8) if out is None
              else out.reshape(count, element_size, size))
    as_integer = _AS_INTEGERS.get(element_size)
    if as_integer is None or size == 0:
        planes[...] = rows.reshape(count, size, element_size).transpose(0, 2, 1)
    else:  # plane j: the low byte of each little-endian element shifted right by 8*j
        np.right_shift(rows.view(as_integer)[:, None, :], _PLANE_SHIFTS[element_size],
                       out=planes, casting="unsafe")
    return planes.reshape(rows.shape)


def shuffle_bytes(data: np.ndarray, element_size: int) -> np.ndarray:
    """Gather byte ``j`` of every element into plane ``j``; a partial element stays last."""
    size = data.size
    whole = size // element_size * element_size
    if whole == size and data.flags.c_contiguous:  # sliced only when it must be: per chunk
        return shuffle_rows(data.reshape(1, size), element_size).reshape(size)
    out = np.empty(size, np.uint8)
    elements = np.ascontiguousarray(data[:whole]).reshape(1, whole)
    out[:whole] = shuffle_rows(elements, element_size).reshape(whole)
    out[whole:] = data[whole:]
    return out


def unshuffle_bytes(data: np.ndarray, element_size: int) -> np.ndarray:
    """Invert :func:`shuffle_bytes`: plane ``j`` back into byte ``j`` of every element."""
    count = data.size // element_size
    whole = count * element_size
    out = np.empty(data.size, np.uint8)
    planes = data[:whole].reshape(element_size, count)
    as_integer = _AS_INTEGERS.get(element_size)
    if as_integer is not None and count and data.flags.c_contiguous:
        elements = out[:whole].view(as_integer)
        plane = np.empty(count, as_integer)
        np.copyto(elements, planes[-1], casting="unsafe")
        for j in range(element_size - 2, -1, -1):  # the most significant byte first
            np.left_shift(elements, 8, out=elements)
            np.copyto(plane, planes[j], casting="unsafe")
            np.bitwise_or(elements, plane, out=elements)
    else:
        out[:whole].reshape(count, element_size)[...] = planes.T
    out[whole:] = data[whole:]
    return out


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

    def encode_bytes(self, data: np.ndarray) -> np.ndarray:
        """The shuffled bytes of ``data`` (one-dimensional ``uint8``): this codec's
        encoding without zarr's ``Buffer`` around it, as ``conditional`` applies it."""
        return shuffle_bytes(data, self.element_size)

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        encoded = self.encode_bytes(chunk_bytes.as_numpy_array())
        return chunk_spec.prototype.buffer.from_array_like(encoded)

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
