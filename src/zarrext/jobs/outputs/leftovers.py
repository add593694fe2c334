"""What killed jobs left: temporary outputs beside and inside local groups (whose they
are, removed when provably a killed job's, what their publication left undone done),
and the unfinished outputs under an object-store location."""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from zarr.abc.store import Store
from zarr.storage import LocalStore

from zarrext import stores
from zarrext.jobs.group_metadata import STAGING_MARKER, group_document
from zarrext.jobs.outputs import local
from zarrext.jobs.outputs.conflicts import OutputLeftoverWarning
from zarrext.jobs.outputs.remote import UNFINISHED

__all__ = [
    "Leftover",
    "RemoteLeftover",
    "clear_leftovers",
    "find_leftovers",
    "find_remote_leftovers",
    "remove_leftover",
]


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


def _is_group(path: Path) -> bool:
    """Whether a local folder holds a Zarr group (read only: nothing is created)."""
    return group_document(LocalStore(path, read_only=True), "") is not None


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
    groups = [root] if _is_group(root) else []
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
            elif entry.is_dir() and _is_group(entry):
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

    What :func:`~zarrext.jobs.outputs.local.publish` had not done yet is done: an old
    output it renamed aside goes back to its path if nothing is there, the groups whose consolidated
    metadata it withdrew (or had not yet written) are consolidated again.

    Raises
    ------
    ValueError
        If the leftover is not provably a killed job's (``leftover.kept``).
    """
    if leftover.kept is not None:
        raise ValueError(f"{leftover.path} is {leftover.kept}: left in place")
    levels = local.recorded(leftover.path) if leftover.path.is_dir() else []
    local.finish(leftover.path, leftover.output, levels)


def clear_leftovers(path: Path) -> None:
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
