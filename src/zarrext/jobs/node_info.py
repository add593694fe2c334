"""What ``zarrext info`` reports of a store: the tree of its groups and arrays, per array
its shape, data type, chunks, shards, codecs and bytes."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
import zarr
from zarr.core.metadata import ArrayV3Metadata

from zarrext.codecs.decisions import decision_record
from zarrext.errors import naming_codec_holder, naming_malformed_metadata
from zarrext.jobs.inspection import ArrayProgress, codec_chain, inventory, storage_block

__all__ = ["node_info"]


def _allocated_bytes(array: zarr.Array, keys: Iterator[str]) -> int | None:
    """Bytes the file system allocates for the objects ``keys`` of a local array
    (``st_blocks * 512``): less than their sizes where fixed slots leave holes
    (``zarrext compact`` reclaims the difference). None for other stores.

    ``keys`` are store keys (:attr:`ArrayInventory.object_sizes`'), which hold the
    array's path already: an array inside a group is not looked for under its path
    twice.
    """
    import os
    from pathlib import Path

    from zarr.storage import LocalStore

    store = array.store_path.store
    if not isinstance(store, LocalStore):
        return None
    root = Path(store.root)
    total = 0
    for key in keys:
        try:
            total += os.stat(root / key).st_blocks * 512
        except FileNotFoundError:  # deleted since listed: nothing allocated
            continue
    return total


def _json_value(value: Any) -> Any:
    """A fill value (numpy scalar, NaN, bytes...) as JSON can carry it."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, complex):
        return [value.real, value.imag]
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


def _quantize_info(metadata: ArrayV3Metadata) -> dict[str, Any] | None:
    """What a quantized array stores (:meth:`StorableValues.describe`), None if it
    quantizes nothing."""
    from zarrext.codecs.quantized_writes import StorableValues

    storable = StorableValues.of_metadata(metadata)
    return None if storable is None else storable.describe()


def node_info(
    node: zarr.Array | zarr.Group, *, progress: ArrayProgress | None = None
) -> dict[str, Any]:
    """What ``zarrext info`` shows: the tree of a store with per-array metadata and bytes.

    Returns a JSON-ready dict: ``{"path", "type", "attributes", "stored_bytes", ...}``,
    for an array also shape, dtype, chunks, shards, codecs, fill_value,
    dimension_names, decision (the one :func:`zarrext.create_array` recorded in
    the attributes, ``None`` if none) and quantize (for an array quantized by
    ``scale_offset`` + ``cast_value``: the integer type, the range it stores, the
    reserved codes and the plan recorded in the attributes, its range, bound and
    headroom; ``None`` otherwise), for a group ``members`` (sorted by name) and
    ``arrays`` (count). Bytes are counted as :class:`ArrayInventory` says, one way
    for every command: ``stored_bytes`` the encoded chunks' bytes
    (:attr:`ArrayInventory.stored_bytes`), ``object_bytes`` the objects' sizes
    (:attr:`ArrayInventory.object_bytes`), each summed over its arrays for a group;
    ``allocated_bytes`` (arrays only) what a local file system allocates for the
    objects, None elsewhere; ``damaged`` (arrays only) the shards whose index does
    not decode (their chunks are not counted: ``zarrext check`` names them);
    ``stored_objects`` (arrays only) how many of the grid's chunk (shard) objects are
    stored, the others reading as the fill value.

    The objects' sizes come from one listing of the store where it lists sizes (else
    each is asked of the store); of a shard only the index is read.
    ``progress(path, done, total)``, if given, is called with each array's path
    and its stored objects read so far, before the first and after each batch.
    """
    attributes = dict(node.attrs)
    if isinstance(node, zarr.Array):
        metadata = node.metadata
        if not isinstance(metadata, ArrayV3Metadata):
            raise ValueError(f"array {node.path!r} is not a Zarr format 3 array")
        outer, sharding = storage_block(metadata)
        stored = inventory(  # totals only: of a shard, only its index is read
            node, read_masks=False, list_chunks=False, on_damage="mark",
            progress=None if progress is None else functools.partial(progress, node.path or "/"),
        )
        return {
            "path": node.path or "/",
            "type": "array",
            "shape": list(metadata.shape),
            "dtype": metadata.data_type.to_json(zarr_format=3),
            "chunks": list(sharding.chunk_shape if sharding is not None else outer),
            "shards": list(outer) if sharding is not None else None,
            "codecs": codec_chain(metadata.codecs),
            "fill_value": _json_value(metadata.fill_value),
            "dimension_names": (
                list(metadata.dimension_names) if metadata.dimension_names else None
            ),
            "attributes": attributes,
            # recorded by zarrext.create_array, used by zarrext.open_array
            "decision": decision_record(attributes),
            # a quantized array: what it stores, and the plan its attributes record
            "quantize": _quantize_info(metadata),
            "stored_bytes": stored.stored_bytes,
            "object_bytes": stored.object_bytes,
            # local files only: holes in fixed slots make it less than object_bytes
            "allocated_bytes": _allocated_bytes(node, iter(stored.object_sizes)),
            "damaged": len(stored.damaged),
            # the chunk (shard) objects of the grid that are stored; the rest read as fill
            "stored_objects": stored.store_keys,
        }
    with naming_codec_holder(group=node), \
            naming_malformed_metadata(node.store, node.store_path.path):
        listed = sorted(node.members(), key=lambda m: m[0])
    members = [node_info(member, progress=progress) for _, member in listed]
    return {
        "path": node.path or "/",
        "type": "group",
        "attributes": attributes,
        "stored_bytes": sum(m["stored_bytes"] for m in members),
        "object_bytes": sum(m["object_bytes"] for m in members),
        "arrays": sum(1 if m["type"] == "array" else m["arrays"] for m in members),
        "members": members,
    }
