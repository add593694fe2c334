"""Open and create arrays with runtime settings that metadata cannot carry.

``zarrext.open_array`` and ``zarrext.create_array`` return ordinary
``zarr.Array`` objects whose codec pipeline is :class:`~zarrext.pipeline.ZarrextCodecPipeline`
and whose ``conditional`` codecs carry the decision given here. ``zarr.json`` is
not touched: the same array opened with plain zarr-python reads the same values.

A built-in decision given to :func:`create_array` is also recorded in the array's
attributes (``{"zarrext": '{"decision": "<name>"}'}``, a JSON object in a string
that netCDF takes too), and :func:`open_array` uses it
when no ``decision=`` is given. An array written with no decision at all stores
its chunks raw, as the spec's default says, with a
:class:`~zarrext.codecs.decisions.NoDecisionWarning` once per opened array.

Filters from :func:`zarrext.quantize.plan` given to :func:`create_array` record the
plan likewise (the record's ``"quantize"``). Writes into a quantized array
(``scale_offset`` + ``cast_value``) through these arrays' pipeline, and
:func:`create_array`'s ``data``, refuse a finite value the array would not give back
as itself, before anything of the write is stored (:mod:`zarrext.codecs.quantized_writes`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import zarr
from zarr.codecs.sharding import ShardingCodec
from zarr.core.array import AsyncArray
from zarr.core.metadata import ArrayV3Metadata

from zarrext._exit import settle_at_exit
from zarrext._zarr_compat import (
    async_array_of,
    set_codec_pipeline,
    sharding_codec_fields,
    with_codecs,
)
from zarrext.codecs.blosc_frames import checked_codec
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.codecs.decisions import (
    NO_DECISION,
    DecisionLike,
    Undecided,
    builtin_spelling,
    recorded_decision,
    with_record,
)
from zarrext.codecs.literal_padding import warn_padding_mismatches
from zarrext.codecs.optional import OptionalCodec
from zarrext.codecs.pad import PadCodec, PaddingFunction, SaidOnce
from zarrext.codecs.quantized_writes import PlannedFilters, StorableValues, array_label
from zarrext.codecs.walk import map_nested, walk_codecs
from zarrext.errors import FillValueError, naming_codec_holder
from zarrext.pipeline.codec_pipeline import build_pipeline
from zarrext.sharding.codec import RuntimeShardingCodec
from zarrext.sharding.geometry import ShardLayoutError
from zarrext.sharding.layout import bind_layout, recover_array
from zarrext.stores import open_store, writes_in_place

__all__ = [
    "create_array",
    "open_array",
    "readable",
    "with_decision_when_none_given",
    "with_runtime",
]


def _map_codecs(codec: Any, leaf: Callable[[Any], Any]) -> Any:
    """Apply ``leaf`` to ``codec`` and to every codec nested in it, at any depth."""
    if isinstance(codec, ShardingCodec):
        fields = sharding_codec_fields(codec)
        fields["codecs"] = [_map_codecs(c, leaf) for c in codec.codecs]
        return RuntimeShardingCodec(**fields)
    if isinstance(codec, OptionalCodec):
        codec = map_nested(codec, lambda c: _map_codecs(c, leaf))
    return leaf(codec)


def _runtime_binder(
    decision: DecisionLike, trial_encode: bool | None, padding: PaddingFunction | None
) -> Callable[[Any], Any]:
    def bind(codec: Any) -> Any:
        if isinstance(codec, ConditionalCodec) and decision is not None:
            return codec.with_decision(decision, trial_encode)
        if isinstance(codec, PadCodec):
            # Each array opened here says once, on its own, that its padding misfits.
            codec = replace(codec, mismatch_said=SaidOnce())
            return codec if padding is None else codec.with_padding(padding)
        return codec

    return bind


def _contains(codec: Any, kind: type) -> bool:
    return any(isinstance(c, kind) for c in walk_codecs([codec]))


def _conditional_codecs(codec: Any) -> Iterator[ConditionalCodec]:
    """``codec`` and the codecs nested in it, at any depth, that are ``conditional``."""
    return (c for c in walk_codecs([codec]) if isinstance(c, ConditionalCodec))


def _decision_when_none_given(array: zarr.Array, advice: str | None = None) -> DecisionLike:
    """The decision for a writer of ``array`` given none: recorded, or :class:`Undecided`
    (whose warning gives ``advice``, if given).

    ``None`` (keep what the codecs carry) for an array without ``conditional``
    codecs, or whose codecs already carry a decision of their own (codec objects
    given a decision, ``"never_apply"`` too: only :data:`NO_DECISION` is none).
    """
    conditionals = [
        c for codec in getattr(array.metadata, "codecs", ()) for c in _conditional_codecs(codec)
    ]
    if not conditionals or any(c.decision is not NO_DECISION for c in conditionals):
        return None
    where = str(array.store_path)
    recorded = recorded_decision(array.attrs, f"array {where}")
    return recorded if recorded is not None else Undecided(where, advice)


XARRAY_ADVICE = (
    "give the codec its decision in the variable's encoding, e.g. "
    "ConditionalCodec(codecs, decision='compress_if_smaller'), or run zarrext recompress"
)


def with_decision_when_none_given(array: Any) -> Any:
    """``array`` as zarrext's writers write it when given no decision (xarray's
    ``to_zarr``): with the decision its attributes record, or one that stores chunks
    raw and says so once (:class:`~zarrext.codecs.decisions.NoDecisionWarning`), as
    :func:`open_array` does. Any other array (no ``conditional`` codec, codecs
    that carry a decision, not a Zarr format 3 ``zarr.Array``) is returned as it is.
    """
    if not isinstance(array, zarr.Array) or not isinstance(array.metadata, ArrayV3Metadata):
        return array
    decision = _decision_when_none_given(array, XARRAY_ADVICE)
    return array if decision is None else with_runtime(array, decision=decision)


def _with_decision_record(kwargs: dict[str, Any], spelling: str) -> dict[str, Any]:
    """``kwargs`` for ``zarr.create_array`` with attributes that record decision ``spelling``."""
    return {**kwargs, "attributes": with_record(kwargs.get("attributes"), "decision",
                                                decision=spelling)}


def _with_plan_record(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the quantization plan that ``filters`` carry (the list
    :func:`zarrext.quantize.plan` returns) recorded in the attributes."""
    filters = kwargs.get("filters")
    if not isinstance(filters, PlannedFilters):
        return kwargs
    return {**kwargs, "attributes": filters.planned.recorded_in(kwargs.get("attributes"))}


def _refuse_unstorable_data(store: Any, kwargs: dict[str, Any]) -> None:
    """Refuse ``data=`` holding a value the array's quantizing filters would not give
    back (:mod:`zarrext.codecs.quantized_writes`), before anything is created: zarr-python
    writes ``data`` through its own pipeline, which checks nothing."""
    data = kwargs.get("data")
    if data is None or kwargs.get("filters") is None:
        return
    from zarr.storage import MemoryStore

    probe = {k: v for k, v in kwargs.items() if k not in ("data", "storage_options")}
    probe.setdefault("shape", data.shape)
    probe.setdefault("dtype", data.dtype)
    storable = StorableValues.of_metadata(zarr.create_array(MemoryStore(), **probe).metadata)
    if storable is not None:
        name = kwargs.get("name")
        storable.refuse(data, array_label(f"{store}/{name}" if name else str(store)))


def _require_in_place(store: Any, shard_layout: str) -> None:
    if not writes_in_place(store):
        raise ShardLayoutError(
            f"shard_layout={shard_layout!r} writes inner chunks in place, which "
            f"{type(store).__name__} cannot do (only local directories, LocalStore, "
            "can); open without shard_layout (whole shards are rewritten), or work "
            "on a local copy and upload it"
        )


def _store_of(store: Any, mode: str, kwargs: dict[str, Any]) -> Any:
    """A path, zip archive or URL as a store (zarr itself takes no zip path)."""
    if isinstance(store, str | os.PathLike) and kwargs.get("zarr_format") != 2:
        return open_store(
            os.fspath(store), mode=mode, storage_options=kwargs.pop("storage_options", None)
        )
    if type(store).__name__ == "ObjectStore":  # the caller's own obstore-backed store
        settle_at_exit()
    return store


def _explicit_optional_codecs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """An optional array's serializer and compressors, passed to zarr explicitly.

    zarr-python's own defaults for them come from zarrext's wrappers of zarr
    internals (for users of plain ``zarr.create_array``); zarrext's API takes the
    public route and names the codecs itself.
    """
    from zarrext.dtypes.optional import OptionalDType
    from zarrext.integration.optional import optional_create_kwargs

    if not isinstance(kwargs.get("dtype"), OptionalDType) and not isinstance(
        kwargs.get("serializer"), OptionalCodec
    ):
        return kwargs
    kwargs = optional_create_kwargs(kwargs)
    dtype = kwargs.get("dtype")
    if isinstance(dtype, OptionalDType) and kwargs.get("serializer", "auto") == "auto":
        kwargs = {**kwargs, "serializer": OptionalCodec.default_for(dtype)}
    return kwargs


def _in_memory(kwargs: dict[str, Any]) -> zarr.Array:
    """The array ``zarr.create_array(store, **kwargs)`` would make, made in memory
    (without its data): its metadata, parsed and checked by zarr."""
    from zarr.storage import MemoryStore

    probe = {k: v for k, v in kwargs.items() if k not in ("data", "storage_options")}
    data = kwargs.get("data")
    if data is not None:
        probe.setdefault("shape", data.shape)
        probe.setdefault("dtype", data.dtype)
    return zarr.create_array(MemoryStore(), **probe)


def _refuse_lost_fill_value(probe: zarr.Array, store: Any) -> None:
    """Refuse a fill value that the array's filters do not give back (spec 002: an
    implementation SHOULD check it at creation); see
    :func:`zarrext.codecs.filter_roundtrip.fill_value_change`."""
    from zarrext.codecs.filter_roundtrip import array_filters, fill_value_change

    metadata = probe.metadata
    if not isinstance(metadata, ArrayV3Metadata):
        return
    problem = fill_value_change(
        array_filters(metadata.codecs), metadata.data_type, metadata.fill_value,
        ndim=len(metadata.shape),
    )
    if problem is not None:
        where = f"{store}/{probe.path}" if probe.path else str(store)
        raise FillValueError(
            f"array {where}: {problem}; choose a fill value the filters store exactly"
        )


def readable(array: Any) -> Any:
    """The array read through zarrext's pipeline (decode errors name the chunk), format
    3 or 2."""
    from zarrext.pipeline.format2 import format_2_reader

    return with_runtime(array) if array.metadata.zarr_format == 3 else format_2_reader(array)


def with_runtime(
    array: zarr.Array,
    *,
    decision: DecisionLike = None,
    trial_encode: bool | None = None,
    shard_layout: str | None = None,
    padding: PaddingFunction | None = None,
    _probe: bool = False,
) -> zarr.Array:
    """The same array, with runtime settings attached.

    Parameters
    ----------
    array : zarr.Array
        A Zarr format 3 array.
    decision : Decision, str, int or callable, optional
        Decision for every ``conditional`` codec of the array (also inside shards).
        ``None`` keeps the decisions the codecs already carry: the decision
        :func:`create_array` recorded in the attributes is read by
        :func:`open_array`, not here.
    trial_encode : bool, optional
        Trial encoding for a decision function.
    shard_layout : {"fixed-slot", "append"}, optional
        How shards are written (see :mod:`zarrext.sharding`): inner chunks go into
        local shard files in place instead of rewriting whole shards. ``None``
        keeps the layout ``array`` already has (zarr-python's whole-shard rewrite
        for a plain array).
    padding : callable, optional
        Padding function for every ``pad`` codec of the array,
        ``padding(encoded_chunk, chunk_index, chunk_shape) -> bytes`` (e.g.
        :func:`zarrext.formats.tiff.dynamic_header`). ``None`` keeps what the
        codecs carry (a freshly opened array's pad codecs write their stored
        ``padding`` literally, or zeros).

    Returns
    -------
    zarr.Array
        A new array object over the same store; its metadata serializes exactly as
        the original's.
    """
    async_array = async_array_of(array)
    metadata = async_array.metadata
    if not isinstance(metadata, ArrayV3Metadata):
        raise ValueError("zarrext runtime settings need a Zarr format 3 array")
    if decision is not None and not any(_contains(c, ConditionalCodec) for c in metadata.codecs):
        raise ValueError(
            f"array {array.path!r} has no conditional codec, so a decision has nothing to decide"
        )
    if padding is not None and not any(_contains(c, PadCodec) for c in metadata.codecs):
        raise ValueError(f"array {array.path!r} has no pad codec to give a padding function")
    bind = _runtime_binder(decision, trial_encode, padding)
    if shard_layout is None:  # keep the layout the array was opened with
        shard_layout = next(
            (c.shard_layout for c in metadata.codecs if hasattr(c, "shard_layout")), None
        )
    # blosc codecs check every frame against its chunk, also where the metadata's
    # codecs decode without the pipeline (a shard's inner chunks, recompression)
    codecs = tuple(checked_codec(_map_codecs(c, bind)) for c in metadata.codecs)
    if shard_layout is not None:
        if not _probe:  # create_array's in-memory dry run: the real store was checked
            _require_in_place(async_array.store_path.store, shard_layout)
        codecs = bind_layout(codecs, shard_layout, metadata)
    bound = with_codecs(metadata, codecs)
    new = AsyncArray(metadata=bound, store_path=async_array.store_path, config=async_array.config)
    set_codec_pipeline(new, build_pipeline(bound, async_array.store_path.path))
    return zarr.Array(new)


def open_array(
    store: Any,
    *,
    mode: str = "r+",
    decision: DecisionLike = None,
    trial_encode: bool | None = None,
    shard_layout: str | None = None,
    padding: PaddingFunction | None = None,
    **kwargs: Any,
) -> zarr.Array:
    """Open an existing array, with runtime settings, without changing ``zarr.json``.

    Parameters
    ----------
    store : StoreLike
        As for ``zarr.open_array``.
    mode : str
        ``"r+"`` (default) or ``"r"``, ``"a"``.
    decision, trial_encode, shard_layout, padding
        See :func:`with_runtime`. With no ``decision``, an array opened for writing
        takes the one :func:`create_array` recorded in its attributes; with none
        recorded either, its chunks are stored raw and the first chunk written
        gives a :class:`~zarrext.codecs.decisions.NoDecisionWarning`.
    **kwargs
        Passed to ``zarr.open_array``.

    Raises
    ------
    DecisionError
        When no ``decision`` is given and the attributes record one that is not a
        built-in (opening for writing only).

    Warns
    -----
    PaddingWarning
        Opening for writing an array whose ``pad`` padding, written literally (no
        ``padding`` function given), does not describe its chunks: a TIFF header
        made for other chunks (:class:`~zarrext.formats.tiff.TiffHeaderWarning`
        names the fields and the fix). Once per opened array.

    Notes
    -----
    Opening a sharded array on a local store for writing first rolls back shard
    writes that a killed writer left unfinished (:func:`zarrext.sharding.layout.recover_array`).
    """
    if mode in ("w", "w-", "x"):
        raise ValueError(
            f"zarrext.open_array opens existing arrays; mode {mode!r} would replace it "
            "(use zarrext.create_array)"
        )
    named = os.fspath(store) if isinstance(store, str | os.PathLike) else None
    store = _store_of(store, "r" if mode == "r" else "r+", kwargs)
    with naming_codec_holder(array=kwargs.get("path") or "", store=named or str(store)):
        array = zarr.open_array(store, mode=mode, **kwargs)
    if mode != "r":
        recover_array(array)
        if decision is None:
            decision = _decision_when_none_given(array)
    opened = with_runtime(
        array, decision=decision, trial_encode=trial_encode, shard_layout=shard_layout,
        padding=padding,
    )
    if mode != "r":
        warn_padding_mismatches(opened, f"array {array.store_path}")
    return opened


def create_array(
    store: Any,
    *,
    decision: DecisionLike = None,
    trial_encode: bool | None = None,
    shard_layout: str | None = None,
    padding: PaddingFunction | None = None,
    **kwargs: Any,
) -> zarr.Array:
    """``zarr.create_array`` plus zarrext's runtime settings.

    Parameters
    ----------
    store : StoreLike
        As for ``zarr.create_array``.
    decision, trial_encode, shard_layout, padding
        See :func:`with_runtime`. A built-in decision (a name such as
        ``"compress_if_smaller"``, or the object it gives) is also recorded in the
        array's attributes (:func:`~zarrext.codecs.decisions.with_record`), for
        :func:`open_array` to use again. A function, a fixed mask, a plan or a
        :class:`~zarrext.codecs.decisions.Decision` subclass cannot be recorded: nothing is,
        and each :func:`open_array` must be given it again. With no ``decision``
        (and conditional codec objects that carry none), chunks are stored raw and
        the first chunk written gives a :class:`~zarrext.codecs.decisions.NoDecisionWarning`.
    **kwargs
        Passed to ``zarr.create_array`` (shape, dtype, chunks, shards, serializer,
        compressors, ...). ``filters`` from :func:`zarrext.quantize.plan` also record
        the plan (range, bound, headroom) in the attributes (the ``zarrext``
        record's ``"quantize"``), which zarrext's writers then check
        (:mod:`zarrext.codecs.quantized_writes`).

    Raises
    ------
    ValueError
        When a runtime setting does not fit the array (e.g. ``shard_layout=
        "fixed-slot"`` with inner codecs whose encoded size has no bound), before
        anything is written to ``store``.
    FillValueError
        When the array's filters (``scale_offset``, ``cast_value``, any array->array
        codec, also inside ``sharding_indexed``) do not give the fill value back bit
        for bit (spec 002): the unwritten elements of a stored chunk would read
        something else. Nothing is written to ``store`` either.
    UnstorableValueError
        When ``data`` holds a finite value the array's quantizing filters would not
        give back as itself, before anything is written to ``store``.

    Warns
    -----
    PaddingWarning
        As :func:`open_array`: ``pad`` padding, written literally, that does not
        describe the chunks (once per created array).
    """
    store = _store_of(store, "w", kwargs)
    kwargs = _with_plan_record(_explicit_optional_codecs(kwargs))
    _refuse_unstorable_data(store, kwargs)
    recorded = builtin_spelling(decision)
    if recorded is not None:
        kwargs = _with_decision_record(kwargs, recorded)
    elif decision is None:  # attributes given with a record: refuse a bad one up front
        recorded_decision(kwargs.get("attributes") or {}, f"array {store}")
    if shard_layout is not None:
        _require_in_place(store, shard_layout)
    # Validate on the same metadata in memory first: a refusal must leave no
    # zarr.json behind (a retry would meet ContainsArrayError).
    probe = _in_memory(kwargs)
    _refuse_lost_fill_value(probe, store)
    if any(v is not None for v in (decision, shard_layout, padding)):
        with_runtime(
            probe, decision=decision, trial_encode=trial_encode, shard_layout=shard_layout,
            padding=padding, _probe=True,
        )
    array = zarr.create_array(store, **kwargs)
    if decision is None:
        decision = _decision_when_none_given(array)
    created = with_runtime(
        array, decision=decision, trial_encode=trial_encode, shard_layout=shard_layout,
        padding=padding,
    )
    warn_padding_mismatches(created, f"array {array.store_path}")
    return created
