"""Rewrite whole shards: densely (:func:`compact`) or into fixed slots (:func:`expand`).

Each shard is rewritten under its lock into a temporary file beside it, which
then replaces it with ``os.replace``: readers see the old shard or the new one,
never a mix, and a crash leaves the old shard (plus a temporary file that
``zarrext check --repair`` deletes). Chunk bytes are copied file to file with
``os.copy_file_range`` (no decoding: the shard's chunks are moved, not re-encoded),
adjacent chunks in one call. Shards are rewritten in parallel.

A shard whose index ends it compacts within its own file when no byte it still
needs is overwritten (:func:`_compact_in_place`): a fixed-slot shard of chunks
that fill their slots, for one, where only the chunks updated into spare slots
move home. Truncating the file publishes the new index; until then the old one
ends the file and describes intact chunks, so a crash leaves the old shard here too.

On an object store (no locks, no rename, no positioned writes) :func:`compact`
reads each shard object whole, packs its chunks in memory and writes the object
back whole: a reader gets the old object or the new one. Nothing coordinates
with other writers there (zarr-python's writers take no locks either): compact
an object store while no one writes to it. :func:`expand` is refused there, as
fixed slots only serve in-place writes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zarrext._zarr_compat import async_array_of, inner_chunk_spec
from zarrext.jobs.cluster import batches, concurrency, on_client, on_threads
from zarrext.jobs.progress import ProgressCallback
from zarrext.jobs.store_refs import ArrayRef, array_ref
from zarrext.sharding import faults
from zarrext.sharding.allocator import occupied
from zarrext.sharding.array_shards import ArrayShards
from zarrext.sharding.geometry import EMPTY, ShardGeometry, ShardLayoutError
from zarrext.sharding.journal import discard_sidecars, locked_shard, read_quarantine, temp_path
from zarrext.sharding.state import ShardState, encode_index, load_state, state_of_bytes
from zarrext.stores import open_job_array

__all__ = ["READER_NOTE", "RewriteReport", "compact", "expand"]


@dataclass(frozen=True)
class RewriteReport:
    """What a rewrite did.

    Attributes
    ----------
    shards : int
        Shards processed, those left as they were included.
    bytes_before, bytes_after : int
        Total size of those shard files before and after.
    unchanged : int
        Shards already in the wanted form (dense, or every chunk in its slot): left
        untouched, not even rewritten to the same bytes (same file, same mtime).
    """

    shards: int
    bytes_before: int
    bytes_after: int
    unchanged: int = 0

    @property
    def rewritten(self) -> int:
        """Shards the run rewrote."""
        return self.shards - self.unchanged


def _copy_range(src: int, dst: int, length: int, src_off: int, dst_off: int) -> None:
    while length > 0:
        try:
            n = os.copy_file_range(src, dst, length, src_off, dst_off)
        except OSError:  # e.g. a file system without it: copy through memory
            n = os.pwrite(dst, os.pread(src, min(length, 1 << 24), src_off), dst_off)
        if n <= 0:
            raise OSError(f"short copy at byte {src_off}")
        length, src_off, dst_off = length - n, src_off + n, dst_off + n


def _copy_runs(src: int, dst: int, moves: list[tuple[int, int, int]]) -> None:
    """Copy (src offset, dst offset, length) moves, merging adjacent ones."""
    run: list[int] | None = None
    for s, d, n in sorted(moves, key=lambda m: m[1]):
        if run is not None and run[0] + run[2] == s and run[1] + run[2] == d:
            run[2] += n
            continue
        if run is not None:
            _copy_range(src, dst, run[2], run[0], run[1])
        run = [s, d, n]
    if run is not None:
        _copy_range(src, dst, run[2], run[0], run[1])


def _plan(
    state: ShardState, geometry: ShardGeometry, mode: str
) -> tuple[np.ndarray, int]:
    """New offsets table and data end for a dense or fixed-slot shard."""
    table = np.full_like(state.table, EMPTY)
    present = np.flatnonzero(state.present())
    lengths = state.table[present, 1].astype(np.int64)
    if mode == "dense":
        offsets = geometry.data_start + np.concatenate(([0], np.cumsum(lengths)[:-1]))
        end = geometry.data_start + int(lengths.sum())
    else:
        slot = geometry.slot_size
        assert slot is not None
        offsets = geometry.data_start + present * slot
        end = geometry.slots_end
        for i in np.flatnonzero(lengths > slot):  # too big for its slot: after the slots
            offsets[i] = end
            end += int(lengths[i])
    if present.size:
        table[present, 0] = offsets.astype(np.uint64)
        table[present, 1] = lengths.astype(np.uint64)
    return table, end


def _in_form(
    state: ShardState, geometry: ShardGeometry, mode: str, table: np.ndarray, end: int
) -> bool:
    """Whether the shard already is what the rewrite would make of it.

    Dense: its chunks fill the bytes between the index and the data end back to
    back, in any order (zarr-python writes them in Morton order, the planned
    table in C order: the same density, so no reason to rewrite), and the index
    lies where a dense shard has it. Fixed-slot: every chunk where the plan puts it.
    """
    index_size = geometry.index_size
    index_at_end = geometry.index_location == "end"
    present = np.flatnonzero(state.present())
    if mode == "dense":
        starts = state.table[present, 0].astype(np.int64)
        lengths = state.table[present, 1].astype(np.int64)
        order = np.argsort(starts, kind="stable")
        starts, lengths = starts[order], lengths[order]
        ends = starts + lengths
        data_end = geometry.data_start + int(lengths.sum())
        back_to_back = bool(
            starts.size == 0
            or (starts[0] == geometry.data_start and np.array_equal(starts[1:], ends[:-1]))
        )
        index_offset = data_end if index_at_end else 0
        return (
            back_to_back
            and state.index_offset == index_offset
            and state.size == data_end + (index_size if index_at_end else 0)
        )
    return (
        np.array_equal(state.table, table)
        and state.index_offset == (end if index_at_end else 0)
        and state.size == end + (index_size if index_at_end else 0)
    )


def _packed(
    data: bytes, shards: ArrayShards, key: str, mode: str
) -> bytes:
    """A whole shard held in memory, rewritten (dense or fixed-slot) in memory."""
    geometry = shards.geometry
    state = state_of_bytes(data, shards.codec, geometry, key)
    table, end = _plan(state, geometry, mode)
    index = encode_index(shards.codec, geometry, table)
    out = bytearray(end + (len(index) if geometry.index_location == "end" else 0))
    source = memoryview(data)
    for flat in np.flatnonzero(state.present()).tolist():
        start, length = int(state.table[flat, 0]), int(state.table[flat, 1])
        dest = int(table[flat, 0])
        out[dest : dest + length] = source[start : start + length]
    where = 0 if geometry.index_location == "start" else end
    out[where : where + len(index)] = index
    return bytes(out)


def packed_shard(
    codec: Any, geometry: ShardGeometry, datas: Mapping[int, bytes]
) -> bytes:
    """A dense shard holding ``datas`` (inner chunk's flat index -> encoded bytes),
    built in memory: chunks back to back in flat order, then (or before) the index."""
    table = np.full((geometry.n_chunks, 2), EMPTY, dtype="<u8")
    offset = geometry.data_start
    flats = sorted(datas)
    for flat in flats:
        table[flat] = (offset, len(datas[flat]))
        offset += len(datas[flat])
    index = encode_index(codec, geometry, table)
    out = bytearray(offset + (len(index) if geometry.index_location == "end" else 0))
    for flat in flats:
        start = int(table[flat, 0])
        out[start : start + len(datas[flat])] = datas[flat]
    where = 0 if geometry.index_location == "start" else offset
    out[where : where + len(index)] = index
    return bytes(out)


def _rewrite_object(
    array: Any, shards: ArrayShards, key: str
) -> tuple[int, int, bool] | None:
    """Compact one shard object of a store that takes whole objects only:
    (size before, size after, rewritten), or None when it is gone."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    store_path = async_array_of(array).store_path / key
    buffer = sync(store_path.get(prototype=default_buffer_prototype()))
    if buffer is None:
        return None
    data = buffer.to_bytes()
    geometry = shards.geometry
    state = state_of_bytes(data, shards.codec, geometry, key)
    if _in_form(state, geometry, "dense", *_plan(state, geometry, "dense")):
        return len(data), len(data), False  # already dense: the object stays as it is
    packed = _packed(data, shards, key, "dense")
    sync(store_path.set(default_buffer_prototype().buffer.from_bytes(packed)))
    return len(data), len(packed), True


def _compact_in_place(
    fd: int,
    path: Path,
    state: ShardState,
    moves: list[tuple[int, int, int]],
    end: int,
    index: bytes,
    geometry: ShardGeometry,
) -> bool:
    """Compact a shard whose index ends it within its own file, when that
    overwrites nothing live; False (nothing done) otherwise.

    A fixed-slot shard of chunks that fill their slots compacts to its slots: only
    chunks in spare slots move home (unused places of their own), the new index
    goes after the last slot, and truncating the file there publishes both. Until
    then the old index ends the file and every byte it references is intact, so a
    crash leaves the old shard; afterwards it is the new one. This copies a
    fraction of the shard and frees only its spare area, where a rewrite into a
    new file copies every chunk and frees the whole old file.
    """
    if geometry.index_location != "end":
        return False  # the index is rewritten where the old one lies: not atomic
    moving = [(s, d, n) for s, d, n in moves if s != d and n]
    if not moving and state.size == end + len(index) and state.index_bytes == index:
        return True  # already dense: nothing to write
    # Nothing the old index references may be written over before the truncation,
    # nor a quarantined range (a reader that takes no lock may still read there).
    held = [(lo, hi) for lo, hi, _ in read_quarantine(path) or ()]
    busy = occupied(state.table, state.index_offset, len(state.index_bytes), held)
    targets = [(d, d + n) for _, d, n in moving] + [(end, end + len(index))]
    if any(busy.overlaps(lo, hi) for lo, hi in targets):
        return False
    _copy_runs(fd, fd, moving)
    if faults.fault("compact-data"):
        faults.die()
    os.pwrite(fd, index, end)
    if faults.fault("compact-index"):
        faults.die()
    os.ftruncate(fd, end + len(index))  # publishes the new index: the file's end moves
    return True


def _rewrite(shards: ArrayShards, key: str, mode: str) -> tuple[int, int, bool] | None:
    """Rewrite one shard file under its lock: (size before, size after, rewritten),
    or None when it is gone."""
    path = shards.path(key)
    geometry = shards.geometry
    with locked_shard(path) as fd:
        if fd is None:
            return None
        state = load_state(fd, shards.codec, geometry, key)
        table, end = _plan(state, geometry, mode)
        if _in_form(state, geometry, mode, table, end):
            return state.size, state.size, False  # nothing to do: the file stays as it is
        index = encode_index(shards.codec, geometry, table)
        total = end + (len(index) if geometry.index_location == "end" else 0)
        moves = [
            (int(state.table[f, 0]), int(table[f, 0]), int(table[f, 1]))
            for f in np.flatnonzero(state.present())
        ]
        if mode == "dense" and _compact_in_place(fd, path, state, moves, end, index, geometry):
            return state.size, total, True
        tmp = temp_path(path)
        out = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(out, total)
            _copy_runs(fd, out, moves)
            os.pwrite(out, index, 0 if geometry.index_location == "start" else end)
        except BaseException:
            os.close(out)
            tmp.unlink(missing_ok=True)
            raise
        os.close(out)
        # Before the swap: once the new file is in place a writer may lock it and
        # start a journal of its own under the same name.
        discard_sidecars(path)
        # Still holding the old file's lock: writers waiting on it see a new inode
        # after the replace and reopen.
        os.replace(tmp, path)
        return state.size, total, True


def _run(
    array: Any,
    mode: str,
    *,
    workers: int | None,
    progress: ProgressCallback | None,
    client: Any = None,
    storage_options: Mapping[str, Any] | None = None,
) -> RewriteReport:
    array = open_job_array(array, writes="compact" if mode == "dense" else "expand",
                           storage_options=storage_options)
    shards = ArrayShards.of(array)
    refusal = rewrite_refusal(shards, mode)
    if refusal is not None:
        raise ShardLayoutError(f"array {array.path or '/'!r}: {refusal}")
    if shards.directory is None and mode != "dense":
        store = type(async_array_of(array).store_path.store).__name__
        raise ShardLayoutError(
            f"expand makes room for in-place writes, which {store} cannot do "
            "(only local directories can); object stores keep dense shards"
        )
    if mode == "fixed-slot" and shards.geometry.slot_size is None:
        from zarrext.sharding.bounds import slot_bound

        slot_bound(shards.codec.codecs, inner_chunk_spec(shards.codec, shards.shard_spec))
    if shards.directory is None:
        from zarrext.stores import list_keys

        store_path = async_array_of(array).store_path
        prefix = f"{store_path.path}/" if store_path.path else ""
        stored = set(list_keys(store_path.store, prefix))
        keys = [k for k in shards.keys if prefix + k in stored]
    else:
        keys = [k for k in shards.keys if shards.path(k).exists()]
    before = after = done = finished = unchanged = 0
    if workers is None:
        # local files: bounded by the disk; an object store: by request latency
        local = min(8, (os.cpu_count() or 1) * 2)
        workers = local if shards.directory is not None else concurrency()

    def count(result: tuple[int, int, bool] | None) -> None:
        nonlocal before, after, done, finished, unchanged
        if result is not None:
            before, after, done = before + result[0], after + result[1], done + 1
            unchanged += not result[2]
        finished += 1

    if progress is not None:
        progress(0, len(keys))
    # Results come back in this thread, so ``progress`` needs no lock.
    if client is not None:
        ref = array_ref(array)
        for results in on_client(
            client, _compact_on_worker, batches(keys), ref, mode, workers,
            what="compact on a Dask cluster",
        ):
            for result in results:
                count(result)
            if progress is not None:
                progress(finished, len(keys))
    else:
        for result in on_threads(lambda k: _rewrite_one(array, shards, k, mode), keys,
                                         workers):
            count(result)
            if progress is not None:
                progress(finished, len(keys))
    return RewriteReport(done, before, after, unchanged)


def _rewrite_one(
    array: Any, shards: ArrayShards, key: str, mode: str
) -> tuple[int, int, bool] | None:
    """Rewrite one shard: a whole object, or a file under its lock."""
    if shards.directory is None:
        return _rewrite_object(array, shards, key)
    return _rewrite(shards, key, mode)


def _compact_on_worker(
    ref: ArrayRef, mode: str, threads: int, keys: list[str]
) -> list[tuple[int, int, bool] | None]:
    """One Dask task: rewrite the shards ``keys`` of the array ``ref`` describes.

    Idempotent: a shard rewritten again comes out the same, so a task rerun after
    its worker died finishes the job.
    """
    array = ref.open()
    shards = ArrayShards.of(array)
    return list(on_threads(
        lambda k: _rewrite_one(array, shards, k, mode), keys, min(threads, len(keys))
    ))


def rewrite_refusal(shards: ArrayShards, mode: str) -> str | None:
    """Why ``compact`` (``mode="dense"``) or ``expand`` (``"fixed-slot"``) leaves an
    array alone, or None.

    Codecs after the sharding codec encode each shard whole: zarr writes such
    shards whole and dense every time, so there are no stale bytes to compact,
    and no in-place layout can write them (:func:`zarrext.sharding.layout_refusal`).
    """
    if shards.bare:
        return None
    what = (
        "nothing to compact: zarr rewrites each such shard whole and dense on every write"
        if mode == "dense"
        else "no in-place layout can write such shards (create the array with "
        "compressors=None, or with the compressors inside the ShardingCodec)"
    )
    return f"{shards.chain.outer_names()} after sharding_indexed encode each shard whole; {what}"


READER_NOTE = (
    "readers through zarrext.open_array stay consistent during the rewrite; zarr-python "
    "and tensorstore readers reading the array meanwhile may read an index from the old "
    "shard file and chunk bytes from the new one, and get another chunk's values"
)
"""What a ``compact``/``expand`` run means for readers (the CLI prints it)."""


def compact(
    array: Any,
    *,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    client: Any = None,
    storage_options: Mapping[str, Any] | None = None,
) -> RewriteReport:
    """Rewrite every shard of ``array`` densely: chunks back to back in C order.

    Takes each shard's writer lock (rolling back a killed writer's transaction
    first) and swaps the new file in with ``os.replace``: no write is lost, and
    readers through :func:`zarrext.open_array` (one open, a shared lock) see the
    old shard or the new one. Plain zarr-python or tensorstore readers read the
    index and the chunks in separate opens: one racing the swap may take the
    index from the old file and the bytes from the new one, and get another
    chunk's values (a ``crc32c`` does not catch it). Compact while no plain
    reader reads (:data:`READER_NOTE`).

    Parameters
    ----------
    array : zarr.Array, str or StoreLike
        A sharded array in a local directory or an object store; a path or URL
        (opened with ``storage_options``) or a store is opened for writing.
    workers : int, optional
        Shards rewritten at once, per process (threads). Default: up to 8 on a
        local directory; zarr's ``async.concurrency`` on an object store, where
        each shard is held whole in memory (twice: as read and as packed), so a
        process holds at most ``2 x workers`` shards.
    progress : callable, optional
        ``progress(done, total)``, called before the first shard and after each one
        (after each task on a cluster; ``zarrext.cli.render.progress_bar`` draws it).
    client : dask.distributed.Client, optional
        Run on this Dask cluster: one task per batch of shards (never one shard in
        two tasks), each reopening the store from its description
        (:mod:`zarrext.jobs.store_refs`). A task rerun after its worker died rewrites
        its shards again, to the same bytes.

    Returns
    -------
    RewriteReport
    """
    return _run(array, "dense", workers=workers, progress=progress, client=client,
                storage_options=storage_options)


def expand(
    array: Any,
    *,
    workers: int | None = None,
    progress: ProgressCallback | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> RewriteReport:
    """Rewrite every shard of ``array`` (an array, path or URL, as for :func:`compact`)
    into fixed slots, ready for in-place writes.

    Raises
    ------
    ShardLayoutError
        When the inner codecs bound no slot size.
    """
    return _run(array, "fixed-slot", workers=workers, progress=progress,
                storage_options=storage_options)
