"""Validate chunk and shard files and repair what an interrupted writer left behind.

:func:`check` works on any Zarr format 3 array in a local directory, sharded or
not. It reads every shard under a shared lock (so it sees no write half done)
and reports, once per store key:

- a shard shorter than its index (a *truncated* file) apart from an index that
  does not decode (a *checksum* error), entries past the end of the file or over
  the index, entries that overlap;
- journals of interrupted writes;
- files that writers leave behind when killed: zarrext's temporary files
  (``*.zarrext-tmp-<pid>-*``, stale once that process is gone) and zarr-python's
  (``<key>.<hex>.partial``, stale once untouched for ``stale_after`` seconds);
- with ``deep=True``, every stored chunk (every inner chunk of every shard) that
  does not decode through the array's codecs (checksums, conditional headers,
  optional lengths, ...), named by its chunk coordinates.

It changes nothing unless ``repair=True``:

- an interrupted write is rolled back from its journal (:func:`writer.recover`);
- stale temporary files are deleted;
- entries that point outside the file or overlap are marked empty (the chunk
  reads as the fill value; the finding says which chunk was dropped);
- what cannot be repaired stays in :attr:`ShardCheck.remaining`: an index that
  fails its checksum with no journal to explain it, a truncated shard, a chunk
  whose bytes do not decode (its data is gone; rewrite it or delete it).
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from zarr.core.buffer import default_buffer_prototype
from zarr.core.metadata import ArrayV3Metadata
from zarr.core.metadata.v3 import RegularChunkGridMetadata
from zarr.storage import LocalStore

from zarrext._context import _chunk_index
from zarrext._zarr_compat import async_array_of, inner_chunk_spec, inner_chunk_transform
from zarrext.sharding import writer
from zarrext.sharding.geometry import EMPTY, ShardLayoutError
from zarrext.sharding.journal import free_path, read_quarantine, write_quarantine
from zarrext.sharding.layout import ArrayShards, recover_array, shards_of
from zarrext.sharding.state import decode_table

__all__ = ["STALE_AFTER", "ShardCheck", "check", "recover_array"]

_TMP_PID = re.compile(re.escape(writer.TMP_MARK) + r"(\d+)-")
# zarr-python's LocalStore writes ``path.with_suffix(f".{uuid4().hex}.partial")``.
_ZARR_PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")
STALE_AFTER = 60.0
"""Seconds after which an untouched zarr-python ``*.partial`` file counts as left behind."""

# Errors a codec raises on bytes it cannot decode: zarr's and numcodecs' own are
# ValueError/TypeError; some compressors raise RuntimeError (zstd), EOFError,
# OSError (gzip's BadGzipFile), zlib.error, or fail on a short buffer (IndexError).
_DECODE_ERRORS = (ValueError, TypeError, RuntimeError, EOFError, OSError, IndexError, KeyError)


@dataclass
class ShardCheck:
    """What :func:`check` found at one store key (a shard, or a chunk file).

    Attributes
    ----------
    key : str
        The store key, relative to the array (e.g. ``"c/0/1"``).
    problems : list of str
        Problems found (empty: the key validates).
    repaired : list of str
        What ``repair=True`` did about them.
    remaining : list of str
        Problems still there afterwards (every problem, without ``repair``).
    """

    key: str
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    remaining: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether nothing is left to fix (after repair, if it ran)."""
        return not self.remaining

    def problem(self, text: str, *, fixed: str | None = None) -> None:
        """Record a problem, and what was done about it (None: nothing)."""
        self.problems.append(text)
        if fixed is None:
            self.remaining.append(text)
        else:
            self.repaired.append(fixed)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of this finding."""
        return {
            "key": self.key,
            "ok": self.ok,
            "problems": list(self.problems),
            "repaired": list(self.repaired),
            "remaining": list(self.remaining),
        }


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _leftover(path: Path, now: float, stale_after: float) -> tuple[str, str] | None:
    """``(target name, description)`` of a file a killed writer left, if ``path`` is one."""
    name = path.name
    match = _TMP_PID.search(name)
    if match is not None:
        if _pid_alive(int(match.group(1))):
            return None
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
) -> list[tuple[str, int]]:
    """Problems of a decoded index table, each with the inner chunk to drop to fix it."""
    problems: list[tuple[str, int]] = []
    drop: set[int] = set()
    present = np.flatnonzero(table[:, 0] != EMPTY)
    starts = table[present, 0].astype(object)
    ends = starts + table[present, 1].astype(object)
    lo, hi = index_range
    for flat, start, end in zip(present.tolist(), starts, ends, strict=True):
        if end > size:
            problems.append((
                f"inner chunk {flat}: bytes {start}-{end} past end of file ({size}; "
                "the shard looks truncated)", flat
            ))
            drop.add(flat)
        elif start < hi and end > lo:
            problems.append((f"inner chunk {flat}: bytes {start}-{end} overlap the index", flat))
            drop.add(flat)
    order = sorted((s, e, f) for f, s, e in zip(present.tolist(), starts, ends, strict=True))
    reach_end, reach_flat = -1, -1
    for start, end, flat in order:
        if start < reach_end and flat not in drop and reach_flat not in drop:
            problems.append((f"inner chunks {reach_flat} and {flat} overlap at byte {start}", flat))
            drop.add(flat)
        if end > reach_end:
            reach_end, reach_flat = end, flat
    return problems


class _Decoder:
    """Decodes single chunks (or inner chunks) of an array, for ``deep`` checks."""

    def __init__(self, array: Any, shards: ArrayShards | None) -> None:
        from zarrext.pipeline import build_pipeline
        from zarrext.sharding.layout import shard_spec_of

        metadata = array.metadata
        self.shards = shards
        if shards is not None:
            self.spec = inner_chunk_spec(shards.codec, shards.shard_spec)
            self.transform = inner_chunk_transform(shards.codec, shards.shard_spec)
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
            return f"{type(e).__name__}: {e}"
        finally:
            _chunk_index.reset(token)
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
                "reuse quarantine of a shard that no longer exists",
                fixed="deleted the quarantine file" if repair else None,
            )
            if repair and not path.exists():  # not if a writer just created the shard
                free_path(path).unlink(missing_ok=True)
        if writer.journal_pending(path):
            result.problem(
                "journal of a shard that no longer exists",
                fixed="deleted the journal" if repair else None,
            )
            if repair and not path.exists():
                writer.discard_journal(path)
        return
    try:
        if not writer.journal_pending(path) and writer.journal_path(path).exists():
            result.problem(
                "inactive journal left beside the shard (older zarrext kept them)",
                fixed="deleted the inactive journal" if repair else None,
            )
            if repair:
                writer.discard_journal(path)
        if writer.journal_pending(path):
            torn = writer.read_journal(path) is None
            text = (
                "interrupted write: torn journal (index untouched)"
                if torn
                else "interrupted write: journal present (will roll back)"
            )
            result.problem(text, fixed="rolled back the interrupted write" if repair else None)
            if repair:
                writer.recover(path, fd)
        if repair and free_path(path).exists():
            # Not a problem (it guards readers for a few seconds); drop what expired.
            write_quarantine(path, read_quarantine(path) or [])
        try:
            size, offset, raw, table = writer.read_index(fd, codec, geometry, key)
        except writer.ShardCorruptError as e:
            result.problem(str(e))
            return
        problems = _entry_problems(table, size, (offset, offset + geometry.index_size))
        drop = sorted(flat for _, flat in problems)
        for text, flat in problems:
            result.problem(text, fixed=f"marked inner chunk {flat} empty" if repair else None)
        if repair and drop:
            table[drop] = EMPTY
            writer.replace_index(
                path, fd, size, offset, raw, writer.encode_index(codec, geometry, table)
            )
        if decoder is None:
            return
        per_shard = geometry.chunks_per_shard
        origin = tuple(c * k for c, k in zip(coords, per_shard, strict=True))
        for flat in np.flatnonzero(table[:, 0] != EMPTY).tolist():
            if flat in drop:
                continue
            start, length = (int(v) for v in table[flat])
            inner = tuple(
                o + int(i) for o, i in zip(origin, np.unravel_index(flat, per_shard), strict=True)
            )
            why = decoder.problem(inner, os.pread(fd, length, start))
            if why is not None:
                result.problem(
                    f"inner chunk {flat} (chunk {inner} of the array) does not decode: {why}"
                )
    finally:
        os.close(fd)


def _check_chunk(
    directory: Path, key: str, coords: tuple[int, ...], result: ShardCheck, decoder: _Decoder
) -> None:
    try:
        data = (directory / key).read_bytes()
    except FileNotFoundError:
        return
    why = decoder.problem(coords, data)
    if why is not None:
        result.problem(f"chunk {coords} does not decode: {why}")


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
) -> list[ShardCheck]:
    """Validate the stored chunks (or shards) of an array in a local directory.

    Parameters
    ----------
    array : zarr.Array
        A Zarr format 3 array in a ``LocalStore``, sharded or not.
    repair : bool
        Fix what can be fixed (see the module docstring). Without it nothing is
        changed.
    deep : bool
        Also decode every stored chunk (every inner chunk of every shard) and
        report each one that fails.
    stale_after : float
        Age in seconds after which a zarr-python ``*.partial`` file is reported
        (and removed by ``repair``): younger ones may belong to a live writer.

    Returns
    -------
    list of ShardCheck
        One entry per store key with problems, each key once; an empty list means
        everything validates.

    Raises
    ------
    ShardLayoutError
        When the array is not a Zarr format 3 array in a local directory.
    """
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
        return _check_objects(array, deep=deep)
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
            entry(key).problem(text, fixed=f"deleted {name}" if repair else None)
            if repair:
                path.unlink(missing_ok=True)

    if shards is not None:
        per_object = shards.shard_spec.shape
    elif isinstance(metadata.chunk_grid, RegularChunkGridMetadata):
        per_object = tuple(metadata.chunk_grid.chunk_shape)
    else:
        raise ShardLayoutError("zarrext check needs a regular chunk grid")
    decoder = _Decoder(array, shards) if deep else None
    for key, coords in _stored_keys(array, per_object):
        result = entry(key)
        if shards is not None:
            _check_shard(shards, key, coords, result, repair, decoder)
        elif decoder is not None:
            _check_chunk(directory, key, coords, result, decoder)
    return [f for f in found.values() if f.problems]


def _check_objects(array: Any, *, deep: bool) -> list[ShardCheck]:
    """:func:`check` for a store of whole objects (object store, zip, memory).

    Each stored object is read whole: a shard's index must decode and its entries
    stay inside the object and apart; with ``deep``, every chunk must decode.
    """
    from zarr.core.sync import sync

    from zarrext.stores import list_keys

    metadata = array.metadata
    store_path = async_array_of(array).store_path
    try:
        shards: ArrayShards | None = shards_of(array)
    except ShardLayoutError:
        shards = None
    if shards is not None:
        per_object = shards.shard_spec.shape
    elif isinstance(metadata.chunk_grid, RegularChunkGridMetadata):
        per_object = tuple(metadata.chunk_grid.chunk_shape)
    else:
        raise ShardLayoutError("zarrext check needs a regular chunk grid")
    if shards is None and not deep:
        return []  # nothing to parse in a plain chunk without decoding it
    prefix = f"{store_path.path}/" if store_path.path else ""
    stored = set(list_keys(store_path.store, prefix))
    decoder = _Decoder(array, shards) if deep else None
    prototype = default_buffer_prototype()
    found: list[ShardCheck] = []
    for key, coords in _stored_keys(array, per_object):
        if prefix + key not in stored:
            continue
        buffer = sync((store_path / key).get(prototype=prototype))
        if buffer is None:  # deleted since listed
            continue
        data, result = buffer.to_bytes(), ShardCheck(key)
        if shards is None:
            assert decoder is not None
            why = decoder.problem(coords, data)
            if why is not None:
                result.problem(f"chunk {coords} does not decode: {why}")
        else:
            _check_shard_bytes(shards, key, coords, data, result, decoder)
        if result.problems:
            found.append(result)
    return found


def _check_shard_bytes(
    shards: ArrayShards,
    key: str,
    coords: tuple[int, ...],
    data: bytes,
    result: ShardCheck,
    decoder: _Decoder | None,
) -> None:
    geometry = shards.geometry
    isz = geometry.index_size
    if len(data) < isz:
        result.problem(
            f"truncated: the object is {len(data)} bytes, shorter than its {isz}-byte index"
        )
        return
    offset = 0 if geometry.index_location == "start" else len(data) - isz
    try:
        table = decode_table(
            shards.codec, geometry.chunks_per_shard, data[offset : offset + isz]
        )
    except ValueError as e:
        result.problem(f"index does not decode (checksum error?): {e}")
        return
    problems = _entry_problems(table, len(data), (offset, offset + isz))
    for text, _ in problems:
        result.problem(text)
    if decoder is None:
        return
    drop = {flat for _, flat in problems}
    per_shard = geometry.chunks_per_shard
    origin = tuple(c * k for c, k in zip(coords, per_shard, strict=True))
    for flat in np.flatnonzero(table[:, 0] != EMPTY).tolist():
        if flat in drop:
            continue
        start, length = (int(v) for v in table[flat])
        inner = tuple(
            o + int(i) for o, i in zip(origin, np.unravel_index(flat, per_shard), strict=True)
        )
        why = decoder.problem(inner, data[start : start + length])
        if why is not None:
            result.problem(
                f"inner chunk {flat} (chunk {inner} of the array) does not decode: {why}"
            )
