"""Diagnosis of one stored shard or chunk for :func:`zarrext.jobs.shards.check.check`.

A shard's bytes, from a locked local file or a whole object read into memory: its
index is read and decoded (a cut-short file told from a checksum error), its entries
checked against the file and each other, and, with a :class:`Decoder`, every inner
chunk decoded; beside a local shard file, its journal and reuse quarantine. Each
problem is recorded on a :class:`~zarrext.jobs.shards.check_report.ShardCheck`; a local
shard is repaired in place (under its exclusive lock) when asked. Which keys to
check, and where, is the driver's business (:mod:`zarrext.jobs.shards.check`).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from zarr.codecs import ShardingCodec
from zarr.core.buffer import default_buffer_prototype

from zarrext._zarr_compat import inner_chunk_spec, inner_chunk_transform
from zarrext.codecs.blosc_frames import checked_codec
from zarrext.codecs.chunk_context import chunk_index
from zarrext.errors import (
    DECODE_ERRORS,
    ChunkDecodeError,
    error_text,
    hex_bytes,
    is_decode_error,
)
from zarrext.jobs.shards.check_report import OBJECT_ADVICE, RESTORE, REWRITE, ShardCheck
from zarrext.sharding.array_shards import ArrayShards, stored_spec_of
from zarrext.sharding.geometry import EMPTY, ShardGeometry
from zarrext.sharding.journal import (
    discard_journal,
    free_path,
    journal_path,
    journal_pending,
    read_journal,
    read_quarantine,
    recover,
    replace_index,
    write_quarantine,
)
from zarrext.sharding.state import decode_table, encode_index


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
    """``codec`` as zarr-python's own ``ShardingCodec``, nested ones too, its blosc
    codecs checking each frame (:func:`~zarrext.codecs.blosc_frames.checked_codec`): a
    check only decodes, and zarrext's runtime sharding codec (of
    :func:`zarrext.open_array`) keeps nested shards off the synchronous path that
    decodes one inner chunk."""
    stock = codec if type(codec) is ShardingCodec else ShardingCodec.from_dict(codec.to_dict())
    return checked_codec(stock)


class Decoder:
    """Decodes single chunks (or inner chunks) of an array, for ``deep`` checks."""

    def __init__(self, array: Any, shards: ArrayShards | None) -> None:
        from zarrext.pipeline.codec_pipeline import build_pipeline

        metadata = array.metadata
        self.shards = shards
        if shards is not None:
            self.spec = inner_chunk_spec(shards.codec, shards.shard_spec)
            self.transform = inner_chunk_transform(_stock(shards.codec), shards.shard_spec)
        else:
            self.spec = stored_spec_of(metadata)
            pipeline = build_pipeline(metadata, array.path)
            self.transform = pipeline.transform

    def problem(self, coords: tuple[int, ...], data: bytes) -> str | None:
        """Why ``data`` does not decode as the chunk at ``coords`` (the codec that
        failed and its error), or None."""
        token = chunk_index.set(coords)
        try:
            decoded = self.transform.decode_chunk(
                default_buffer_prototype().buffer.from_bytes(data), self.spec
            )
            if tuple(decoded.shape) != tuple(self.spec.shape):
                return f"decodes to shape {tuple(decoded.shape)}, not {tuple(self.spec.shape)}"
        except DECODE_ERRORS as e:
            if not is_decode_error(e):
                raise
            error = ChunkDecodeError.wrapping(e, codecs=self.transform.codecs)
            return f"codec {error.codec!r}: {error.reason}" if error.codec else error.reason
        finally:
            chunk_index.reset(token)
        return None


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


def check_shard(
    shards: ArrayShards,
    key: str,
    coords: tuple[int, ...],
    result: ShardCheck,
    repair: bool,
    decoder: Decoder | None,
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
        if journal_pending(path):
            result.problem(
                "orphan_journal", "journal of a shard that no longer exists",
                fix="deleted the journal", repaired=repair,
            )
            if repair and not path.exists():
                discard_journal(path)
        return
    try:
        if not journal_pending(path) and journal_path(path).exists():
            result.problem(
                "inactive_journal",
                "inactive journal left beside the shard (older zarrext kept them)",
                fix="deleted the inactive journal", repaired=repair,
            )
            if repair:
                discard_journal(path)
        if journal_pending(path):
            if read_journal(path) is None:
                kind, text = "torn_journal", "interrupted write: torn journal (index untouched)"
            else:
                kind, text = "interrupted_write", "interrupted write: journal present"
            result.problem(kind, text, fix="rolled back the interrupted write", repaired=repair)
            if not repair:
                # The index is half written until the rollback: check it after --repair.
                return
            recover(path, fd)
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
            replace_index(
                path, fd, size, offset, raw, encode_index(codec, geometry, table)
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
    decoder: Decoder | None,
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


def check_chunk(
    directory: Path, key: str, coords: tuple[int, ...], result: ShardCheck, decoder: Decoder
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


def check_stored_shard(
    shards: ArrayShards,
    coords: tuple[int, ...],
    stored: bytes,
    result: ShardCheck,
    decoder: Decoder | None,
) -> None:
    """Check a stored object holding a shard: the codecs after the sharding codec
    (a compressor, a checksum) are undone first, then the shard is checked."""
    try:
        data = shards.shard_bytes(stored)
    except DECODE_ERRORS as e:
        if not is_decode_error(e):
            raise
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
    decoder: Decoder | None,
) -> None:
    def read(length: int, start: int) -> bytes:
        return data[start : start + length]

    index = _index_problem(read, len(data), shards.geometry, shards.codec, result, "object")
    if index is not None:
        offset, _, table = index
        _check_table(shards, coords, len(data), offset, table, read, result, decoder, None,
                     "object")
