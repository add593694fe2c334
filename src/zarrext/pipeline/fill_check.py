"""Which chunks cannot be empty, told from their first value.

zarr-python leaves a chunk whose values all equal the fill value unstored
(``write_empty_chunks=False``, :func:`zarr.core.chunk_utils.chunk_is_empty`). Its
check costs tens of microseconds per chunk in Python around numpy, and most chunks
written differ from the fill value at their first element. :class:`FirstValue`
decides that from the first element's bytes alone, with zarr's own notion of
equal: bit patterns where the fill value is ``0.0`` (``-0.0`` is not ``0.0``), and
otherwise equal values with NaN equal to NaN. Where it cannot decide (the first
element equals the fill value, another data type), zarr's check runs as before, so
the chunks stored are the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from zarr.core.chunk_utils import fill_value_or_default

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import NDBuffer

__all__ = ["FirstValue"]


@dataclass(frozen=True)
class FirstValue:
    """The fill value of a chunk spec, as the bytes of one element."""

    fill_bytes: bytes
    nan_fill: bool
    """Whether the fill value is a float NaN (equal to any NaN, as zarr compares)."""

    @classmethod
    def of(cls, chunk_spec: ArraySpec) -> FirstValue | None:
        """The check for chunks of ``chunk_spec``; None where empty chunks are
        written anyway, or for a data type it does not decide (bool, complex, dates,
        strings, structured, zarrext's own)."""
        if chunk_spec.config.write_empty_chunks:
            return None
        dtype = chunk_spec.dtype.to_native_dtype()
        if not isinstance(dtype, np.dtype) or dtype.kind not in "iuf":
            return None
        fill = np.asarray(fill_value_or_default(chunk_spec))
        if fill.dtype != dtype or fill.ndim:
            # zarr compares in numpy's promoted type: not the element's bytes
            return None
        return cls(fill.tobytes(), bool(dtype.kind == "f" and np.isnan(fill)))

    def differs(self, values: NDBuffer) -> bool:
        """Whether ``values`` surely hold a value other than the fill value (so
        zarr's ``chunk_is_empty`` is false); False means "check them all".

        An element whose bytes are the fill value's equals it. Otherwise it differs:
        an integer with other bytes has another value, and so has a float
        but for two cases. ``-0.0`` against a fill of ``0.0`` (or the reverse)
        differs too, as zarr compares floats to zero by bit pattern; against a
        non-zero fill value the zeros' signs do not matter. And two NaNs are equal
        whatever their bits: a NaN fill value is decided only by a first element
        that is not NaN.
        """
        array = values.as_ndarray_like()
        if not isinstance(array, np.ndarray) or array.size == 0:
            return False
        first = array[(0,) * array.ndim]
        if first.tobytes() == self.fill_bytes:
            return False
        return not (self.nan_fill and np.isnan(first))
