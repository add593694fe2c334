"""Every private name of zarr-python that zarrext uses, checked when zarrext loads.

zarr-python's public API does not reach everything a codec plugin with shard write
layouts needs: the shard index, the inner-chunk pipeline of ``sharding_indexed``,
the synchronous codec path, the function that writes a selection. zarrext uses those
private names only through this module, which checks at import that each exists
with the parameters zarrext passes. When zarr-python changes one of them, importing
any zarrext codec fails with :class:`ZarrCompatibilityError` naming it and the
installed zarr version, instead of zarrext silently falling back to other behaviour
(e.g. whole-shard rewrites without the journal, or masked values written as present).

What is not here: the methods zarr-python documents for codec and data type
implementers (``_encode_single``/``_decode_single``, ``_encode_sync``/``_decode_sync``,
``ZDType._from_json_v3``, ``_check_scalar``, ...) are the subclassing API every
plugin overrides; they are checked as overrides below only where zarrext overrides
a method zarr-python itself does not ask plugins to implement.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import zarr
import zarr.core.array as core_array
from zarr import registry as zarr_registry
from zarr.abc import codec as abc_codec
from zarr.abc import store as abc_store
from zarr.codecs import _v2 as zarr_v2
from zarr.codecs import sharding as zarr_sharding
from zarr.core import metadata as zarr_metadata
from zarr.core.dtype import registry as dtype_registry
from zarr.core.dtype.wrapper import ZDType
from zarr.storage import _local as zarr_local

__all__ = [
    "EMPTY_SHARD_INDEX_ENTRY",
    "REQUIREMENTS",
    "async_array_of",
    "chunk_grid_of",
    "chunks_per_shard",
    "codec_supports_sync",
    "core_array",
    "decode_shard_index",
    "decode_shard_index_sync",
    "encode_shard_index_sync",
    "encode_shard_parts_sync",
    "inner_chunk_spec",
    "inner_chunk_transform",
    "local_atomic_write",
    "resolve_codec",
    "running_io_loop",
    "set_codec_pipeline",
    "shard_index_size",
    "shard_indexer_and_value",
    "sharding_codec_fields",
    "store_is_open",
    "store_supports_sync_io",
    "unwrapped_store",
    "verify",
    "with_codecs",
    "wrap_core_array",
    "NestedDataTypeValidationError",
    "V2Codec",
    "Requirement",
    "ShardIndex",
    "ShardingByteSetter",
    "ZarrCompatibilityError",
]


class ZarrCompatibilityError(ImportError):
    """zarr-python lacks, or has changed, a private name zarrext relies on."""


def _fail(where: str, problem: str) -> ZarrCompatibilityError:
    return ZarrCompatibilityError(
        f"zarrext needs {where}, which {problem} in zarr {version('zarr')}; zarrext is "
        "tested with the zarr versions declared in its pyproject.toml"
    )


@dataclass(frozen=True)
class Requirement:
    """One private name of zarr-python, and what zarrext expects of it.

    Parameters
    ----------
    where : str
        Dotted name of the module or class holding it (for messages).
    name : str
        The attribute.
    parameters : tuple of str, optional
        Parameter names of the callable, in order (``self`` included for methods
        looked up on a class; a classmethod's ``cls`` is not).
    fields : tuple of str, optional
        Dataclass fields the attribute (a class) must have.
    kind : type, optional
        The attribute must be an instance of ``kind`` (e.g. ``property``) or, if it
        is a class, a subclass of it.
    annotated : str, optional
        An instance attribute: the class (``owner``) must declare it with this
        annotation (e.g. ``"bool"``).
    """

    where: str
    name: str
    parameters: tuple[str, ...] | None = None
    fields: tuple[str, ...] | None = None
    kind: type | None = None
    annotated: str | None = None

    def check(self, owner: object) -> Any:
        """``owner.<name>`` if it is what zarrext expects, else ZarrCompatibilityError."""
        label = f"{self.where}.{self.name}"
        if self.annotated is not None:
            declared = inspect.get_annotations(owner) if isinstance(owner, type) else {}
            if self.name not in declared:
                raise _fail(label, "does not exist")
            annotation = declared[self.name]
            if getattr(annotation, "__name__", annotation) != self.annotated:
                raise _fail(label, f"is not annotated {self.annotated}")
            return None
        try:
            static = inspect.getattr_static(owner, self.name)
        except AttributeError:
            raise _fail(label, "does not exist") from None
        value = getattr(owner, self.name)  # bound for a classmethod: no ``cls``
        if self.kind is not None:
            ok = isinstance(static, self.kind) or (
                isinstance(value, type) and issubclass(value, self.kind)
            )
            if not ok:
                raise _fail(label, f"is not a {self.kind.__name__}")
        if self.parameters is not None:
            if not callable(value):
                raise _fail(label, "is not callable")
            found = tuple(inspect.signature(inspect.unwrap(value)).parameters)
            if found != self.parameters:
                raise _fail(f"{label}({', '.join(self.parameters)})",
                            f"takes ({', '.join(found)})")
        if self.fields is not None:
            if not dataclasses.is_dataclass(value):
                raise _fail(label, "is not a dataclass")
            missing = set(self.fields) - {f.name for f in dataclasses.fields(value)}
            if missing:
                raise _fail(f"{label} fields {sorted(missing)}", "do not exist")
        return value


_SHARDING = "zarr.codecs.sharding.ShardingCodec"

# (owner, requirement) for every private zarr name zarrext uses, checked at import.
REQUIREMENTS: tuple[tuple[object, Requirement], ...] = (
    (abc_codec, Requirement("zarr.abc.codec", "_codec_supports_sync", ("codec",))),
    (abc_store, Requirement("zarr.abc.store", "_store_supports_sync_io", ("store",))),
    # whether a store was opened: local chunk files are read directly only then
    (abc_store.Store, Requirement("zarr.abc.store.Store", "_is_open", annotated="bool")),
    (zarr_registry, Requirement("zarr.registry", "_resolve_codec", ("data",))),
    (dtype_registry, Requirement("zarr.core.dtype.registry", "_NestedDataTypeValidationError",
                                 kind=dtype_registry.DataTypeValidationError)),
    (zarr_sharding, Requirement("zarr.codecs.sharding", "_ShardIndex",
                                ("chunks_per_shard", "offsets_and_lengths"))),
    (zarr_sharding, Requirement("zarr.codecs.sharding", "_ShardingByteSetter",
                                ("shard_dict", "chunk_coords"))),
    (zarr_sharding, Requirement("zarr.codecs.sharding", "MAX_UINT_64", kind=int)),
    # ShardingCodec's private methods zarrext calls: shard index, inner chunk specs
    *((zarr_sharding.ShardingCodec, Requirement(_SHARDING, name, parameters))
      for name, parameters in {
        "_get_chunk_spec": ("self", "shard_spec"),
        "_get_chunks_per_shard": ("self", "shard_spec"),
        "_get_inner_chunk_transform": ("self", "shard_spec"),
        "_get_shard_indexer_and_value": ("self", "selection", "shard_spec", "value"),
        "_shard_index_size": ("self", "chunks_per_shard"),
        "_decode_shard_index": ("self", "index_bytes", "chunks_per_shard"),
        "_decode_shard_index_sync": ("self", "index_bytes", "chunks_per_shard"),
        "_encode_shard_index_sync": ("self", "index"),
        "_build_shard_layout": ("self", "shard_dict", "chunks_per_shard"),
        # overridden by zarrext (sharding/layout.py, pipeline.py): if zarr stopped
        # calling them, fixed-slot writes would fall back to whole-shard rewrites
        # and inner chunks would not know their coordinates
        "_encode_partial_single": ("self", "byte_setter", "shard_array", "selection",
                                   "shard_spec"),
        "_decode_partial_single": ("self", "byte_getter", "selection", "shard_spec"),
        "_get_inner_pipeline": ("self", "shard_spec"),
    }.items()),
    (zarr_sharding.ShardingCodec, Requirement(_SHARDING, "_sync_capable", kind=property)),
    # a format 2 array's codec: its compressor is swapped for one that checks blosc
    # frames (codecs/blosc_frames.py)
    (zarr_v2, Requirement("zarr.codecs._v2", "V2Codec", fields=("filters", "compressor"))),
    # how LocalStore writes a key: a temporary file renamed over it
    (zarr_local, Requirement("zarr.storage._local", "_atomic_write",
                             ("path", "mode", "exclusive"))),
    # the codec author's interface every zarrext codec implements and calls on the
    # codecs it nests (zarr documents it for codec authors, but spells it private)
    *((owner, Requirement(where, name, ("self", "chunk_data", "chunk_spec")))
      for owner, where, name in (
        (abc_codec.BaseCodec, "zarr.abc.codec.BaseCodec", "_decode_single"),
        (abc_codec.BaseCodec, "zarr.abc.codec.BaseCodec", "_encode_single"),
        (abc_codec.SupportsSyncCodec, "zarr.abc.codec.SupportsSyncCodec", "_decode_sync"),
        (abc_codec.SupportsSyncCodec, "zarr.abc.codec.SupportsSyncCodec", "_encode_sync"),
    )),
    # arrays: the AsyncArray behind an Array, its chunk grid, its pipeline
    (zarr, Requirement("zarr", "Array", fields=("_async_array",))),
    (core_array, Requirement("zarr.core.array", "AsyncArray", fields=(
        "metadata", "store_path", "config", "codec_pipeline", "_chunk_grid"))),
    (zarr_metadata, Requirement("zarr.core.metadata", "ArrayV3Metadata", fields=("codecs",))),
    # functions zarrext wraps for optional arrays (optional_integration.py): if zarr
    # stopped calling them, masked writes would be cast by numpy (missing values
    # becoming present) and optional arrays would get the bytes serializer
    (core_array, Requirement("zarr.core.array", "_set_selection", (
        "store_path", "metadata", "codec_pipeline", "config", "chunk_grid", "indexer",
        "value", "prototype", "fields"))),
    (core_array, Requirement("zarr.core.array", "default_serializer_v3", ("dtype",))),
    (core_array, Requirement("zarr.core.array", "init_array", (
        "store_path", "shape", "dtype", "chunks", "shards", "filters", "compressors",
        "serializer", "fill_value", "order", "zarr_format", "attributes",
        "chunk_key_encoding", "dimension_names", "overwrite", "config"))),
    # data type methods zarrext overrides beyond the abstract ones
    (ZDType, Requirement("zarr.core.dtype.ZDType", "_from_json_resolved", ("data", "resolver"))),
    (ZDType, Requirement("zarr.core.dtype.ZDType", "_check_native_dtype", ("dtype",))),
)


def verify() -> dict[str, Any]:
    """Check every requirement; the checked values by name."""
    return {req.name: req.check(owner) for owner, req in REQUIREMENTS}


_found = verify()
if _found["MAX_UINT_64"] != 2**64 - 1:
    raise _fail("zarr.codecs.sharding.MAX_UINT_64 == 2**64 - 1", "has another value")

codec_supports_sync: Callable[[object], bool] = _found["_codec_supports_sync"]
store_supports_sync_io: Callable[[object], bool] = _found["_store_supports_sync_io"]
resolve_codec: Callable[[Any], Any] = _found["_resolve_codec"]
NestedDataTypeValidationError: type[ValueError] = _found["_NestedDataTypeValidationError"]
ShardIndex: Any = _found["_ShardIndex"]
ShardingByteSetter: Any = _found["_ShardingByteSetter"]
V2Codec: Any = _found["V2Codec"]
# An absent inner chunk's offset and length in a shard index (2**64 - 1).
EMPTY_SHARD_INDEX_ENTRY: int = _found["MAX_UINT_64"]


def unwrapped_store(store: Any) -> Any:
    """The store inside zarr ``WrapperStore``s (a cache, a counter, a logger...), read
    from ``WrapperStore._store``: zarr gives it no public name."""
    from zarr.storage import WrapperStore

    while isinstance(store, WrapperStore):
        inner = getattr(store, "_store", None)
        if inner is None:
            raise _fail("zarr.storage.WrapperStore._store", "does not exist")
        store = inner
    return store


def store_is_open(store: object) -> bool:
    """Whether a zarr store has been opened (``Store._is_open``)."""
    return bool(getattr(store, "_is_open", False))


def inner_chunk_spec(codec: zarr_sharding.ShardingCodec, shard_spec: Any) -> Any:
    """The ``ArraySpec`` of one inner chunk of a shard of ``shard_spec``."""
    return codec._get_chunk_spec(shard_spec)


def inner_chunk_transform(codec: zarr_sharding.ShardingCodec, shard_spec: Any) -> Any:
    """zarr-python's synchronous inner-chunk codec chain for ``shard_spec``."""
    return codec._get_inner_chunk_transform(shard_spec)


def chunks_per_shard(codec: zarr_sharding.ShardingCodec, shard_spec: Any) -> tuple[int, ...]:
    """The number of inner chunks along each dimension of a shard."""
    return tuple(codec._get_chunks_per_shard(shard_spec))


def shard_index_size(codec: zarr_sharding.ShardingCodec, chunks: tuple[int, ...]) -> int:
    """Encoded size in bytes of a shard index for ``chunks`` inner chunks."""
    return int(codec._shard_index_size(chunks))


def decode_shard_index_sync(
    codec: zarr_sharding.ShardingCodec, index_bytes: Any, chunks: tuple[int, ...]
) -> Any:
    """A shard index (``ShardIndex``) from its encoded bytes, through ``index_codecs``."""
    return codec._decode_shard_index_sync(index_bytes, chunks)


async def decode_shard_index(
    codec: zarr_sharding.ShardingCodec, index_bytes: Any, chunks: tuple[int, ...]
) -> Any:
    """As :func:`decode_shard_index_sync`, for codecs without a synchronous path."""
    return await codec._decode_shard_index(index_bytes, chunks)


def encode_shard_index_sync(codec: zarr_sharding.ShardingCodec, index: Any) -> Any:
    """The encoded bytes (a ``Buffer``) of a shard index."""
    return codec._encode_shard_index_sync(index)


def encode_shard_parts_sync(
    codec: zarr_sharding.ShardingCodec, shard_dict: Any, chunks_per_shard: tuple[int, ...]
) -> list[Any] | None:
    """A shard's stored bytes as the buffers that make it, in order (None when no
    inner chunk is present), laid out by zarr-python's own steps
    (``_build_shard_layout``, the index encoded, put at the start or the end)."""
    layout = codec._build_shard_layout(shard_dict, chunks_per_shard)
    if layout is None:
        return None
    index, buffers = layout
    index_bytes = codec._encode_shard_index_sync(index)
    if len(index_bytes) != codec._shard_index_size(chunks_per_shard):  # as zarr guards it
        raise RuntimeError("encoded shard index size does not match _shard_index_size; "
                           "variable-size index codecs are not supported")
    if codec.index_location == "start":
        return [index_bytes, *buffers]
    return [*buffers, index_bytes]


def local_atomic_write(path: Any) -> Any:
    """A context manager giving a binary file whose bytes replace ``path``'s when the
    block ends (a temporary file renamed over it; removed on an error), as
    ``LocalStore.set`` writes a key (``zarr.storage._local._atomic_write``)."""
    return _found["_atomic_write"](path, "wb", exclusive=False)


def shard_indexer_and_value(
    codec: zarr_sharding.ShardingCodec, selection: Any, shard_spec: Any, value: Any
) -> Any:
    """zarr-python's inner-chunk indexer for a write of ``value`` into a shard."""
    return codec._get_shard_indexer_and_value(selection, shard_spec, value)


def sharding_codec_fields(codec: zarr_sharding.ShardingCodec) -> dict[str, Any]:
    """The constructor arguments of ``codec``: every ``ShardingCodec`` dataclass field.

    Listing them through :func:`dataclasses.fields` carries a field zarr-python adds
    without a change here.
    """
    return {
        f.name: getattr(codec, f.name)
        for f in dataclasses.fields(zarr_sharding.ShardingCodec)
        if f.init
    }


# -- arrays ---------------------------------------------------------------------------


def async_array_of(array: zarr.Array) -> core_array.AsyncArray[Any]:
    """The ``AsyncArray`` behind ``array`` (its store path, metadata, pipeline)."""
    return array._async_array


def chunk_grid_of(array: zarr.Array) -> Any:
    """The resolved chunk grid of ``array``."""
    return array._async_array._chunk_grid


def set_codec_pipeline(async_array: core_array.AsyncArray[Any], pipeline: Any) -> None:
    """Give a new ``AsyncArray`` zarrext's pipeline.

    zarr-python builds an array's pipeline from the ``codec_pipeline.path`` setting,
    through ``from_array_metadata_and_store(metadata, store)``, which is not told the
    array's path; zarrext's pipeline needs the path to name chunks (journal keys,
    per-chunk decisions), so it is set on the new, not yet shared, array object.
    """
    object.__setattr__(async_array, "codec_pipeline", pipeline)


def with_codecs(metadata: Any, codecs: tuple[Any, ...]) -> Any:
    """A copy of frozen array ``metadata`` whose codec objects are ``codecs``.

    ``codecs`` carry runtime settings (decisions, shard layouts) that are not
    metadata: a round trip through ``to_dict``/``from_dict`` would drop them, so
    the copy's field is set directly. ``codecs`` must serialize as the original's.
    """
    bound = copy.copy(metadata)
    object.__setattr__(bound, "codecs", codecs)
    return bound


# -- wrapping functions of zarr.core.array --------------------------------------------

# How many times each wrapper ran (tests check that zarr still calls them).
WRAPPER_CALLS: Counter[str] = Counter()


def _counted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        WRAPPER_CALLS[name] += 1
        return function(*args, **kwargs)

    return counted


def _counted_async(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    async def counted(*args: Any, **kwargs: Any) -> Any:
        WRAPPER_CALLS[name] += 1
        return await function(*args, **kwargs)

    return counted


def wrap_core_array(name: str, make_wrapper: Callable[[Callable[..., Any]], Any]) -> None:
    """Replace ``zarr.core.array.<name>`` by ``make_wrapper(original)``, once.

    The wrapper must act only on arrays that use zarrext and call ``original``
    otherwise. It is marked so that a second call (a re-imported module) does not
    wrap it twice, and counted in :data:`WRAPPER_CALLS`.
    """
    original = getattr(core_array, name)
    if getattr(original, "_zarrext_wrapped", False):
        return
    wrapper = make_wrapper(original)
    counted = _counted_async(name, wrapper) if inspect.iscoroutinefunction(wrapper) else (
        _counted(name, wrapper)
    )
    functools.update_wrapper(counted, original)
    counted._zarrext_wrapped = True  # type: ignore[attr-defined]
    setattr(core_array, name, counted)


def running_io_loop() -> Any:
    """zarr-python's event loop (``zarr.core.sync``), the one its synchronous API runs
    coroutines on in the ``zarr_io`` thread; None when it was not started or is closed."""
    import zarr.core.sync as zarr_sync

    loop = zarr_sync.loop[0]
    return None if loop is None or loop.is_closed() else loop
