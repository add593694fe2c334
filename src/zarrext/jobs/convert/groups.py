"""A converted group's members: selected, and the rest copied as they are.

:func:`group_members` lists a group's arrays and groups at any depth,
:func:`chosen_arrays` the arrays selected for conversion; :func:`copy_as_is` copies
every other object of the group into the output, a format 2 group's metadata
migrated to format 3 (zarr's ``migrate_to_v3``; variable-length strings and bytes,
and xarray's dimension names and fill values, as the converted arrays get them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from zarrext.jobs import cluster
from zarrext.jobs.convert.reports import ArraySelectionError
from zarrext.jobs.convert.sources import V2_METADATA

__all__ = ["chosen_arrays", "copy_as_is", "group_members", "v2_consolidated"]

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


def chosen_arrays(members: Mapping[str, Any], names: Sequence[str] | None, where: str) -> list[str]:
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


def copy_as_is(group: Any, members: Mapping[str, Any], store: Any, base: str,
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
    keys = [k for k in keys if k.rsplit("/", 1)[-1] not in V2_METADATA]
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


def v2_consolidated(group: Any) -> bool:
    """Whether a format 2 group holds consolidated metadata (``.zmetadata``)."""
    from zarr.core.sync import sync

    path = group.store_path.path
    return bool(sync(group.store.exists(f"{path}/.zmetadata" if path else ".zmetadata")))
