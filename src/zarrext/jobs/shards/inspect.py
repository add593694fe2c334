"""Per-shard report: layout, bytes stored against the shard's size, empty inner chunks.

The report is data (:class:`ShardInfo`); ``zarrext.cli.render`` prints it as a table.
"""

from __future__ import annotations

import fcntl
import os
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from zarrext._text import counted
from zarrext._zarr_compat import async_array_of
from zarrext.errors import DECODE_ERRORS, is_decode_error
from zarrext.jobs.inspection import inner_chunks_inside
from zarrext.sharding.array_shards import ArrayShards
from zarrext.sharding.geometry import EMPTY, guess_layout
from zarrext.sharding.journal import journal_pending
from zarrext.sharding.state import decode_table

__all__ = [
    "MAX_SHARD_ROWS",
    "ShardInfo",
    "format_bytes",
    "shard_json",
    "shard_report",
    "summary_line",
    "used_text",
    "usual_writes",
    "writes_text",
]


@dataclass(frozen=True)
class ShardInfo:
    """One stored shard.

    Bytes are counted as every report of zarrext counts them
    (:class:`zarrext.jobs.inspection.ArrayInventory`): :attr:`stored_bytes` are the inner
    chunks' bytes, without the index and the free space.

    Attributes
    ----------
    key : str
        Store key.
    layout : str
        ``"fixed-slot"``, ``"dense"``, ``"append"`` or ``"unknown"`` (index unreadable).
    chunk_bytes : int
        Bytes of the inner chunks present inside the array's shape (in the decoded
        shard when codecs follow ``sharding_indexed``); not the index.
    file_size : int
        Stored size of the shard object (as the store holds it).
    empty_chunks : int
        Inner chunks inside the array's shape with no stored bytes (read as the
        fill value).
    n_chunks : int
        Inner chunks of this shard inside the array's shape (an edge shard has
        fewer than the shard's grid: those beyond the edge hold no data).
    in_place : bool
        Whether zarrext writers *can* write inner chunks of this shard in place: a
        local file with a readable index and nothing after the sharding codec.
        They do only when the array is opened with a ``shard_layout``
        (``opened_layout``); otherwise every write rewrites the whole shard.
    pending : bool
        A journal of an interrupted write is present (``zarrext check --repair``).
    allocated : int or None
        Bytes the file system allocates for a local shard file (``st_blocks * 512``):
        less than ``file_size`` when parts of fixed slots that no chunk fills are
        holes; ``zarrext compact`` reclaims the rest. None for other stores.
    opened_layout : str or None
        The ``shard_layout`` of the array object the report was made from (writes
        through it go in place), ``None`` when it was opened without one: then
        writes, zarr-python's and ``zarrext.open_array``'s alike, rewrite whole
        shards.
    decoded_size : int or None
        Size of the shard with the codecs after ``sharding_indexed`` undone (what
        ``chunk_bytes`` is part of); None when no codecs follow it (the shard is
        stored as it is, ``file_size``).
    slot_size : int or None
        The slot size of a ``fixed-slot`` shard: the one this version gives the
        array's inner codecs, or an earlier version's for a shard that version
        wrote (:data:`zarrext.sharding.bounds.SLOT_RULES`), which writers keep.
        None for other layouts.
    index_bytes : int
        Size of the shard's index.
    """

    key: str
    layout: str
    chunk_bytes: int
    file_size: int
    empty_chunks: int
    n_chunks: int
    in_place: bool
    pending: bool = False
    allocated: int | None = None
    opened_layout: str | None = None
    decoded_size: int | None = None
    slot_size: int | None = None
    index_bytes: int = 0

    @property
    def stored_bytes(self) -> int:
        """The bytes stored: the inner chunks' own bytes, or the whole object when
        codecs after ``sharding_indexed`` encode the shard whole (its chunks are no
        separate bytes in the store)."""
        return self.chunk_bytes if self.decoded_size is None else self.file_size


Stat = tuple[int, int, bytes, bool, int | None]
"""(stored size, shard size, index bytes, pending, allocated bytes) of one shard."""


def _stat_local(shards: ArrayShards, key: str) -> Stat | None:
    path = shards.path(key)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        stat = os.fstat(fd)
        size, allocated = stat.st_size, stat.st_blocks * 512
        if not shards.bare:
            stored = _stat_stored(shards, os.pread(fd, size, 0), journal_pending(path))
            return (*stored[:4], allocated)
        isz = shards.geometry.index_size
        start = 0 if shards.geometry.index_location == "start" else max(size - isz, 0)
        raw = os.pread(fd, isz, start)
        return size, size, raw, journal_pending(path), allocated
    finally:
        os.close(fd)


def _stat_store(array: Any, shards: ArrayShards, key: str) -> Stat | None:
    store_path = async_array_of(array).store_path / key
    value = sync(store_path.get(prototype=default_buffer_prototype()))
    if value is None:
        return None
    return _stat_stored(shards, value.to_bytes(), False)


def _stat_stored(shards: ArrayShards, stored: bytes, pending: bool) -> Stat:
    """(stored size, shard size, index bytes, pending) of a whole stored object; the
    codecs after the sharding codec are undone first (an object that does not
    decode gives no index bytes)."""
    try:
        data = shards.shard_bytes(stored)
    except DECODE_ERRORS as e:
        if not is_decode_error(e):
            raise
        return len(stored), len(stored), b"", pending, None
    isz = shards.geometry.index_size
    raw = data[:isz] if shards.geometry.index_location == "start" else data[-isz:]
    return len(stored), len(data), raw, pending, None


def shard_report(array: Any) -> list[ShardInfo]:
    """One :class:`ShardInfo` per stored shard of a sharded array (any store).

    Raises
    ------
    ShardLayoutError
        When the array is not sharded.
    """
    shards = ArrayShards.of(array)
    geometry = shards.geometry
    local = shards.directory is not None
    metadata = array.metadata
    opened = next((c.shard_layout for c in metadata.codecs
                   if getattr(c, "shard_layout", None) is not None), None)
    out: list[ShardInfo] = []
    for key in shards.keys:
        stat = _stat_local(shards, key) if local else _stat_store(array, shards, key)
        if stat is None:
            continue
        size, shard_size, raw, pending, allocated = stat
        # inner chunks beyond the array's edge hold no data: neither empty nor counted
        inside = np.zeros(geometry.chunks_per_shard, dtype=bool)
        counts = inner_chunks_inside(metadata, metadata.chunk_key_encoding.decode_chunk_key(key))
        inside[tuple(slice(0, n) for n in counts)] = True
        inside = inside.reshape(-1)
        try:
            table = decode_table(shards.codec, geometry.chunks_per_shard, raw)
        except ValueError:
            out.append(ShardInfo(
                key=key, layout="unknown", chunk_bytes=0, file_size=size, empty_chunks=0,
                n_chunks=int(inside.sum()), in_place=False, pending=pending,
                allocated=allocated, index_bytes=geometry.index_size,
            ))
            continue
        present = table[:, 0] != EMPTY
        own = geometry.for_shard(table, shard_size)
        layout = guess_layout(table, shard_size, own)
        out.append(
            ShardInfo(
                key=key,
                layout=layout,
                chunk_bytes=int(table[present & inside, 1].sum()),
                file_size=size,
                empty_chunks=int((~present & inside).sum()),
                n_chunks=int(inside.sum()),
                # codecs after the sharding codec: every write rewrites the shard
                in_place=local and shards.bare,
                pending=pending,
                allocated=allocated,
                opened_layout=opened,
                decoded_size=None if shards.bare else shard_size,
                slot_size=own.slot_size if layout == "fixed-slot" else None,
                index_bytes=geometry.index_size,
            )
        )
    return out


def format_bytes(n: int) -> str:
    """``n`` bytes in B, KiB, MiB or GiB, for tables."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


# How zarrext writers opened with a shard_layout write into a shard of each layout,
# when it is a local file.
IN_PLACE = {
    "fixed-slot": "in place (each chunk in its slot)",
    "append": "in place (appended)",
    "dense": "in place (appended; zarrext expand puts chunks in slots)",
}

MAX_SHARD_ROWS = 20


def writes_text(info: ShardInfo) -> str:
    """How a write reaches this shard, from its file and its own index."""
    if info.layout == "unknown":
        writes = "unknown (index unreadable: run zarrext check)"
    elif info.in_place and info.opened_layout is not None:
        writes = IN_PLACE[info.layout]
    elif info.in_place:  # what the write does depends on how the array is opened
        layout = "fixed-slot" if info.layout == "fixed-slot" else "append"
        writes = (
            "whole-shard rewrite (zarr-python, zarrext.open_array without shard_layout); "
            f"in place when opened with shard_layout={layout!r}"
        )
    else:
        writes = "whole-shard rewrite (store cannot write in place)"
    if info.pending:
        writes += ", interrupted write pending: run zarrext check --repair"
    return writes


def usual_writes(report: list[ShardInfo]) -> str | None:
    """How writes reach most shards of ``report`` (None for no shards).

    An array's shards are usually alike: saying it once, above them, keeps each
    shard to one line; only a shard that differs (an unreadable index, a pending
    write) says its own.
    """
    counts = Counter(writes_text(info) for info in report)
    return counts.most_common(1)[0][0] if counts else None


def shard_json(info: ShardInfo) -> dict[str, object]:
    """One shard as JSON for ``zarrext inspect --json``: the report's fields, its
    stored bytes and its writes."""
    return {**asdict(info), "stored_bytes": info.stored_bytes, "writes": writes_text(info)}


def used_text(info: ShardInfo) -> str:
    """A shard's bytes in a table cell: stored of the object (the rest is its index
    and free space); for a shard encoded whole, the object and its decoded chunks."""
    if info.decoded_size is None:
        pct = 100.0 * info.stored_bytes / info.file_size if info.file_size else 0.0
        return (f"{format_bytes(info.stored_bytes)} of {format_bytes(info.file_size)} "
                f"({pct:.0f}%)")
    pct = 100.0 * info.chunk_bytes / info.decoded_size if info.decoded_size else 0.0
    return (f"{format_bytes(info.file_size)} whole (chunks {format_bytes(info.chunk_bytes)} "
            f"of {format_bytes(info.decoded_size)} decoded, {pct:.0f}%)")


def summary_line(report: list[ShardInfo]) -> str:
    """One line for shards not shown row by row: count, layouts, bytes, empty chunks."""
    layouts = ", ".join(
        f"{n} {layout}" for layout, n in sorted(Counter(i.layout for i in report).items())
    )
    stored = sum(i.stored_bytes for i in report)
    size = sum(i.file_size for i in report)
    empty = sum(i.empty_chunks for i in report)
    chunks = sum(i.n_chunks for i in report)
    pending = sum(i.pending for i in report)
    allocated = [i.allocated for i in report if i.allocated is not None]
    on_disk = ""
    if allocated and sum(allocated) < size:  # holes: say what they leave on disk
        on_disk = f" ({format_bytes(sum(allocated))} on disk)"
    bytes_text = f"{format_bytes(stored)} stored of {format_bytes(size)}"
    if any(i.decoded_size is not None for i in report):
        used = sum(i.chunk_bytes for i in report)
        decoded = sum(i.file_size if i.decoded_size is None else i.decoded_size for i in report)
        bytes_text += f" (chunks {format_bytes(used)} of {format_bytes(decoded)} decoded)"
    return (
        f"... and {counted(len(report), 'more shard')} ({layouts}): "
        f"{bytes_text}{on_disk}, {empty}/{counted(chunks, 'chunk')} empty"
        + (f", {pending} with an interrupted write pending" if pending else "")
    )
