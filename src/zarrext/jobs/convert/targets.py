"""Planning each converted array's target, checked before anything is written.

:func:`plan_targets` turns each selected array and the :class:`~zarrext.jobs.convert.
plans.Encoding` asked for it into a :class:`~zarrext.jobs.convert.plans.Target`: the
keyword arguments of :func:`zarrext.create_array` (chunks, shards, codecs, fill value,
attributes, dimension names, decision, shard layout; a quantized array's filters
planned from a scan of its values, :func:`zarrext.jobs.convert.scanning.quantized`),
checked by creating the array's metadata in a scratch directory (zarrext's own
checks: a dtype a codec refuses, a chunk grid a layout refuses, a fill value the
filters lose).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from zarrext.api import readable
from zarrext.jobs.convert import scanning
from zarrext.jobs.convert.plans import Encoding, Target, shape_text
from zarrext.jobs.convert.reports import ConversionError, ConvertProgress
from zarrext.jobs.convert.sources import chunk_codecs, opened_store, source_parts
from zarrext.jobs.convert.units import spread, unit_slices

__all__ = ["default_compressors", "plan_targets"]

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


def _like_encoding(like: Any, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    import zarr

    from zarrext.codecs.decisions import recorded_decision

    array = like if isinstance(like, zarr.Array) else zarr.open_array(
        opened_store(like, storage_options), mode="r"
    )
    if array.metadata.zarr_format != 3:
        raise ConversionError(f"like={like}: a Zarr format 2 array has no format 3 encoding")
    inner, sharding, layout = chunk_codecs(readable(array).metadata)
    return {
        "chunks": tuple(array.chunks),
        "shards": tuple(array.shards or ()) if sharding is not None else False,
        "codecs": inner,
        "shard_layout": layout,
        "decision": recorded_decision(array.attrs.asdict(), f"array {like}"),
    }


def _target(
    src: Any,
    path: str,
    encoding: Encoding,
    storage_options: Mapping[str, Any] | None,
    sample: int | None = None,
    client: Any = None,
    scan_progress: ConvertProgress | None = None,
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
        regions = None
        if sample is not None:  # the units the dry run encodes (converting's _sampled)
            unit = tuple(shards) if shards is not False else tuple(chunks)
            regions = spread(unit_slices(tuple(src.shape), unit), sample)

        def scanned(done: int, total: int) -> None:
            if scan_progress is not None:
                scan_progress(label, done, total)

        quantized = scanning.quantized(
            src, encoding.max_abs_error, label, cover_zero=shards is not False, client=client,
            job_name="convert", regions=regions, progress=scanned,
        )
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
    inner, _, _ = chunk_codecs(probe.metadata)
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
                f"cannot convert {label}: {what} {shape_text(grid)} have {len(grid)} "
                f"dimensions and the array {len(shape)} (shape {shape_text(shape)})"
            )
    if shards is None:
        return
    for axis, (shard, chunk) in enumerate(zip(shards, chunks, strict=True)):
        if shard % chunk:
            raise ConversionError(
                f"cannot convert {label}: shards {shape_text(shards)} are not a multiple of the "
                f"chunks {shape_text(chunks)} (dimension {axis}: {shard} is not a multiple of "
                f"{chunk}); give shards that hold whole chunks, or other chunks"
            )


def plan_targets(
    arrays: Mapping[str, Any],
    encodings: Mapping[str, Encoding] | Encoding,
    *,
    output_in_place: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    sample: int | None = None,
    client: Any = None,
    scan_progress: ConvertProgress | None = None,
) -> list[Target]:
    """Each array's :class:`~zarrext.jobs.convert.plans.Target`, checked; refuses the
    first that cannot be made.

    ``arrays`` maps paths to source arrays; ``encodings`` is one encoding for all or
    one per path (a path without one gets ``Encoding()``). An encoding with
    ``max_abs_error`` has its array scanned (by its shards, or chunks; on a Dask
    ``client``'s workers when given) and its filters planned
    (:func:`zarrext.jobs.convert.scanning.quantized`), ``scan_progress(path, done,
    total)`` called as the scan's blocks finish. ``sample``: for a dry run, a
    quantized array is scanned in the ``sample`` write units it encodes only (a plan
    from them), not whole.
    """
    targets = []
    with tempfile.TemporaryDirectory(prefix="zarrext-convert-") as scratch:
        for path, src in arrays.items():
            encoding = encodings if isinstance(encodings, Encoding) else encodings.get(
                path, Encoding()
            )
            target = _target(src, path, encoding, storage_options, sample, client, scan_progress)
            targets.append(_check(target, scratch, output_in_place))
    return targets
