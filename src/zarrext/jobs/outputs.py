"""Outputs of whole-store jobs: never over their input, never seen half-built.

A job that writes a new array (``zarrext quantize --out``) must never leave
something that opens as a finished array when it is interrupted (Ctrl-C, an
error, kill -9), and a job replacing an output must leave the old one readable
until the new one is complete, through its path and through the consolidated
metadata of the groups holding it. How depends on what the store can do:

- a local directory or zip archive is built in a staging directory beside it
  (``.NAME.zarrext-tmp-<pid>-<host>-<id>``, no member of any group: no
  ``zarr.json`` at its root) and renamed into place when complete, over nothing
  but what the job saw at its start. A new output is renamed where nothing is, in
  one step that fails if anything is there (Linux's
  ``renameat2(RENAME_NOREPLACE)``; elsewhere ``mkdir`` claims the path, or a hard
  link puts a zip archive there): whatever appeared at the path during the run
  (another tool's array, a user's directory, a second job's output) stays, and
  the job fails with :class:`OutputConflictError`, its own output discarded. An
  old output the caller asked to replace is swapped with the new one in one step
  (Linux's ``renameat2(RENAME_EXCHANGE)``) and then removed, so its path holds
  the old output or the new one at every moment, a kill included; what the swap
  took out must be the output seen at the start (same inode; its ctime is checked
  just before), else the swap is undone and the job fails the same way. Where the
  exchange is not available (another OS, a file system without it) the old
  output is renamed into the staging directory just before: a kill between the
  two renames leaves it there, and the next run puts it back. The groups above holding
  consolidated metadata have it withdrawn before the swap and written again after
  (:func:`_publish` says why in that order). A rerun removes what a killed run
  writing the same output left, once its process is gone (the staging
  directory's name says which), and names in a warning the temporary outputs
  beside it that it cannot prove are a killed run's (:func:`find_leftovers`);
- on an object store (no rename) a new output is written where it will stay,
  each chunk once, through a :class:`MetadataLastStore`: its ``zarr.json``
  documents are held in memory and written only when the job succeeds, the
  arrays' first and the root's last, the root's only where none is (a
  conditional create: one another writer put there during the run is never
  overwritten). Until the root's ``zarr.json`` lands, nothing opens at the
  output. The groups above holding consolidated metadata are then consolidated
  again. An object :data:`UNFINISHED`, naming the job's process and host, is
  written first (where none is, by a conditional create) and deleted last: it
  says the objects there are the job's own. A second job finding it refuses
  while that process runs (or runs on another host); once it is gone, a rerun
  takes the marker over (a write conditional on its ETag: one rerun does) and
  replaces the killed job's leftovers without ``overwrite`` (or, when the root's
  ``zarr.json`` had landed, consolidates the groups above again and deletes the
  marker), and never touches anything else. A store without conditional writes
  (an fsspec store, or a server ignoring ``If-None-Match``: the marker is
  written twice to find out, and a warning says so) is read just before each of
  those writes instead: a writer in that moment is not detected;
- an existing output on an object store is never replaced, ``overwrite`` or not
  (:class:`OutputConflictError`, naming what to do instead). Without a rename,
  a replacement has to put the new objects at the old ones' keys one by one: a
  chunk key of the new output is the same key as the old output's, so between
  the first such write and the last the prefix holds a mix that is neither
  output (and deleting the old output first leaves nothing that opens), and a
  kill there loses both. Write to a new prefix and point readers to it, or
  delete the old output first;
- in an icechunk session the job writes in place: readers see nothing of it
  until the caller commits, and a failed job's changes are never committed;
- an output inside a Zarr format 2 group is refused before anything is read: it
  would be a format 3 node that the group's readers do not see as a member.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import json
import os
import shutil
import sys
import uuid
import warnings
import zipfile
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, WrapperStore

from zarrext import stores
from zarrext._zarr_compat import unwrapped_store
from zarrext.jobs.group_metadata import (
    STAGING_MARKER,
    consolidate,
    group_document,
    is_consolidated,
    withdraw,
)
from zarrext.stores import local_path

__all__ = [
    "STAGING_MARKER",
    "UNFINISHED",
    "Leftover",
    "RemoteLeftover",
    "MetadataLastStore",
    "OutputConflictError",
    "OutputLeftoverWarning",
    "UnconditionalStoreWarning",
    "check_disjoint",
    "find_leftovers",
    "find_remote_leftovers",
    "left_after_failure",
    "run_staged",
    "refuse_taken",
    "remove_leftover",
    "staged_output",
]

UNFINISHED = f"{STAGING_MARKER}unfinished"
"""The key, at an object-store output's root, of the object saying a job is writing
there: written before the first chunk, deleted after the last ``zarr.json``."""


class OutputConflictError(ValueError):
    """An output that would overwrite or overlap what the job must not touch."""


def _is_metadata(key: str) -> bool:
    return key == "zarr.json" or key.endswith("/zarr.json")


def _depth(key: str) -> int:
    return key.count("/")


def _sliced(value: Buffer, byte_range: ByteRequest | None) -> Buffer:
    """``value`` cut as a store's ``get`` cuts an object for ``byte_range``."""
    if byte_range is None:
        return value
    if isinstance(byte_range, RangeByteRequest):
        return value[byte_range.start : byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return value[byte_range.offset :]
    if isinstance(byte_range, SuffixByteRequest):
        return value[max(0, len(value) - byte_range.suffix) :]
    raise TypeError(f"unexpected byte range {byte_range!r}")


class MetadataLastStore(WrapperStore[Store]):
    """A store whose ``zarr.json`` writes wait in memory until :meth:`publish`.

    Chunks go to the wrapped store at once, at their final keys; ``zarr.json``
    documents are kept here (reads, listings and ``exists`` see them as if they
    were stored) and written by :meth:`publish`, innermost first, the root's last.
    A job interrupted before then leaves chunks that open as nothing.

    Parameters
    ----------
    store : Store
        Where the output goes.
    pending : dict, optional
        ``zarr.json`` documents already written (shared with the copies zarr makes,
        e.g. a read-only view, so that they all see the same ones).
    keep : mapping, optional
        Objects that ``delete_dir`` must leave in place (put back after it): the
        :data:`UNFINISHED` marker, which zarr's ``overwrite`` would delete.
    root_where_none : bool
        Whether :meth:`publish` writes the root's ``zarr.json`` only where none is
        (a conditional create, where the store has one), raising
        :class:`RootTakenError` if one is there.
    """

    def __init__(
        self,
        store: Store,
        pending: dict[str, Buffer] | None = None,
        keep: Mapping[str, Buffer] | None = None,
        *,
        root_where_none: bool = False,
    ) -> None:
        super().__init__(store)
        self.pending: dict[str, Buffer] = {} if pending is None else pending
        self.keep: Mapping[str, Buffer] = dict(keep or {})
        self.root_where_none = root_where_none

    @property
    def wrapped(self) -> Store:
        """The store chunks go to (and, once published, the metadata)."""
        return self._store

    def _with_store(self, store: Store) -> MetadataLastStore:
        return type(self)(store, self.pending, self.keep, root_where_none=self.root_where_none)

    @property
    def _supports_sync_io(self) -> bool:
        # The synchronous methods would bypass the held-back documents.
        return False

    def __eq__(self, value: object) -> bool:
        return isinstance(value, MetadataLastStore) and value.pending is self.pending

    __hash__ = None  # type: ignore[assignment]

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if key in self.pending:
            return _sliced(self.pending[key], byte_range)
        return await self._store.get(key, prototype, byte_range)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(
            await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges))
        )

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        for key, prototype, byte_range in requests:
            yield key, await self.get(key, prototype, byte_range)

    async def exists(self, key: str) -> bool:
        return key in self.pending or await self._store.exists(key)

    async def set(self, key: str, value: Buffer) -> None:
        if _is_metadata(key):
            self._check_writable()
            self.pending[key] = value
        else:
            await self._store.set(key, value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        if not await self.exists(key):
            await self.set(key, value)

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        await asyncio.gather(*(self.set(k, v) for k, v in values))

    async def delete(self, key: str) -> None:
        self.pending.pop(key, None)
        await self._store.delete(key)

    async def delete_dir(self, prefix: str) -> None:
        within = f"{prefix.rstrip('/')}/" if prefix else ""
        for key in [k for k in self.pending if k.startswith(within)]:
            del self.pending[key]
        await self._store.delete_dir(prefix)
        for key, value in self.keep.items():
            if key.startswith(within):
                await self._store.set(key, value)

    async def is_empty(self, prefix: str) -> bool:
        within = f"{prefix.rstrip('/')}/" if prefix else ""
        if any(k.startswith(within) for k in self.pending):
            return False
        return await self._store.is_empty(prefix)

    async def _merged(
        self, listed: AsyncIterator[str], held: Iterable[str], within: str = ""
    ) -> AsyncIterator[str]:
        # The kept objects (the UNFINISHED marker) are zarrext's, no part of the Zarr
        # hierarchy: listed, zarr's group walk would warn "Object at
        # .zarrext-tmp-unfinished is not recognized as a component of a Zarr hierarchy".
        seen = {k[len(within):] for k in self.keep if k.startswith(within)}
        async for key in listed:
            if key not in seen:
                seen.add(key)
                yield key
        for key in held:
            if key not in seen:
                seen.add(key)
                yield key

    def list(self) -> AsyncIterator[str]:
        return self._merged(self._store.list(), list(self.pending))

    def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        return self._merged(
            self._store.list_prefix(prefix), [k for k in self.pending if k.startswith(prefix)]
        )

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        within = f"{prefix.rstrip('/')}/" if prefix else ""
        children = [
            k[len(within):].split("/", 1)[0] for k in self.pending if k.startswith(within)
        ]
        return self._merged(self._store.list_dir(prefix), children, within)

    async def publish(self) -> None:
        """Write the held ``zarr.json`` documents: innermost first, the root's last.

        Raises
        ------
        RootTakenError
            If the root's is to be written where none is, and one is there (the
            others are written; the root's is held).
        """
        for key in sorted(self.pending, key=lambda k: (-_depth(k), k)):
            if key == "zarr.json" and self.root_where_none:
                # Read first too: the one check where a store has no conditional
                # write, or a server ignores it (see staged_output).
                if await self._store.exists(key):
                    raise RootTakenError(key)
                created = await stores.create_object_async(self._store, key,
                                                           self.pending[key].to_bytes())
                if created is None:
                    await self._store.set(key, self.pending[key])
                elif not created:
                    raise RootTakenError(key)
            else:
                await self._store.set(key, self.pending[key])
        self.pending.clear()


class RootTakenError(Exception):
    """A ``zarr.json`` another writer put at the root of an output being published."""


def _remote(store_like: Any) -> tuple[str, str] | None:
    """(scheme, path) of an object store, fsspec store or URL, to compare two of them."""
    if isinstance(store_like, Store):
        return stores.remote_location(unwrapped_store(store_like))
    if isinstance(store_like, str) and stores.local_path(store_like) is None:
        scheme, _, rest = store_like.partition("://")
        return scheme, rest.strip("/")
    return None


def in_session(store_like: Any) -> tuple[Any, str] | None:
    """(store, path) of an icechunk session's store or a ``StorePath`` on one."""
    from zarr.storage import StorePath

    from zarrext.jobs.transactions import is_session_store

    store, path = (
        (store_like.store, store_like.path) if isinstance(store_like, StorePath)
        else (store_like, "")
    )
    return (store, path.strip("/")) if is_session_store(store) else None


def check_disjoint(source: Any, output: Any) -> None:
    """Refuse an output equal to, inside, or containing the source."""
    src, out = local_path(source), local_path(output)
    ss, so = in_session(source), in_session(output)
    if ss is not None and so is not None:
        if ss[0] != so[0]:  # two sessions: two repositories, or two versions of one
            return
        a, b = Path("/", ss[1]), Path("/", so[1])
    elif src is not None and out is not None:
        a, b = src.resolve(), out.resolve()
    else:
        rs, ro = _remote(source), _remote(output)
        if rs is None or ro is None or rs[0] != ro[0]:
            return
        a, b = Path("/", rs[1]), Path("/", ro[1])
    if a == b:
        raise OutputConflictError(f"the output {output} is the input; choose another --out")
    if a in b.parents:
        raise OutputConflictError(f"the output {output} is inside the input {source}")
    if b in a.parents:
        raise OutputConflictError(f"the output {output} contains the input {source}")


def _is_zarr_node(path: Path) -> bool:
    if path.suffix == ".zip" and path.is_file():
        with contextlib.suppress(zipfile.BadZipFile), zipfile.ZipFile(path) as archive:
            return "zarr.json" in archive.namelist()
        return False
    return any((path / name).is_file() for name in ("zarr.json", ".zarray", ".zgroup"))


@contextlib.contextmanager
def staged_output(
    output: Any, *, overwrite: bool, storage_options: Mapping[str, Any] | None = None
) -> Iterator[Any]:
    """Yield where to build ``output``; it opens at ``output`` only on success.

    ``output`` is a local path or URL (opened with ``storage_options``), or a zarr
    store (local, zip, object store, fsspec, an icechunk session's). On any
    exception (KeyboardInterrupt included) what was written is removed and nothing
    at ``output`` opens or changes. Stores of other kinds (e.g. a ``MemoryStore``)
    are written in place. See the module's description for each kind of store; on
    an object store the store yielded is a :class:`MetadataLastStore`. The groups
    above ``output`` that hold consolidated metadata are consolidated again, so
    that readers trusting it see the new output, and never a mix of the two.

    Raises
    ------
    OutputConflictError
        If ``output`` exists and ``overwrite`` is false, or it exists and is not a
        Zarr array or group (never replaced, whatever ``overwrite`` says), or it
        exists on an object store (never replaced there either), or another job
        is writing it, or it is inside a Zarr format 2 group. Leftovers of a
        killed job of zarrext's own (:data:`UNFINISHED`) are replaced. At the
        end, if something else than what was at ``output`` at the start is there
        (put there during the run): it stays, and what was written is discarded.
    """
    if isinstance(output, str) and local_path(output) is None:
        output = stores.open_store(output, mode="w", storage_options=storage_options)
    if isinstance(output, Store) and _remote(output) is not None:
        _refuse_inside_format_2(output, _format_2_group_above_remote(output))
        with _staged_remote(output, overwrite=overwrite) as remote:
            yield remote
        return
    session = in_session(output)
    if session is not None:
        # An icechunk session is its own staging area: readers see nothing of it
        # until the caller commits, and a failed job's changes are never committed.
        _refuse_existing_in_session(*session, output=output, overwrite=overwrite)
        yield output
        _consolidate_again(_consolidated_above(output))  # committed with the output
        return
    path = local_path(output)
    if path is None:
        yield output
        return
    with _staged_local(output, path, overwrite=overwrite) as target:
        yield target


# Inside a local output's staging directory: the output being built (then, once
# exchanged, the old output being removed), the old output renamed aside where no
# exchange exists, and the groups above whose consolidated metadata is to be written.
_BUILT = "output"
_REPLACED = "replaced"
_RECORD = "consolidate.json"


@contextlib.contextmanager
def _staged_local(output: Any, path: Path, *, overwrite: bool) -> Iterator[Any]:
    """:func:`staged_output` for a local directory or zip archive.

    The output is built inside a staging directory beside ``path``
    (``.NAME.zarrext-tmp-<pid>-<host>-<id>/output``). The staging directory holds
    no ``zarr.json``, so in a group it is no member: a reader walking the group
    finds no array there, and consolidated metadata never lists it; its name says
    whose it is, so that a rerun can remove it once that process is gone. What
    sits at ``path`` at the start (its identity, :func:`_identity`) is the only
    thing the publication may replace.
    """
    path = path.parent.resolve() / path.name  # the groups above are found by path
    _refuse_inside_format_2(output, _format_2_group_above_local(path))
    _clear_leftovers(path)
    _refuse_existing_local(output, path, overwrite=overwrite)
    seen = _identity(path)
    staging = _staging_path(path)
    staging.mkdir(parents=True)
    zipped = path.suffix == ".zip"
    # A zip archive is built as a directory, then archived whole: a job writes some
    # objects twice (a group's zarr.json, consolidated again), which a zip cannot replace.
    tree = staging / _BUILT
    built = staging / f"{_BUILT}.zip" if zipped else tree
    target: Any = LocalStore(tree) if zipped or isinstance(output, LocalStore) else str(tree)
    try:
        yield target
        if zipped:
            archived(tree, built)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _publish(staging, built, path, seen)


def archived(tree: Path, archive: Path) -> None:
    """Write the directory ``tree`` as the zip ``archive``, its root at the archive's root
    (as zarr's ``ZipStore`` writes one: entries stored uncompressed), then remove ``tree``."""
    with zipfile.ZipFile(archive, mode="x", compression=zipfile.ZIP_STORED,
                         allowZip64=True) as out:
        for file in sorted(p for p in tree.rglob("*") if p.is_file()):
            out.write(file, file.relative_to(tree).as_posix())
    shutil.rmtree(tree)


def _refuse_inside_format_2(output: Any, group: str | None) -> None:
    """Refuse an output inside the Zarr format 2 group ``group`` (None: it is not).

    The output is a format 3 array or group; its readers (xarray, zarr-python) open
    a format 2 group as format 2 and find its members by their ``.zarray`` or
    ``.zgroup`` (or through its ``.zmetadata``, which holds only format 2
    documents): the output would be no member they see, a member it replaced would
    read as missing (or, through the old ``.zmetadata``, as fill values).
    """
    if group is not None:
        raise OutputConflictError(
            f"{group} is a Zarr format 2 group: {output} inside it would be a format 3 "
            "node that its readers (xarray, zarr-python) do not see as a member, and its "
            f".zmetadata would go on describing the old one; convert the whole group "
            f"(zarrext convert {group} --out NEW) or write the output outside it"
        )


def _format_2_group_above_local(path: Path) -> str | None:
    """The innermost Zarr format 2 group holding a local ``path`` (the walk up stops
    at the first directory that is no group), or None. A zip archive is no member."""
    if path.suffix == ".zip":
        return None
    for parent in path.parents:
        if (parent / ".zgroup").is_file():
            return str(parent)
        if group_document(LocalStore(parent), "") is None:
            return None
    return None


def _format_2_group_above_remote(output: Store) -> str | None:
    """:func:`_format_2_group_above_local` for an object-store or fsspec output."""
    remote = _remote(output)
    assert remote is not None
    # The output's own prefix first: a store that cannot be reached (credentials, a
    # frozen server) is then named as the user named it, not by a parent prefix.
    sync(output.exists("zarr.json"))
    parts = remote[1].split("/")
    for n in range(len(parts) - 1, 0, -1):
        above = "/".join(parts[:n])
        store = stores.remote_store_at(unwrapped_store(output), above)
        if sync(store.exists(".zgroup")):
            return f"{remote[0]}://{above}"
        if group_document(store, "") is None:
            return None
    return None


def _refuse_existing_local(output: Any, path: Path, *, overwrite: bool) -> None:
    if os.path.lexists(path):
        if not overwrite:
            raise OutputConflictError(f"{output} already exists (pass --overwrite to replace it)")
        if not _is_zarr_node(path):
            raise OutputConflictError(
                f"{output} exists and is not a Zarr array or group; refusing to replace it"
            )


def _staging_path(path: Path) -> Path:
    """A fresh staging directory's path beside ``path``: its name holds this process's
    id and this host's tag (:func:`zarrext.sharding.journal.temp_owner` reads them)."""
    from zarrext.sharding.journal import HOST

    return path.with_name(
        f".{path.name}{STAGING_MARKER}{os.getpid()}-{HOST}-{uuid.uuid4().hex[:8]}"
    )


def _publish(staging: Path, built: Path, path: Path, seen: _Identity | None) -> None:
    """Put the finished output ``built`` at ``path``, consistently for every reader,
    over nothing but ``seen`` (what was at ``path`` when the job started; None:
    nothing was).

    The steps, in this order:

    1. the groups above ``path`` holding consolidated metadata are recorded in the
       staging directory (a rerun after a kill consolidates them again);
    2. when an old output is replaced, their consolidated metadata is withdrawn
       (:func:`zarrext.jobs.group_metadata.withdraw`): it describes the old output, and
       no consolidated metadata can describe both (dropping only the output's entry
       would make readers see no output at all). Until the swap, readers read the
       old output through its own ``zarr.json``, after it the new one;
    3. the swap (:func:`_swap`): ``path`` holds the old output or the new one at
       every moment; a new output goes where nothing is, in one no-replace step;
    4. the groups are consolidated again, from what is stored: the new output;
    5. the staging directory, with the old output in it, is removed.

    A new output (nothing at ``path`` before) needs no withdrawal: the consolidated
    metadata without it reads as the group did before, until step 4 lists it. A
    zip archive is no member of a group: nothing to consolidate. On an exception
    (not a kill, which runs nothing) steps 4 and 5 still run, describing what is
    at ``path`` then, the old output or the new one.

    Raises
    ------
    OutputConflictError
        If something else than ``seen`` is at ``path`` (put there during the run by
        another tool or job): it stays as it is, and this run's output is removed.
    """
    levels = [] if built.suffix == ".zip" else _consolidated_levels(path)
    if levels:
        _record(staging, levels)
    withdrawn = False
    try:
        if seen is not None:
            if _identity(path) != seen:
                raise _taken(path, seen)
            for level in levels:
                withdrawn = True
                withdraw(*_group_at(path, level))
        _swap(built, path, staging / _REPLACED, seen)
    except OutputConflictError:
        if not withdrawn:  # nothing changed: the groups' metadata stays as it is
            levels = []
        raise
    finally:
        _finish(staging, path, levels)


@dataclass(frozen=True)
class _Identity:
    """What sits at a path: its file system object (device and inode) and the last
    change of its own entry (ctime: a directory's changes as entries are added,
    removed or renamed in it). A path emptied and filled again during a run, even
    with an inode number reused, holds another identity."""

    device: int
    inode: int
    changed: int

    def same_object(self, other: _Identity | None) -> bool:
        """Whether ``other`` is this object (a rename changes its ctime, not its inode)."""
        return other is not None and (other.device, other.inode) == (self.device, self.inode)


def _identity(path: Path) -> _Identity | None:
    try:
        status = path.lstat()
    except FileNotFoundError:
        return None
    return _Identity(status.st_dev, status.st_ino, status.st_ctime_ns)


def _taken(path: Path, seen: _Identity | None) -> OutputConflictError:
    happened = "created" if seen is None else "replaced"
    return OutputConflictError(
        f"{path} was {happened} during this run (by another tool or job): it is left as it "
        "is, and this run's output was discarded; nothing was written there"
    )


def _swap(built: Path, path: Path, aside: Path, seen: _Identity | None) -> None:
    """Put ``built`` at ``path``, over nothing but ``seen``.

    A new output (``seen`` None) goes where nothing is, in one step that fails if
    anything is there (:func:`_put_new`). An old output is exchanged with the new
    one (:func:`_exchange`; it then sits at ``built`` until removed); if the
    object exchanged out is not ``seen`` (replaced in the moment since it was
    checked) the exchange is undone. Only where no exchange exists is the old
    output renamed to ``aside`` first (a kill between the two renames leaves it
    there, and the next run puts it back).

    Raises
    ------
    OutputConflictError
        If something else than ``seen`` is at ``path``: nothing of it is moved.
    """
    if seen is None:
        _put_new(built, path, seen)
    elif _exchange(built, path):
        if not seen.same_object(_identity(built)):
            _exchange(built, path)  # put back what another writer put there
            raise _taken(path, seen)
    else:
        os.replace(path, aside)
        if not seen.same_object(_identity(aside)):
            try:  # put back what another writer put there
                _put_new(aside, path, seen)
            except OutputConflictError:  # and another since: keep it beside, named
                kept = path.with_name(f"{path.name}.kept-{uuid.uuid4().hex[:8]}")
                os.replace(aside, kept)
                raise OutputConflictError(
                    f"{path} was replaced twice during this run (by other tools or jobs): "
                    f"the one this run moved aside is at {kept}, and this run's output "
                    "was discarded"
                ) from None
            raise _taken(path, seen)
        _put_new(built, path, seen)


def _put_new(built: Path, path: Path, seen: _Identity | None) -> None:
    """Rename ``built`` to ``path`` where nothing is, in one step that fails if
    anything is there: Linux's ``renameat2(RENAME_NOREPLACE)``; elsewhere a
    directory claims ``path`` with ``mkdir`` (which fails on anything there) and is
    renamed onto that empty directory of its own (a rename onto a directory that
    is not empty fails), a file is hard-linked (which fails on anything there).

    Raises
    ------
    OutputConflictError
        If anything is at ``path``: it is left as it is.
    """
    try:
        if _rename_no_replace(built, path):
            return
        if built.is_dir():
            os.mkdir(path)
            try:
                os.replace(built, path)  # onto the empty directory just made
            except OSError as e:  # written into meanwhile: not ours any more
                raise FileExistsError(e.errno, e.strerror, str(path)) from e
        else:
            _link_new(built, path)
    except FileExistsError:
        raise _taken(path, seen) from None


def _link_new(built: Path, path: Path) -> None:
    """Put the file ``built`` at ``path`` where nothing is (``FileExistsError`` if
    anything is): a hard link; on a file system without links, ``path`` is claimed
    by an exclusive create and replaced (a writer replacing it in between, in that
    moment, is not detected)."""
    try:
        os.link(built, path)
    except FileExistsError:
        raise
    except OSError:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        os.replace(built, path)
        return
    built.unlink()


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


def _renameat2(a: Path, b: Path, flags: int) -> bool:
    """Linux's ``renameat2(a, b, flags)`` through the C library; False, with nothing
    changed, where the C library or the file system has no such call or flag."""
    if not sys.platform.startswith("linux"):
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:  # a C library without it (glibc before 2.28)
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False  # a kernel or file system without it: nothing was changed
    raise OSError(code, os.strerror(code), str(b))


def _rename_no_replace(a: Path, b: Path) -> bool:
    """Rename ``a`` to ``b`` only where nothing is at ``b``, in one step (Linux's
    ``RENAME_NOREPLACE``): ``FileExistsError`` if anything is; False, with nothing
    changed, where the C library or the file system has no such call."""
    return _renameat2(a, b, _RENAME_NOREPLACE)


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` in one step (Linux's ``renameat2`` with
    ``RENAME_EXCHANGE``, through the C library); False, with nothing changed,
    where the C library or the file system has no such call."""
    return _renameat2(a, b, _RENAME_EXCHANGE)


def _finish(staging: Path, path: Path, levels: list[int]) -> None:
    """The end of a publication from ``staging`` (this run's, or a killed run's):
    an old output renamed aside goes back to ``path`` if nothing is there, the
    groups ``levels`` above ``path`` are consolidated again, innermost first, from
    what is stored, and the staging directory is removed, last."""
    aside = staging / _REPLACED
    if not os.path.lexists(path) and os.path.lexists(aside):
        os.replace(aside, path)
    for level in sorted(levels):
        group = _group_at(path, level)
        if group_document(*group) is not None:
            consolidate(*group)
    if staging.is_dir() and not staging.is_symlink():
        shutil.rmtree(staging, ignore_errors=True)
    else:
        staging.unlink(missing_ok=True)


def _group_at(path: Path, level: int) -> tuple[Store, str]:
    """(store, path) of the directory ``level`` steps above ``path`` (1: its parent)."""
    return LocalStore(path.parents[level - 1]), ""


def _consolidated_levels(path: Path) -> list[int]:
    """How many steps above ``path`` each group holding consolidated metadata is,
    innermost first; the walk up stops at the first directory that is no group."""
    levels = []
    for level in range(1, len(path.parents) + 1):
        group = _group_at(path, level)
        if group_document(*group) is None:
            break
        if is_consolidated(*group):
            levels.append(level)
    return levels


def _record(staging: Path, levels: list[int]) -> None:
    # Written whole (another name, then renamed): a kill leaves it or nothing.
    partial = staging / f"{_RECORD}.partial"
    partial.write_text(json.dumps({"consolidate": levels}))
    os.replace(partial, staging / _RECORD)


def _recorded(staging: Path) -> list[int]:
    """The levels a staging directory's record names (none when it has no record)."""
    try:
        levels = json.loads((staging / _RECORD).read_text())["consolidate"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [n for n in levels if isinstance(n, int) and n >= 1]


class UnconditionalStoreWarning(UserWarning):
    """An output's object store ignores conditional writes: another writer putting
    objects at the output during the run is not detected."""


class OutputLeftoverWarning(UserWarning):
    """A temporary output beside an output that a job cannot prove its own: left in place."""


@dataclass(frozen=True)
class Leftover:
    """A temporary output that a job writing ``output`` left beside it.

    Attributes
    ----------
    path : Path
        The staging directory (or, from an earlier zarrext, directory or zip file).
    output : Path
        The output it was built for.
    size : int
        Bytes of the files in it.
    kept : str or None
        None when it is provably a killed job's: its name records this host and a
        process that is gone (:func:`remove_leftover` removes it); else why it is
        left in place (a live process's, another host's, an earlier zarrext's).
    running : bool
        Whether the process its name records runs on this host (a job writing it,
        or the number reused by another process).
    """

    path: Path
    output: Path
    size: int
    kept: str | None
    running: bool = False

    def describe(self) -> str:
        """The leftover in words, with its size."""
        whose = "a killed job's (its process is gone)" if self.kept is None else self.kept
        return (f"temporary output {self.path.name} for {self.output.name}: {whose}, "
                f"{self.size:,} bytes")


def _size(path: Path) -> int:
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_size
    total = 0
    for directory, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += (Path(directory) / name).lstat().st_size
    return total


def _leftover(entry: Path, output: Path) -> Leftover:
    from zarrext.sharding.journal import HOST, process_alive, temp_owner

    owner = temp_owner(entry.name)
    running = False
    if owner is None:
        kept: str | None = "an earlier zarrext's (its name records no process)"
    elif owner[1] != HOST:
        kept = f"a job's on another host (process {owner[0]}), perhaps still running"
    elif process_alive(owner[0]):
        running = True
        kept = f"process {owner[0]}'s, which still runs (a job writing it, or its number reused)"
    else:
        kept = None
    return Leftover(entry, output, _size(entry), kept, running)


def _leftovers_of(path: Path) -> list[Leftover]:
    """The temporary outputs beside ``path`` of jobs writing ``path``."""
    prefix = f".{path.name}{STAGING_MARKER}"
    try:
        entries = sorted(e for e in path.parent.iterdir() if e.name.startswith(prefix))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for entry in entries:
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile
            found.append(_leftover(entry, path))
    return found


def find_leftovers(location: str | os.PathLike[str]) -> list[Leftover]:
    """Temporary outputs of jobs under and beside a local array or group.

    Beside ``location`` (the ones built for it) and in every group under it (the
    ones built for its members), sorted by path. Another URL: none.
    """
    root = stores.local_path(location)
    if root is None:
        return []
    root = root.parent.resolve() / root.name
    found = _leftovers_of(root)
    groups = [root] if group_document(LocalStore(root), "") is not None else []
    while groups:
        group = groups.pop()
        for entry in sorted(group.iterdir()):
            name = entry.name
            if STAGING_MARKER in name:
                output = group / name[1:name.index(STAGING_MARKER)]
                # a temporary output's name is ".NAME<marker>..."; a metadata document
                # written whole (".zarr.json<marker><pid>", zarrext n5) is no output
                if name.startswith(".") and output.name != "zarr.json":
                    with contextlib.suppress(FileNotFoundError):
                        found.append(_leftover(entry, output))
            elif entry.is_dir() and group_document(LocalStore(entry), "") is not None:
                groups.append(entry)
    return sorted(found, key=lambda f: f.path)


@dataclass(frozen=True)
class RemoteLeftover:
    """An object-store output a job did not finish: a prefix holding :data:`UNFINISHED`
    (a job writing there now, or one killed or failed before its clean-up ended).

    Attributes
    ----------
    prefix : str
        Its path under the location searched (``""``: the location itself).
    objects, size : int
        How many objects are under it, and their bytes.
    published : bool
        Whether its root ``zarr.json`` landed (killed while consolidating the groups
        above: complete, and a rerun finishes it).
    """

    prefix: str
    objects: int
    size: int
    published: bool

    def describe(self) -> str:
        """The leftover in words, with its size."""
        state = ("complete, but the groups above may not list it yet" if self.published
                 else "nothing opens there")
        return (f"unfinished output of a zarrext job (it holds {UNFINISHED}): {state}; "
                f"{self.objects:,} objects, {self.size:,} bytes")


def find_remote_leftovers(store: Store) -> list[RemoteLeftover]:
    """The unfinished outputs under an object store's location, sorted by path: every
    prefix holding :data:`UNFINISHED`, the location itself included. Not whose they are:
    an object store keeps no process to ask, so a job may still be writing one."""
    sizes = stores.object_sizes(store)
    if sizes is None:
        keys = stores.list_keys(store, "")
        sizes = dict.fromkeys(keys, 0)
    found = []
    for key in sorted(sizes):
        if key.rsplit("/", 1)[-1] != UNFINISHED:
            continue
        prefix = key[: -len(UNFINISHED)].rstrip("/")
        inside = f"{prefix}/" if prefix else ""
        under = {k: n for k, n in sizes.items() if k.startswith(inside)}
        found.append(RemoteLeftover(prefix, len(under), sum(under.values()),
                                    f"{inside}zarr.json" in under))
    return found


def remove_leftover(leftover: Leftover) -> None:
    """Finish what the killed job left and remove its temporary output.

    What :func:`_publish` had not done yet is done: an old output it renamed aside
    goes back to its path if nothing is there, the groups whose consolidated
    metadata it withdrew (or had not yet written) are consolidated again.

    Raises
    ------
    ValueError
        If the leftover is not provably a killed job's (``leftover.kept``).
    """
    if leftover.kept is not None:
        raise ValueError(f"{leftover.path} is {leftover.kept}: left in place")
    levels = _recorded(leftover.path) if leftover.path.is_dir() else []
    _finish(leftover.path, leftover.output, levels)


def _clear_leftovers(path: Path) -> None:
    """Remove what killed jobs writing ``path`` left (see :func:`remove_leftover`);
    name, in a warning, each temporary output beside it that is not provably theirs."""
    for leftover in _leftovers_of(path):
        if leftover.kept is None:
            remove_leftover(leftover)
        else:
            warnings.warn(
                f"left in place beside {path}: {leftover.describe()}; delete it once no "
                f"zarrext job is writing {path.name}",
                OutputLeftoverWarning,
                stacklevel=5,
            )


def _refuse_existing_in_session(store: Store, path: str, *, output: Any, overwrite: bool) -> None:
    # Every key of an icechunk repository belongs to an array or group: a path holds
    # something exactly when it holds a zarr.json.
    if sync(store.exists(f"{path}/zarr.json" if path else "zarr.json")) and not overwrite:
        raise OutputConflictError(
            f"{path or '/'} already exists in the icechunk session (pass --overwrite to "
            "replace it)"
        )


async def _keys(store: Store) -> list[str]:
    return [k async for k in store.list()]


async def _delete_all(store: Store, last: str | None = None) -> None:
    """Delete every object of ``store``, ``last`` (if any) after all the others."""
    keys = [k async for k in store.list() if k != last]
    await asyncio.gather(*(store.delete(k) for k in keys))
    if last is not None:
        await store.delete(last)


def _replacement_leftovers(output: Store) -> str | None:
    """The temporary copy an earlier zarrext's interrupted replacement left beside
    ``output`` (``.NAME.zarrext-tmp-*``), or None: named in the refusal, not deleted."""
    root = _remote(output)[1]  # type: ignore[index]
    parent, _, name = root.rpartition("/")
    if not parent:
        return None
    with contextlib.suppress(Exception):
        siblings = stores.remote_store_at(unwrapped_store(output), parent)
        for child in sync(_listed_dir(siblings)):
            if child.startswith(f".{name}{STAGING_MARKER}"):
                return f"{parent}/{child}"
    return None


async def _listed_dir(store: Store) -> list[str]:
    return [k async for k in store.list_dir("")]


def _groups_above(output: Any) -> list[tuple[Any, str]]:
    """(store, path) of the groups above an object-store output or a path in an
    icechunk session, innermost first, up to the top of the hierarchy."""
    session = in_session(output)
    if session is not None:
        store, inner = session
        parts = inner.split("/") if inner else []
        candidates = [(store, "/".join(parts[:n])) for n in range(len(parts) - 1, -1, -1)]
    else:
        remote = _remote(output)
        if remote is None:
            return []
        parts = remote[1].split("/")
        candidates = [
            (stores.remote_store_at(unwrapped_store(output), "/".join(parts[:n])), "")
            for n in range(len(parts) - 1, 0, -1)
        ]
    found = []
    for store, path in candidates:
        if group_document(store, path) is None:  # the top of the hierarchy was passed
            break
        found.append((store, path))
    return found


def _consolidated_above(output: Any) -> list[tuple[Any, str]]:
    return [group for group in _groups_above(output) if is_consolidated(*group)]


def _consolidate_again(groups: list[tuple[Any, str]]) -> None:
    for store, path in groups:  # innermost first
        consolidate(store, path)


@contextlib.contextmanager
def _staged_remote(output: Store, *, overwrite: bool) -> Iterator[Store]:
    marker = _marker()
    running = json.loads(marker)["id"]
    _RUNNING_HERE.add(running)  # before the claim: a job of another thread sees it run
    try:
        _claim(output, marker, overwrite=overwrite)
        with _written_in_place(output, marker) as target:
            yield target
    finally:
        _RUNNING_HERE.discard(running)


def _where(output: Store) -> str:
    remote = _remote(output)
    assert remote is not None
    return f"{remote[0]}://{remote[1]}"


def _marker() -> bytes:
    """This job's :data:`UNFINISHED` object: whose it is (process, host) and a
    fresh id (two jobs' markers never have one ETag)."""
    from zarrext.sharding.journal import HOST

    return json.dumps({
        "zarrext": "a job is writing here; this object goes when the output is complete",
        "pid": os.getpid(), "host": HOST, "id": uuid.uuid4().hex,
    }).encode()


# The ids of the markers this process's jobs hold while they run: a marker of this
# process whose job has ended (failed, its objects not removed) is a dead job's.
_RUNNING_HERE: set[str] = set()


def _refuse_live_owner(output: Store, marker: bytes) -> None:
    """Refuse an output whose :data:`UNFINISHED` object may be a running job's: one
    on this host whose process runs (in this process: a job still running), or one on
    another host. An earlier zarrext's marker (it names no process) and a gone
    process's are a killed job's."""
    from zarrext.sharding.journal import HOST, process_alive

    try:
        document = json.loads(marker)
        pid, host = int(document["pid"]), str(document["host"])
    except (ValueError, TypeError, KeyError):
        return
    where = _where(output)
    if host == HOST and pid == os.getpid() and document.get("id") not in _RUNNING_HERE:
        return  # a job of this process that ended and could not remove its objects
    if host == HOST and process_alive(pid):
        raise OutputConflictError(
            f"another zarrext job (process {pid}) is writing {where}: wait for it to "
            "finish, or write to another prefix"
        )
    if host != HOST:
        raise OutputConflictError(
            f"a zarrext job on another host (process {pid}) is writing {where}, or was "
            f"killed there: if none is writing there, delete {where}/{UNFINISHED} and run "
            "again"
        )


def _claim(output: Store, marker: bytes, *, overwrite: bool) -> bytes:
    """Make ``output`` this job's: its :data:`UNFINISHED` object written where none
    is, in one conditional request, or put over a killed job's by a request
    conditional on that marker's ETag (of two jobs finding one killed job's
    leftovers, one takes them over); that job's objects are then removed.
    Returns the marker.

    A store without conditional writes (an fsspec store; an S3-compatible server
    that ignores ``If-None-Match``, found by writing the marker twice) is read
    just before it is written: a writer in between is not detected.

    Raises
    ------
    OutputConflictError
        If ``output`` holds something else, or a job that may be running is
        writing there.
    """
    for _ in range(3):  # a marker found then gone: its job just finished; look again
        created = stores.create_object(output, UNFINISHED, marker)
        if created is None:
            return _claim_unconditionally(output, marker, overwrite=overwrite)
        if created:
            if stores.create_object(output, UNFINISHED, marker):
                warnings.warn(
                    f"{_where(output)}: the server ignores conditional writes "
                    "(If-None-Match): another writer putting objects there during this "
                    "run would not be detected",
                    UnconditionalStoreWarning, stacklevel=5,
                )
                return _claim_unconditionally(output, marker, overwrite=overwrite,
                                              ours=True)
            keys = set(sync(_keys(output))) - {UNFINISHED}
            if keys:
                sync(output.delete(UNFINISHED))
                _refuse_existing_remote(output, keys, overwrite=overwrite)
            return marker
        found = stores.read_object(output, UNFINISHED)
        if found is None:
            continue
        _refuse_live_owner(output, found[0])
        if not stores.replace_object(output, UNFINISHED, marker, found[1]):
            raise OutputConflictError(
                f"another zarrext job took over {_where(output)} as this one started: "
                "wait for it to finish, or write to another prefix"
            )
        _take_over(output, overwrite=overwrite)
        return marker
    raise OutputConflictError(f"{_where(output)} is being written by other jobs")


def _take_over(output: Store, *, overwrite: bool) -> None:
    """What a killed job left at ``output``, its marker now this job's: complete
    (its root ``zarr.json`` had landed) the groups above are consolidated again
    and the output refused as existing; else its objects go."""
    keys = set(sync(_keys(output))) - {UNFINISHED}
    if "zarr.json" in keys:
        _consolidate_again(_consolidated_above(output))
        sync(output.delete(UNFINISHED))
        _refuse_existing_remote(output, keys, overwrite=overwrite)
    sync(_delete_all_but(output, UNFINISHED))


def _claim_unconditionally(output: Store, marker: bytes, *, overwrite: bool,
                           ours: bool = False) -> bytes:
    """:func:`_claim` on a store without conditional writes: read, then write."""
    keys = set(sync(_keys(output)))
    if UNFINISHED in keys and not ours:
        found = sync(output.get(UNFINISHED, default_buffer_prototype()))
        if found is not None:
            _refuse_live_owner(output, found.to_bytes())
        _take_over(output, overwrite=overwrite)
        keys = set()
    if keys - {UNFINISHED}:
        if ours:
            sync(output.delete(UNFINISHED))
        _refuse_existing_remote(output, keys - {UNFINISHED}, overwrite=overwrite)
    if not ours:
        sync(output.set(UNFINISHED, default_buffer_prototype().buffer.from_bytes(marker)))
    return marker


async def _delete_all_but(store: Store, kept: str) -> None:
    keys = [k async for k in store.list() if k != kept]
    await asyncio.gather(*(store.delete(k) for k in keys))


def _refuse_existing_remote(output: Store, keys: set[str], *, overwrite: bool) -> None:
    remote = _remote(output)
    assert remote is not None
    where = f"{remote[0]}://{remote[1]}"
    if keys:
        if "zarr.json" not in keys:
            leftover = _replacement_leftovers(output)
            raise OutputConflictError(
                f"{where} exists and is not a Zarr array or group; refusing to replace it"
                + (
                    f" (it looks like an interrupted replacement, its temporary copy "
                    f"{remote[0]}://{leftover} beside it: delete both to write there again)"
                    if leftover else ""
                )
            )
        raise OutputConflictError(
            f"{where} already exists, and an output on an object store is never replaced"
            f"{', overwrite or not' if overwrite else ''} (the old one could not stay "
            "readable until the new one is complete): write to a new prefix and point "
            f"readers to it, or delete {where} first"
        )


@contextlib.contextmanager
def _written_in_place(output: Store, marker: bytes) -> Iterator[Store]:
    """A new object-store output written once, where it stays; ``zarr.json`` last.

    The root's ``zarr.json`` is written where none is (a conditional create, where
    the store has one): one put there during the run by another writer is never
    overwritten. Then the groups above that hold consolidated metadata are
    consolidated again, and only then the marker goes: a rerun after a kill before
    that finishes it. Nothing is withdrawn first, as nothing is replaced: until
    they are consolidated again, the groups' consolidated metadata reads as
    before, without the output.
    """
    held = default_buffer_prototype().buffer.from_bytes(marker)
    target = MetadataLastStore(output, keep={UNFINISHED: held}, root_where_none=True)
    try:
        yield target
    except BaseException:
        # Best effort: a kill -9 skips this, and the marker lets a rerun clear it.
        with contextlib.suppress(Exception):
            sync(_delete_all(output, last=UNFINISHED))
        raise
    try:
        sync(target.publish())
    except RootTakenError:
        sync(output.delete(UNFINISHED))
        where = _where(output)
        raise OutputConflictError(
            f"{where}/zarr.json was put there during this run (by another tool or job): it "
            f"is left as it is, and so are the objects this run wrote under {where} (they "
            "cannot be told from that writer's)"
        ) from None
    _consolidate_again(_consolidated_above(output))
    sync(output.delete(UNFINISHED))


def refuse_taken(
    output: Any, *, overwrite: bool, storage_options: Mapping[str, Any] | None = None
) -> None:
    """Refuse, reading only, an ``output`` that :func:`staged_output` would refuse.

    For a job that reads its source before it writes (a quantizing conversion
    scans every value first, which can take hours): the refusal comes before that.
    :func:`staged_output` checks again when it starts. Leftovers of a killed job of
    zarrext's own are not refused (staged_output replaces them), nor removed here.
    """
    if isinstance(output, str) and local_path(output) is None:
        output = stores.open_store(output, mode="r", storage_options=storage_options)
    if isinstance(output, Store) and _remote(output) is not None:
        _refuse_inside_format_2(output, _format_2_group_above_remote(output))
        keys = set(sync(_keys(output)))
        if UNFINISHED in keys:
            found = sync(output.get(UNFINISHED, default_buffer_prototype()))
            if found is not None:
                _refuse_live_owner(output, found.to_bytes())
            if "zarr.json" not in keys:
                return  # a killed job's own leftovers: replaced
        _refuse_existing_remote(output, keys - {UNFINISHED}, overwrite=overwrite)
        return
    session = in_session(output)
    if session is not None:
        _refuse_existing_in_session(*session, output=output, overwrite=overwrite)
        return
    path = local_path(output)
    if path is not None:
        path = path.parent.resolve() / path.name
        _refuse_inside_format_2(output, _format_2_group_above_local(path))
        _refuse_existing_local(output, path, overwrite=overwrite)


def run_staged[T](
    output: Any, overwrite: bool, storage_options: Mapping[str, Any] | None,
    job: Callable[[Any], T],
) -> T:
    """``job(target)`` inside :func:`staged_output`; a failure notes what it left at
    ``output``: nothing, or (an object store whose clean-up failed) the objects still
    there (:func:`left_after_failure`). staged_output refuses an existing (or
    non-Zarr) output before yielding, so that refusal comes before the job reads
    anything."""
    failed = False
    try:
        with staged_output(output, overwrite=overwrite,
                           storage_options=storage_options) as target:
            try:
                return job(target)
            except BaseException:
                failed = True
                raise
    except BaseException as e:
        if failed:  # the clean-up has run (or failed) by now
            e.add_note(left_after_failure(output, storage_options))
        raise


def left_after_failure(output: Any, storage_options: Mapping[str, Any] | None = None) -> str:
    """What a failed job left at ``output``, in words: on an object store the objects
    its clean-up could not delete (the network gone, say), marked as a killed job's
    (:data:`UNFINISHED`: a rerun replaces them, ``zarrext check`` on the group above
    lists them); elsewhere nothing (the staging directory is removed)."""
    nothing = f"nothing was written at {output}"
    try:
        store = output
        if isinstance(output, str) and local_path(output) is None:
            store = stores.open_store(output, mode="r", storage_options=storage_options)
        remote = _remote(store) if isinstance(store, Store) else None
        if remote is None:
            return nothing
        keys = set(sync(_keys(store)))
    except Exception:  # the store cannot be read now: what is there is unknown
        return (f"objects may be left at {output} (it could not be listed after the "
                f"failure); a rerun replaces what a zarrext job left there")
    if not keys:
        return nothing
    marked = (f", marked by {UNFINISHED} as an unfinished job's: nothing opens there, a "
              "rerun replaces them" if UNFINISHED in keys else "")
    return (f"{len(keys)} objects left at {output} (its clean-up failed){marked}; "
            "`zarrext check` on the group above lists them; delete them to write there "
            "again")
