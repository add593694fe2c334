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

Conversions to and from masked, pyarrow and plain arrays live in
:mod:`zarrext.dtypes.optional_conversions`; what zarr-python does with optional
arrays (converting written values, the default serializer) in
:mod:`zarrext.integration.optional`.
"""


from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeGuard, cast

import numpy as np
from zarr.core.context import Context, Resolver
from zarr.core.dtype import (
    VariableLengthUTF8,
    ZDType,
    data_type_registry,
    get_data_type_from_native_dtype,
    parse_dtype,
)
from zarr.core.dtype.common import HasItemSize
from zarr.errors import DataTypeValidationError

from zarrext._nesting import NestingError, check_depth, nested
from zarrext._zarr_compat import NestedDataTypeValidationError
from zarrext.errors import FillValueError

if TYPE_CHECKING:
    from zarr.core.common import JSON, ZarrFormat
    from zarr.core.dtype import ZDTypeLike
    from zarr.core.dtype.common import DTypeJSON
    from zarr.core.dtype.wrapper import TBaseDType, TBaseScalar

__all__ = ["OptionalDType", "is_optional_native", "register_with_zarr"]

NAME = "optional"
NAMES = ("optional", "zarrs.optional")
FIELDS = ("value", "valid")
# The inner type of ``OptionalDType()``: NumPy's default data type, so that code
# which builds every registered data type with no arguments (zarr-python's generic
# data type tests do) gets a valid, round-tripping type.
DEFAULT_INNER = "float64"


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
        raise NestedDataTypeValidationError(
            f"optional: the inner data type must be an object with a 'name', got {data!r}"
        )
    unknown = set(data) - {"name", "configuration"}
    if unknown:
        raise NestedDataTypeValidationError(
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
    inner : ZDType or data type like, default ``"float64"``
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

    def __init__(self, inner: ZDTypeLike = DEFAULT_INNER, name: str = NAME) -> None:
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
            raise NestedDataTypeValidationError(
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
        if not (isinstance(data, list) and len(data) == 1):
            raise FillValueError(
                f"fill_value {data!r} of data type {_name(self)}: expected null or a one-element "
                "list holding the inner fill value"
            )
        try:
            return self.present(self.inner.from_json_scalar(data[0], zarr_format=zarr_format))
        except FillValueError:  # a nested optional's: it names its own level
            raise
        except (TypeError, ValueError, OverflowError) as e:
            raise FillValueError(
                f"fill_value {data!r} of data type {_name(self)}: {data[0]!r} is not a "
                f"value of the inner data type {_name(self.inner)} ({e})"
            ) from e

    def to_json_scalar(self, data: object, *, zarr_format: ZarrFormat) -> JSON:
        scalar = self.cast_scalar(data)
        if not bool(scalar["valid"]):
            return None
        return [self.inner.to_json_scalar(scalar["value"], zarr_format=zarr_format)]


def _name(dtype: Any) -> str:
    """A data type as metadata names it: ``uint8``, ``optional(optional(int16))``."""
    if isinstance(dtype, OptionalDType):
        return f"optional({_name(dtype.inner)})"
    name = getattr(dtype, "_zarr_v3_name", None)
    return name if isinstance(name, str) else type(dtype).__name__


def register_with_zarr() -> None:
    """Put :class:`OptionalDType` in zarr-python's data type registry now.

    zarr-python loads data types from entry points lazily, on the first lookup, and
    code that iterates ``data_type_registry.contents`` while resolving a type (zarr's
    own test suite does) would see the registry grow under it ("dictionary changed
    size during iteration"). Registered here, the later entry-point load registers
    the same class again, which leaves the registry as it is.
    """
    data_type_registry.register(OptionalDType._zarr_v3_name, OptionalDType)
