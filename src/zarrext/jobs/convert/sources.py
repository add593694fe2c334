"""Opening a conversion's source, and what its arrays give their copies.

:func:`open_source` opens the array or group at a path, URL or store, read-only
(:func:`zarrext.api.readable` then reads its arrays through zarrext's pipeline);
:func:`source_parts` is what a source array gives its copy
(filters, serializer, attributes, dimension names), and :func:`chunk_codecs` the
codecs inside its chunks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

__all__ = [
    "V2_METADATA",
    "chunk_codecs",
    "open_source",
    "opened_store",
    "source_parts",
]

V2_METADATA = (".zarray", ".zattrs", ".zgroup", ".zmetadata")
"""The names of format 2 metadata objects (not chunks)."""


def chunk_codecs(metadata: Any) -> tuple[list[Any], Any, Any]:
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
    inner, sharding, _ = chunk_codecs(src.metadata)
    outer = (
        [c for c in src.metadata.codecs if isinstance(c, ArrayArrayCodec)]
        if sharding is not None else []  # without shards, the inner codecs are these
    )
    filters = outer + [c for c in inner if isinstance(c, ArrayArrayCodec)]
    serializer = next((c for c in inner if isinstance(c, ArrayBytesCodec)), "auto")
    return filters, serializer, attributes, dims
