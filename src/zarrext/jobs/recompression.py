"""Compress later: rewrite every stored chunk with freshly decided conditional masks.

The spec's "write fast, compress later" workflow. Only chunks that are stored are
touched; ``zarr.json`` is never written. Work is split by store object (a chunk,
or a whole shard), run on a thread pool by default or on a Dask cluster when a
``dask.distributed`` client is given.

On a local directory store each object is re-encoded under the writers' lock:

- a shard goes through :func:`zarrext.sharding.transcode.transcode_shard`: the
  same ``flock`` as zarrext's in-place writers, a killed writer's transaction
  rolled back first, index and bytes read under the lock, the layout kept
  (a fixed-slot shard stays fixed-slot), one atomic ``os.replace``;
- an unsharded chunk file is locked (``flock``), read, re-encoded into a
  temporary file named ``<chunk>.zarrext-tmp-<pid>-<id>`` and swapped in with
  ``os.replace`` only if the chunk file is still the one that was read. A killed
  job leaves at most such temporary files, which ``zarrext check --repair``
  removes. zarr-python writers of unsharded chunks take no lock: a write that
  replaces the chunk between that last check and the swap (microseconds) is lost.

On a store of whole objects (an object store, a remote file system, memory) each
object is read once, its chunks re-encoded in memory, and written back once, with no
lock; sizes and masks for the report come from those same bytes. Arrays with codecs
after ``sharding_indexed`` are rewritten through zarr-python (read, then write back)
and measured by an inventory before and after.

Memory: a process holds at most ``zarr.config["async.concurrency"]`` objects at once
(:func:`zarrext.jobs.cluster.concurrency`), each as its stored bytes, its re-encoded bytes
and one decoded chunk: about ``concurrency x (2 x object size + chunk size)``.
On a Dask cluster that bound holds per worker thread.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import zarr
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.metadata import ArrayV3Metadata
from zarr.core.sync import sync

from zarrext._zarr_compat import async_array_of, inner_chunk_spec, inner_chunk_transform
from zarrext.api import with_runtime
from zarrext.codecs.chain import CodecChain
from zarrext.codecs.chunk_context import chunk_index
from zarrext.codecs.decisions import DecisionLike, format_mask
from zarrext.errors import ChunkDecodeError, DamagedChunksError, naming_chunk
from zarrext.jobs import cluster
from zarrext.jobs.inspection import (
    ConditionalPlacement,
    conditional_placement,
    inventory,
    storage_block,
    stored_chunk_keys,
    stored_mask,
)
from zarrext.jobs.progress import ProgressLike, progress_callback
from zarrext.jobs.shards.compact import packed_shard
from zarrext.jobs.store_refs import ArrayRef, array_ref
from zarrext.pipeline.chunk_io import local_file
from zarrext.sharding.array_shards import geometry_of, stored_spec_of
from zarrext.sharding.journal import temp_path
from zarrext.sharding.state import ShardCorruptError, state_of_bytes
from zarrext.sharding.transcode import transcode_shard

__all__ = ["RecompressReport", "recompress"]


@dataclass
class RecompressReport:
    """What :func:`recompress` did to one array.

    Attributes
    ----------
    path : str
    chunks : int
        Stored chunks rewritten (inner chunks, for a sharded array).
    objects : int
        Store objects rewritten (chunks, or shards).
    bytes_before, bytes_after : int
        Stored bytes of those chunks before and after.
    masks_before, masks_after : Counter
        How many chunks used each conditional mask.
    seconds : float
    n_codecs : int
        Nested codecs of the conditional codec: the width masks are printed with.
    damaged : list of ChunkDecodeError
        Chunks that did not decode, each left exactly as it was stored (an inner
        chunk keeps its bytes in its rewritten shard; a shard whose index does not
        decode is left whole), in store order. Not counted in ``chunks`` or bytes.
    """

    path: str
    chunks: int
    objects: int
    bytes_before: int
    bytes_after: int
    masks_before: Counter[int] = field(default_factory=Counter)
    masks_after: Counter[int] = field(default_factory=Counter)
    seconds: float = 0.0
    n_codecs: int = 0
    damaged: list[ChunkDecodeError] = field(default_factory=list)

    def mask_text(self, mask: int) -> str:
        """``mask`` in zarrext's one notation (:func:`zarrext.codecs.decisions.format_mask`)."""
        return format_mask(mask, self.n_codecs)

    @property
    def ratio(self) -> float:
        """``bytes_before / bytes_after``."""
        return self.bytes_before / self.bytes_after if self.bytes_after else float("inf")


def _region(
    coords: tuple[int, ...], block: tuple[int, ...], shape: tuple[int, ...]
) -> tuple[slice, ...]:
    return tuple(
        slice(c * b, min((c + 1) * b, s)) for c, b, s in zip(coords, block, shape, strict=True)
    )


def _runtime_array(
    array: zarr.Array, decision: DecisionLike, trial_encode: bool | None
) -> zarr.Array:
    # Unsharded: keep chunks that hold only the fill value stored, so the set of
    # stored chunks does not change. Sharded: inner chunks absent from a shard read
    # as fill and must stay absent, which write_empty_chunks=False gives.
    write_empty = storage_block(array.metadata)[1] is None  # type: ignore[arg-type]
    return with_runtime(
        array.with_config({"write_empty_chunks": write_empty}),
        decision=decision,
        trial_encode=trial_encode,
    )


@dataclass
class _Stats:
    """Sizes and masks of the chunks one batch re-encoded, before and after."""

    chunks: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    masks_before: Counter[int] = field(default_factory=Counter)
    masks_after: Counter[int] = field(default_factory=Counter)
    damaged: list[ChunkDecodeError] = field(default_factory=list)

    def add(self, other: _Stats) -> None:
        self.chunks += other.chunks
        self.bytes_before += other.bytes_before
        self.bytes_after += other.bytes_after
        self.masks_before.update(other.masks_before)
        self.masks_after.update(other.masks_after)
        self.damaged.extend(other.damaged)


class _Rewriter:
    """Re-encodes one store object (a chunk or a shard) of ``runtime`` at a time.

    On a local store the chunks' sizes and masks are taken from the bytes read and
    written under the lock (a separate inventory would race writers).
    """

    def __init__(self, runtime: zarr.Array) -> None:
        self.runtime = runtime
        metadata = runtime.metadata
        assert isinstance(metadata, ArrayV3Metadata)
        self.metadata = metadata
        chain = CodecChain.from_metadata(metadata)
        self.placement: ConditionalPlacement | None = chain.conditional()
        self.block, self.sharding = storage_block(metadata)
        self.directory = local_file(runtime.store_path)
        self.spec = stored_spec_of(metadata)  # one stored object (chunk or shard)
        self.mode = "zarr"
        if self.sharding is None:
            transform = getattr(async_array_of(runtime).codec_pipeline, "transform", None)
            if transform is not None:
                self.transform, self.chunk_spec, self.mode = transform, self.spec, "chunk"
        elif chain.stores_bare_shards:  # shards rewritten in place, inner chunk by chunk
            # the shard as the sharding codec sees it: after the filters
            shard_spec = chain.filtered_spec(self.spec)
            try:
                self.transform = inner_chunk_transform(self.sharding, shard_spec)
            except TypeError:  # an inner codec without a synchronous path
                return
            self.chunk_spec = inner_chunk_spec(self.sharding, shard_spec)
            self.geometry = geometry_of(self.sharding, shard_spec)
            if self.geometry.slot_size is None:
                # Slots are placed by the bound writers use (raw size + header, for
                # any decision that never inflates), whatever this job's decision.
                bounded = with_runtime(runtime, decision="never_apply").metadata
                assert isinstance(bounded, ArrayV3Metadata)
                codec = CodecChain.from_metadata(bounded).sharding
                assert codec is not None
                self.geometry = geometry_of(codec, shard_spec)
            self.mode = "shard"

    def _mask(self, data: Buffer) -> int | None:
        if self.placement is None:
            return None
        return stored_mask(self.placement, data, self.chunk_spec)

    def _reencode(
        self,
        coords: tuple[int, ...],
        data: Buffer,
        stats: _Stats,
        key: str,
        inner: tuple[int, ...] | None = None,
    ) -> Buffer:
        token = chunk_index.set(coords)
        try:
            # The codec's error names no chunk; say whose bytes they are.
            with naming_chunk(array=self.runtime.path, key=key, inner=inner,
                              codecs=self.transform.codecs):
                mask_before = self._mask(data)
                decoded = self.transform.decode_chunk(data, self.chunk_spec)
            encoded = self.transform.encode_chunk(decoded, self.chunk_spec)
            if encoded is None:  # nothing to store: keep the chunk as it was
                encoded = data
            mask_after = self._mask(encoded)
        finally:
            chunk_index.reset(token)
        stats.chunks += 1
        stats.bytes_before += len(data)
        stats.bytes_after += len(encoded)
        if mask_before is not None:
            stats.masks_before[mask_before] += 1
        if mask_after is not None:
            stats.masks_after[mask_after] += 1
        return encoded

    def _inner_reencoder(
        self, coords: tuple[int, ...], stats: _Stats, key: str
    ) -> Callable[[int, Buffer], Buffer]:
        """Re-encodes the inner chunks of the shard at ``coords``, by flat index."""
        per_shard = self.geometry.chunks_per_shard
        origin = tuple(c * k for c, k in zip(coords, per_shard, strict=True))

        def one(flat: int, data: Buffer) -> Buffer:
            inner = tuple(int(i) for i in np.unravel_index(flat, per_shard)) if per_shard else ()
            index = tuple(o + i for o, i in zip(origin, inner, strict=True))
            try:
                return self._reencode(index, data, stats, key, inner)
            except ChunkDecodeError as e:  # kept byte for byte in the rewritten shard
                stats.damaged.append(e)
                return data

        return one

    def _rewrite_object(
        self, coords: tuple[int, ...], relative: str, key: str, stats: _Stats, write: bool
    ) -> None:
        """Re-encode one object of a store of whole objects: one read, one write."""
        store_path = async_array_of(self.runtime).store_path / relative
        prototype = default_buffer_prototype()
        stored = sync(store_path.get(prototype=prototype))
        if stored is None:
            return  # deleted since listed: nothing stored to rewrite
        if self.mode == "chunk":
            encoded = self._reencode(coords, stored, stats, key)
        else:
            assert self.sharding is not None
            one = self._inner_reencoder(coords, stats, key)
            data = stored.to_bytes()
            state = state_of_bytes(data, self.sharding, self.geometry, key)
            datas = {}
            for flat in np.flatnonzero(state.present()).tolist():
                start, length = (int(v) for v in state.table[flat])
                chunk = prototype.buffer.from_bytes(data[start : start + length])
                datas[flat] = one(flat, chunk).to_bytes()
            encoded = prototype.buffer.from_bytes(
                packed_shard(self.sharding, self.geometry, datas)
            )
        if write:
            sync(store_path.set(encoded))

    def rewrite(self, coords: tuple[int, ...], stats: _Stats, *, write: bool = True) -> None:
        """Re-encode the stored object at grid position ``coords``.

        ``write=False`` (a dry run): decode and re-encode every chunk the run
        would, in memory, and write nothing. A chunk that does not decode is left
        as it is and added to ``stats.damaged`` (an unsharded chunk, or a shard
        that cannot be read, is not written at all).
        """
        try:
            self._rewrite(coords, stats, write)
        except ChunkDecodeError as e:
            stats.damaged.append(e)
        except ShardCorruptError as e:  # the shard's index: none of its chunks is readable
            relative = self.metadata.encode_chunk_key(coords)
            key = f"{self.runtime.path}/{relative}" if self.runtime.path else relative
            error = ChunkDecodeError.wrapping(e, array=self.runtime.path, key=key,
                                              codecs=(self.sharding,))
            stats.damaged.append(error)

    def _rewrite(self, coords: tuple[int, ...], stats: _Stats, write: bool) -> None:
        if self.mode == "zarr":
            region = _region(coords, self.block, self.runtime.shape)
            data = self.runtime[region]  # decoding errors name the chunk (the pipeline)
            if write:
                self.runtime[region] = data
            return
        relative = self.metadata.encode_chunk_key(coords)
        key = f"{self.runtime.path}/{relative}" if self.runtime.path else relative
        if self.directory is None:
            self._rewrite_object(coords, relative, key, stats, write)
            return
        path = self.directory / relative
        if self.mode == "chunk":
            if write:
                _rewrite_chunk_file(path, lambda data: self._reencode(coords, data, stats, key))
            else:
                _reencode_unlocked(path, lambda data: self._reencode(coords, data, stats, key))
            return
        if not write:  # read as a whole object, re-encoded in memory
            self._rewrite_object(coords, relative, key, stats, write)
            return
        assert self.sharding is not None
        transcode_shard(path, self.sharding, self.geometry,
                        self._inner_reencoder(coords, stats, key))


def _rewrite_chunk_file(path: Path, reencode: Callable[[Buffer], Buffer]) -> None:
    """Re-encode one chunk file under ``flock``, swapped in with ``os.replace``."""
    while True:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return  # deleted meanwhile: nothing stored to rewrite
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not _same_file(path, fd):
                continue  # replaced while we waited: read the new one
            size = os.fstat(fd).st_size
            data = os.pread(fd, size, 0)
            encoded = reencode(default_buffer_prototype().buffer.from_bytes(data))
            tmp = temp_path(path)
            try:
                with open(tmp, "xb") as out:
                    out.write(encoded.as_buffer_like())
                if not _same_file(path, fd):
                    continue  # a writer replaced it: its write wins, re-encode that
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            return
        finally:
            os.close(fd)


def _read_file(path: Path) -> Buffer | None:
    """The bytes of a chunk or shard file; None if there is none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return default_buffer_prototype().buffer.from_bytes(data)


def _reencode_unlocked(path: Path, reencode: Callable[[Buffer], Buffer]) -> None:
    """A dry run's :func:`_rewrite_chunk_file`: read the chunk, re-encode it in memory."""
    data = _read_file(path)
    if data is not None:
        reencode(data)


def _same_file(path: Path, fd: int) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _rewrite(
    rewriter: _Rewriter, units: Sequence[tuple[int, ...]], write: bool = True,
    threads: int = 1,
) -> tuple[int, _Stats]:
    """Re-encode each unit (chunk or shard) on ``threads`` threads; returns the count
    and the chunks' stats."""

    def one(coords: tuple[int, ...]) -> _Stats:
        stats = _Stats()
        rewriter.rewrite(coords, stats, write=write)
        return stats

    total = _Stats()
    for stats in cluster.on_threads(one, units, min(threads, len(units))):
        total.add(stats)
    return len(units), total


def _rewrite_on_worker(
    ref: ArrayRef, decision: DecisionLike, trial_encode: bool | None, threads: int,
    units: list[tuple[int, ...]],
) -> tuple[int, _Stats]:
    """One Dask task: re-encode ``units`` of the array ``ref`` describes.

    Idempotent: re-encoding an object already re-encoded gives the same values, so
    a task rerun after its worker died finishes the job exactly.
    """
    rewriter = _Rewriter(_runtime_array(ref.open(), decision, trial_encode))
    return _rewrite(rewriter, units, threads=threads)


def recompress(
    array: zarr.Array | Any,
    decision: DecisionLike = "compress_if_smaller",
    trial_encode: bool | None = None,
    *,
    client: Any = None,
    workers: int | None = None,
    progress: ProgressLike = None,
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    on_damage: Literal["raise", "report"] = "raise",
) -> RecompressReport:
    """Rewrite every stored chunk of ``array`` in place with a new conditional decision.

    Parameters
    ----------
    array : zarr.Array, str or StoreLike
        The array; a local path or URL is opened with
        :func:`zarrext.stores.open_store` (with ``storage_options``), another store
        with ``zarr.open_array``.
    decision : Decision, str, int or callable
        The decision for the array's conditional codec(s).
    trial_encode : bool, optional
        Trial encoding for a decision function.
    client : dask.distributed.Client, optional
        Run on this Dask cluster: one task per batch of objects (at most
        :data:`zarrext.jobs.cluster.TASKS` tasks), each reopening the store from its
        description (:mod:`zarrext.jobs.store_refs`: a local directory the workers can
        reach, or a URL and its options). A worker that dies mid-task loses nothing:
        the task is rerun and re-encodes its objects again (objects it had already
        rewritten then count with their new sizes and masks in ``bytes_before`` and
        ``masks_before``).
    workers : int, optional
        Threads for the local pool (default: zarr's ``async.concurrency``, at most
        one per batch): the objects in flight at once.
    progress : callable, bool or None
        ``progress(done, total)`` with the store objects (chunks or shards) rewritten
        so far and their number, before the first batch and after each one, in the
        calling thread (``zarrext.cli.render.progress_bar`` draws it as a bar);
        ``True`` prints ``recompress <path>: done/total`` on stderr; ``False`` or
        ``None``: nothing.
    dry_run : bool
        Decode and re-encode every stored chunk as the run would, in memory, and
        write nothing: the report says what the run would do, and names the
        chunks it would leave as they are (damaged ones), as the run does. Runs
        in this process (``client`` is not used).
    storage_options : mapping, optional
        For a URL given as ``array`` (endpoint, credentials...).
    on_damage : {"raise", "report"}
        What happens once every chunk was tried, when some did not decode.
        Either way the run does not stop at a damaged chunk: it rewrites every
        other one and leaves each damaged chunk exactly as it was stored (an inner
        chunk keeps its bytes inside its rewritten shard; a shard whose index does
        not decode is not written), so nothing of what could still be recovered
        is lost. ``"raise"`` (the default: damage is never silent) then raises
        :class:`~zarrext.errors.DamagedChunksError` naming every damaged chunk,
        with the report as its ``report``; ``"report"`` returns the report, its
        ``damaged`` listing them.

    Returns
    -------
    RecompressReport

    Raises
    ------
    DamagedChunksError
        With ``on_damage="raise"``, after the run, when chunks did not decode: a
        :class:`~zarrext.errors.ChunkDecodeError` (a ``ValueError``) about the
        first, its ``damaged`` naming every one (array, key, inner chunk, codec)
        and its ``report`` what was done to the others.
    ValueError
        ``on_damage`` is none of the above; the array has no conditional codec.
    TypeError
        ``progress`` is none of the above.
    """
    from zarrext.stores import open_job_array

    array = open_job_array(array, writes=None if dry_run else "recompress",
                           storage_options=storage_options)
    if on_damage not in ("raise", "report"):
        raise ValueError(f"on_damage must be 'raise' or 'report', not {on_damage!r}")
    report_progress = progress_callback(progress, f"recompress {array.path or '/'}")
    start_time = time.perf_counter()
    placement = conditional_placement(array.metadata)
    if placement is None:
        raise ValueError(f"array {array.path!r} has no conditional codec to recompress")
    units = [coords for coords, _ in stored_chunk_keys(array)]
    rewriter = _Rewriter(_runtime_array(array, decision, trial_encode))
    through_zarr = rewriter.mode == "zarr"
    before = inventory(array) if through_zarr else None
    if dry_run:
        client = None
    stats = _Stats()
    batches = cluster.batches(units)
    threads = cluster.concurrency()

    done = 0
    report_progress(0, len(units))

    def advance(result: tuple[int, _Stats]) -> None:
        nonlocal done
        n, batch_stats = result
        stats.add(batch_stats)
        done += n
        report_progress(done, len(units))

    if client is not None:
        ref = array_ref(array)
        for finished in cluster.on_client(
            client, _rewrite_on_worker, batches, ref, decision, trial_encode, threads,
            what="recompress on a Dask cluster",
        ):
            advance(finished)
    else:
        # Objects in flight: one per thread; each batch runs its objects one by one.
        n_workers = workers or max(1, min(threads, len(batches)))
        for finished in cluster.on_threads(
            lambda b: _rewrite(rewriter, b, not dry_run), batches, n_workers
        ):
            advance(finished)

    if before is not None:
        # Through zarr the chunks' sizes come from inventories; a dry run encodes
        # nothing there, so it reports the sizes and masks as they are.
        after = before if dry_run else inventory(array)
        stats = _Stats(
            len(after.chunks), before.stored_bytes, after.stored_bytes,
            before.mask_counts, after.mask_counts, stats.damaged,
        )
    report = RecompressReport(
        path=array.path,
        chunks=stats.chunks,
        objects=len(units),
        bytes_before=stats.bytes_before,
        bytes_after=stats.bytes_after,
        masks_before=stats.masks_before,
        masks_after=stats.masks_after,
        seconds=time.perf_counter() - start_time,
        n_codecs=len(placement.codec.codecs),
        damaged=sorted(stats.damaged, key=_damage_order),
    )
    if report.damaged and on_damage == "raise":
        what = f"recompress{' --dry-run' if dry_run else ''} of array {array.path or '/'!r}"
        raise DamagedChunksError(what, report.damaged, report)
    return report


def _damage_order(error: ChunkDecodeError) -> tuple[Any, ...]:
    """Store order of damaged chunks: by key, numbers as numbers, then inner chunk."""
    parts = tuple(
        (0, int(p), "") if p.isdigit() else (1, 0, p) for p in (error.key or "").split("/")
    )
    return parts, error.inner or ()
