"""Optional arrays to and from ``numpy.ma``, pyarrow and plain values.

An optional array in memory is a structured array with fields ``value`` and
``valid`` (see :mod:`zarrext.dtypes.optional`). :func:`to_masked` /
:func:`from_masked` convert to and from ``numpy.ma.MaskedArray``, :func:`to_arrow`
/ :func:`from_arrow` to and from pyarrow (nulls in the validity bitmap), and
:func:`as_optional_array` takes whatever a user writes to an optional array.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
from zarr.core.dtype import VariableLengthUTF8, get_data_type_from_native_dtype

from zarrext._extras import needs
from zarrext.dtypes.optional import OptionalDType, is_optional_native

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa

__all__ = [
    "OptionalValueError",
    "as_optional_array",
    "from_arrow",
    "from_masked",
    "is_nan",
    "nan_dtype",
    "to_arrow",
    "to_masked",
    "to_nan",
]


class OptionalValueError(ValueError):
    """A present value that the inner data type of an optional array cannot hold."""


def _as_optional_dtype(dtype: object) -> OptionalDType:
    if isinstance(dtype, OptionalDType):
        return dtype
    raise TypeError(f"expected an OptionalDType, got {dtype!r}")


def to_masked(array: npt.NDArray[Any]) -> np.ma.MaskedArray[Any, Any]:
    """One optional level of ``array`` as a ``numpy.ma.MaskedArray``.

    The data is a view of ``array["value"]`` (no values are copied); the mask is
    ``~array["valid"]``. For a nested optional the data is again an optional
    (structured) array.
    """
    array = np.asarray(array)
    if not is_optional_native(array.dtype):
        raise TypeError(f"expected an optional (structured value/valid) array, got {array.dtype}")
    return np.ma.MaskedArray(array["value"], mask=~array["valid"])


def from_masked(masked: Any, dtype: OptionalDType | Any) -> npt.NDArray[Any]:
    """An optional array of ``dtype`` from a ``MaskedArray`` (masked = missing).

    For a nested optional, the masked array's data is converted with
    :func:`as_optional_array` for the inner level (a structured optional array, a
    masked array or plain values).

    Present values for an integer inner type follow :func:`integer_values`:
    floats are rounded half to even (as xarray encodes floats as integers), and a
    value outside the inner type's range is refused.

    Raises
    ------
    OptionalValueError
        A present value outside the range of an integer inner type (or a present
        NaN or infinity for one).
    """
    dtype = _as_optional_dtype(dtype)
    masked = np.ma.asanyarray(masked)
    valid = ~_element_mask(masked)
    data = np.ma.getdata(masked)
    out = np.zeros(masked.shape, dtype=dtype.to_native_dtype())
    if isinstance(dtype.inner, OptionalDType):
        data = as_optional_array(data, dtype.inner)
    else:
        data = integer_values(data, valid, out["value"].dtype)
    # copy only present values, so missing ones stay zero (the canonical filler)
    np.copyto(out["value"], data, casting="unsafe", where=valid)
    out["valid"] = valid
    return out


def integer_values(
    values: npt.NDArray[Any], present: npt.NDArray[np.bool_], target: np.dtype[Any]
) -> npt.NDArray[Any]:
    """``values`` ready to be cast to the integer dtype ``target`` without surprise.

    NumPy's cast truncates floats toward zero and wraps integers around
    (``40000.0`` becomes ``-25536`` in ``int16``). Here floats are rounded half to
    even, as xarray's encoding of floats into integer variables does
    (``np.round``: 2.7 -> 3, -1.6 -> -2, 2.5 -> 2), and every present value must
    then lie in ``target``'s range. Values that need no care (a ``target`` that is
    not an integer, values that cast safely, non-numeric values) are returned as
    they are.

    Parameters
    ----------
    values : ndarray
        Values to be written; an object array of Python numbers is read as numbers.
    present : ndarray of bool
        Which elements are present (missing ones are not checked).
    target : numpy.dtype
        The inner data type of the optional array.

    Raises
    ------
    OptionalValueError
        A present value outside ``target``'s range, or a present NaN or infinity.
    """
    if target.kind not in "iu":
        return values
    values = np.asarray(values)
    if values.dtype == object:
        numbers = np.asarray(values.tolist()) if values.size else values
        if numbers.dtype.kind not in "biuf":
            return values  # not plain numbers: NumPy's cast says what is wrong
        values = numbers
    if values.dtype.kind not in "iuf" or np.can_cast(values.dtype, target, "safe"):
        return values
    info = np.iinfo(target)
    given = values
    if values.dtype.kind == "f":
        if values.dtype.itemsize < 8:
            values = values.astype(np.float64)  # exact; the bounds below are float64
        values = np.round(values)
        # both bounds are powers of two (or 0): exact in float64, unlike info.max
        fits = (values >= info.min) & (values < float(int(info.max) + 1))
    else:
        fits = (values >= info.min) & (values <= info.max)
    bad = np.asarray(present & ~fits, dtype=bool)
    if bad.any():
        first = given[tuple(np.argwhere(bad)[0])] if given.ndim else given[()]
        raise OptionalValueError(
            f"value {_shown(first)} is outside the range of {target} "
            f"[{info.min}, {info.max}]"
        )
    return values


def _shown(value: Any) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def nan_dtype(dtype: OptionalDType) -> np.dtype[Any] | None:
    """The plain dtype :func:`to_nan` gives for ``dtype``, or None if it has none.

    Floats and complex keep their type; integers and bools become floats the way
    xarray's CF decoding widens masked integers (``float32`` for items of at most
    2 bytes, else ``float64``: integers beyond 2**53 lose precision); datetimes
    and timedeltas keep their type (missing is NaT). Nested optionals, strings
    and structured inner types have no plain form (None).
    """
    if isinstance(dtype.inner, OptionalDType):
        return None
    native = dtype.inner.to_native_dtype()
    if native.kind in "fcmM":
        return native
    if native.kind in "biu":
        return np.dtype("float32" if native.itemsize <= 2 else "float64")
    return None


def to_nan(array: npt.NDArray[Any], dtype: OptionalDType) -> npt.NDArray[Any]:
    """One-level optional ``array`` as a plain array, missing as NaN (or NaT).

    ``array`` is a (value, valid) structured array, or a ``MaskedArray`` of the
    values (as :func:`zarrext.read_masked` gives). The result's dtype is
    :func:`nan_dtype` of ``dtype`` (e.g. ``optional<int16>`` gives ``float32``).
    Writing such an array back to an optional array (see
    :func:`as_optional_array`) makes NaN missing again.
    """
    target = nan_dtype(dtype)
    if target is None:
        raise TypeError(f"{dtype} has no plain form with NaN for missing values")
    missing = np.array("NaT", dtype=target) if target.kind in "mM" else np.array(np.nan, target)
    if isinstance(array, np.ma.MaskedArray) and array.dtype.names is None:
        return np.where(np.ma.getmaskarray(array), missing, array.data.astype(target, copy=False))
    array = np.asarray(array)
    if not is_optional_native(array.dtype):
        raise TypeError(f"expected an optional (structured value/valid) array, got {array.dtype}")
    return np.where(array["valid"], array["value"].astype(target), missing)


def _element_mask(masked: np.ma.MaskedArray[Any, Any]) -> npt.NDArray[np.bool_]:
    """Per-element mask; a structured element counts as masked when all its fields are."""
    if masked.dtype.names is None:
        return np.ma.getmaskarray(masked)
    return np.broadcast_to(np.asarray(masked.recordmask, dtype=bool), masked.shape)


def as_optional_array(value: Any, dtype: OptionalDType | Any) -> Any:
    """``value`` as an optional array (or scalar) of ``dtype``.

    Accepts an optional structured array (returned as is), a ``MaskedArray``, a
    pyarrow array, ``None``/``numpy.ma.masked`` (missing), a scalar (present), or
    values of the inner type (all present; ``None`` entries of a list or object
    array are missing). Plain floating-point values (arrays or scalars) have no
    mask, so NaN among them is missing; write a ``MaskedArray`` or a structured
    array to store a present NaN.
    """
    dtype = _as_optional_dtype(dtype)
    native = dtype.to_native_dtype()
    if value is None or value is np.ma.masked:
        return dtype.cast_scalar(value)
    if isinstance(value, np.void) and value.dtype == native:
        return value
    if _is_arrow(value):
        return from_arrow(value, dtype)
    if isinstance(value, np.ma.MaskedArray):
        return from_masked(value, dtype)
    if isinstance(value, np.ndarray) and value.dtype == native:
        return value
    if np.isscalar(value):
        if is_nan(value):
            return dtype.default_scalar()
        if (
            not isinstance(dtype.inner, OptionalDType)
            and native["value"].kind in "iu"
            and isinstance(value, int | float | np.integer | np.floating)
        ):
            # rounded and range-checked as arrays are (zarr's cast would truncate)
            one = from_masked(np.ma.MaskedArray(np.asarray(value), mask=False), dtype)
            return cast("np.void", one[()])
        return dtype.cast_scalar(value)
    array = np.asarray(value, dtype=object if isinstance(value, list | tuple) else None)
    inner_kind = native["value"].kind
    if inner_kind in "mM" and array.dtype.kind in "biuf":
        # Numbers are no times without their units (xarray's to_zarr sends datetimes
        # CF-encoded as numbers, NaT as -2**63); NumPy would cast them as counts of
        # the inner unit, silently wrong, and NaT would become present.
        inner_name = native["value"]
        raise TypeError(
            f"optional<{inner_name}> takes {inner_name} values, got {array.dtype} numbers; "
            "xarray's to_zarr encodes datetimes as numbers with units, which an optional "
            "datetime array cannot hold: write such a variable through zarr "
            "(zarr.open_array(...)[...] = values) instead"
        )
    if array.dtype.kind in "fcmM" and not isinstance(dtype.inner, OptionalDType):
        # plain floats have no mask: NaN (NaT) is missing (xarray's and pandas' convention)
        missing = np.isnan(array)
        filled = np.where(missing, np.zeros((), array.dtype), array)
        return from_masked(np.ma.MaskedArray(filled, mask=missing), dtype)
    if array.dtype == object:
        missing = np.frompyfunc(lambda v: v is None, 1, 1)(array).astype(bool)
        filled = array
        if not isinstance(dtype.inner, OptionalDType):
            filled = np.where(missing, dtype.inner.default_scalar(), array)
        return from_masked(np.ma.MaskedArray(filled, mask=missing), dtype)
    return from_masked(np.ma.MaskedArray(array, mask=np.zeros(array.shape, bool)), dtype)


def is_nan(value: object) -> bool:
    """Whether ``value`` is a floating-point or complex NaN scalar."""
    return isinstance(value, float | np.floating | complex | np.complexfloating) and bool(
        np.isnan(value)
    )


def _is_arrow(value: object) -> bool:
    module = type(value).__module__
    return module.startswith("pyarrow") and hasattr(value, "is_valid")


def to_arrow(array: npt.NDArray[Any]) -> pa.Array:
    """An optional array as a pyarrow array, flattened in C order.

    One level: a primitive (or string) array whose validity bitmap is ``valid``.
    Nested levels: a struct array with one field ``value`` per extra level, the
    struct's own validity being that level's ``valid``.
    """
    with needs("arrow", "zarrext.to_arrow"):
        import pyarrow as pa

    array = np.asarray(array).reshape(-1)
    if not is_optional_native(array.dtype):
        raise TypeError(f"expected an optional (structured value/valid) array, got {array.dtype}")
    valid = np.ascontiguousarray(array["valid"])
    values = array["value"]
    mask = pa.array(~valid)
    if is_optional_native(values.dtype):
        child = to_arrow(values)
        return pa.StructArray.from_arrays([child], names=["value"], mask=mask)
    return pa.array(np.ascontiguousarray(values), mask=~valid)


def from_arrow(array: Any, dtype: OptionalDType | None = None) -> npt.NDArray[Any]:
    """A 1-D optional array from a pyarrow array (nulls = missing).

    ``dtype`` defaults to one inferred from the Arrow type (struct arrays with one
    field ``value`` are a nested level, as :func:`to_arrow` writes them).
    """
    with needs("arrow", "zarrext.from_arrow"):
        import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    valid = array.is_valid().to_numpy(zero_copy_only=False).astype(bool, copy=False)
    if pa.types.is_struct(array.type):
        if array.type.num_fields != 1 or array.type.field(0).name != "value":
            raise TypeError(
                f"a struct array is a nested optional only with one field 'value', got {array.type}"
            )
        inner_dtype = dtype.inner if dtype is not None else None
        if inner_dtype is not None and not isinstance(inner_dtype, OptionalDType):
            raise TypeError(f"{dtype} has no nested optional level for {array.type}")
        inner = from_arrow(array.field(0), inner_dtype)
        dtype = dtype or OptionalDType(inner=OptionalDType.from_native_layout(inner.dtype))
        return from_masked(np.ma.MaskedArray(inner, mask=~valid), dtype)
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        values = array.fill_null("").to_numpy(zero_copy_only=False)
        dtype = dtype or OptionalDType(inner=VariableLengthUTF8())  # type: ignore[arg-type]
    else:
        filler = pa.scalar(False) if pa.types.is_boolean(array.type) else pa.scalar(0)
        values = array.fill_null(filler.cast(array.type)).to_numpy(zero_copy_only=False)
        dtype = dtype or OptionalDType(inner=get_data_type_from_native_dtype(values.dtype))
    return from_masked(np.ma.MaskedArray(values, mask=~valid), dtype)
