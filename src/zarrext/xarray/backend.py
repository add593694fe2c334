"""xarray engine ``"zarrext"``: optional (nullable) variables as NaN-filled arrays.

``xr.open_dataset(path, engine="zarrext")`` opens a Zarr format 3 group like
xarray's own ``zarr`` engine (same parameters), except that a variable of the
``optional`` data type loads as what xarray users expect of missing values:
floats with NaN, integers and bools widened to floats with NaN the way xarray's
CF decoding does for masked integers (``float32`` up to 2-byte items, else
``float64``), datetimes with NaT (see
:func:`zarrext.dtypes.optional_conversions.nan_dtype`). Decoding is lazy, chunk
by chunk, like the ``zarr`` engine's; ``mask_and_scale=False`` (or
``decode_cf=False``) keeps the raw (value, valid) structured arrays. Nested
optionals keep them too: one NaN cannot say at which level a value is missing.

The decoded variable's ``encoding`` holds the optional codec with its inner data
type, so ``ds.to_zarr(...)`` writes the optional type back (NaN missing). For a
dataset built in xarray, ask for it per variable with
``encoding={"v": optional_encoding("int16")}``.

``xr.open_zarr`` (whose engine is always ``zarr``) gives the raw (value, valid)
arrays: :func:`decode_optional` turns them into the same NaN form.

Appending (``to_zarr(append_dim=...)``) and region writes into an existing
optional array: xarray casts the new values to the array's stored (value, valid)
record itself, which would make NaN a present value and real zeros missing.
zarrext converts NaN-form values to records first (NaN or NaT missing, zeros
present; see :func:`zarrext.integration.optional.raw_for_stored_optional`), as
:func:`encode_optional` does explicitly.

Every variable is read through zarrext's pipeline (format 3 arrays as
:func:`zarrext.api.with_runtime` gives them, format 2 as
:func:`zarrext.pipeline.format2.format_2_reader` does): a chunk that does not decode
raises :class:`~zarrext.errors.ChunkDecodeError` naming it, and a blosc chunk cut
short is refused instead of read as other values
(:mod:`zarrext.codecs.blosc_frames`).

Opening an optional variable with xarray's own ``zarr`` engine warns
(:class:`~zarrext.integration.optional.OptionalReadWarning`) that it comes as
records and names ``engine="zarrext"``.

The engine is registered through the ``xarray.backends`` entry point; this module
is loaded only by xarray (and by the two functions above, which import it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, ClassVar, Literal, cast

import numpy as np
import xarray.backends.zarr as xarray_zarr
import zarr
from xarray.backends import BackendArray, ZarrBackendEntrypoint, ZarrStore
from xarray.backends.zarr import FillValueCoder, ZarrArrayWrapper
from xarray.core import indexing
from xarray.core.variable import Variable
from zarr.core.metadata import ArrayV3Metadata

from zarrext.api import readable
from zarrext.codecs.optional import OptionalCodec
from zarrext.dtypes.optional import OptionalDType, is_optional_native
from zarrext.dtypes.optional_conversions import as_optional_array, nan_dtype, to_nan
from zarrext.integration.optional import install_xarray_hooks
from zarrext.pipeline.masked_read import read_masked

install_xarray_hooks(xarray_zarr)  # once: also run when zarr first loads the optional type

__all__ = [
    "OptionalBackendArray",
    "ZarrextBackendEntrypoint",
    "decode_optional",
    "encode_optional",
    "optional_encoding",
]


def optional_encoding(inner: Any, *, name: str = "optional") -> dict[str, Any]:
    """``to_zarr`` encoding that stores a variable as ``optional<inner>`` (NaN missing).

    Parameters
    ----------
    inner : data type like
        Type of the present values, e.g. ``"int16"``, ``"bool"``, ``"float32"``.
    name : {"optional", "zarrs.optional"}
        Name written for the data type and its codec.

    Returns
    -------
    dict
        ``{"serializer": codec, "_FillValue": None}``: the codec, with
        ``zarrext.create_array``'s default chains for the type
        (:meth:`OptionalCodec.default_for`: mask ``packbits`` + ``zstd``, values the
        inner type's default serializer + ``zstd``), makes the array optional;
        ``_FillValue: None`` keeps xarray from adding a NaN ``_FillValue``
        attribute, which means nothing for an array that records missing values in
        its mask.
    """
    dtype = OptionalDType(inner, name=name)
    default = OptionalCodec.default_for(dtype)
    codec = OptionalCodec(mask_codecs=default.mask_codecs, data_codecs=default.data_codecs,
                          name=name, inner=dtype.inner)
    return {"serializer": codec, "_FillValue": None}


def _optional_of(dtype: np.dtype[Any]) -> OptionalDType | None:
    """The one-level optional type of a (value, valid) NumPy dtype with a NaN form, or None."""
    if not is_optional_native(dtype) or dtype.fields is None:
        return None
    optional = OptionalDType(dtype.fields["value"][0])
    return optional if nan_dtype(optional) is not None else None


def _map(data: Any, function: Any, dtype: np.dtype[Any]) -> Any:
    """``function`` over ``data`` block by block if it is a dask array, else at once."""
    if hasattr(data, "map_blocks") and hasattr(data, "dask"):
        return data.map_blocks(function, dtype=dtype)
    return function(np.asarray(data))


def decode_optional(ds: Any) -> Any:
    """``ds`` with its raw optional variables in the NaN form ``engine="zarrext"`` gives.

    For datasets opened with ``xr.open_zarr`` (or ``engine="zarr"``), where an
    optional variable is a (value, valid) structured array on which ``mean``,
    arithmetic, ``isnull`` and ``to_series`` fail. Dask-backed variables stay lazy;
    others are loaded. The encoding keeps the optional codec with its inner type, so
    ``to_zarr`` writes the variables back as optional.

    Parameters
    ----------
    ds : xarray.Dataset

    Returns
    -------
    xarray.Dataset
        A new dataset; variables that are not one-level optional are unchanged.
    """
    out = ds.copy()
    for name, variable in ds.variables.items():
        optional = _optional_of(variable.dtype)
        if optional is None:
            continue
        target = nan_dtype(optional)
        assert target is not None
        data = _map(variable.data, lambda block, o=optional: to_nan(block, o), target)
        encoding = {k: v for k, v in variable.encoding.items() if k != "dtype"}
        codec = encoding.get("serializer")
        if isinstance(codec, OptionalCodec):
            encoding["serializer"] = OptionalCodec(
                mask_codecs=codec.mask_codecs, data_codecs=codec.data_codecs,
                name=codec.name, inner=optional.inner,
            )
        else:
            encoding.update(optional_encoding(optional.inner))
        encoding.setdefault("_FillValue", None)
        out[name] = Variable(variable.dims, data, variable.attrs, encoding)
    return out


def encode_optional(ds: Any, types: Any) -> Any:
    """``ds`` with NaN-form variables as raw (value, valid) arrays, NaN (NaT) missing.

    What ``to_zarr(append_dim=...)`` and ``to_zarr(region=...)`` into existing
    optional arrays do to NaN-form variables anyway (zarrext converts them before
    xarray casts them to the stored records); explicit, and with a mapping of types
    for code that builds the records itself.

    Parameters
    ----------
    ds : xarray.Dataset
    types : str, os.PathLike, zarr.Group or mapping
        The store (or group) to be written to, whose optional arrays give the
        variables and their types; or ``{variable: optional type or inner type}``.

    Returns
    -------
    xarray.Dataset
        A new dataset; other variables, and variables that are raw already, are
        unchanged. Dask-backed variables stay lazy.
    """
    if isinstance(types, str | os.PathLike | zarr.Group):
        group = types if isinstance(types, zarr.Group) else zarr.open_group(types, mode="r")
        found = {name: getattr(array.metadata, "data_type", None) for name, array in group.arrays()}
        wanted = {name: t for name, t in found.items() if isinstance(t, OptionalDType)}
    else:
        wanted = {
            name: t if isinstance(t, OptionalDType) else OptionalDType(t)
            for name, t in dict(types).items()
        }
    out = ds.copy()
    for name, optional in wanted.items():
        if name not in ds.variables or is_optional_native(ds.variables[name].dtype):
            continue
        variable = ds.variables[name]
        native = optional.to_native_dtype()
        data = _map(
            variable.data, lambda block, o=optional: as_optional_array(np.asarray(block), o),
            native,
        )
        encoding = {k: v for k, v in variable.encoding.items() if k not in ("dtype", "_FillValue")}
        out[name] = Variable(variable.dims, data, variable.attrs, encoding)
    return out


class OptionalBackendArray(BackendArray):
    """Lazy view of a one-level optional zarr array as NaN-filled plain values."""

    __slots__ = ("_raw", "dtype", "optional", "shape")

    def __init__(self, zarr_array: Any, optional: OptionalDType, dtype: np.dtype[Any]) -> None:
        self._raw = ZarrArrayWrapper(zarr_array)
        self.optional = optional
        self.shape = zarr_array.shape
        self.dtype = dtype

    def get_array(self) -> Any:
        return self._raw.get_array()

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray[Any, Any]:
        if isinstance(key, indexing.BasicIndexer):
            # the store's members come with zarrext's pipeline (_fetch_members), which
            # decodes values and mask apart in its codec threads: 6x the speed of a
            # (value, valid) read converted after.
            return to_nan(read_masked(self._raw.get_array(), key.tuple), self.optional)
        return to_nan(np.asarray(self._raw[key]), self.optional)


class _OptionalZarrStore(ZarrStore):
    """xarray's ZarrStore, but optional variables come out decoded (NaN missing)."""

    __slots__ = ()
    # read by zarrext's warning on raw optional reads: this engine was chosen
    zarrext_engine: ClassVar[bool] = True
    decodes_optional: ClassVar[bool] = True

    def _fetch_members(self) -> dict[str, Any]:
        """The group's members, each array read through zarrext's pipeline."""
        return {name: readable(node) if isinstance(node, zarr.Array) else node
                for name, node in super()._fetch_members().items()}

    def open_store_variable(self, name: str) -> Variable:
        if not self.decodes_optional:
            return super().open_store_variable(name)
        zarr_array = self.members[name]
        metadata = getattr(zarr_array, "metadata", None)
        optional = getattr(metadata, "data_type", None)
        if (
            not isinstance(zarr_array, zarr.Array)
            or not isinstance(metadata, ArrayV3Metadata)
            or not isinstance(optional, OptionalDType)
            or not isinstance(zarr_array.serializer, OptionalCodec)
            or nan_dtype(optional) is None
        ):
            return super().open_store_variable(name)
        dtype = nan_dtype(optional)
        assert dtype is not None
        attributes = dict(zarr_array.attrs)
        if "_FillValue" in attributes:
            # a CF fill value written for the (float) variable xarray wrote
            try:
                attributes["_FillValue"] = FillValueCoder.decode(
                    cast("Any", attributes["_FillValue"]), dtype)
            except (TypeError, ValueError) as e:
                raise ValueError(
                    f"variable {name!r} ({optional}): cannot read its _FillValue attribute "
                    f"{attributes['_FillValue']!r} as {dtype}: {e}"
                ) from e
        dims = tuple(metadata.dimension_names or ())
        if len(dims) != zarr_array.ndim or None in dims:
            raise ValueError(
                f"variable {name!r}: xarray needs a dimension name for every axis, "
                f"zarr.json has {metadata.dimension_names}"
            )
        codec = zarr_array.serializer
        fill = optional.cast_scalar(metadata.fill_value)
        encoding: dict[str, Any] = {
            "chunks": zarr_array.chunks,
            "preferred_chunks": dict(zip(dims, zarr_array.chunks, strict=True)),
            "compressors": zarr_array.compressors,
            "filters": zarr_array.filters,
            "shards": zarr_array.shards,
            # the inner type makes to_zarr write the optional type back
            "serializer": OptionalCodec(mask_codecs=codec.mask_codecs,
                                        data_codecs=codec.data_codecs,
                                        name=codec.name, inner=optional.inner),
            # missing (null) fill: None, which to_zarr writes back as null
            "fill_value": fill["value"].item() if fill["valid"] else None,
        }
        if "_FillValue" not in attributes:
            encoding["_FillValue"] = None  # missing is the mask: no CF fill value
        data = indexing.LazilyIndexedArray(OptionalBackendArray(zarr_array, optional, dtype))
        return Variable(dims, data, attributes, encoding)


class _RawZarrStore(_OptionalZarrStore):
    """The zarrext engine with ``mask_and_scale=False``: (value, valid) records, asked for."""

    __slots__ = ()
    decodes_optional: ClassVar[bool] = False


class ZarrextBackendEntrypoint(ZarrBackendEntrypoint):
    """xarray's ``zarr`` engine, with optional (nullable) variables decoded to NaN.

    Open with ``xr.open_dataset(path, engine="zarrext")`` (add ``chunks={}`` for
    dask, as ``xr.open_zarr`` does). ``mask_and_scale=False`` keeps optional
    variables as (value, valid) structured arrays.
    """

    description = "Zarr v3 with zarrext's optional (nullable) data type decoded to NaN"
    url = "https://github.com/zarr-developers/zarr-extensions"
    supports_groups = False

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        return False  # chosen explicitly with engine="zarrext", never by guessing

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: Any = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        mode: Literal["r", "r+", "a", "a-", "w", "w-"] = "r",
        consolidated: bool | None = None,
        storage_options: dict[str, Any] | None = None,
        zarr_format: int | None = None,
        store: Any = None,
        engine: Any = None,
        use_zarr_fill_value_as_mask: bool | None = None,
        cache_members: bool = True,
    ) -> Any:
        if store is None:
            if isinstance(filename_or_obj, os.PathLike):
                filename_or_obj = os.fspath(filename_or_obj)
            kind = _OptionalZarrStore if mask_and_scale else _RawZarrStore
            store = kind.open_group(
                filename_or_obj,
                group=group,
                mode=mode,
                consolidated=consolidated,
                consolidate_on_close=False,
                storage_options=storage_options,
                use_zarr_fill_value_as_mask=None,  # as the zarr engine does
                zarr_format=zarr_format,
                cache_members=cache_members,
            )
        return super().open_dataset(
            filename_or_obj,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            drop_variables=drop_variables,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
            group=group,
            mode=mode,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
            store=store,
            use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
            cache_members=cache_members,
        )

    def open_groups_as_dict(self, filename_or_obj: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "engine='zarrext' opens one group at a time: xr.open_dataset(path, "
            "engine='zarrext', group=...)"
        )
