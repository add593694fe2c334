"""Validate shard files and repair what an interrupted writer left behind.

:func:`check` reads every shard (under a shared lock, so it sees no write half
done) and reports: index that does not decode (checksum), entries past the end of
the file or over the index, entries that overlap, journals of interrupted writes
and stale temporary files. It changes nothing unless ``repair=True``:

- an interrupted write is rolled back from its journal (:func:`writer.recover`);
- a temporary file whose writing process is gone is deleted;
- entries that point outside the file or overlap are marked empty (the chunk
  reads as the fill value; the finding says which chunk was dropped);
- an index that fails its checksum with no journal to explain it cannot be
  rebuilt and is reported as unrepaired.
"""

from __future__ import annotations

import fcntl
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zarrext.sharding import writer
from zarrext.sharding.layout import ArrayShards, ShardLayoutError, shards_of

__all__ = ["ShardCheck", "check", "recover_array"]

_TMP_PID = re.compile(re.escape(writer.TMP_MARK) + r"(\d+)-")


@dataclass
class ShardCheck:
    """What :func:`check` found in one shard.

    Attributes
    ----------
    key : str
        The shard's store key.
    problems : list of str
        Problems found (empty: the shard validates).
    repaired : list of str
        What ``repair=True`` did about them.
    """

    key: str
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems or len(self.repaired) >= len(self.problems)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale_temp(name: str) -> bool:
    match = _TMP_PID.search(name)
    return match is not None and not _pid_alive(int(match.group(1)))


def _entry_problems(
    table: np.ndarray, size: int, index_range: tuple[int, int]
) -> tuple[list[str], list[int]]:
    """Problems of a decoded index table and the chunks to drop to fix them."""
    problems: list[str] = []
    drop: set[int] = set()
    present = np.flatnonzero(table[:, 0] != writer.EMPTY)
    starts = table[present, 0].astype(object)
    ends = starts + table[present, 1].astype(object)
    lo, hi = index_range
    for flat, start, end in zip(present.tolist(), starts, ends, strict=True):
        if end > size:
            problems.append(f"inner chunk {flat}: bytes {start}-{end} past end of file ({size})")
            drop.add(flat)
        elif start < hi and end > lo:
            problems.append(f"inner chunk {flat}: bytes {start}-{end} overlap the index")
            drop.add(flat)
    order = sorted((s, e, f) for f, s, e in zip(present.tolist(), starts, ends, strict=True))
    reach_end, reach_flat = -1, -1
    for start, end, flat in order:
        if start < reach_end and flat not in drop and reach_flat not in drop:
            problems.append(f"inner chunks {reach_flat} and {flat} overlap at byte {start}")
            drop.add(flat)
        if end > reach_end:
            reach_end, reach_flat = end, flat
    return problems, sorted(drop)


def _check_one(shards: ArrayShards, key: str, repair: bool) -> ShardCheck | None:
    path = shards.path(key)
    result = ShardCheck(key)
    for tmp in path.parent.glob(path.name + writer.TMP_MARK + "*") if path.parent.exists() else ():
        if _stale_temp(tmp.name):
            result.problems.append(f"stale temporary file {tmp.name}")
            if repair:
                tmp.unlink(missing_ok=True)
                result.repaired.append(f"deleted {tmp.name}")
    journal = writer.journal_path(path)
    if not path.exists():
        if writer.journal_pending(path):
            result.problems.append("journal of a shard that no longer exists")
            if repair:
                journal.unlink(missing_ok=True)
                result.repaired.append("deleted the journal")
        return result if result.problems else None
    geometry, codec = shards.geometry, shards.codec
    flags = os.O_RDWR if repair else os.O_RDONLY
    fd = os.open(path, flags)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if repair else fcntl.LOCK_SH)
        if writer.journal_pending(path):
            torn = writer.read_journal(path) is None
            result.problems.append(
                "interrupted write: torn journal (index untouched)"
                if torn
                else "interrupted write: journal present (will roll back)"
            )
            if repair:
                writer.recover(path, fd)
                result.repaired.append("rolled back the interrupted write")
        try:
            size, offset, raw, table = writer.read_index(fd, codec, geometry, key)
        except writer.ShardCorruptError as e:
            result.problems.append(str(e))
            return result
        problems, drop = _entry_problems(table, size, (offset, offset + geometry.index_size))
        result.problems.extend(problems)
        if repair and drop:
            table[drop] = writer.EMPTY
            writer._write_journal(path, size, offset, raw)
            os.pwrite(fd, writer.encode_index(codec, geometry, table), offset)
            writer._clear_journal(path)
            result.repaired.extend(f"marked inner chunk {f} empty" for f in drop)
    finally:
        os.close(fd)
    return result if result.problems else None


def check(array: Any, *, repair: bool = False) -> list[ShardCheck]:
    """Validate every shard of a sharded array on a local store.

    Parameters
    ----------
    array : zarr.Array
        A sharded Zarr format 3 array in a ``LocalStore``.
    repair : bool
        Fix what can be fixed (see the module docstring). Without it nothing is
        changed.

    Returns
    -------
    list of ShardCheck
        One entry per shard with problems; an empty list means every shard validates.
    """
    shards = shards_of(array)
    if shards.directory is None:
        raise ShardLayoutError("zarrext check works on arrays in a local directory store")
    found = [_check_one(shards, key, repair) for key in shards.keys]
    return [f for f in found if f is not None]


def recover_array(array: Any) -> int:
    """Roll back interrupted shard writes of ``array``; returns how many were.

    A no-op for arrays that are not sharded or not on a local store. Safe while
    other writers run: each shard is recovered under its lock.
    """
    try:
        shards = shards_of(array)
    except ShardLayoutError:
        return 0
    if shards.directory is None or not shards.directory.is_dir():
        return 0
    count = 0
    for dirpath, _, files in os.walk(shards.directory):
        for name in files:
            if not name.endswith(writer.JOURNAL_SUFFIX):
                continue
            shard = Path(dirpath) / name[: -len(writer.JOURNAL_SUFFIX)]
            if not writer.journal_pending(shard):
                continue
            if not shard.exists():
                (Path(dirpath) / name).unlink(missing_ok=True)
                count += 1
                continue
            with writer.locked_shard(shard):
                count += 1  # locked_shard rolled it back (or another writer did)
    return count
