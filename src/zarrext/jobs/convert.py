"""Converting an array or a group into the encoding the user names (``zarrext convert``).

:func:`convert` copies any array or group zarr-python opens (Zarr format 3 or 2)
into Zarr format 3 arrays encoded as asked, and publishes the copy as ``quantize``
publishes its own (:func:`zarrext.jobs.outputs.staged_output`: built under a
temporary name, published last, the groups holding it consolidated again). Three
steps, in this order, so that what cannot be converted is refused before anything
is written:

1. :func:`plan_targets`: each selected array's target, the keyword arguments of
   :func:`zarrext.create_array` (chunks, shards, codecs, fill value, attributes,
   dimension names, decision, shard layout), checked by creating the array's
   metadata in a scratch directory (zarrext's own checks: a dtype a codec refuses,
   a chunk grid a layout refuses, a fill value the filters lose);
2. the output's groups and the arrays not selected, copied as they are (format 2
   ones migrated to format 3 metadata by zarr's own ``migrate_to_v3``);
3. each selected array, one output write unit (shard, or chunk) at a time, read
   from the source as a region: memory is about a write unit per thread.

Steps 2 and 3 are :func:`run_conversion`, the one engine of every conversion:
``zarrext quantize`` is convert's quantizing form, planning its own targets (the
source's chunks and shards kept, plain zstd) and running them here.

Quantization (``max_abs_error``) needs :mod:`zarrext.quantize`'s planner, a layer
above this one: :func:`zarrext.quantize.converting.convert` passes it in as a
:data:`Quantizer`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from zarrext.jobs import cluster
from zarrext.jobs.store_refs import ArrayRef, StoreRef, array_ref

if TYPE_CHECKING:
    from zarrext.jobs.ome import OmeUpgrade

__all__ = [
    "ArraySelectionError",
    "ConversionError",
    "ConvertReport",
    "Encoding",
    "Quantized",
    "Quantizer",
    "OutputUnitsRef",
    "Target",
    "convert",
    "copy_units_on_worker",
    "default_compressors",
    "group_members",
    "open_source",
    "opened_store",
    "readable",
    "run_conversion",
    "source_parts",
    "output_ref",
    "plan_targets",
    "source_ref",
    "write_units",
]

ConvertProgress = Callable[[str, int, int], None]
"""``progress(array_path, done, total)`` as write units finish."""

Layout = Literal["fixed-slot", "append"] | None

_V2_METADATA = (".zarray", ".zattrs", ".zgroup", ".zmetadata")


class ConversionError(ValueError):
    """An array cannot be converted as asked; nothing was written."""


class ArraySelectionError(ConversionError):
    """The arrays selected (``arrays=``) are not arrays of the group converted."""


@dataclass(frozen=True)
class Quantized:
    """What a :data:`Quantizer` plans for one float array: the filters storing it as
    integers, the attributes recording the plan, and the bound to check on writing."""

    filters: tuple[Any, ...]
    attributes: dict[str, Any]
    max_abs_error: float
    stored_dtype: str
    plan: Any = field(default=None, compare=False)
    """The planner's own record of the plan (quantize's ``QuantizationPlan``)."""
    sampled: bool = False
    """Planned from a dry run's sample of the array, not from all of it."""


Quantizer = Callable[[Any, float, str, bool, "Sequence[tuple[slice, ...]] | None"], Quantized]
"""``quantizer(source_array, max_abs_error, label, sharded, regions)``: scans and plans
one float array (``sharded``: its filters go inside a sharding codec; ``regions``: scan
only these, a dry run's sample, else the whole array)."""


@dataclass(frozen=True)
class Encoding:
    """What a converted array becomes; every field left ``None`` keeps zarrext's default.

    Attributes
    ----------
    codecs : sequence of dict, optional
        The codec chain inside a chunk (inside the shard's inner chunks when
        sharded) as zarr's codec JSON (``[{"name": "bytes"}, {"name": "zstd"}]``).
        Default: the source's array->bytes codec, then ``conditional([shuffle,
        zstd])`` with the decision ``compress_if_smaller`` (:func:`default_compressors`).
    chunks : tuple of int, optional
        The chunk shape (the inner chunks when sharded). Default: the source's.
    shards : tuple of int, "auto" or False, optional
        The shard shape, fitted to each array (:func:`zarrext.jobs.shard_shapes.
        fitted_shards`: clipped to it, or ``"auto"``: grown from its chunks towards
        a target size), or ``False`` for no shards. Default: the source's shards.
    shard_layout : {"fixed-slot", "append"}, optional
        How the shards' inner chunks are laid out; ``None``: dense.
    like : array, path or URL, optional
        Take chunks, shards, codecs and layout from this array (each field given
        here still wins), and the decision its attributes record, which no field
        here sets (without ``like``: ``compress_if_smaller``).
    max_abs_error : float, optional
        Quantize float arrays within this bound (scale_offset + cast_value).
    decision : Decision, str, int or callable, optional
        The decision for the ``conditional`` codecs (a built-in's spelling is
        recorded, as :func:`zarrext.create_array` records it). Default: ``like``'s
        recorded decision, else ``compress_if_smaller``.
    """

    codecs: Sequence[Mapping[str, Any]] | None = None
    chunks: tuple[int, ...] | None = None
    shards: tuple[int, ...] | Literal[False, "auto"] | None = None
    shard_layout: Layout = None
    like: Any = None
    max_abs_error: float | None = None
    decision: Any = None


@dataclass(frozen=True)
class Target:
    """A selected array's plan: its path in the group and the keyword arguments of
    :func:`zarrext.create_array` that make its copy, checked."""

    path: str
    source: Any
    kwargs: dict[str, Any]
    quantized: Quantized | None = None
    chain: str = ""
    """The codecs inside a chunk as the checked metadata names them."""

    @property
    def write_unit(self) -> tuple[int, ...]:
        shards = self.kwargs.get("shards")
        return tuple(shards if shards is not None else self.kwargs["chunks"])

    def describe(self) -> str:
        """What the array becomes, in one line (``--dry-run``, reports)."""
        layout = self.kwargs.get("shard_layout")
        grid = f"chunks {_shape(self.kwargs['chunks'])}"
        if self.kwargs.get("shards") is not None:
            grid += f" in shards {_shape(self.kwargs['shards'])} ({layout or 'dense'})"
        quantized = (
            f"; quantized to {self.quantized.stored_dtype} within "
            f"{self.quantized.max_abs_error:g}"
            f"{' (range of the sample)' if self.quantized.sampled else ''}"
            if self.quantized else ""
        )
        return f"{grid}; {self.chain}{quantized}"


@dataclass(frozen=True)
class ConvertReport:
    """What :func:`convert` did (or, with ``dry_run``, expects to do) to one array.

    Attributes
    ----------
    path : str
        The array's path in the group converted ("" for a lone array).
    becomes : str
        Its new encoding (:meth:`Target.describe`), or ``"copied as it is"``.
    source_bytes, output_bytes : int
        Stored bytes of chunks (:func:`zarrext.jobs.inspection.inventory`'s
        ``stored_bytes``; for a format 2 source, its chunk objects' sizes). With
        ``dry_run``, ``output_bytes`` is the sample's bytes scaled to the array.
    seconds : float
        Time spent on the array's write units (on the sample's, with ``dry_run``).
    units : int
        Write units written (sampled, with ``dry_run``) out of ``total_units``.
    worst_error : float, optional
        For a quantized array, the largest ``|output - source|`` read back.
    ome_upgrade : OmeUpgrade, optional
        The conversion's upgrade of OME-Zarr 0.4 metadata to 0.5 (the same in
        every report of one conversion; :mod:`zarrext.jobs.ome`), if it made one.
    """

    path: str
    becomes: str
    source_bytes: int
    output_bytes: int
    seconds: float
    units: int
    total_units: int
    converted: bool = True
    dry_run: bool = False
    worst_error: float | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    ome_upgrade: OmeUpgrade | None = field(default=None, compare=False)

    @property
    def size_ratio(self) -> float:
        """``source_bytes / output_bytes`` (how many times smaller the output is)."""
        return self.source_bytes / self.output_bytes if self.output_bytes else math.inf


def _shape(shape: Iterable[int]) -> str:
    return "x".join(str(n) for n in shape)


def default_compressors(itemsize: int) -> list[Any]:
    """zarrext's default: ``conditional([shuffle, zstd])`` (decision ``compress_if_smaller``),
    zstd at level 1."""
    from zarr.codecs import ZstdCodec

    from zarrext.codecs.conditional import ConditionalCodec
    from zarrext.codecs.shuffle import ShuffleCodec

    # Level 1, not zstd's default 3: on shuffled planes level 3's double-hash match
    # finder is most of a conversion's CPU, for an output within a few percent.
    return [ConditionalCodec([ShuffleCodec(element_size=itemsize), ZstdCodec(level=1)])]


def _configured(value: Any) -> Any:
    """Codec JSON with ``"configuration": {}`` given to every codec named alone, nested
    ones too (a conditional's codecs): zarr wants a configuration even where every
    field has a default."""
    if isinstance(value, Mapping):
        out = {k: _configured(v) for k, v in value.items()}
        if "name" in out and "configuration" not in out:
            out["configuration"] = {}
        return out
    if isinstance(value, list):
        return [_configured(v) for v in value]
    return value


def _named_alone(cls: Any, codec: Mapping[str, Any]) -> Any:
    """A codec named without a configuration, as its class makes it with no argument
    (``bytes``: the machine's byte order, as zarr's ``BytesCodec()``; its JSON with
    an empty configuration would leave the order unset, refused for multi-byte
    types); a codec whose class needs arguments gets an empty configuration."""
    try:
        return cls()
    except TypeError:
        return cls.from_dict(_configured(codec))


def _parsed_codecs(chain: Sequence[Any], label: str) -> dict[str, Any]:
    """A codec chain (JSON dicts or codec objects) as ``filters``/``serializer``/``compressors``."""
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
    from zarr.codecs.sharding import ShardingCodec
    from zarr.registry import get_codec_class

    codecs = []
    for each in chain:
        if isinstance(each, Mapping):
            if "name" not in each:
                raise ConversionError(f"cannot convert {label}: codec {dict(each)!r} has no name")
            try:
                cls = get_codec_class(str(each["name"]))
                codecs.append(_named_alone(cls, each) if "configuration" not in each
                              else cls.from_dict(_configured(each)))
            except (KeyError, TypeError, ValueError) as e:
                raise ConversionError(
                    f"cannot convert {label}: codec {dict(each)!r}: {e}"
                ) from None
        else:
            codecs.append(each)
    filters = [c for c in codecs if isinstance(c, ArrayArrayCodec)]
    serializers = [c for c in codecs if isinstance(c, ArrayBytesCodec)]
    compressors = [c for c in codecs if isinstance(c, BytesBytesCodec)]
    if any(isinstance(c, ShardingCodec) for c in serializers):
        raise ConversionError(
            f"cannot convert {label}: give shards with shards= (--shards), not as a "
            "sharding_indexed codec; the codecs are those inside a chunk"
        )
    if len(serializers) > 1:
        raise ConversionError(f"cannot convert {label}: the codecs hold more than one "
                              "array->bytes codec")
    return {
        "filters": filters,
        "serializer": serializers[0] if serializers else "auto",
        "compressors": compressors,
    }


def _chunk_codecs(metadata: Any) -> tuple[list[Any], Any, Any]:
    """(codecs inside a chunk, the sharding codec or None, its shard layout) of v3 metadata."""
    from zarr.codecs.sharding import ShardingCodec

    for codec in metadata.codecs:
        if isinstance(codec, ShardingCodec):
            return list(codec.codecs), codec, getattr(codec, "shard_layout", None)
    return list(metadata.codecs), None, None


def opened_store(location: Any, storage_options: Mapping[str, Any] | None) -> Any:
    """A path or URL as a read-only store (with ``storage_options``); a store as given."""
    from zarrext.stores import open_store

    if isinstance(location, str | os.PathLike):
        return open_store(os.fspath(location), mode="r", storage_options=storage_options)
    return location


def readable(array: Any) -> Any:
    """The array read through zarrext's pipeline (decode errors name the chunk), format
    3 or 2."""
    from zarrext.api import with_runtime
    from zarrext.pipeline.format2 import format_2_reader

    return with_runtime(array) if array.metadata.zarr_format == 3 else format_2_reader(array)


def _like_encoding(like: Any, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    import zarr

    from zarrext.codecs.decisions import recorded_decision

    array = like if isinstance(like, zarr.Array) else zarr.open_array(
        opened_store(like, storage_options), mode="r"
    )
    if array.metadata.zarr_format != 3:
        raise ConversionError(f"like={like}: a Zarr format 2 array has no format 3 encoding")
    inner, sharding, layout = _chunk_codecs(readable(array).metadata)
    return {
        "chunks": tuple(array.chunks),
        "shards": tuple(array.shards or ()) if sharding is not None else False,
        "codecs": inner,
        "shard_layout": layout,
        "decision": recorded_decision(array.attrs.asdict(), f"array {like}"),
    }


def source_parts(src: Any) -> tuple[list[Any], Any, dict[str, Any], tuple[str, ...] | None]:
    """(filters, serializer, attributes, dimension names) the source gives its copy."""
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec

    from zarrext.codecs.decisions import without_decision_record
    from zarrext.formats.n5 import written_by_n5
    from zarrext.jobs.xarray_convention import as_format_3

    attributes = without_decision_record(src.attrs.asdict())
    if src.metadata.zarr_format == 2:
        # xarray's dimension names and fill value, where its format 3 reader looks
        attributes, dims = as_format_3(attributes, src.metadata.fill_value, src.dtype)
        from zarrext.jobs.v2_filters import format3_filters

        return format3_filters(src), "auto", attributes, dims
    dims = getattr(src.metadata, "dimension_names", None)
    dims = tuple(dims) if dims is not None else None
    if written_by_n5(json.loads(json.dumps(src.metadata.to_dict(), default=str))):
        # N5's block format (F order, big-endian, its header) is how the container
        # stores blocks, not an encoding chosen: the copy is plain Zarr
        return [], "auto", attributes, dims
    inner, sharding, _ = _chunk_codecs(src.metadata)
    outer = (
        [c for c in src.metadata.codecs if isinstance(c, ArrayArrayCodec)]
        if sharding is not None else []  # without shards, the inner codecs are these
    )
    filters = outer + [c for c in inner if isinstance(c, ArrayArrayCodec)]
    serializer = next((c for c in inner if isinstance(c, ArrayBytesCodec)), "auto")
    return filters, serializer, attributes, dims


def _target(
    src: Any,
    path: str,
    encoding: Encoding,
    quantizer: Quantizer | None,
    storage_options: Mapping[str, Any] | None,
    sample: int | None = None,
) -> Target:
    """The keyword arguments of :func:`zarrext.create_array` for one array's copy
    (``sample``: a dry run's, whose quantized arrays are scanned there only)."""
    from zarrext.codecs.conditional import ConditionalCodec

    label = path or "/"
    filters, serializer, attributes, dims = source_parts(src)
    like = _like_encoding(encoding.like, storage_options) if encoding.like is not None else {}
    chunks = encoding.chunks or like.get("chunks") or tuple(src.chunks)
    shards: Any = encoding.shards if encoding.shards is not None else like.get("shards")
    if shards is None:
        shards = tuple(src.shards) if getattr(src, "shards", None) else False
    else:  # one shape (or "auto") named for every array: each gets one that suits it
        from zarrext.jobs.shard_shapes import fitted_shards

        shards = fitted_shards(shards, tuple(src.shape), tuple(chunks), src.dtype.itemsize)
    layout = encoding.shard_layout or like.get("shard_layout")
    itemsize = src.dtype.itemsize
    if filters and src.metadata.zarr_format == 2:  # what the shuffle sees: the filters' output
        from zarrext.jobs.v2_filters import encoded_itemsize

        itemsize = encoded_itemsize(filters, src.dtype)
    codecs: dict[str, Any] = {"filters": filters, "serializer": serializer,
                              "compressors": default_compressors(itemsize)}
    chain = encoding.codecs if encoding.codecs is not None else like.get("codecs")
    if chain is not None:
        codecs = _parsed_codecs(chain, label)
    quantized = None
    if encoding.max_abs_error is not None:
        if src.dtype.kind != "f":
            raise ConversionError(
                f"cannot convert {label}: max_abs_error quantizes floating-point arrays, "
                f"and it holds {src.dtype}"
            )
        if quantizer is None:
            raise ConversionError("max_abs_error needs zarrext.convert (the quantize planner)")
        regions = None
        if sample is not None:  # the units the dry run encodes (_sampled)
            unit = tuple(shards) if shards is not False else tuple(chunks)
            regions = _spread(unit_slices(tuple(src.shape), unit), sample)
        quantized = quantizer(src, encoding.max_abs_error, label, shards is not False,
                              regions)
        codecs["filters"] = list(quantized.filters)
        attributes = quantized.attributes | {
            k: v for k, v in attributes.items() if k != "zarrext"
        }
    decision = encoding.decision if encoding.decision is not None else (
        like.get("decision") or "compress_if_smaller"
    )
    kwargs: dict[str, Any] = {
        "shape": tuple(src.shape),
        # quantized: cast_value casts native floats (a format 2 '>f8' is read as such)
        "dtype": src.dtype.newbyteorder("=") if quantized is not None else src.dtype,
        "chunks": tuple(chunks),
        "shards": tuple(shards) if shards is not False else None,
        "fill_value": src.fill_value,
        "attributes": attributes,
        "dimension_names": dims,
        "zarr_format": 3,
        **codecs,
    }
    if any(isinstance(c, ConditionalCodec) for c in codecs["compressors"]):
        kwargs["decision"] = decision
    if layout is not None:
        kwargs["shard_layout"] = layout
    return Target(path, src, kwargs, quantized)


def _check(target: Target, scratch: str, output_in_place: bool) -> Target:
    """Create the target's metadata in ``scratch`` (a local directory): zarrext's checks.

    Returns the target with its chain named as the metadata made has it."""
    import dataclasses

    from zarr.storage import LocalStore

    from zarrext.api import create_array
    from zarrext.jobs.inspection import codec_chain

    label = target.path or "/"
    layout = target.kwargs.get("shard_layout")
    if layout is not None and target.kwargs.get("shards") is None:
        raise ConversionError(
            f"cannot convert {label}: shard_layout={layout!r} lays out shards, and the "
            "copy has none (give shards)"
        )
    if layout is not None and not output_in_place:
        raise ConversionError(
            f"cannot convert {label}: shard_layout={layout!r} writes inner chunks in place, "
            "which only a local directory can (not a .zip or an object store); convert "
            "with the dense layout, or to a local directory"
        )
    _check_grid(label, target.kwargs)
    try:
        probe = create_array(LocalStore(scratch), name="probe", overwrite=True,
                             **target.kwargs)
    except (ValueError, TypeError, NotImplementedError) as e:
        raise ConversionError(f"cannot convert {label}: {e}") from None
    inner, _, _ = _chunk_codecs(probe.metadata)
    codecs = getattr(probe.metadata, "codecs", ())
    outer = [c for c in codecs if c not in inner and not hasattr(c, "codecs")]
    return dataclasses.replace(target, chain=" -> ".join(codec_chain([*outer, *inner])))


def _check_grid(label: str, kwargs: Mapping[str, Any]) -> None:
    """Refuse chunks or shards of another rank than the array, and shards that are not
    whole multiples of the chunks, saying which shape is which (zarr's own messages
    name the shards "chunks" and swap the two sizes)."""
    shape, chunks, shards = kwargs["shape"], kwargs["chunks"], kwargs.get("shards")
    for what, grid in (("chunks", chunks), ("shards", shards)):
        if grid is not None and len(grid) != len(shape):
            raise ConversionError(
                f"cannot convert {label}: {what} {_shape(grid)} have {len(grid)} "
                f"dimensions and the array {len(shape)} (shape {_shape(shape)})"
            )
    if shards is None:
        return
    for axis, (shard, chunk) in enumerate(zip(shards, chunks, strict=True)):
        if shard % chunk:
            raise ConversionError(
                f"cannot convert {label}: shards {_shape(shards)} are not a multiple of the "
                f"chunks {_shape(chunks)} (dimension {axis}: {shard} is not a multiple of "
                f"{chunk}); give shards that hold whole chunks, or other chunks"
            )


def plan_targets(
    arrays: Mapping[str, Any],
    encodings: Mapping[str, Encoding] | Encoding,
    *,
    quantizer: Quantizer | None = None,
    output_in_place: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    sample: int | None = None,
) -> list[Target]:
    """Each array's :class:`Target`, checked; refuses the first that cannot be made.

    ``arrays`` maps paths to source arrays; ``encodings`` is one encoding for all or
    one per path (a path without one gets ``Encoding()``). ``sample``: for a dry
    run, a quantized array is scanned in the ``sample`` write units it encodes
    only (a plan from them), not whole.
    """
    targets = []
    with tempfile.TemporaryDirectory(prefix="zarrext-convert-") as scratch:
        for path, src in arrays.items():
            encoding = encodings if isinstance(encodings, Encoding) else encodings.get(
                path, Encoding()
            )
            target = _target(src, path, encoding, quantizer, storage_options, sample)
            targets.append(_check(target, scratch, output_in_place))
    return targets


def unit_slices(shape: Sequence[int], unit: Sequence[int]) -> list[tuple[slice, ...]]:
    """The regions of an array's write units (shards, or chunks), in C order."""
    import itertools

    starts = itertools.product(*(range(0, n, u) for n, u in zip(shape, unit, strict=True)))
    return [
        tuple(slice(s, min(s + u, n)) for s, u, n in zip(start, unit, shape, strict=True))
        for start in starts
    ]


@dataclass(frozen=True)
class ChunkObjectReader:
    """Reads a region made of whole chunks of an unsharded source straight from its
    chunk objects (:meth:`chunks`: local chunk files read in the calling thread, other
    stores' objects fetched at once), each decoded in the calling thread by the
    source's own codec chain and copied into its place, missing ones left at the
    fill value, as ``src[region]`` reads them.

    ``src[region]`` hands each chunk to the event loop and to codec threads and
    back; converting, every thread already has a write unit of its own. Measured
    (bench_convert, 2 busy cores), the whole unit in its thread with
    :class:`ShardWriter` is 5-15 % faster than ``src[region]`` and ``dst[region]
    =``: a conversion is bound by decoding, encoding and writing (CPU), not idle.
    """

    store: Any
    prefix: str
    metadata: Any
    spec: Any
    transform: Any
    chunk_shape: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fill: Any
    local: bool = False
    """Whether chunk files are read in the calling thread (a ``LocalStore``)."""
    blosc: Any = None
    """A format 2 source's blosc chunks decoded into scratch memory
    (:class:`~zarrext.pipeline.blosc_scratch.BloscIntoScratch`), if they are."""

    @classmethod
    def of(cls, src: Any, unit: Sequence[int]) -> ChunkObjectReader | None:
        """The reader of ``src`` for write units of shape ``unit``; None when the
        source is sharded, its chunk grid irregular or not a divisor of ``unit``, or
        a codec has no synchronous path (then ``src[region]`` reads it)."""
        from dataclasses import replace

        from zarr.codecs.sharding import ShardingCodec
        from zarr.core.array_spec import ArraySpec
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.chunk_utils import ChunkTransform, fill_value_or_default
        from zarr.core.metadata.v3 import RegularChunkGridMetadata
        from zarr.storage import LocalStore

        from zarrext.pipeline.blosc_scratch import BloscIntoScratch

        metadata = src.metadata
        if metadata.zarr_format == 3 and (
            not isinstance(metadata.chunk_grid, RegularChunkGridMetadata)
            or any(isinstance(c, ShardingCodec) for c in metadata.codecs)
        ):
            return None
        chunk_shape = tuple(src.chunks)
        if len(chunk_shape) != len(unit) or any(
            c <= 0 or u % c for c, u in zip(chunk_shape, unit, strict=True)
        ):
            return None
        native = metadata.dtype.to_native_dtype()
        if (
            not type(metadata.dtype).__module__.startswith("zarr.")  # zarrext's own (optional)
            or native.hasobject
            or native.kind not in "biufcmM"
        ):
            return None
        config = src.async_array.config
        if getattr(config, "read_missing_chunks", True) is False:  # src[region] refuses them
            return None
        if metadata.zarr_format == 2:  # as zarr reads format 2: in the metadata's order
            config = replace(config, order=metadata.order)
        spec = ArraySpec(shape=chunk_shape, dtype=metadata.dtype, fill_value=metadata.fill_value,
                         config=config, prototype=default_buffer_prototype())
        pipeline = src.async_array.codec_pipeline.evolve_from_array_spec(spec)
        transform = getattr(pipeline, "transform", None)
        if transform is None:
            try:
                transform = ChunkTransform(codecs=tuple(pipeline))
            except TypeError:  # a codec without a synchronous path
                return None
        store = src.store_path.store
        return cls(store, src.store_path.path, metadata, spec, transform, chunk_shape,
                   tuple(src.shape), native, fill_value_or_default(spec),
                   local=type(store) is LocalStore, blosc=BloscIntoScratch.of(metadata, spec))

    def chunks(self, region: tuple[slice, ...]) -> list[tuple[tuple[int, ...], Callable[[], Any]]]:
        """Every chunk of ``region`` in C order: its coordinates, and a function
        giving its stored bytes (None: missing). A chunk file of a local store is
        read when asked, in the calling thread, into the thread's read memory
        (valid until it reads its next chunk file:
        :func:`~zarrext.pipeline.chunk_io.get_chunk_sync`); other stores' chunk
        objects are all fetched here, at once (one event-loop round trip).

        Read in the unit's thread, a local chunk costs neither a trip through the
        event loop and a file thread nor fresh memory: convert's CPU outside the
        unit threads was a third of theirs before (bench_convert, 256 MiB).
        """
        import asyncio
        import itertools

        from zarr.core.sync import sync
        from zarr.storage import StorePath

        from zarrext.pipeline.chunk_io import get_chunk_sync

        first = [r.start // c for r, c in zip(region, self.chunk_shape, strict=True)]
        last = [-(-r.stop // c) for r, c in zip(region, self.chunk_shape, strict=True)]
        every = list(itertools.product(*(range(a, b) for a, b in zip(first, last, strict=True))))
        inside = f"{self.prefix}/" if self.prefix else ""
        keys = [f"{inside}{self.metadata.encode_chunk_key(c)}" for c in every]
        prototype = self.spec.prototype
        if self.local:
            return [
                (c, functools.partial(get_chunk_sync, StorePath(self.store, k), prototype))
                for c, k in zip(every, keys, strict=True)
            ]

        async def fetch() -> list[Any]:
            return await asyncio.gather(*(self.store.get(k, prototype=prototype) for k in keys))

        return [(c, functools.partial(_given, chunk))
                for c, chunk in zip(every, sync(fetch()), strict=True)]

    def decode(self, coords: tuple[int, ...], chunk: Any) -> np.ndarray:
        """A fetched chunk's values, of the chunk's shape (the fill value where it is
        missing), as the source's pipeline decodes it. They may live in the
        thread's scratch memory: valid until the thread decodes its next chunk.

        Raises
        ------
        UndecodableChunk
            Where the chunk does not decode (``src[region]`` then raises the error
            naming it).
        """
        from zarrext.codecs.chunk_context import chunk_index

        if chunk is None:
            return np.full(self.chunk_shape, self.fill, dtype=self.dtype)
        token = chunk_index.set(coords)  # as the source's pipeline decodes it
        try:
            if self.blosc is not None:
                return self.blosc.decode(chunk)
            return np.asarray(self.transform.decode_chunk(chunk, self.spec).as_ndarray_like())
        except Exception as e:  # src[region] raises the error, naming the chunk and codec
            raise UndecodableChunk(coords) from e
        finally:
            chunk_index.reset(token)

    def read(self, region: tuple[slice, ...]) -> np.ndarray | None:
        """The values of ``region`` (whole chunks, but at the array's edge); None if a
        chunk does not decode (``src[region]`` then raises the error naming it)."""
        out = np.empty(tuple(r.stop - r.start for r in region), dtype=self.dtype)
        for coords, stored in self.chunks(region):
            starts = [i * c for i, c in zip(coords, self.chunk_shape, strict=True)]
            extent = tuple(
                slice(0, min(c, n - s)) for s, c, n in zip(starts, self.chunk_shape, self.shape,
                                                           strict=True)
            )
            place = tuple(
                slice(s - r.start, s - r.start + e.stop)
                for s, r, e in zip(starts, region, extent, strict=True)
            )
            chunk = stored()
            if chunk is None:
                out[place] = self.fill
                continue
            try:
                values = self.decode(coords, chunk)
            except UndecodableChunk:
                return None
            out[place] = values[extent]
        return out


def _given(chunk: Any) -> Any:
    return chunk


class UndecodableChunk(Exception):
    """A source chunk :meth:`ChunkObjectReader.decode` could not decode (the region
    path then reads it again, and raises the error naming the chunk and codec)."""


@dataclass(frozen=True)
class ShardWriter:
    """Writes a whole shard of a zarrext-written output in the calling thread
    (:meth:`~zarrext.pipeline.ZarrextCodecPipeline.write_shard_here`): the same
    bytes as ``dst[region] = values``, without its round trips to the event loop.

    Where the source's chunks are the output's inner chunks
    (:meth:`write_chunks`), each decoded source chunk is encoded as its inner chunk
    at once (:meth:`~zarrext.pipeline.ZarrextCodecPipeline.write_shard_from_chunks`),
    on local disk and on object stores: no shard of values is assembled and cut
    up again. Measured (bench_convert, 256 MiB on local disk, paired medians,
    with the local reads and writes of :meth:`ChunkObjectReader.chunks` and
    :func:`~zarrext.pipeline.chunk_io.set_parts_sync`): convert's time over the
    limit's (reading and encoding alone) 1.65-1.68 -> 1.11-1.16, over
    ``zarr.from_array``'s 0.91-0.95 -> 0.58-0.67.
    """

    array: Any
    pipeline: Any
    spec: Any
    shard_shape: tuple[int, ...]
    inner_shape: tuple[int, ...]
    dtype: np.dtype[Any]
    local: bool
    """Whether the store has synchronous IO (else :meth:`write` declines)."""

    @classmethod
    def of(cls, dst: Any) -> ShardWriter | None:
        """The writer of ``dst``'s shards; None when it has none, or another pipeline."""
        from zarr.core.array_spec import ArraySpec
        from zarr.core.buffer import default_buffer_prototype

        from zarrext.pipeline import ZarrextCodecPipeline
        from zarrext.pipeline.chunk_io import sync_io

        pipeline = dst.async_array.codec_pipeline
        if dst.shards is None or not isinstance(pipeline, ZarrextCodecPipeline):
            return None
        shard_shape = tuple(dst.shards)
        spec = ArraySpec(shape=shard_shape, dtype=dst.metadata.dtype,
                         fill_value=dst.metadata.fill_value, config=dst.async_array.config,
                         prototype=default_buffer_prototype())
        return cls(dst, pipeline, spec, shard_shape, tuple(dst.chunks),
                   dst.metadata.dtype.to_native_dtype(),
                   sync_io(dst.store_path, write=True))

    def _item(self, region: tuple[slice, ...]) -> tuple[Any, ...] | None:
        """``region``'s shard as an item of the pipeline's batch; None unless
        ``region`` starts a shard."""
        coords = tuple(r.start // n for r, n in zip(region, self.shard_shape, strict=True))
        if any(r.start != c * n for r, c, n in zip(region, coords, self.shard_shape,
                                                   strict=True)):
            return None
        selection = tuple(slice(0, r.stop - r.start) for r in region)
        return (self.array.store_path / self.array.metadata.encode_chunk_key(coords), self.spec,
                selection, selection, True)

    def write(self, region: tuple[slice, ...], values: np.ndarray) -> bool:
        """Write ``values`` into ``region``, one whole shard; False (nothing written)
        where the pipeline's whole-shard path does not apply."""
        item = self._item(region) if self.local else None
        if item is None:
            return False
        value = self.spec.prototype.nd_buffer.from_ndarray_like(values)
        return bool(self.pipeline.write_shard_here(item, value))

    def write_chunks(self, region: tuple[slice, ...], reader: ChunkObjectReader) -> bool:
        """Write ``region``, one whole shard inside the array whose inner chunks are
        ``reader``'s source chunks, each decoded and encoded in turn; False
        (nothing written) where that does not apply: a shard at the array's edge,
        other chunks, another data type, a chain the pipeline cannot encode so.

        Raises
        ------
        UndecodableChunk
            A source chunk does not decode (nothing written).
        """
        from zarr.core.sync import sync

        from zarrext.pipeline.chunk_io import joined, set_parts_sync

        item = self._item(region)
        if (
            item is None
            or any(r.stop - r.start != n for r, n in zip(region, self.shard_shape, strict=True))
            or reader.chunk_shape != self.inner_shape
            or reader.dtype != self.dtype
            or not self.pipeline.encodes_shards_from_chunks(self.spec)
        ):
            return False
        chunks = reader.chunks(region)
        nd_buffer = self.spec.prototype.nd_buffer

        def chunk_values(coords: tuple[int, ...]) -> Any:
            # the shard's inner chunks and the region's source chunks, both in C order
            source_coords, stored = chunks[inner_order[coords]]
            return nd_buffer.from_ndarray_like(reader.decode(source_coords, stored()))

        per_shard = [s // c for s, c in zip(self.shard_shape, self.inner_shape, strict=True)]
        inner_order = {c: k for k, c in enumerate(np.ndindex(*per_shard))}
        byte_setter = item[0]

        def store(parts: list[Any] | None) -> None:
            if self.local:
                if parts is None:
                    byte_setter.delete_sync()
                else:
                    set_parts_sync(byte_setter, parts)
            elif parts is None:
                sync(byte_setter.delete())
            else:
                sync(byte_setter.set(joined(parts)))

        self.pipeline.write_shard_from_chunks(item, chunk_values, store)
        return True


def _copy_unit(src: Any, dst: Any, region: tuple[slice, ...], measure: bool,
               reader: ChunkObjectReader | None = None,
               writer: ShardWriter | None = None,
               storable: Any = None) -> float:
    """Copy one write unit; the worst error read back from ``dst`` (with ``measure``).

    A value ``dst``'s filters would not give back within their plan (a quantized
    copy whose source changed since its scan) is refused before anything of the
    unit is written, naming the source (:class:`~zarrext.errors.UnstorableValueError`).
    Idempotent: a unit written again gets the same bytes.
    """
    from zarrext.codecs.filter_roundtrip import measured_error
    from zarrext.codecs.quantized_writes import array_label

    # chunk to chunk: no unit of values to check (quantizing filters) or measure
    if not measure and storable is None and reader is not None and writer is not None:
        try:
            if writer.write_chunks(region, reader):
                return 0.0
        except UndecodableChunk:
            pass  # the region path below raises the error naming the chunk
    data = reader.read(region) if reader is not None else None
    if data is None:
        data = np.asarray(src[region])
    if not data.dtype.isnative:  # a format 2 '>f8': filters (cast_value) take native values
        data = data.astype(data.dtype.newbyteorder("="))
    if storable is not None:
        storable.refuse(data, array_label(str(src.store_path)))
    if writer is None or not writer.write(region, data):
        dst[region] = data
    return measured_error(data, np.asarray(dst[region])) if measure else 0.0


@dataclass(frozen=True)
class OutputUnitsRef:
    """The output array as a Dask worker reopens it to write write units.

    Its store's description and path, its ``zarr.json`` (on an object store it is
    not written until the end: :class:`~zarrext.jobs.outputs.MetadataLastStore`),
    and the runtime settings zarrext writes it with (decision, shard layout).
    """

    store: StoreRef
    path: str
    metadata: bytes
    decision: Any = None
    shard_layout: Layout = None

    def open(self) -> Any:
        import zarr
        from zarr.core.buffer import default_buffer_prototype

        from zarrext.api import with_runtime
        from zarrext.jobs.outputs import MetadataLastStore

        key = f"{self.path}/zarr.json" if self.path else "zarr.json"
        document = default_buffer_prototype().buffer.from_bytes(self.metadata)
        store = MetadataLastStore(self.store.open("r+"), pending={key: document})
        array = zarr.open_array(store, path=self.path, mode="r+")
        return with_runtime(array, decision=self.decision, shard_layout=self.shard_layout)


def _described(store: Any, what: str, job_name: str) -> StoreRef:
    """A store's description for Dask workers; one line when it has none, or when it
    is a writable icechunk session (whose commits only this process makes)."""
    from zarrext.jobs.outputs import MetadataLastStore
    from zarrext.jobs.store_refs import worker_ref
    from zarrext.jobs.transactions import is_session_store
    from zarrext.stores import StoreOpenError

    inner: Any = store.wrapped if isinstance(store, MetadataLastStore) else store
    if is_session_store(inner) and not inner.session.read_only:
        raise StoreOpenError(
            f"{job_name} on a Dask cluster: the {what} is in a writable icechunk session; "
            f"{job_name} into a repository without the client (or --scheduler)"
        )
    return worker_ref(store, job_name, what)


def _refuse_zip_output(output: Any, job_name: str) -> None:
    from zarr.storage import StorePath, ZipStore

    from zarrext.stores import StoreOpenError, local_path

    store = output.store if isinstance(output, StorePath) else output
    path = local_path(output) if not isinstance(store, ZipStore) else None
    if isinstance(store, ZipStore) or (path is not None and path.suffix == ".zip"):
        raise StoreOpenError(
            f"{job_name} on a Dask cluster: the output is a zip archive, which only this "
            "process can write; give a directory or URL, or leave out the client"
        )


def source_ref(src: Any, job_name: str = "convert") -> ArrayRef:
    """The source array as a Dask worker reopens it (read-only; zarrext's pipeline for
    a format 3 array, with its runtime codecs); ``job_name`` names the job in errors."""
    ref = array_ref(src, "r") if src.metadata.zarr_format == 3 else None
    store = _described(src.store_path.store, "source", job_name)
    if ref is None:
        return ArrayRef(store, src.store_path.path, "r")
    return ArrayRef(store, ref.path, "r", codecs=ref.codecs)


def output_ref(dst: Any, target: Target, job_name: str = "convert") -> OutputUnitsRef:
    from zarr.core.buffer import default_buffer_prototype

    document = dst.metadata.to_buffer_dict(default_buffer_prototype())["zarr.json"]
    return OutputUnitsRef(
        _described(dst.store_path.store, "output", job_name), dst.store_path.path,
        document.to_bytes(),
        target.kwargs.get("decision"), target.kwargs.get("shard_layout"),
    )


def copy_units_on_worker(
    source: ArrayRef,
    output: OutputUnitsRef,
    measure: bool,
    threads: int,
    batch: list[tuple[slice, ...]],
) -> tuple[int, float]:
    """One Dask task: copy ``batch``'s write units; the worst error read back.

    Idempotent (each region is whole write units of the output): a task rerun after
    its worker died writes the same bytes again.
    """
    from zarrext.codecs.quantized_writes import StorableValues

    src = source.open()
    if src.metadata.zarr_format == 2:  # a damaged chunk named, as in this process
        from zarrext.pipeline.format2 import format_2_reader

        src = format_2_reader(src)
    dst = output.open()
    storable = StorableValues.of_metadata(dst.metadata)
    worst = 0.0
    for each in cluster.on_threads(
        lambda r: _copy_unit(src, dst, r, measure, storable=storable), batch, threads
    ):
        worst = max(worst, each)
    return len(batch), worst


def _write_unit(array: Any) -> tuple[int, ...]:
    return tuple(array.shards or array.chunks)


def write_units(
    src: Any,
    dst: Any,
    regions: Sequence[tuple[slice, ...]],
    *,
    measure: bool = False,
    progress: Callable[[int, int], None] | None = None,
    client: Any = None,
    on_workers: tuple[ArrayRef, OutputUnitsRef] | None = None,
    job_name: str = "convert",
    where: str = "",
    unit: str = "write unit",
) -> float:
    """Copy ``regions`` of ``src`` into ``dst``, zarr's ``async.concurrency`` at once.

    Each region is one of ``dst``'s write units, written whole by one thread: memory
    is about a unit's values per thread (per process). With a Dask ``client``, the
    regions run in batches (:func:`zarrext.jobs.cluster.batches`), one task each,
    on the workers, which reopen the arrays from ``on_workers`` (:func:`source_ref`,
    :func:`output_ref`): memory is then about ``async.concurrency`` units per
    worker. Returns the worst error read back (with ``measure``; else 0). An error
    or Ctrl-C cancels the units not started, and gets the note ``"{job_name} stopped
    in {where} after {done} of {total} {unit}s"``.
    """
    from zarrext.codecs.quantized_writes import StorableValues
    from zarrext.pipeline.codec_threads import codec_workers

    reader = writer = None
    threads = cluster.concurrency()
    if client is None:
        reader = ChunkObjectReader.of(src, _write_unit(dst))
        writer = ShardWriter.of(dst)
        # A unit's thread that encodes its shard itself keeps a core busy: more of
        # them than codec threads only share the cores (and each holds a shard),
        # 10-25 % slower here than as many as the codec threads.
        threads = cluster.concurrency() if writer is None else codec_workers()
    storable = StorableValues.of_metadata(dst.metadata)
    job: cluster.Pass[tuple[slice, ...], float] = cluster.Pass(
        local=lambda region: _copy_unit(src, dst, region, measure, reader, writer, storable),
        remote=(copy_units_on_worker, (*on_workers, measure)) if on_workers else None,
        combine=max, start=0.0, threads=threads, what=f"{job_name} on a Dask cluster",
        stopped=f"{job_name} stopped in {where}" if where else f"{job_name} stopped",
        unit=unit,
    )
    return cluster.run_pass(job, regions, client=client, progress=progress)


def _stored_bytes(array: Any) -> int:
    """Stored bytes of chunks, as ``zarrext info`` counts them (format 2: the sizes of
    the array's objects but its metadata, chunks in nested directories too)."""
    from zarr.core.common import concurrent_map
    from zarr.core.sync import sync

    from zarrext.jobs.inspection import chunk_prefix, inventory
    from zarrext.stores import list_keys, object_sizes

    if array.metadata.zarr_format == 3:
        # the totals alone: of a shard its index only, not its bytes (reading every
        # shard whole was a third of a 256 MiB convert's time in bench_convert)
        return inventory(array, read_masks=False, list_chunks=False).stored_bytes
    store, prefix = array.store_path.store, chunk_prefix(array)
    sizes = object_sizes(store, prefix)
    if sizes is None:  # a store that cannot list sizes: asked key by key
        keys = list_keys(store, prefix)
        found = sync(concurrent_map([(k,) for k in keys], store.getsize, cluster.concurrency()))
        sizes = dict(zip(keys, found, strict=True))
    return sum(size for key, size in sizes.items()
               if key.rsplit("/", 1)[-1] not in _V2_METADATA)


def _sampled(target: Target, sample: int) -> ConvertReport:
    """A dry run: encode up to ``sample`` write units in memory; the size scaled up."""
    import dataclasses

    from zarr.storage import MemoryStore

    from zarrext.api import create_array

    kwargs = {k: v for k, v in target.kwargs.items() if k != "shard_layout"}
    dst = create_array(MemoryStore(), **kwargs)
    regions = unit_slices(target.kwargs["shape"], target.write_unit)
    picked = _spread(regions, sample)
    started = time.perf_counter()
    write_units(readable(target.source), dst, picked, measure=target.quantized is not None)
    seconds = time.perf_counter() - started
    from zarrext.jobs.inspection import inventory

    written = inventory(dst, read_masks=False, list_chunks=False).stored_bytes
    size = sum(_region_size(r) for r in regions)
    sampled = sum(_region_size(r) for r in picked)
    expected = round(written * size / sampled) if sampled else 0
    report = ConvertReport(
        target.path, target.describe(), _stored_bytes(target.source), expected, seconds,
        len(picked), len(regions), dry_run=True,
    )
    return dataclasses.replace(report)


def _region_size(region: tuple[slice, ...]) -> int:
    return math.prod(s.stop - s.start for s in region)


def _spread[T](items: Sequence[T], n: int) -> list[T]:
    """Up to ``n`` items spread over ``items`` (first and last included)."""
    if len(items) <= n:
        return list(items)
    step = (len(items) - 1) / (n - 1) if n > 1 else 0
    return [items[round(i * step)] for i in range(n)]


def group_members(group: Any) -> dict[str, Any]:
    """The arrays and groups under ``group`` by path, at any depth (no staging copy of
    an earlier job); an unknown codec names the array holding it."""
    import zarr

    from zarrext.errors import naming_codec_holder, naming_malformed_metadata
    from zarrext.jobs.group_metadata import is_staging

    with naming_codec_holder(group=group), \
            naming_malformed_metadata(group.store, group.store_path.path):
        members = group.members(max_depth=None)
    return {
        name: member for name, member in members
        if isinstance(member, zarr.Array | zarr.Group) and not is_staging(name)
    }


def _chosen(members: Mapping[str, Any], names: Sequence[str] | None, where: str) -> list[str]:
    import zarr

    arrays = sorted(n for n, m in members.items() if isinstance(m, zarr.Array))
    if names is None:
        return arrays
    chosen = []
    for name in dict.fromkeys(n.strip("/") for n in names):
        if name not in arrays:
            known = ", ".join(arrays) or "none"
            raise ArraySelectionError(f"no array {name!r} in group {where} (its arrays: {known})")
        chosen.append(name)
    return chosen


def _copy_keys(source: Any, prefix: str, store: Any, into: str, keys: Sequence[str]) -> None:
    """Copy objects ``prefix + key`` of ``source`` to ``into + key`` of ``store``."""
    import asyncio

    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    prototype = default_buffer_prototype()

    async def copy_all() -> None:
        limit = asyncio.Semaphore(cluster.concurrency())

        async def copy(key: str) -> None:
            async with limit:
                value = await source.get(f"{prefix}{key}", prototype)
                if value is not None:
                    await store.set(f"{into}{key}", value)

        await asyncio.gather(*(copy(k) for k in keys))

    sync(copy_all())


def _listed(store: Any, prefix: str) -> list[str]:
    from zarr.core.sync import sync

    from zarrext.jobs.group_metadata import STAGING_MARKER

    async def keys() -> list[str]:
        return [k[len(prefix):] async for k in store.list_prefix(prefix)]

    # a zip archive made by shutil.make_archive lists its directories ("sub/"): no objects
    return [k for k in sync(keys()) if STAGING_MARKER not in k and not k.endswith("/")]


def _copy_as_is(group: Any, members: Mapping[str, Any], store: Any, base: str,
                converted: Sequence[str]) -> None:
    """Copy the group's objects but the converted arrays'. A format 3 group is
    copied object for object (consolidated metadata written again later); a format 2
    one gets format 3 groups and arrays (zarr's ``migrate_to_v3``), chunks as they are."""
    import zarr

    prefix = f"{group.path}/" if group.path else ""
    into = f"{base}/" if base else ""
    skipped = tuple(f"{name}/" for name in converted)
    keys = [k for k in _listed(group.store, prefix) if not k.startswith(skipped)]
    if group.metadata.zarr_format == 3:
        # metadata first, outer groups before inner nodes: an icechunk session takes
        # a chunk only for an array it already holds
        documents = sorted((k for k in keys if k.rsplit("/", 1)[-1] == "zarr.json"),
                           key=lambda k: k.count("/"))
        for depth in sorted({k.count("/") for k in documents}):
            _copy_keys(group.store, prefix, store, into,
                       [k for k in documents if k.count("/") == depth])
        _copy_keys(group.store, prefix, store, into,
                   [k for k in keys if k.rsplit("/", 1)[-1] != "zarr.json"])
        return
    # groups first (creating one clears what is under it), then chunks, then metadata
    zarr.create_group(store, path=base or None, attributes=group.attrs.asdict(),
                      zarr_format=3, overwrite=True)
    groups = sorted((n for n, m in members.items() if isinstance(m, zarr.Group)),
                    key=lambda n: n.count("/"))
    for name in groups:
        zarr.create_group(store, path=f"{into}{name}", zarr_format=3, overwrite=True,
                          attributes=members[name].attrs.asdict())
    keys = [k for k in keys if k.rsplit("/", 1)[-1] not in _V2_METADATA]
    _copy_keys(group.store, prefix, store, into, keys)
    for name, member in members.items():
        if name not in converted and isinstance(member, zarr.Array):
            _migrated(member, store, f"{into}{name}")


def _migrated(member: Any, store: Any, path: str) -> None:
    """A format 2 array's metadata written as format 3 at ``path`` (zarr's
    ``migrate_to_v3``), its chunks read where they are, as the converted arrays
    are made: xarray's ``_ARRAY_DIMENSIONS`` and fill value become its format 3
    dimension names and ``_FillValue`` (:mod:`zarrext.jobs.xarray_convention`), and a fill
    value of null (format 2's "none": zarr-python reads a missing chunk as the
    type's default, which xarray writes for integers) becomes that default, as
    format 3 needs one (``migrate_to_v3`` refuses null)."""
    import dataclasses

    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync
    from zarr.metadata.migrate_v3 import migrate_to_v3
    from zarr.storage import StorePath

    from zarrext.jobs.xarray_convention import as_format_3

    metadata = member.metadata
    fill_value = metadata.fill_value  # null: xarray masks nothing
    if metadata.fill_value is None:
        metadata = dataclasses.replace(metadata, fill_value=metadata.dtype.default_scalar())
        member = zarr.Array(zarr.AsyncArray(metadata=metadata, store_path=member.store_path))
    if _variable_length(metadata) is not None:
        _migrated_strings(metadata, store, path)
    else:
        migrate_to_v3(member, StorePath(store, path))
    key = f"{path}/zarr.json"
    prototype = default_buffer_prototype()
    document = json.loads(sync(store.get(key, prototype=prototype)).to_bytes())
    attributes, dims = as_format_3(document.get("attributes", {}), fill_value, member.dtype)
    if dims is not None:
        document["attributes"], document["dimension_names"] = attributes, list(dims)
        sync(store.set(key, prototype.buffer.from_bytes(json.dumps(document, indent=2).encode())))


_VARIABLE_LENGTH = {"vlen-utf8": "vlen-utf8", "vlen-bytes": "vlen-bytes"}
"""Format 2 filters that are format 3 serializers of the same bytes (strings, bytes)."""


def _variable_length(metadata: Any) -> str | None:
    """The format 3 serializer of a format 2 array whose only filter encodes
    variable-length strings or bytes (zarr-python's and xarray's strings), else None."""
    filters: tuple[Any, ...] = tuple(metadata.filters or ())
    if len(filters) != 1 or metadata.order != "C":
        return None
    return _VARIABLE_LENGTH.get(getattr(filters[0], "codec_id", ""))


def _migrated_strings(metadata: Any, store: Any, path: str) -> None:
    """Format 3 metadata at ``path`` for a format 2 array of variable-length strings or
    bytes, its chunks read where they are: format 2's ``vlen-utf8`` filter is format
    3's serializer of the same bytes (zarr's ``migrate_to_v3`` refuses it), the
    compressor as ``migrate_to_v3`` gives it."""
    import dataclasses

    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.dtype import UInt8
    from zarr.core.sync import sync
    from zarr.metadata.migrate_v3 import migrate_to_v3
    from zarr.storage import MemoryStore, StorePath

    compressors: list[Any] = []
    if metadata.compressor is not None:  # zarr's own translation of the compressor
        probe = dataclasses.replace(metadata, filters=None, dtype=UInt8(), fill_value=0,
                                    attributes={})
        scratch = MemoryStore()
        migrate_to_v3(zarr.Array(zarr.AsyncArray(metadata=probe, store_path=StorePath(
            MemoryStore()))), StorePath(scratch))
        stored = sync(scratch.get("zarr.json", prototype=default_buffer_prototype()))
        assert stored is not None  # migrate_to_v3 wrote it
        compressors = json.loads(stored.to_bytes())["codecs"][1:]
    attributes = dict(metadata.attributes)
    dims = attributes.pop("_ARRAY_DIMENSIONS", None)
    zarr.create_array(
        StorePath(store, path), shape=metadata.shape, dtype=metadata.dtype,
        chunks=metadata.chunks, fill_value=metadata.fill_value, filters=[],
        serializer={"name": _variable_length(metadata), "configuration": {}},
        compressors=compressors, attributes=attributes,
        dimension_names=list(dims) if dims is not None else None,
        chunk_key_encoding={"name": "v2", "separator": metadata.dimension_separator},
        zarr_format=3,
    )


def _v2_consolidated(group: Any) -> bool:
    """Whether a format 2 group holds consolidated metadata (``.zmetadata``)."""
    from zarr.core.sync import sync

    path = group.store_path.path
    return bool(sync(group.store.exists(f"{path}/.zmetadata" if path else ".zmetadata")))


def _in_place(output: Any) -> bool:
    """Whether shard layouts can write at ``output``: a local directory (not a .zip)."""
    from zarr.storage import StorePath

    from zarrext.jobs.outputs import in_session
    from zarrext.stores import local_path

    if in_session(output) is not None:
        return False
    if isinstance(output, StorePath):
        output = output.store
    path = local_path(output)
    return path is not None and path.suffix != ".zip"


def convert(
    source: Any,
    output: Any,
    *,
    encoding: Encoding | None = None,
    encodings: Mapping[str, Encoding] | None = None,
    arrays: Sequence[str] | None = None,
    overwrite: bool = False,
    dry_run: bool = False,
    sample: int = 3,
    progress: ConvertProgress | None = None,
    quantizer: Quantizer | None = None,
    storage_options: Mapping[str, Any] | None = None,
    output_storage_options: Mapping[str, Any] | None = None,
    client: Any = None,
    ome_upgrade: bool = True,
    allow_larger: bool = False,
) -> list[ConvertReport]:
    """Copy an array or group into the encoding named, as zarrext's engine does.

    :func:`zarrext.convert` is the public form (with quantization); see it for the
    parameters. ``encoding`` applies to every selected array, ``encodings`` (by path
    in the group) override it per array. With a Dask ``client``, each array's write
    units run on its workers (:func:`write_units`); a dry run stays here. A format 2
    group's OME-Zarr 0.4 metadata becomes 0.5 (:mod:`zarrext.jobs.ome`) unless
    ``ome_upgrade`` is false.
    """
    from dataclasses import replace

    import zarr

    from zarrext.jobs.outputs import check_disjoint, refuse_taken
    from zarrext.stores import refuse_read_only

    out_options = storage_options if output_storage_options is None else output_storage_options
    if not dry_run:
        refuse_read_only(output, "convert")
        check_disjoint(source, output)
        # before any value is read: planning a quantized array scans it whole
        refuse_taken(output, overwrite=overwrite, storage_options=out_options)
    node = open_source(source, storage_options)
    base_encoding = encoding or Encoding()
    per_array: dict[str, Encoding] = {}
    if isinstance(node, zarr.Array):
        if arrays:
            raise ArraySelectionError(f"{source} is an array, not a group: it has no arrays "
                                      "to select")
        selected = {"": node}
        members: dict[str, Any] = {}
    else:
        members = group_members(node)
        chosen = _chosen(members, arrays, node.path or str(source))
        selected = {name: members[name] for name in chosen}
    for name in selected:
        per_array[name] = (encodings or {}).get(name, base_encoding)
        if arrays is None and selected[name].dtype.kind != "f":
            # every array of a group, quantizing: the floats; the rest converted exactly
            per_array[name] = replace(per_array[name], max_abs_error=None)
    targets = plan_targets(
        {name: readable(a) for name, a in selected.items()}, per_array,
        quantizer=quantizer, output_in_place=dry_run or _in_place(output),
        storage_options=storage_options, sample=sample if dry_run else None,
    )
    import dataclasses

    from zarrext.jobs.ome import planned_upgrade

    upgrade = planned_upgrade(node, members) if ome_upgrade else None
    if dry_run:
        return [dataclasses.replace(_sampled(t, sample), ome_upgrade=upgrade) for t in targets]
    from zarrext.jobs.larger import refusing_larger

    return run_conversion(
        node, targets, output, members=members, overwrite=overwrite,
        output_storage_options=out_options, progress=progress, client=client,
        ome_upgrade=upgrade, written=refusing_larger(allow_larger, source),
    )


def open_source(source: Any, storage_options: Mapping[str, Any] | None) -> Any:
    """The array or group at ``source`` (a path, URL or store), read-only; a group
    with its members as stored, not as its consolidated metadata says."""
    import zarr
    from zarr.storage import StorePath

    from zarrext.errors import naming_malformed_metadata

    store = opened_store(source, storage_options)
    inside = store if isinstance(store, StorePath) else StorePath(store)
    with naming_malformed_metadata(inside.store, inside.path):
        node = zarr.open(store, mode="r")
        if isinstance(node, zarr.Group):
            node = zarr.open_group(store, mode="r", use_consolidated=False)
    return node


def run_conversion(
    node: Any,
    targets: Sequence[Target] | Callable[[], Sequence[Target]],
    output: Any,
    *,
    members: Mapping[str, Any],
    overwrite: bool,
    output_storage_options: Mapping[str, Any] | None,
    progress: ConvertProgress | None = None,
    client: Any = None,
    excluded: Sequence[str] = (),
    written: Callable[[Target, ConvertReport], None] | None = None,
    job_name: str = "convert",
    unit: str = "write unit",
    ome_upgrade: OmeUpgrade | None = None,
) -> list[ConvertReport]:
    """Write the planned ``targets`` of ``node`` (an array, or a group and its
    ``members``) at ``output`` and publish it (:func:`zarrext.jobs.outputs.run_staged`).

    ``targets`` may be a function planning them (a quantizing form scans its
    arrays): it is called once the output is known to be free, so that an existing
    output is refused before any value is read, and before anything is written.

    A group's objects but the targets' (and the ``excluded`` members': an output
    inside its source group, in one icechunk session) are copied as they are; each
    target is created and its write units copied (:func:`write_units`); the
    consolidated metadata is written again. ``written(target, report)`` is called
    as each array is done, before anything is published: an error it raises
    discards the output. ``job_name`` and ``unit`` word the messages: the note on
    an interrupted array (``"convert stopped in {path} after {done} of {total}
    write units"``), and a store Dask workers cannot reach. ``ome_upgrade``: the
    OME-Zarr metadata upgrade to make in the output (:mod:`zarrext.jobs.ome`),
    recorded in each report.
    """
    import zarr

    from zarrext.jobs.outputs import run_staged

    kept = {name: m for name, m in members.items()
            if not any(name == e or name.startswith(f"{e}/") for e in excluded)}
    if client is not None:  # refused before anything is written, as the source is
        _refuse_zip_output(output, job_name)

    def job(target_store: Any) -> list[ConvertReport]:
        from zarrext.api import create_array
        from zarrext.jobs.group_metadata import consolidate_within

        planned = list(targets() if callable(targets) else targets)
        skipped = [*(t.path for t in planned), *excluded]
        sources = (
            {t.path: source_ref(t.source, job_name) for t in planned} if client is not None
            else {}
        )
        if isinstance(node, zarr.Array):
            store, base = target_store, None
        else:
            made = zarr.open_group(target_store, mode="w", zarr_format=3)
            store, base = made.store, made.path
            _copy_as_is(node, kept, store, base, skipped)
        reports = []
        for t in planned:
            name = (f"{base}/{t.path}" if base else t.path) if t.path else None
            started = time.perf_counter()
            dst = create_array(store, name=name, overwrite=True, **t.kwargs)
            regions = unit_slices(t.kwargs["shape"], t.write_unit)
            each = None
            if progress is not None:
                each = (lambda p: lambda done, total: progress(p, done, total))(t.path)
            worst = write_units(
                t.source, dst, regions, measure=t.quantized is not None, progress=each,
                client=client,
                on_workers=(
                    (sources[t.path], output_ref(dst, t, job_name)) if client is not None
                    else None
                ),
                job_name=job_name, where=t.path, unit=unit,
            )
            if t.quantized is not None and worst > t.quantized.max_abs_error:
                raise ConversionError(
                    f"converted {t.path or '/'} exceeds max_abs_error="
                    f"{t.quantized.max_abs_error!r}: worst error read back is {worst!r}"
                )
            seconds = time.perf_counter() - started
            report = ConvertReport(
                t.path, t.describe(), _stored_bytes(t.source), _stored_bytes(dst), seconds,
                len(regions), len(regions),
                worst_error=worst if t.quantized is not None else None,
                ome_upgrade=ome_upgrade,
            )
            if written is not None:
                written(t, report)
            reports.append(report)
        if not isinstance(node, zarr.Array):
            if ome_upgrade is not None:
                from zarrext.jobs.ome import apply_upgrade

                apply_upgrade(ome_upgrade, store, base or "")
            consolidate_within(store, base or "")
            if node.metadata.zarr_format == 2 and _v2_consolidated(node):
                from zarrext.jobs.group_metadata import consolidate

                consolidate(store, base or "")
        return reports

    return run_staged(output, overwrite, output_storage_options, job)
