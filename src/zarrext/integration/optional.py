"""What zarr-python and xarray do with optional arrays: written values, default codecs.

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

xarray writes into an existing optional array (``to_zarr(append_dim=...)``,
``to_zarr(region=...)``) by casting the new values to the array's (value, valid)
record itself, before zarr sees them: NumPy puts a float in ``value`` and
``bool(float)`` in ``valid``, so NaN would be stored present and real zeros
missing. :func:`install_xarray_hooks` (run once ``xarray.backends.zarr`` is
imported, see :mod:`zarrext.integration.xarray_compat`) converts such values to the record
first, NaN (NaT) missing, as :func:`zarrext.encode_optional` does; and warns when
xarray's ``zarr`` engine opens an optional variable as raw records. The same hook
checks quantized variables (``scale_offset`` + ``cast_value``, new or existing)
before xarray creates or resizes an array: a value the array would not give back
as itself is refused (:mod:`zarrext.codecs.quantized_writes`), and the plan that
:func:`zarrext.quantize.plan`'s filters carry is recorded in a new array's
attributes.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
from zarr.core.dtype import ZDType

from zarrext._zarr_compat import wrap_core_array
from zarrext.codecs.optional import OptionalCodec
from zarrext.dtypes.optional import OptionalDType, is_optional_native
from zarrext.dtypes.optional_conversions import OptionalValueError, as_optional_array, is_nan
from zarrext.integration.xarray_compat import (
    XARRAY_ZARR,
    XarrayCompatibilityError,
    when_imported,
    wrap,
)

__all__ = [
    "OptionalDType",
    "OptionalReadWarning",
    "install_hooks",
    "install_xarray_hooks",
    "optional_create_kwargs",
    "raw_for_stored_optional",
]


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


# -- xarray -----------------------------------------------------------------------


class OptionalReadWarning(UserWarning):
    """xarray's ``zarr`` engine opened an optional variable as raw (value, valid) records."""


def install_xarray_hooks(module: ModuleType) -> None:
    """Guard xarray's writes into, and plain reads of, optional arrays, and its writes
    of quantized ones.

    Wraps ``encode_zarr_variable`` of xarray's zarr backend (``module``) with
    :func:`raw_for_stored_optional`, ``ZarrStore.open_store_variable`` with a
    warning for optional variables opened by the ``zarr`` engine, and
    ``ZarrStore.encode`` to name a refused variable and to check quantized ones
    (:func:`_checked_quantized`). They leave every other variable as xarray has it.
    If xarray's backend no longer has what zarrext wraps, a ``RuntimeWarning`` says
    that such writes are not guarded.
    """
    try:
        wrap(module, _encode_stored_optional, _warn_on_raw_read, _encode_named)
    except XarrayCompatibilityError as e:
        warnings.warn(
            f"{e}: xarray appends and region writes into optional arrays are not converted "
            "(NaN would be stored present); convert with zarrext.encode_optional first",
            RuntimeWarning, stacklevel=2,
        )


def _stored_optional(encoding: dict[str, Any]) -> OptionalDType | None:
    """The optional type of the zarr array an encoding was read from, or None.

    xarray gives a variable written into an existing array that array's encoding:
    its stored NumPy dtype (the (value, valid) record) and, for Zarr format 3, its
    serializer. Both must say optional: a plain struct with the same two fields
    (zarr's ``struct`` type, any other serializer) is not zarrext's.
    """
    dtype = encoding.get("dtype")
    if not isinstance(encoding.get("serializer"), OptionalCodec) or not is_optional_native(dtype):
        return None
    return OptionalDType.from_native_layout(dtype)


def raw_for_stored_optional(variable: Any) -> Any:
    """``variable`` as (value, valid) records if xarray will write it into an optional array.

    For a variable whose encoding is that of an existing optional array (what xarray
    gives appended and region-written variables) and whose values are not records
    yet: the values converted with
    :func:`~zarrext.dtypes.optional_conversions.as_optional_array` (NaN or NaT
    missing, everything else present, real zeros included), lazily for dask. Floats
    for an integer inner type are rounded half to even, as xarray rounds floats
    written into a plain integer variable. Any other variable is returned as it is.

    Raises
    ------
    TypeError
        Values the optional type cannot hold, e.g. numbers for an optional datetime
        (xarray adds the variable's name).
    OptionalValueError
        A present value outside the range of an integer inner type (or infinity),
        where xarray would wrap it around. Raised before xarray writes anything,
        also for a dask-backed variable (whose minimum and maximum are computed
        first when its values may not fit: one more pass over its inputs).
    """
    optional = _stored_optional(variable.encoding)
    if optional is None or is_optional_native(variable.dtype):
        return variable
    native = optional.to_native_dtype()

    def convert(block: Any) -> Any:
        return as_optional_array(np.asarray(block), optional)

    data = variable.data
    if hasattr(data, "map_blocks") and hasattr(data, "dask"):
        convert(np.zeros((0,) * data.ndim, data.dtype))  # type errors now, not at compute
        _check_range_now(data, optional)
        converted = data.map_blocks(convert, dtype=native)
    else:
        converted = convert(data)
    return variable.copy(deep=False, data=converted)


def _check_range_now(data: Any, optional: OptionalDType) -> None:
    """Refuse a dask array's out-of-range values before xarray grows the array.

    xarray resizes an array for an append before it computes the blocks: an error
    raised block by block would leave the array longer, its new part missing.
    """
    target = optional.to_native_dtype()["value"]
    if (
        target.kind not in "iu"
        or data.dtype.kind not in "iuf"
        or np.can_cast(data.dtype, target, "safe")
        or data.size == 0
    ):
        return
    import dask
    import dask.array as da

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN array: NaN bounds
        low, high = dask.compute(da.nanmin(data), da.nanmax(data))
    as_optional_array(np.array([low, high], dtype=data.dtype), optional)


def _encode_stored_optional(encode: Callable[..., Any]) -> Callable[..., Any]:
    def encode_zarr_variable(
        var: Any, needs_copy: bool = True, name: Any = None, *, zarr_format: Any = None
    ) -> Any:
        return encode(raw_for_stored_optional(var), needs_copy, name,
                      zarr_format=zarr_format)

    return encode_zarr_variable


def _encode_named(encode: Callable[..., Any]) -> Callable[..., Any]:
    """Convert optional variables where their names are known, to name a refused one;
    then check quantized variables as encoded (:func:`_checked_quantized`).

    xarray calls ``encode_zarr_variable`` without the variable's name (it only adds
    a multi-line note to an error); converted here, the variables pass that wrapper
    unchanged, and a refusal is one line starting ``variable 'name':``.
    """

    def encode_variables(self: Any, variables: Any, attributes: Any) -> Any:
        converted = {}
        for name, variable in variables.items():
            try:
                converted[name] = raw_for_stored_optional(variable)
            except (OptionalValueError, TypeError) as e:
                if type(e) not in (OptionalValueError, TypeError):
                    raise  # another class may take other arguments: xarray names it
                raise type(e)(f"variable {name!r}: {e}") from None
        encoded, encoded_attributes = encode(self, converted, attributes)
        return _checked_quantized(self, encoded), encoded_attributes

    return encode_variables


def _checked_quantized(store: Any, variables: dict[str, Any]) -> dict[str, Any]:
    """``variables`` (encoded, as xarray will write them) once every quantized one is
    checked; new variables given :func:`zarrext.quantize.plan`'s filters get the plan
    recorded in their attributes.

    A value the variable's array (existing: its zarr.json; new: the ``filters`` of
    its encoding) would not give back as itself (:mod:`zarrext.codecs.quantized_writes`) is
    refused here, before xarray creates or resizes any array: one line naming the
    variable. A Dask-backed variable is computed once more for the check.
    """
    from zarrext.codecs.quantized_writes import PlannedFilters, StorableValues

    existing = set(store.array_keys()) if getattr(store, "_mode", "w") != "w" else set()
    out = dict(variables)
    for name, variable in variables.items():
        if name in existing:
            storable = StorableValues.of_metadata(store.members[name].metadata)
        else:
            filters = variable.encoding.get("filters") or ()
            serializer = variable.encoding.get("serializer")  # a sharding codec's filters
            codecs = [*filters, *([serializer] if serializer is not None else [])]
            planned = filters.planned if isinstance(filters, PlannedFilters) else None
            fill = filters.fill_value if isinstance(filters, PlannedFilters) else np.nan
            storable = StorableValues.of_codecs(codecs, variable.dtype, fill, planned)
            if planned is not None:
                out[name] = variable.copy(deep=False)
                out[name].attrs = planned.recorded_in(variable.attrs)
        if storable is None:
            continue
        data = variable.data
        if hasattr(data, "dask") and hasattr(data, "to_delayed"):
            storable.refuse_dask(data, f"variable {name!r}")
        else:
            storable.refuse(np.asarray(data), f"variable {name!r}")
    return out


def _library_dirs(xarray_function: Callable[..., Any]) -> tuple[str, ...]:
    """Folders of xarray and zarrext: a warning points at the first frame outside them."""
    code = inspect.unwrap(xarray_function).__code__
    xarray_dir = os.path.dirname(os.path.dirname(code.co_filename))  # xarray/backends/..
    return (xarray_dir + os.sep, os.path.dirname(__file__) + os.sep)


def _warn_on_raw_read(open_store_variable: Callable[..., Any]) -> Callable[..., Any]:
    def open_variable(self: Any, name: str) -> Any:
        variable = open_store_variable(self, name)
        # xarray's own writes reopen existing arrays in another mode: only reads warn,
        # and not those of the zarrext engine (mask_and_scale=False asks for records)
        if (
            getattr(self, "_mode", None) == "r"
            and not getattr(type(self), "zarrext_engine", False)
            and isinstance(
                variable.encoding.get("serializer"), OptionalCodec
            )
        ):
            inner = variable.dtype.fields["value"][0]
            warnings.warn(
                f"variable {name!r} is zarrext's optional<{inner}> (nullable): xarray's zarr "
                "engine gives (value, valid) records, on which arithmetic, mean and groupby "
                'fail; open with xr.open_dataset(..., engine="zarrext") for NaN as missing, '
                "or convert with zarrext.decode_optional(ds)",
                OptionalReadWarning, skip_file_prefixes=_library_dirs(open_store_variable),
            )
        return variable

    return open_variable


install_hooks()
when_imported(XARRAY_ZARR, install_xarray_hooks)
