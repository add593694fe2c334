"""Reading optional arrays straight into ``numpy.ma``: values and mask apart.

An optional array reads as a structured array of ``(value, valid)`` records, the
in-memory form of the data type (:mod:`zarrext.dtypes.optional`); for float32
values that is five interleaved bytes per element, and a ``MaskedArray`` made from
it (:func:`~zarrext.dtypes.optional_conversions.to_masked`) has strided data.
:func:`read_masked` reads the same selection into a contiguous values array and a
boolean mask instead, through zarr-python's own selection machinery: zarr indexes
the chunks and the codec pipeline fills a :class:`SplitOptionalBuffer`, an
``NDBuffer`` that keeps the two fields in separate arrays.

With :class:`zarrext.pipeline.ZarrextCodecPipeline` (arrays opened by
:func:`zarrext.open_array`, or any array when it is zarr's configured pipeline)
each chunk decodes into values and mask without building the interleaved chunk
(:meth:`zarrext.codecs.optional.OptionalCodec.decode_split`); through other
pipelines each decoded chunk is split as it is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.core.buffer import NDBuffer, cpu

from zarrext.dtypes.optional import is_optional_native

if TYPE_CHECKING:
    from typing import Self

    import numpy.typing as npt
    import zarr

__all__ = ["SplitOptionalBuffer", "read_masked"]


def _view_key(key: Any) -> tuple[Any, ...]:
    """``key`` as a tuple that indexes a view, also where it picks one element.

    numpy gives a scalar (a copy) for an integer per axis; with a trailing
    Ellipsis it gives a 0-d view, which writes go through.
    """
    key = key if isinstance(key, tuple) else (key,)
    if any(k is Ellipsis for k in key):
        return key
    return (*key, Ellipsis)


class SplitOptionalBuffer(cpu.NDBuffer):
    """An ``NDBuffer`` of an optional data type that keeps values and validity apart.

    To zarr-python it has the optional array's shape and structured dtype; every
    write (``buffer[key] = value``, with a structured chunk or a fill value)
    stores the ``value`` field into :attr:`values` and the ``valid`` field,
    inverted, into :attr:`mask` (``numpy.ma``'s convention: True is missing).

    A new buffer's mask is all False and written only where an element is
    missing: made by ``numpy.zeros``, its pages are not touched (nor faulted in)
    for chunks whose elements are all present.

    Its structured ``_data`` is a read-only stand-in of zero strides: a write
    that bypassed ``__setitem__`` would raise instead of being lost.

    Parameters
    ----------
    values : numpy.ndarray
        Where the values go (the optional type's inner dtype).
    mask : numpy.ndarray
        Where the missing elements are marked (bool, the same shape).
    dtype : numpy.dtype
        The optional data type's structured native dtype.
    """

    values: npt.NDArray[Any]
    mask: npt.NDArray[np.bool_]

    def __init__(
        self,
        values: npt.NDArray[Any],
        mask: npt.NDArray[np.bool_],
        dtype: np.dtype[Any],
        *,
        _marked: list[bool] | None = None,
    ) -> None:
        if not is_optional_native(dtype):
            raise TypeError(f"expected an optional (structured value/valid) dtype, got {dtype}")
        if values.shape != mask.shape:
            raise ValueError(f"values {values.shape} and mask {mask.shape} differ in shape")
        stand_in = np.lib.stride_tricks.as_strided(
            np.zeros(1, dtype), shape=values.shape, strides=(0,) * values.ndim, writeable=False
        )
        super().__init__(stand_in)
        self.values = values
        self.mask = mask
        # Whether any element was ever marked missing, shared with views of this
        # buffer: until then a region of present elements needs no mask write.
        self._marked = [bool(mask.any())] if _marked is None else _marked

    @classmethod
    def empty_for(cls, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Self:
        """A new buffer of ``shape`` for the optional native ``dtype``."""
        values, mask = np.empty(shape, dtype["value"]), np.zeros(shape, np.bool_)
        return cls(values, mask, dtype, _marked=[False])

    def __getitem__(self, key: Any) -> Self:
        view = _view_key(key)
        values, mask = self.values[view], self.mask[view]
        if values.size and not np.may_share_memory(values, self.values):
            # An advanced index copies: writes into the result would be lost.
            raise TypeError(f"an optional buffer gives views for basic keys only, got {key!r}")
        return type(self)(values, mask, self.dtype, _marked=self._marked)

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, NDBuffer):
            value = value.as_numpy_array()
        value = np.asarray(value)
        if not is_optional_native(value.dtype):
            raise TypeError(
                f"an optional buffer takes (value, valid) records, got dtype {value.dtype}"
            )
        self.put(key, value["value"], value["valid"])

    def put(self, key: Any, values: Any, valid: Any) -> None:
        """Store ``values`` and their validity ``valid`` (already split) at ``key``."""
        self.values[key] = values
        if self._marked[0] or not np.all(valid):
            self._marked[0] = True  # first: later puts into this region write masks too
            self.mask[key] = np.logical_not(valid)

    def fill(self, value: Any) -> None:
        self[...] = value

    def as_numpy_array(self) -> npt.NDArray[Any]:
        """The structured ``(value, valid)`` array (a copy)."""
        out = np.empty(self.values.shape, self.dtype)
        out["value"] = self.values
        out["valid"] = ~self.mask
        return out

    def as_ndarray_like(self) -> np.ma.MaskedArray[Any, Any]:  # type: ignore[override]
        """The contents as a ``MaskedArray`` (masked = missing), sharing both arrays."""
        return np.ma.MaskedArray(self.values, mask=self.mask, copy=False, shrink=False)


def read_masked(array: zarr.Array[Any], selection: Any = Ellipsis) -> np.ma.MaskedArray[Any, Any]:
    """``array[selection]`` of an optional array as a ``numpy.ma.MaskedArray``.

    Same values and missing elements as ``zarrext.to_masked(array[selection])``,
    but the data is a contiguous array of the inner type, written by the decode
    itself, and the mask a contiguous bool array: no interleaved
    ``(value, valid)`` array is built. Data under the mask is zero where no value
    is stored.

    Parameters
    ----------
    array : zarr.Array
        An array of the optional data type (one level is split; for a nested
        optional the data is again an optional, structured array).
    selection : basic selection, optional
        Integers, slices (positive steps) and Ellipsis, as ``array[selection]``.

    Returns
    -------
    numpy.ma.MaskedArray
        The selection; a single element gives a 0-d masked array.

    Raises
    ------
    TypeError
        If ``array`` is not of an optional data type.
    """
    dtype = np.dtype(array.dtype)  # zarr gives the native (structured) dtype
    if not is_optional_native(dtype):
        raise TypeError(f"read_masked needs an array of the optional data type, got {array.dtype}")
    # zarr's basic selection gives numpy's shape: index a view that holds no memory.
    shape = np.broadcast_to(np.empty((), np.bool_), array.shape)[selection].shape
    out = SplitOptionalBuffer.empty_for(shape, dtype)
    array.get_basic_selection(selection, out=out)
    return out.as_ndarray_like()
