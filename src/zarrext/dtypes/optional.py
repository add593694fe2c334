"""The ``optional`` data type: nullable values of any other data type.

Metadata: ``{"name": "optional", "configuration": {"name": <inner>, "configuration":
{...}}}``, nesting allowed. Fill value: ``null`` (missing) or a one-element list
holding the inner fill value (``[42]``, ``[null]``, ``[[42]]``).

Names: the registry's ``optional`` and zarrs' ``zarrs.optional`` (the only name
zarrs 0.23.8 reads) are both read; a type writes the name it was read with or
given (``OptionalDType(inner, name="zarrs.optional")``), and its default codec
uses the same name.

A NumPy structured dtype never selects this type: ``dtype=[("value", "<f4"),
("valid", "?")]`` stays zarr-python's ``struct``. Only an explicit
``OptionalDType`` (or ``optional`` metadata) makes an optional array.

In memory an optional array is a NumPy structured array with two fields::

    value  the inner data type (itself structured for a nested optional)
    valid  bool, True where the element is present

so ``a["valid"]`` is the validity mask (the spec's mask, Arrow's validity bitmap)
and ``a["value"]`` the values. Missing elements hold zeros in ``value``, which keeps
an all-missing chunk equal to a ``null`` fill value (zarr-python then skips storing
it). ``np.zeros(shape, dtype.to_native_dtype())`` is an all-missing array.
Variable-length strings are held in an object field, because NumPy's
``StringDType`` cannot be a structured field.

Conversions: :func:`to_masked` / :func:`from_masked` (``numpy.ma``),
:func:`to_arrow` / :func:`from_arrow` (``pyarrow``, nulls in the validity bitmap).
Writing a ``MaskedArray``, a pyarrow array, ``None`` or plain values to an optional
zarr array converts them with :func:`as_optional_array`: zarr-python casts written
values with ``astype``, which cannot carry a mask, so this module wraps
``zarr.core.array._set_selection`` to convert values for optional arrays first.
It also makes :class:`~zarrext.codecs.optional.OptionalCodec` the default
serializer of optional arrays (zarr-python's default, ``bytes``, would write the
structured bytes, not the spec's format).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeGuard, cast

import numpy as np
from zarr.core.context import Context, Resolver
from zarr.core.dtype import VariableLengthUTF8, ZDType, get_data_type_from_native_dtype, parse_dtype
from zarr.core.dtype.common import HasItemSize
from zarr.core.dtype.registry import _NestedDataTypeValidationError
from zarr.errors import DataTypeValidationError

from zarrext._nesting import NestingError, check_depth, nested

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa
    from zarr.core.common import JSON, ZarrFormat
    from zarr.core.dtype import ZDTypeLike
    from zarr.core.dtype.common import DTypeJSON
    from zarr.core.dtype.wrapper import TBaseDType, TBaseScalar

__all__ = [
    "OptionalDType",
    "as_optional_array",
    "from_arrow",
    "from_masked",
    "to_arrow",
    "to_masked",
]

NAME = "optional"
NAMES = ("optional", "zarrs.optional")
FIELDS = ("value", "valid")


def is_optional_native(dtype: object) -> TypeGuard[np.dtypes.VoidDType[int]]:
    """Whether ``dtype`` has the in-memory layout of an optional array (value, valid)."""
    if not isinstance(dtype, np.dtype) or dtype.names != FIELDS or dtype.fields is None:
        return False
    return isinstance(dtype, np.dtypes.VoidDType) and dtype.fields["valid"][0] == np.bool_


def _field_dtype(inner: ZDType[TBaseDType, TBaseScalar]) -> np.dtype[Any]:
    native = inner.to_native_dtype()
    # StringDType cannot be a structured field; Python str objects stand in for it.
    return np.dtype("O") if native.kind == "T" else native


def _inner_json(data: object) -> DTypeJSON:
    """The registry's form of the inner data type JSON (``{"name": "uint8",
    "configuration": {}}`` is the string ``"uint8"`` to zarr-python)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
        raise _NestedDataTypeValidationError(
            f"optional: the inner data type must be an object with a 'name', got {data!r}"
        )
    unknown = set(data) - {"name", "configuration"}
    if unknown:
        raise _NestedDataTypeValidationError(
            f"optional: unknown keys {sorted(unknown)} in the inner data type {data!r}"
        )
    configuration = data.get("configuration")
    if not configuration:
        return cast("str", data["name"])
    return {"name": data["name"], "configuration": configuration}


@dataclass(frozen=True)
class OptionalDType(ZDType[np.dtypes.VoidDType[int], np.void], HasItemSize):
    """Nullable values of ``inner`` (any zarr v3 data type, optional included).

    Parameters
    ----------
    inner : ZDType or data type like
        The data type of present values, e.g. ``Float32()``, ``"int16"``,
        ``OptionalDType("uint8")``.
    name : {"optional", "zarrs.optional"}
        Name written to ``zarr.json``, for this level and every nested one:
        ``"zarrs.optional"`` for arrays that zarrs 0.23.8 must read. Not part of
        equality.
    """

    _zarr_v3_name: ClassVar[Literal["optional"]] = "optional"
    dtype_cls = np.dtypes.VoidDType  # type: ignore[assignment]

    inner: ZDType[TBaseDType, TBaseScalar]
    name: str = field(default=NAME, compare=False)

    def __init__(self, inner: ZDTypeLike, name: str = NAME) -> None:
        if name not in NAMES:
            raise ValueError(f"optional: name must be one of {NAMES}, got {name!r}")
        if not isinstance(inner, ZDType):
            inner = parse_dtype(inner, zarr_format=3)
        if isinstance(inner, OptionalDType) and inner.name != name:
            inner = OptionalDType(inner.inner, name=name)
        object.__setattr__(self, "inner", inner)
        object.__setattr__(self, "name", name)

    # -- levels ---------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Number of nested optional levels (1 for ``optional<T>``)."""
        return 1 + (self.inner.depth if isinstance(self.inner, OptionalDType) else 0)

    @property
    def leaf(self) -> ZDType[TBaseDType, TBaseScalar]:
        """The innermost, non-optional data type."""
        return self.inner.leaf if isinstance(self.inner, OptionalDType) else self.inner

    @property
    def item_size(self) -> int:
        return self.to_native_dtype().itemsize

    # -- native dtype ---------------------------------------------------------

    def to_native_dtype(self) -> np.dtypes.VoidDType[int]:
        return cast(
            "np.dtypes.VoidDType[int]",
            np.dtype([("value", _field_dtype(self.inner)), ("valid", np.bool_)]),
        )

    @classmethod
    def _check_native_dtype(cls, dtype: TBaseDType) -> TypeGuard[np.dtypes.VoidDType[int]]:
        # zarr-python infers data types from NumPy dtypes through this check: a
        # (value, valid) structured dtype is also a plain struct, and only an
        # explicit OptionalDType may select this type (see from_native_layout).
        return False

    @classmethod
    def from_native_dtype(cls, dtype: TBaseDType) -> Self:
        raise DataTypeValidationError(
            f"{dtype}: the optional data type is never inferred from a NumPy dtype (a "
            "structured dtype is zarr's struct); pass zarrext.OptionalDType(inner), or "
            "use OptionalDType.from_native_layout"
        )

    @classmethod
    def from_native_layout(cls, dtype: object) -> Self:
        """The optional type whose in-memory layout (``to_native_dtype``) is ``dtype``."""
        if not is_optional_native(dtype):
            raise DataTypeValidationError(
                f"Invalid data type: {dtype}. Expected a structured dtype with fields "
                f"{FIELDS} ('valid' bool)"
            )
        assert dtype.fields is not None
        value = dtype.fields["value"][0]
        if is_optional_native(value):
            return cls(inner=cls.from_native_layout(value))
        if value == np.dtype("O"):
            # Object fields are how this type holds variable-length strings.
            return cls(inner=VariableLengthUTF8())  # type: ignore[arg-type]
        return cls(inner=get_data_type_from_native_dtype(value))

    # -- JSON -----------------------------------------------------------------

    @classmethod
    def _check_json_v3(cls, data: DTypeJSON) -> bool:
        return (
            isinstance(data, Mapping)
            and data.get("name") in NAMES
            and set(data) == {"name", "configuration"}
            and isinstance(data["configuration"], Mapping)
        )

    @classmethod
    def _from_json_v2(cls, data: DTypeJSON) -> Self:
        raise DataTypeValidationError("the optional data type exists only in Zarr format 3")

    @classmethod
    def _from_json_v3(cls, data: DTypeJSON) -> Self:
        resolver = Resolver(context=Context.default(), zarr_format=3)
        return cls._from_json_resolved(data, resolver=resolver)

    @classmethod
    def _from_json_resolved(cls, data: DTypeJSON, *, resolver: Resolver) -> Self:
        if resolver.zarr_format != 3 or not cls._check_json_v3(data):
            raise DataTypeValidationError(
                f"Invalid JSON representation of {cls.__name__}: {data!r}"
            )
        check_depth(data, "configuration", "optional data type")
        configuration = cast("Mapping[str, Mapping[str, object]]", data)["configuration"]
        inner_json = _inner_json(configuration)
        try:
            with nested("optional data type"):
                inner = resolver.at("configuration").resolve_data_type(inner_json)
        except (DataTypeValidationError, NestingError):
            raise
        except ValueError as e:
            raise _NestedDataTypeValidationError(
                f"optional: unknown inner data type {configuration!r}: {e}"
            ) from e
        return cls(inner=inner, name=cast("str", cast("Mapping[str, object]", data)["name"]))

    def to_json(self, zarr_format: ZarrFormat) -> Any:
        if zarr_format != 3:
            raise ValueError("the optional data type exists only in Zarr format 3")
        inner = self.inner.to_json(zarr_format=3)
        if isinstance(inner, str):
            inner = {"name": inner, "configuration": {}}
        return {"name": self.name, "configuration": dict(inner)}

    # -- scalars --------------------------------------------------------------

    def default_scalar(self) -> np.void:
        """The missing value (``null``)."""
        return cast("np.void", np.zeros((), dtype=self.to_native_dtype())[()])

    def present(self, value: object) -> np.void:
        """A present scalar holding ``value`` (cast to the inner data type)."""
        out = np.zeros((), dtype=self.to_native_dtype())
        out["value"] = self.inner.cast_scalar(value)
        out["valid"] = True
        return cast("np.void", out[()])

    def _check_scalar(self, data: object) -> bool:
        if data is None or data is np.ma.masked:
            return True
        if isinstance(data, np.void) and data.dtype == self.to_native_dtype():
            return True
        if isinstance(data, list) and len(data) == 1:
            return self.inner._check_scalar(data[0])
        return self.inner._check_scalar(data)

    def cast_scalar(self, data: object) -> np.void:
        """A scalar of this type.

        ``None`` (or ``numpy.ma.masked``) is missing; a one-element list ``[v]`` is
        present ``v`` (so ``[None]`` is a present-but-missing inner value); an
        ``np.void`` of the native dtype is taken as is; anything else is a present
        value of the inner type.
        """
        if data is None or data is np.ma.masked:
            return self.default_scalar()
        if isinstance(data, np.void) and data.dtype == self.to_native_dtype():
            return data
        if isinstance(data, list) and len(data) == 1:
            return self.present(data[0])
        if not self._check_scalar(data):
            raise TypeError(f"Cannot convert {data!r} to a scalar of {self}")
        return self.present(data)

    def from_json_scalar(self, data: JSON, *, zarr_format: ZarrFormat) -> np.void:
        if data is None:
            return self.default_scalar()
        if isinstance(data, list) and len(data) == 1:
            return self.present(self.inner.from_json_scalar(data[0], zarr_format=zarr_format))
        raise TypeError(
            f"Invalid fill value {data!r} for {self}: expected null or a one-element list "
            "holding the inner fill value"
        )

    def to_json_scalar(self, data: object, *, zarr_format: ZarrFormat) -> JSON:
        scalar = self.cast_scalar(data)
        if not bool(scalar["valid"]):
            return None
        return [self.inner.to_json_scalar(scalar["value"], zarr_format=zarr_format)]


# -- conversions ----------------------------------------------------------------


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
    """
    dtype = _as_optional_dtype(dtype)
    masked = np.ma.asanyarray(masked)
    valid = ~_element_mask(masked)
    data = np.ma.getdata(masked)
    out = np.zeros(masked.shape, dtype=dtype.to_native_dtype())
    if isinstance(dtype.inner, OptionalDType):
        data = as_optional_array(data, dtype.inner)
    # copy only present values, so missing ones stay zero (the canonical filler)
    np.copyto(out["value"], data, casting="unsafe", where=valid)
    out["valid"] = valid
    return out


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
        if _is_nan(value):
            return dtype.default_scalar()
        return dtype.cast_scalar(value)
    array = np.asarray(value, dtype=object if isinstance(value, list | tuple) else None)
    if array.dtype.kind in "fc" and not isinstance(dtype.inner, OptionalDType):
        # plain floats have no mask: NaN is missing (xarray's and pandas' convention)
        missing = np.isnan(array)
        return from_masked(np.ma.MaskedArray(np.where(missing, 0, array), mask=missing), dtype)
    if array.dtype == object:
        missing = np.frompyfunc(lambda v: v is None, 1, 1)(array).astype(bool)
        filled = array
        if not isinstance(dtype.inner, OptionalDType):
            filled = np.where(missing, dtype.inner.default_scalar(), array)
        return from_masked(np.ma.MaskedArray(filled, mask=missing), dtype)
    return from_masked(np.ma.MaskedArray(array, mask=np.zeros(array.shape, bool)), dtype)


def _is_nan(value: object) -> bool:
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


# -- zarr-python integration ------------------------------------------------------


def _install_hooks() -> None:
    """Convert written values for optional arrays; default their serializer.

    Both wrap module-level functions of ``zarr.core.array`` that zarr-python looks
    up at call time; other data types pass through unchanged.
    """
    import zarr.core.array as core_array

    set_selection = core_array._set_selection
    if not getattr(set_selection, "_zarrext_optional", False):

        @functools.wraps(set_selection)
        async def _set_selection(*args: Any, **kwargs: Any) -> Any:
            metadata = args[1] if len(args) > 1 else kwargs["metadata"]
            dtype = getattr(metadata, "dtype", None)
            if isinstance(dtype, OptionalDType) and not kwargs.get("fields"):
                if len(args) > 6:
                    args = (*args[:6], as_optional_array(args[6], dtype), *args[7:])
                else:
                    kwargs["value"] = as_optional_array(kwargs["value"], dtype)
            return await set_selection(*args, **kwargs)

        _set_selection._zarrext_optional = True  # type: ignore[attr-defined]
        core_array._set_selection = _set_selection

    default_serializer = core_array.default_serializer_v3
    if not getattr(default_serializer, "_zarrext_optional", False):

        @functools.wraps(default_serializer)
        def default_serializer_v3(dtype: ZDType[Any, Any]) -> Any:
            if isinstance(dtype, OptionalDType):
                from zarrext.codecs.optional import OptionalCodec

                return OptionalCodec.default_for(dtype)
            return default_serializer(dtype)

        default_serializer_v3._zarrext_optional = True  # type: ignore[attr-defined]
        core_array.default_serializer_v3 = default_serializer_v3

    init_array = core_array.init_array
    if not getattr(init_array, "_zarrext_optional", False):

        @functools.wraps(init_array)
        async def _init_array(**kwargs: Any) -> Any:
            return await init_array(**_optional_create_kwargs(kwargs))

        _init_array._zarrext_optional = True  # type: ignore[attr-defined]
        core_array.init_array = _init_array


def _optional_create_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Codecs (and, given the optional codec as serializer, the data type) of a new array.

    - An :class:`~zarrext.codecs.optional.OptionalCodec` with an ``inner`` type,
      passed as the serializer of a non-optional data type (what xarray's
      ``encoding={"v": {"serializer": OptionalCodec(inner="int16")}}`` does), makes
      the array ``optional<inner>``, a NaN/None fill value meaning missing.
    - An optional array with ``compressors="auto"`` gets no top-level compressor:
      the registry recommends ``optional`` as the only codec, compression inside
      its chains (see ``OptionalCodec.default_for``).
    """
    from zarrext.codecs.optional import OptionalCodec

    dtype, serializer = kwargs.get("dtype"), kwargs.get("serializer", "auto")
    if (
        isinstance(serializer, OptionalCodec)
        and serializer.inner is not None
        and not isinstance(dtype, OptionalDType)
    ):
        dtype = OptionalDType(serializer.inner, name=serializer.name)
        fill = kwargs.get("fill_value")
        if fill is None or _is_nan(fill):
            kwargs = {**kwargs, "fill_value": None}
        kwargs = {**kwargs, "dtype": dtype}
    if isinstance(dtype, OptionalDType) and kwargs.get("compressors", "auto") == "auto":
        kwargs = {**kwargs, "compressors": None}
    return kwargs


_install_hooks()

