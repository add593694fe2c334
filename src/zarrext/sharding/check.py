"""Validate chunk and shard files and repair what an interrupted writer left behind.

:func:`check` works on any Zarr format 3 array in a local directory, sharded or
not. It reads every shard under a shared lock (so it sees no write half done)
and reports, once per store key and sorted by key, each :class:`Problem` with
its ``kind``:

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
  coordinates.

It changes nothing unless ``repair=True``:

- an interrupted write is rolled back from its journal (:func:`writer.recover`);
- stale temporary files and orphaned journals are deleted;
- single entries that point outside the file or overlap are marked empty (the
  chunk reads as the fill value; the problem says which chunk was dropped);
- what cannot be repaired stays in :attr:`ShardCheck.remaining`, and its
  :attr:`Problem.advice` says what to do instead: a truncated shard or an index
  that fails its checksum with no journal to roll back (restore the shard from a
  copy), a chunk whose bytes do not decode (its data is gone; rewrite it or
  delete it).
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from zarr.codecs import ShardingCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.metadata import ArrayV3Metadata
from zarr.core.metadata.v3 import RegularChunkGridMetadata
from zarr.storage import LocalStore

from zarrext._context import _chunk_index
from zarrext._zarr_compat import async_array_of, inner_chunk_spec, inner_chunk_transform
from zarrext.cluster import batches, concurrency, on_client, on_threads
from zarrext.codecs.conditional import ConditionalCodec
from zarrext.errors import error_text, hex_bytes
from zarrext.progress import ProgressCallback
from zarrext.sharding import writer
from zarrext.sharding.geometry import EMPTY, ShardGeometry, ShardLayoutError
from zarrext.sharding.journal import free_path, read_quarantine, write_quarantine
from zarrext.sharding.layout import ArrayShards, recover_array, shards_of
from zarrext.sharding.state import decode_table
from zarrext.stores import open_job_array

__all__ = ["STALE_AFTER", "Problem", "ShardCheck", "check", "recover_array", "unverifiable"]

_TMP_PID = re.compile(re.escape(writer.TMP_MARK) + r"(\d+)-")
# zarr-python's LocalStore writes ``path.with_suffix(f".{uuid4().hex}.partial")``.
_ZARR_PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")
STALE_AFTER = 60.0
"""Seconds after which an untouched zarr-python ``*.partial`` file counts as left behind."""

# Errors a codec raises on bytes it cannot decode: zarr's and numcodecs' own are
# ValueError/TypeError; some compressors raise RuntimeError (zstd), EOFError,
# OSError (gzip's BadGzipFile), zlib.error, or fail on a short buffer (IndexError).
_DECODE_ERRORS = (ValueError, TypeError, RuntimeError, EOFError, OSError, IndexError, KeyError)


RESTORE = "restore the shard from a copy"
"""What to do about a shard whose bytes are gone (truncated, index unreadable)."""
REWRITE = "rewrite the chunk (its data is gone) or delete it"
"""What to do about a chunk whose bytes do not decode."""
OBJECT_ADVICE = "rewrite or delete the shard object (--repair works on local directories)"
"""What to do about a bad index entry in a store that cannot be repaired in place."""


@dataclass(frozen=True)
class Problem:
    """One problem :func:`check` found at a store key.

    Attributes
    ----------
    kind : str
        What sort of problem (see the module docstring): ``"truncated"``,
        ``"index_checksum"``, ``"index_unreadable"``, ``"entry_past_end"``,
        ``"entry_overlaps_index"``, ``"entries_overlap"``, ``"interrupted_write"``,
        ``"torn_journal"``, ``"inactive_journal"``, ``"orphan_journal"``,
        ``"orphan_quarantine"``, ``"stale_temporary_file"`` or ``"undecodable_chunk"``.
    text : str
        The problem in words (without the key, which the finding carries).
    fix : str or None
        What ``repair=True`` does (or did) about it; None when it cannot fix it.
    advice : str or None
        What to do instead when ``repair`` cannot fix it.
    repaired : bool
        Whether this run fixed it.
    """

    kind: str
    text: str
    fix: str | None = None
    advice: str | None = None
    repaired: bool = False

    @property
    def repairable(self) -> bool:
        """Whether ``repair=True`` fixes it."""
        return self.fix is not None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of this problem."""
        return {
            "kind": self.kind,
            "text": self.text,
            "repairable": self.repairable,
            "repaired": self.repaired,
            "fix": self.fix,
            "advice": self.advice,
        }


@dataclass
class ShardCheck:
    """What :func:`check` found at one store key (a shard, or a chunk file).

    Attributes
    ----------
    key : str
        The store key, relative to the array (e.g. ``"c/0/1"``).
    details : list of Problem
        Problems found, in the order they were found (empty: the key validates).
    """

    key: str
    details: list[Problem] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """The problems found, in words."""
        return [p.text for p in self.details]

    @property
    def repaired(self) -> list[str]:
        """What ``repair=True`` did about them."""
        return [p.fix for p in self.details if p.repaired and p.fix is not None]

    @property
    def remaining(self) -> list[str]:
        """Problems still there afterwards (every problem, without ``repair``)."""
        return [p.text for p in self.details if not p.repaired]

    @property
    def ok(self) -> bool:
        """Whether nothing is left to fix (after repair, if it ran)."""
        return not self.remaining

    def problem(
        self,
        kind: str,
        text: str,
        *,
        fix: str | None = None,
        advice: str | None = None,
        repaired: bool = False,
    ) -> None:
        """Record a problem: ``fix`` is what repair does (None: it cannot), ``repaired`` if done."""
        self.details.append(Problem(kind, text, fix, advice, repaired and fix is not None))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of this finding."""
        return {
            "key": self.key,
            "ok": self.ok,
            "problems": [p.to_json() for p in self.details],
        }


def _leftover(path: Path, now: float, stale_after: float) -> tuple[str, str] | None:
    """``(target name, description)`` of a file a killed writer left, if ``path`` is one."""
    name = path.name
    match = _TMP_PID.search(name)
    owner = writer.temp_owner(name)
    if match is not None and owner is not None:
        pid, host = owner
        if writer.process_alive(pid) or host not in (None, writer.HOST):
            return None  # alive, or another host's process (not visible here)
        return name[: match.start()], f"stale temporary file {name} (its process is gone)"
    if _ZARR_PARTIAL.search(name):
        try:
            age = now - path.stat().st_mtime
        except FileNotFoundError:
            return None
        if age < stale_after:
            return None  # a zarr-python writer may still be writing it
        return name[: -len(".partial") - 33], (
            f"stale temporary file {name} (zarr-python, untouched for {age:.0f} s)"
        )
    return None


def _entry_problems(
    table: np.ndarray, size: int, index_range: tuple[int, int]
) -> list[tuple[str, str, int]]:
    """Problems of a decoded index table: ``(kind, text, inner chunk to drop to fix it)``."""
    problems: list[tuple[str, str, int]] = []
    drop: set[int] = set()
    present = np.flatnonzero(table[:, 0] != EMPTY)
    starts = table[present, 0].astype(object)
    ends = starts + table[present, 1].astype(object)
    lo, hi = index_range
    for flat, start, end in zip(present.tolist(), starts, ends, strict=True):
        if end > size:
            problems.append((
                "entry_past_end",
                f"inner chunk {flat}: bytes {start}-{end} past end of file ({size} bytes)",
                flat,
            ))
            drop.add(flat)
        elif start < hi and end > lo:
            problems.append((
                "entry_overlaps_index",
                f"inner chunk {flat}: bytes {start}-{end} overlap the index",
                flat,
            ))
            drop.add(flat)
    order = sorted((s, e, f) for f, s, e in zip(present.tolist(), starts, ends, strict=True))
    reach_end, reach_flat = -1, -1
    for start, end, flat in order:
        if start < reach_end and flat not in drop and reach_flat not in drop:
            problems.append((
                "entries_overlap", f"inner chunks {reach_flat} and {flat} overlap at byte {start}",
                flat,
            ))
            drop.add(flat)
        if end > reach_end:
            reach_end, reach_flat = end, flat
    return problems


def _cut_short(table: np.ndarray, size: int, index_start: bool) -> tuple[int, list[int]] | None:
    """``(size the index needs, inner chunks past the end)`` if the file looks cut short.

    Only an index at the start can say so: entries that reach past the end of the
    file and lie over no other entry are chunks whose bytes were cut off (a single
    bad entry that lands on other chunks is a bad entry, which repair drops). An
    index at the end that decodes sits at the file's real end.
    """
    if not index_start:
        return None
    starts, lengths = table[:, 0], table[:, 1]
    limit = np.uint64(size)
    # start + length > size, without uint64 wrap-around
    beyond = (starts > limit) | (lengths > limit - np.minimum(starts, limit))
    if not np.any(beyond & (starts != EMPTY)):
        return None  # the usual case, without building the spans below
    present = np.flatnonzero(table[:, 0] != EMPTY).tolist()
    spans = {f: (int(table[f, 0]), int(table[f, 0]) + int(table[f, 1])) for f in present}
    past = [f for f, (_, end) in spans.items() if end > size]
    if not past:
        return None
    for f in past:
        start, end = spans[f]
        if any(s < end and start < e for g, (s, e) in spans.items() if g != f):
            return None
    return max(spans[f][1] for f in past), past


def _plausible(entries: np.ndarray, limit: int) -> np.ndarray:
    """Which ``(offset, length)`` entries are empty or point at bytes before ``limit``."""
    empty = (entries[:, 0] == EMPTY) & (entries[:, 1] == EMPTY)
    starts = entries[:, 0].astype(object)
    lengths = entries[:, 1].astype(object)
    inside = np.array(
        [n > 0 and s + n <= limit for s, n in zip(starts, lengths, strict=True)], dtype=bool
    )
    return np.asarray(empty | inside)


def _cut_index_end(tail: bytes, size: int) -> int | None:
    """The size a file had, if its last bytes are the head of an index cut short.

    ``tail`` is the last ``index_size`` bytes of a shard whose index (at the end)
    does not decode. When all its entries but one still look like entries, the
    index is in place and was damaged there (a checksum error, not a cut). If the
    file lost its last ``k`` bytes, its last ``index_size - k`` bytes are the head
    of the index: whole 16-byte entries, empty or pointing before that head,
    that do not overlap (a shift by whole entries must also see the chunks end
    exactly where the index began). A file cut by more than its index has no
    index left to tell: that is reported as a checksum error.
    """
    isz = len(tail)
    whole = np.frombuffer(tail[: isz // 16 * 16], dtype="<u8").reshape(-1, 2)
    if len(whole) and len(whole) - int(_plausible(whole, size - isz).sum()) <= 1:
        return None
    for k in range(1, isz - 15):
        head_start = size - isz + k  # where the index began
        if head_start < 0:
            continue
        head = tail[k:]
        entries = np.frombuffer(head[: len(head) // 16 * 16], dtype="<u8").reshape(-1, 2)
        present = entries[:, 0] != EMPTY
        if not present.any() or not _plausible(entries, head_start).all():
            continue
        starts = entries[present, 0].astype(object)
        ends = starts + entries[present, 1].astype(object)
        order = np.argsort(starts, kind="stable")
        if any(a < b for a, b in zip(starts[order][1:], ends[order][:-1], strict=True)):
            continue
        if k % 16 == 0 and max(ends) != head_start:
            continue
        return size + k
    return None


def _stock(codec: ShardingCodec) -> ShardingCodec:
    """``codec`` as zarr-python's own ``ShardingCodec``, nested ones too: a check only
    decodes, and zarrext's runtime sharding codec (of :func:`zarrext.open_array`) keeps
    nested shards off the synchronous path that decodes one inner chunk."""
    if type(codec) is ShardingCodec:
        return codec
    return ShardingCodec.from_dict(codec.to_dict())


class _Decoder:
    """Decodes single chunks (or inner chunks) of an array, for ``deep`` checks."""

    def __init__(self, array: Any, shards: ArrayShards | None) -> None:
        from zarrext.pipeline import build_pipeline
        from zarrext.sharding.layout import shard_spec_of

        metadata = array.metadata
        self.shards = shards
        if shards is not None:
            self.spec = inner_chunk_spec(shards.codec, shards.shard_spec)
            self.transform = inner_chunk_transform(_stock(shards.codec), shards.shard_spec)
        else:
            self.spec = shard_spec_of(metadata)
            pipeline = build_pipeline(metadata, array.path)
            self.transform = pipeline.transform

    def problem(self, coords: tuple[int, ...], data: bytes) -> str | None:
        """Why ``data`` does not decode as the chunk at ``coords``, or None."""
        token = _chunk_index.set(coords)
        try:
            decoded = self.transform.decode_chunk(
                default_buffer_prototype().buffer.from_bytes(data), self.spec
            )
            if tuple(decoded.shape) != tuple(self.spec.shape):
                return f"decodes to shape {tuple(decoded.shape)}, not {tuple(self.spec.shape)}"
        except _DECODE_ERRORS as e:
            return error_text(e)
        finally:
            _chunk_index.reset(token)
        return None


def _verifies(codecs: Any) -> bool:
    """Whether a chain (nested codecs too) can tell damaged bytes from good ones: a
    checksum (``crc32c``, ``zstd`` with its checksum) or a ``conditional`` header."""
    from zarr.codecs import Crc32cCodec, ZstdCodec

    for codec in codecs:
        if isinstance(codec, ConditionalCodec | Crc32cCodec):
            return True
        if isinstance(codec, ZstdCodec) and codec.checksum:
            return True
        if _verifies(getattr(codec, "codecs", ())):
            return True
    return False


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
    try:
        shards: ArrayShards | None = shards_of(array)
    except ShardLayoutError:
        shards = None
    codecs = shards.codec.codecs if shards is not None else metadata.codecs
    if _verifies(codecs):
        return None
    noun = "inner chunks" if shards is not None else "chunks"
    return (
        f"its {noun} have no checksum and no conditional header, so a damaged {noun[:-1]} "
        "that still decodes cannot be told from a good one; add a crc32c codec "
        "(compressors=[..., Crc32cCodec()]) to verify them"
    )


def _open_locked(path: Path, repair: bool) -> int | None:
    """``path`` opened and locked (exclusive for repair), the current file; None if gone."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR if repair else os.O_RDONLY)
        except FileNotFoundError:
            return None
        fcntl.flock(fd, fcntl.LOCK_EX if repair else fcntl.LOCK_SH)
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # replaced (compacted) while we waited: check the new file


Read = Callable[[int, int], bytes]
"""``read(length, offset)``: bytes of one shard (a locked file, or an object in memory)."""


def _truncated(result: ShardCheck, noun: str, size: int, needs: int) -> None:
    result.problem(
        "truncated", f"truncated: {noun} is {size} bytes, its index needs {needs}", advice=RESTORE
    )


def _index_problem(
    read: Read, size: int, geometry: ShardGeometry, codec: Any, result: ShardCheck, noun: str
) -> tuple[int, bytes, np.ndarray] | None:
    """The shard's ``(index offset, raw index, table)``; None after recording why not."""
    isz = geometry.index_size
    at_start = geometry.index_location == "start"
    if size < isz:
        _truncated(result, noun, size, isz)
        return None
    offset = 0 if at_start else size - isz
    raw = read(isz, offset)
    try:
        table = decode_table(codec, geometry.chunks_per_shard, raw)
    except ValueError as e:
        needs = None if at_start else _cut_index_end(raw, size)
        if needs is not None:
            _truncated(result, noun, size, needs)
        elif "checksum" in str(e).lower():
            result.problem(
                "index_checksum",
                f"index checksum error: the {isz}-byte index at byte {offset} "
                "does not match its checksum",
                advice=RESTORE,
            )
        else:
            result.problem(
                "index_unreadable",
                f"index does not decode: {' '.join(hex_bytes(str(e)).split())}",
                advice=RESTORE,
            )
        return None
    return offset, raw, table


def _check_shard(
    shards: ArrayShards,
    key: str,
    coords: tuple[int, ...],
    result: ShardCheck,
    repair: bool,
    decoder: _Decoder | None,
) -> None:
    path = shards.path(key)
    geometry, codec = shards.geometry, shards.codec
    fd = _open_locked(path, repair)
    if fd is None:
        if free_path(path).exists():
            result.problem(
                "orphan_quarantine", "reuse quarantine of a shard that no longer exists",
                fix="deleted the quarantine file", repaired=repair,
            )
            if repair and not path.exists():  # not if a writer just created the shard
                free_path(path).unlink(missing_ok=True)
        if writer.journal_pending(path):
            result.problem(
                "orphan_journal", "journal of a shard that no longer exists",
                fix="deleted the journal", repaired=repair,
            )
            if repair and not path.exists():
                writer.discard_journal(path)
        return
    try:
        if not writer.journal_pending(path) and writer.journal_path(path).exists():
            result.problem(
                "inactive_journal",
                "inactive journal left beside the shard (older zarrext kept them)",
                fix="deleted the inactive journal", repaired=repair,
            )
            if repair:
                writer.discard_journal(path)
        if writer.journal_pending(path):
            if writer.read_journal(path) is None:
                kind, text = "torn_journal", "interrupted write: torn journal (index untouched)"
            else:
                kind, text = "interrupted_write", "interrupted write: journal present"
            result.problem(kind, text, fix="rolled back the interrupted write", repaired=repair)
            if not repair:
                # The index is half written until the rollback: check it after --repair.
                return
            writer.recover(path, fd)
        if repair and free_path(path).exists():
            # Not a problem (it guards readers for a few seconds); drop what expired.
            write_quarantine(path, read_quarantine(path) or [])
        size = os.fstat(fd).st_size

        def read(length: int, start: int) -> bytes:
            return os.pread(fd, length, start)

        index = _index_problem(read, size, geometry, codec, result, "file")
        if index is None:
            return
        offset, raw, table = index
        drop = _check_table(
            shards, coords, size, offset, table, read, result, decoder, repair, "file"
        )
        if repair and drop:
            table[drop] = EMPTY
            writer.replace_index(
                path, fd, size, offset, raw, writer.encode_index(codec, geometry, table)
            )
    finally:
        os.close(fd)


def _check_table(
    shards: ArrayShards,
    coords: tuple[int, ...],
    size: int,
    offset: int,
    table: np.ndarray,
    read: Read,
    result: ShardCheck,
    decoder: _Decoder | None,
    repair: bool | None,
    noun: str,
) -> list[int]:
    """Check a decoded index (and, with ``decoder``, its chunks); the entries to drop.

    ``repair`` None: the store cannot be repaired in place (an object store).
    """
    geometry = shards.geometry
    skip: set[int] = set()
    cut = _cut_short(table, size, geometry.index_location == "start")
    if cut is not None:
        needs, past = cut
        _truncated(result, noun, size, needs)
        skip.update(past)
        live = table.copy()
        live[past] = EMPTY  # what is left is checked as usual
    else:
        live = table
    problems = _entry_problems(live, size, (offset, offset + geometry.index_size))
    drop = sorted(flat for _, _, flat in problems)
    for kind, text, flat in problems:
        if repair is None:
            result.problem(kind, text, advice=OBJECT_ADVICE)
        else:
            result.problem(kind, text, fix=f"marked inner chunk {flat} empty", repaired=repair)
    skip.update(drop)
    if decoder is None:
        return drop
    per_shard = geometry.chunks_per_shard
    origin = tuple(c * k for c, k in zip(coords, per_shard, strict=True))
    for flat in np.flatnonzero(table[:, 0] != EMPTY).tolist():
        if flat in skip:
            continue
        start, length = (int(v) for v in table[flat])
        inner = tuple(
            o + int(i) for o, i in zip(origin, np.unravel_index(flat, per_shard), strict=True)
        )
        why = decoder.problem(inner, read(length, start))
        if why is not None:
            result.problem(
                "undecodable_chunk",
                f"inner chunk {flat} (chunk {inner} of the array) does not decode: {why}",
                advice=REWRITE,
            )
    return drop


def _check_chunk(
    directory: Path, key: str, coords: tuple[int, ...], result: ShardCheck, decoder: _Decoder
) -> None:
    try:
        data = (directory / key).read_bytes()
    except FileNotFoundError:
        return
    why = decoder.problem(coords, data)
    if why is not None:
        result.problem(
            "undecodable_chunk", f"chunk {coords} does not decode: {why}", advice=REWRITE
        )


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
        (:mod:`zarrext.store_refs`). A local directory is checked in this process
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
    if not isinstance(store_path.store, LocalStore):
        if repair:
            raise ShardLayoutError(
                f"check --repair works on local directories; {type(store_path.store).__name__} "
                "has no journals or leftovers to repair (run check without --repair to see "
                "what is wrong; rewrite or delete a damaged object)"
            )
        return _check_objects(array, deep=deep, client=client, progress=progress)
    directory = store_path.store.root / store_path.path if store_path.path else (
        store_path.store.root
    )
    try:
        shards: ArrayShards | None = shards_of(array)
    except ShardLayoutError:
        shards = None
    found: dict[str, ShardCheck] = {}

    def entry(key: str) -> ShardCheck:
        return found.setdefault(key, ShardCheck(key))

    # Files killed writers left behind, reported under the key they were meant for.
    now = time.time()
    for dirpath, _, names in os.walk(directory) if directory.is_dir() else ():
        for name in names:
            path = Path(dirpath) / name
            left = _leftover(path, now, stale_after)
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
    decoder = _Decoder(array, shards) if deep else None
    stored = list(_stored_keys(array, per_object))
    if progress is not None:
        progress(0, len(stored))
    for done, (key, coords) in enumerate(stored, 1):
        result = entry(key)
        if shards is not None and not shards.bare:
            path = directory / key
            if path.is_file():
                _check_stored_shard(shards, coords, path.read_bytes(), result, decoder)
        elif shards is not None:
            _check_shard(shards, key, coords, result, repair, decoder)
        elif decoder is not None:
            _check_chunk(directory, key, coords, result, decoder)
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
    try:
        shards: ArrayShards | None = shards_of(array)
    except ShardLayoutError:
        shards = None
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
        from zarrext.store_refs import array_ref

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
        self.decoder = _Decoder(array, shards) if deep else None

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
            _check_stored_shard(self.shards, coords, data, result, self.decoder)
        return result if result.details else None


def _check_on_worker(
    ref: Any, deep: bool, threads: int, items: list[tuple[str, tuple[int, ...]]]
) -> tuple[int, list[ShardCheck]]:
    """One Dask task: check the objects ``items`` of the array ``ref`` describes."""
    array = ref.open()
    try:
        shards: ArrayShards | None = shards_of(array)
    except ShardLayoutError:
        shards = None
    checker = _ObjectChecker(array, shards, deep)
    results = on_threads(checker.check, items, min(threads, len(items)))
    return len(items), [r for r in results if r is not None]


def _check_stored_shard(
    shards: ArrayShards,
    coords: tuple[int, ...],
    stored: bytes,
    result: ShardCheck,
    decoder: _Decoder | None,
) -> None:
    """Check a stored object holding a shard: the codecs after the sharding codec
    (a compressor, a checksum) are undone first, then the shard is checked."""
    try:
        data = shards.shard_bytes(stored)
    except _DECODE_ERRORS as e:
        result.problem(
            "undecodable_object",
            f"does not decode through {shards.chain.outer_names()} (the codecs after "
            f"sharding_indexed): {error_text(e)}",
            advice=REWRITE,
        )
        return
    _check_shard_bytes(shards, coords, data, result, decoder)


def _check_shard_bytes(
    shards: ArrayShards,
    coords: tuple[int, ...],
    data: bytes,
    result: ShardCheck,
    decoder: _Decoder | None,
) -> None:
    def read(length: int, start: int) -> bytes:
        return data[start : start + length]

    index = _index_problem(read, len(data), shards.geometry, shards.codec, result, "object")
    if index is not None:
        offset, _, table = index
        _check_table(shards, coords, len(data), offset, table, read, result, decoder, None,
                     "object")
