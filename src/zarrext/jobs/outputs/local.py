"""A local output's publication: built in a staging directory beside its path, then
renamed into place over nothing but what was there at the start (Linux's
``renameat2`` with ``RENAME_NOREPLACE`` or ``RENAME_EXCHANGE``; elsewhere ``mkdir``, a
hard link, or the old output renamed aside first), the consolidated metadata of the
groups above withdrawn and written again around the swap."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import sys
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.storage import LocalStore

from zarrext.jobs.group_metadata import (
    STAGING_MARKER,
    consolidate,
    group_document,
    is_consolidated,
    withdraw,
)
from zarrext.jobs.outputs.conflicts import OutputConflictError

__all__ = [
    "archived",
    "built_then_published",
    "finish",
    "format_2_group_above",
    "recorded",
    "refuse_existing",
]


# Inside a local output's staging directory: the output being built (then, once
# exchanged, the old output being removed), the old output renamed aside where no
# exchange exists, and the groups above whose consolidated metadata is to be written.
_BUILT = "output"


_REPLACED = "replaced"


_RECORD = "consolidate.json"


def _is_zarr_node(path: Path) -> bool:
    if path.suffix == ".zip" and path.is_file():
        with contextlib.suppress(zipfile.BadZipFile), zipfile.ZipFile(path) as archive:
            return "zarr.json" in archive.namelist()
        return False
    return any((path / name).is_file() for name in ("zarr.json", ".zarray", ".zgroup"))


@contextlib.contextmanager
def built_then_published(path: Path, *, zipped: bool, as_store: bool) -> Iterator[Any]:
    """Yield where to build the output at ``path`` (a resolved path with nothing of a
    killed job's beside it), and publish it there (:func:`publish`) when the block ends
    without an exception; on one the staging directory is removed.

    The output is built inside a staging directory beside ``path``
    (``.NAME.zarrext-tmp-<pid>-<host>-<id>/output``), a ``LocalStore`` on it when
    ``as_store`` or it is built for a zip archive (``zipped``: archived whole at the
    end), else its path. What sits at ``path`` at the start (its identity,
    :func:`identity`) is the only thing the publication may replace.
    """
    seen = identity(path)
    staging = staging_path(path)
    staging.mkdir(parents=True)
    # A zip archive is built as a directory, then archived whole: a job writes some
    # objects twice (a group's zarr.json, consolidated again), which a zip cannot replace.
    tree = staging / _BUILT
    built = staging / f"{_BUILT}.zip" if zipped else tree
    target: Any = LocalStore(tree) if zipped or as_store else str(tree)
    try:
        yield target
        if zipped:
            archived(tree, built)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    publish(staging, built, path, seen)


def archived(tree: Path, archive: Path) -> None:
    """Write the directory ``tree`` as the zip ``archive``, its root at the archive's root
    (as zarr's ``ZipStore`` writes one: entries stored uncompressed), then remove ``tree``."""
    with zipfile.ZipFile(archive, mode="x", compression=zipfile.ZIP_STORED,
                         allowZip64=True) as out:
        for file in sorted(p for p in tree.rglob("*") if p.is_file()):
            out.write(file, file.relative_to(tree).as_posix())
    shutil.rmtree(tree)


def format_2_group_above(path: Path) -> str | None:
    """The innermost Zarr format 2 group holding a local ``path`` (the walk up stops
    at the first directory that is no group), or None."""
    for parent in path.parents:
        if (parent / ".zgroup").is_file():
            return str(parent)
        if group_document(LocalStore(parent, read_only=True), "") is None:
            return None
    return None


def refuse_existing(output: Any, path: Path, *, overwrite: bool) -> None:
    if os.path.lexists(path):
        if not overwrite:
            raise OutputConflictError(f"{output} already exists (pass --overwrite to replace it)")
        if not _is_zarr_node(path):
            raise OutputConflictError(
                f"{output} exists and is not a Zarr array or group; refusing to replace it"
            )


def staging_path(path: Path) -> Path:
    """A fresh staging directory's path beside ``path``: its name holds this process's
    id and this host's tag (:func:`zarrext.sharding.journal.temp_owner` reads them)."""
    from zarrext.sharding.journal import HOST

    return path.with_name(
        f".{path.name}{STAGING_MARKER}{os.getpid()}-{HOST}-{uuid.uuid4().hex[:8]}"
    )


def publish(staging: Path, built: Path, path: Path, seen: _Identity | None) -> None:
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
            if identity(path) != seen:
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
        finish(staging, path, levels)


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


def identity(path: Path) -> _Identity | None:
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
        if not seen.same_object(identity(built)):
            _exchange(built, path)  # put back what another writer put there
            raise _taken(path, seen)
    else:
        os.replace(path, aside)
        if not seen.same_object(identity(aside)):
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


def finish(staging: Path, path: Path, levels: list[int]) -> None:
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


def recorded(staging: Path) -> list[int]:
    """The levels a staging directory's record names (none when it has no record)."""
    try:
        levels = json.loads((staging / _RECORD).read_text())["consolidate"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [n for n in levels if isinstance(n, int) and n >= 1]
