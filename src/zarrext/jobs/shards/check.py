"""Validate chunk and shard files and repair what an interrupted writer left behind.

:func:`check` works on any Zarr format 3 array in a local directory, sharded or
not. It reads every shard under a shared lock (so it sees no write half done)
and reports, once per store key and sorted by key, each
:class:`~zarrext.jobs.shards.check_report.Problem` with its ``kind``:

- ``truncated``: a shard file shorter than its index says it is (a file shorter
  than the index, entries that reach past the end of the file, or, for an index
  at the end, the head of an index found just before a cut end), told apart from
  ``index_checksum``: an index whose bytes do not match its checksum in a file
  of the right length; ``entry_past_end``, ``entry_overlaps_index`` and
  ``entries_overlap`` for single index entries that point where they cannot;
- ``interrupted_write``, ``torn_journal``, ``inactive_journal``,
  ``orphan_journal`` and ``orphan_quarantine``: what writers leave beside a shard;
- ``stale_temporary_file``: files that writers leave behind when killed:
  zarrext's temporary files (``*.zarrext-tmp-<pid>-*``, stale once that process
  is gone) and zarr-python's (``<key>.<hex>.partial``, stale once untouched for
  ``stale_after`` seconds);
- with ``deep=True``, ``undecodable_chunk``: every stored chunk (every inner
  chunk of every shard) that does not decode through the array's codecs
  (checksums, conditional headers, optional lengths, ...), named by its chunk
  coordinates;
- ``fill_value_lost``, under the key ``zarr.json``: a fill value that the array's
  filters (``scale_offset``, ``cast_value``, any array->array codec) do not give
  back (spec 002 asks that it survive them): missing chunks read the fill value,
  but the unwritten elements of a stored chunk read what the filters make of it.

It changes nothing unless ``repair=True``:

- an interrupted write is rolled back from its journal (:func:`zarrext.sharding.journal.recover`);
- stale temporary files and orphaned journals are deleted;
- single entries that point outside the file or overlap are marked empty (the
  chunk reads as the fill value; the problem says which chunk was dropped);
- what cannot be repaired stays in :attr:`ShardCheck.remaining`, and its
  :attr:`~zarrext.jobs.shards.check_report.Problem.advice` says what to do
  instead: a truncated shard or an index
  that fails its checksum with no journal to roll back (restore the shard from a
  copy), a chunk whose bytes do not decode (its data is gone; rewrite it or
  delete it).

This module is the driver: it opens the array, lists the keys it stores, finds
what killed writers left (:mod:`~zarrext.jobs.shards.leftovers`) and has each shard
or chunk diagnosed (:mod:`~zarrext.jobs.shards.diagnosis`), in this process for
a local directory, on threads or a Dask cluster for a store of whole objects. What
it reports is modelled in :mod:`~zarrext.jobs.shards.check_report`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zarr.core.buffer import default_buffer_prototype
from zarr.core.metadata import ArrayV3Metadata
from zarr.core.metadata.v3 import RegularChunkGridMetadata
from zarr.storage import LocalStore

from zarrext._zarr_compat import async_array_of
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.codecs.walk import walk_codecs
from zarrext.jobs.cluster import batches, concurrency, on_client, on_threads
from zarrext.jobs.progress import ProgressCallback
from zarrext.jobs.shards.check_report import REWRITE, ShardCheck
from zarrext.jobs.shards.diagnosis import (
    Decoder,
    check_chunk,
    check_shard,
    check_stored_shard,
)
from zarrext.jobs.shards.leftovers import STALE_AFTER, leftover
from zarrext.pipeline.chunk_io import local_file
from zarrext.sharding.array_shards import ArrayShards
from zarrext.sharding.geometry import ShardLayoutError
from zarrext.stores import open_job_array

__all__ = ["check", "unverifiable"]


def _verifies(codecs: Any) -> bool:
    """Whether a chain (nested codecs too) can tell damaged bytes from good ones: a
    checksum (``crc32c``, ``zstd`` with its checksum) or a ``conditional`` header."""
    from zarr.codecs import Crc32cCodec, ZstdCodec

    return any(
        isinstance(codec, ConditionalCodec | Crc32cCodec)
        or (isinstance(codec, ZstdCodec) and codec.checksum)
        for codec in walk_codecs(codecs, chains=("codecs",))
    )


def _shards_or_none(array: Any) -> ArrayShards | None:
    """The array's shards, or None when its stored objects are not shards (they are
    then its chunks, checked whole)."""
    try:
        return ArrayShards.of(array)
    except ShardLayoutError:
        return None


def unverifiable(array: Any) -> str | None:
    """Why a ``deep`` check of ``array`` cannot tell a damaged chunk that still
    decodes from a good one, or None when its chunks carry a check.

    A chunk's codecs verify it when they hold a checksum (``crc32c``, or ``zstd``
    with ``checksum``) or a ``conditional`` header (its reserved bits); without
    one, flipped bytes of an uncompressed or shuffled chunk decode to other values.
    For a sharded array the inner chunks' codecs count (the index has its own
    checksum).
    """
    metadata = array.metadata
    shards = _shards_or_none(array)
    codecs = shards.codec.codecs if shards is not None else metadata.codecs
    if _verifies(codecs):
        return None
    noun = "inner chunks" if shards is not None else "chunks"
    return (
        f"its {noun} have no checksum and no conditional header, so a damaged {noun[:-1]} "
        "that still decodes cannot be told from a good one; add a crc32c codec "
        "(compressors=[..., Crc32cCodec()]) to verify them"
    )


FILL_VALUE_ADVICE = (
    "choose a fill value the filters store exactly and copy the array with it (editing "
    "zarr.json would change what its missing chunks read)"
)
"""What to do about a fill value the filters do not give back."""


def _fill_value_finding(metadata: ArrayV3Metadata) -> ShardCheck | None:
    """The ``zarr.json`` finding of an array whose fill value its filters lose, or None."""
    from zarrext.codecs.filter_roundtrip import array_filters, fill_value_change

    problem = fill_value_change(
        array_filters(metadata.codecs), metadata.data_type, metadata.fill_value,
        ndim=len(metadata.shape),
    )
    if problem is None:
        return None
    finding = ShardCheck("zarr.json")
    finding.problem("fill_value_lost", problem, advice=FILL_VALUE_ADVICE)
    return finding


def _key_order(key: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key of a store key: numbers as numbers (``c/2`` before ``c/10``)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[/.]", key))


def _object_shape(metadata: ArrayV3Metadata, shards: ArrayShards | None) -> tuple[int, ...]:
    """The shape one stored object (a shard, else a chunk) covers."""
    if shards is not None:
        return tuple(shards.stored_spec.shape)
    if isinstance(metadata.chunk_grid, RegularChunkGridMetadata):
        return tuple(metadata.chunk_grid.chunk_shape)
    raise ShardLayoutError("zarrext check needs a regular chunk grid")


def _stored_keys(array: Any, per_object: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
    import itertools

    metadata = array.metadata
    grid = tuple(-(-s // c) for s, c in zip(metadata.shape, per_object, strict=True))
    return [
        (metadata.encode_chunk_key(c), c) for c in itertools.product(*(range(g) for g in grid))
    ]


def check(
    array: Any,
    *,
    repair: bool = False,
    deep: bool = False,
    stale_after: float = STALE_AFTER,
    client: Any = None,
    progress: ProgressCallback | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[ShardCheck]:
    """Validate the stored chunks (or shards) of an array.

    Parameters
    ----------
    array : zarr.Array, str or StoreLike
        A Zarr format 3 array (or its path or URL, opened with ``storage_options``;
        for writing with ``repair``), sharded or not, in a local directory (everything
        below) or a store of whole objects (each object read once and parsed, or
        decoded with ``deep``; nothing to repair there).
    repair : bool
        Fix what can be fixed (see the module docstring). Without it nothing is
        changed.
    deep : bool
        Also decode every stored chunk (every inner chunk of every shard) and
        report each one that fails. A chunk that decodes is verified only if its
        codecs carry a checksum or a conditional header: :func:`unverifiable`
        says when they do not.
    stale_after : float
        Age in seconds after which a zarr-python ``*.partial`` file is reported
        (and removed by ``repair``): younger ones may belong to a live writer.
    client : dask.distributed.Client, optional
        On a store of whole objects: check on this Dask cluster, one task per
        batch of objects, each reopening the store from its description
        (:mod:`zarrext.jobs.store_refs`). A local directory is checked in this process
        (repairs take its locks).
    progress : callable, optional
        ``progress(done, total)`` stored objects (chunks or shards) checked,
        before the first and as they (or a cluster's tasks) finish.

    Returns
    -------
    list of ShardCheck
        One entry per store key with problems, each key once, sorted by key
        (numbers as numbers); an empty list means everything validates.

    Raises
    ------
    ShardLayoutError
        When the array is not a Zarr format 3 array in a local directory.
    """
    array = open_job_array(array, writes="check --repair" if repair else None,
                           storage_options=storage_options)
    metadata = array.metadata
    if not isinstance(metadata, ArrayV3Metadata):
        raise ShardLayoutError("zarrext check works on Zarr format 3 arrays")
    store_path = async_array_of(array).store_path
    fill_finding = _fill_value_finding(metadata)
    if not isinstance(store_path.store, LocalStore):
        if repair:
            raise ShardLayoutError(
                f"check --repair works on local directories; {type(store_path.store).__name__} "
                "has no journals or leftovers to repair (run check without --repair to see "
                "what is wrong; rewrite or delete a damaged object)"
            )
        found_objects = _check_objects(array, deep=deep, client=client, progress=progress)
        if fill_finding is not None:
            found_objects.append(fill_finding)
        return sorted(found_objects, key=lambda f: _key_order(f.key))
    directory = local_file(store_path)
    assert directory is not None  # a LocalStore's
    shards = _shards_or_none(array)
    found: dict[str, ShardCheck] = {}
    if fill_finding is not None:
        found[fill_finding.key] = fill_finding

    def entry(key: str) -> ShardCheck:
        return found.setdefault(key, ShardCheck(key))

    # Files killed writers left behind, reported under the key they were meant for.
    now = time.time()
    for dirpath, _, names in os.walk(directory) if directory.is_dir() else ():
        for name in names:
            path = Path(dirpath) / name
            left = leftover(path, now, stale_after)
            if left is None:
                continue
            target, text = left
            key = (path.parent / target).relative_to(directory).as_posix()
            entry(key).problem(
                "stale_temporary_file", text, fix=f"deleted {name}", repaired=repair
            )
            if repair:
                path.unlink(missing_ok=True)

    per_object = _object_shape(metadata, shards)
    decoder = Decoder(array, shards) if deep else None
    stored = list(_stored_keys(array, per_object))
    if progress is not None:
        progress(0, len(stored))
    for done, (key, coords) in enumerate(stored, 1):
        result = entry(key)
        if shards is not None and not shards.bare:
            path = directory / key
            if path.is_file():
                check_stored_shard(shards, coords, path.read_bytes(), result, decoder)
        elif shards is not None:
            check_shard(shards, key, coords, result, repair, decoder)
        elif decoder is not None:
            check_chunk(directory, key, coords, result, decoder)
        if progress is not None:
            progress(done, len(stored))
    return sorted((f for f in found.values() if f.details), key=lambda f: _key_order(f.key))


def _check_objects(
    array: Any, *, deep: bool, client: Any = None, progress: ProgressCallback | None = None
) -> list[ShardCheck]:
    """:func:`check` for a store of whole objects (object store, zip, memory).

    Each stored object is read whole, once: a shard's index must decode and its
    entries stay inside the object and apart; with ``deep``, every chunk must
    decode. zarr's ``async.concurrency`` objects are read at once per process
    (each held whole while it is checked), on this machine's threads or, with a
    ``client``, in Dask tasks that reopen the store from its description.
    """
    from zarrext.stores import list_keys

    metadata = array.metadata
    store_path = async_array_of(array).store_path
    shards = _shards_or_none(array)
    per_object = _object_shape(metadata, shards)
    if shards is None and not deep:
        return []  # nothing to parse in a plain chunk without decoding it
    prefix = f"{store_path.path}/" if store_path.path else ""
    stored = set(list_keys(store_path.store, prefix))
    items = [(k, c) for k, c in _stored_keys(array, per_object) if prefix + k in stored]
    threads = concurrency()
    found: list[ShardCheck] = []
    done = 0
    if progress is not None:
        progress(0, len(items))
    if client is not None:
        from zarrext.jobs.store_refs import array_ref

        for checked, results in on_client(
            client, _check_on_worker, batches(items), array_ref(array, "r"), deep,
            threads, what="check on a Dask cluster",
        ):
            found.extend(results)
            done += checked
            if progress is not None:
                progress(done, len(items))
    else:
        checker = _ObjectChecker(array, shards, deep)
        for result in on_threads(checker.check, items, threads):
            done += 1
            if result is not None:
                found.append(result)
            if progress is not None:
                progress(done, len(items))
    return sorted(found, key=lambda f: _key_order(f.key))


class _ObjectChecker:
    """Checks stored objects of one array, one whole object at a time."""

    def __init__(self, array: Any, shards: ArrayShards | None, deep: bool) -> None:
        self.store_path = async_array_of(array).store_path
        self.shards = shards
        self.decoder = Decoder(array, shards) if deep else None

    def check(self, item: tuple[str, tuple[int, ...]]) -> ShardCheck | None:
        """The problems of the object ``(key, coords)``, or None (none, or deleted)."""
        from zarr.core.sync import sync

        key, coords = item
        buffer = sync((self.store_path / key).get(prototype=default_buffer_prototype()))
        if buffer is None:  # deleted since listed
            return None
        data, result = buffer.to_bytes(), ShardCheck(key)
        if self.shards is None:
            assert self.decoder is not None
            why = self.decoder.problem(coords, data)
            if why is not None:
                result.problem(
                    "undecodable_chunk", f"chunk {coords} does not decode: {why}", advice=REWRITE
                )
        else:
            check_stored_shard(self.shards, coords, data, result, self.decoder)
        return result if result.details else None


def _check_on_worker(
    ref: Any, deep: bool, threads: int, items: list[tuple[str, tuple[int, ...]]]
) -> tuple[int, list[ShardCheck]]:
    """One Dask task: check the objects ``items`` of the array ``ref`` describes."""
    array = ref.open()
    shards = _shards_or_none(array)
    checker = _ObjectChecker(array, shards, deep)
    results = on_threads(checker.check, items, min(threads, len(items)))
    return len(items), [r for r in results if r is not None]
