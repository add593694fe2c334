"""What zarr-python does with optional arrays: written values, default codecs.

zarr-python casts written values with ``astype``, which cannot carry a mask, and
its default serializer for a structured dtype (``bytes``) would write the
structured bytes rather than the spec's format. This module wraps three
module-level functions of ``zarr.core.array`` that zarr-python looks up at call
time so that, for arrays whose data type is :class:`OptionalDType` only:

- written values go through :func:`~zarrext.dtypes.optional_conversions.as_optional_array`
  first (``MaskedArray``, pyarrow, ``None``, NaN in plain floats);
- the default serializer is :class:`~zarrext.codecs.optional.OptionalCodec`;
- new arrays follow the registry's advice on codecs (see
  :func:`optional_create_kwargs`).

Every other data type passes through unchanged. The module is imported by the
``zarr.data_type`` entry point of ``optional``, so the wrappers are installed
when zarr-python first loads zarrext's data type.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from zarr.core.dtype import ZDType

from zarrext._zarr_compat import wrap_core_array
from zarrext.codecs.optional import OptionalCodec
from zarrext.dtypes.optional import OptionalDType, is_optional_native
from zarrext.dtypes.optional_conversions import as_optional_array, is_nan

__all__ = ["OptionalDType", "install_hooks", "optional_create_kwargs"]


def install_hooks() -> None:
    """Convert written values for optional arrays; default their serializer and codecs.

    Each wraps a module-level function of ``zarr.core.array`` that zarr-python looks
    up at call time (through :func:`zarrext._zarr_compat.wrap_core_array`, which
    checks their signatures); other data types pass through unchanged.
    """
    wrap_core_array("_set_selection", _convert_written_values)
    wrap_core_array("default_serializer_v3", _default_serializer)
    wrap_core_array("init_array", _registry_default_codecs)


def _convert_written_values(set_selection: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(set_selection)

    async def _set_selection(*args: Any, **kwargs: Any) -> Any:
        call = signature.bind(*args, **kwargs)
        dtype = getattr(call.arguments["metadata"], "dtype", None)
        if isinstance(dtype, OptionalDType) and not call.arguments.get("fields"):
            call.arguments["value"] = as_optional_array(call.arguments["value"], dtype)
        return await set_selection(*call.args, **call.kwargs)

    return _set_selection


def _default_serializer(default_serializer: Callable[..., Any]) -> Callable[..., Any]:
    def default_serializer_v3(dtype: ZDType[Any, Any]) -> Any:
        if isinstance(dtype, OptionalDType):
            return OptionalCodec.default_for(dtype)
        return default_serializer(dtype)

    return default_serializer_v3


def _registry_default_codecs(init_array: Callable[..., Any]) -> Callable[..., Any]:
    async def _init_array(**kwargs: Any) -> Any:
        return await init_array(**optional_create_kwargs(kwargs))

    return _init_array


def optional_create_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Codecs (and, given the optional codec as serializer, the data type) of a new array.

    - An :class:`~zarrext.codecs.optional.OptionalCodec` with an ``inner`` type,
      passed as the serializer of a non-optional data type (what xarray's
      ``encoding={"v": {"serializer": OptionalCodec(inner="int16")}}`` does), makes
      the array ``optional<inner>``, a NaN/None fill value meaning missing; given
      with the (value, valid) structured dtype of an optional array (what
      ``xarray.open_zarr(g).to_zarr(...)`` passes), the array is that optional type.
    - An optional array with ``compressors="auto"`` gets no top-level compressor:
      the registry recommends ``optional`` as the only codec, compression inside
      its chains (see ``OptionalCodec.default_for``).
    """
    dtype, serializer = kwargs.get("dtype"), kwargs.get("serializer", "auto")
    if isinstance(serializer, OptionalCodec) and not isinstance(dtype, OptionalDType):
        if serializer.inner is not None:
            dtype = OptionalDType(serializer.inner, name=serializer.name)
        elif is_optional_native(dtype):
            # an optional array's in-memory (value, valid) dtype with the optional
            # codec: what ``xarray.open_zarr(g).to_zarr(...)`` passes for an optional
            # variable (a plain structured dtype alone stays zarr's struct)
            dtype = OptionalDType.from_native_layout(dtype)
            dtype = OptionalDType(dtype.inner, name=serializer.name)
    if isinstance(dtype, OptionalDType) and dtype is not kwargs.get("dtype"):
        fill = kwargs.get("fill_value")
        if fill is None or is_nan(fill):
            kwargs = {**kwargs, "fill_value": None}
        kwargs = {**kwargs, "dtype": dtype}
    if isinstance(dtype, OptionalDType) and kwargs.get("compressors", "auto") == "auto":
        kwargs = {**kwargs, "compressors": None}
    return kwargs


install_hooks()
