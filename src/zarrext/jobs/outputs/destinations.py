"""Where a job's output goes, resolved once by its kind of store.

:func:`resolve_destination` makes a :class:`Destination` of an output (a path, URL or
store): a :class:`LocalDirectory`, a :class:`LocalZip`, a :class:`RemoteStore` (an
object store or fsspec store), an :class:`IcechunkSession`, or :class:`InPlace` (any
other store, written where it is). Its methods refuse what the job must not touch
(an existing output, one inside a Zarr format 2 group, one overlapping the source),
stage the output and publish it, and say what a failure left: each kind as
:mod:`zarrext.jobs.outputs` describes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, StorePath, ZipStore

from zarrext import stores
from zarrext._zarr_compat import unwrapped_store
from zarrext.jobs.group_metadata import is_consolidated
from zarrext.jobs.outputs import leftovers, local, remote
from zarrext.jobs.outputs.conflicts import OutputConflictError, refuse_inside_format_2
from zarrext.jobs.outputs.remote import UNFINISHED
from zarrext.stores import local_path

__all__ = [
    "Destination",
    "IcechunkSession",
    "InPlace",
    "LocalDirectory",
    "LocalZip",
    "RemoteStore",
    "resolve_destination",
    "staged_output",
]


class Destination:
    """Where a job's output goes: ``output`` as the caller gave it (named in
    messages), and whether an existing one may be replaced (``overwrite``).

    Attributes
    ----------
    shard_layouts_in_place : bool
        Whether shard layouts that write inner chunks at their offsets can write
        there (a local directory).
    only_this_process : bool
        Whether only this process can write it (a zip archive: Dask workers cannot).
    """

    shard_layouts_in_place = False
    only_this_process = False

    def __init__(self, output: Any, *, overwrite: bool) -> None:
        self.output = output
        self.overwrite = overwrite

    def __str__(self) -> str:
        return str(self.output)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.output!r}, overwrite={self.overwrite})"

    def refuse_overlap(self, source: Any) -> None:
        """Refuse an output equal to, inside, or containing ``source`` (a path, URL or
        store), when both are in one place (one file system, one object store's
        scheme, one icechunk session)."""
        placed, out = _place(source), _place(self.output)
        if placed is None or out is None or placed[0] != out[0]:
            return
        a, b = placed[1], out[1]
        if placed[0] == ("local",):
            a, b = a.resolve(), b.resolve()
        if a == b:
            raise OutputConflictError(
                f"the output {self.output} is the input; choose another --out")
        if a in b.parents:
            raise OutputConflictError(f"the output {self.output} is inside the input {source}")
        if b in a.parents:
            raise OutputConflictError(f"the output {self.output} contains the input {source}")

    def path_within(self, source: Any) -> str | None:
        """The output's path relative to ``source`` when both are in one icechunk
        session and the output is inside the source group; else None."""
        return None

    def refuse_taken(self) -> None:
        """Refuse, reading only, an output that :meth:`staged` would refuse.

        For a job that reads its source before it writes (a quantizing conversion
        scans every value first, which can take hours): the refusal comes before
        that. :meth:`staged` checks again when it starts. Leftovers of a killed job
        of zarrext's own are not refused (staged replaces them), nor removed here.
        """

    @contextlib.contextmanager
    def staged(self) -> Iterator[Any]:
        """Yield where to build the output; it opens at the output only on success.

        On any exception (KeyboardInterrupt included) what was written is removed
        and nothing at the output opens or changes. The groups above the output
        that hold consolidated metadata are consolidated again, so that readers
        trusting it see the new output, and never a mix of the two.

        Raises
        ------
        OutputConflictError
            If the output exists and ``overwrite`` is false, or it exists and is not
            a Zarr array or group (never replaced, whatever ``overwrite`` says), or
            it exists on an object store (never replaced there either), or another
            job is writing it, or it is inside a Zarr format 2 group. Leftovers of a
            killed job of zarrext's own
            (:data:`~zarrext.jobs.outputs.remote.UNFINISHED`) are replaced. At the
            end, if something else than what was there at the start is there (put
            there during the run): it stays, and what was written is discarded.
        """
        yield self.output

    def left_after_failure(self) -> str:
        """What a failed job left at the output, in words."""
        return f"nothing was written at {self.output}"

    def run_staged[T](self, job: Callable[[Any], T]) -> T:
        """``job(target)`` inside :meth:`staged`; a failure notes what it left
        (:meth:`left_after_failure`). staged refuses an existing (or non-Zarr)
        output before yielding, so that refusal comes before the job reads
        anything."""
        failed = False
        try:
            with self.staged() as target:
                try:
                    return job(target)
                except BaseException:
                    failed = True
                    raise
        except BaseException as e:
            if failed:  # the clean-up has run (or failed) by now
                e.add_note(self.left_after_failure())
            raise


class InPlace(Destination):
    """A store of another kind (a ``MemoryStore``, a ``StorePath`` outside an icechunk
    session): written where it is, nothing staged."""

    def __init__(self, output: Any, *, overwrite: bool) -> None:
        super().__init__(output, overwrite=overwrite)
        store = output.store if isinstance(output, StorePath) else output
        path = local_path(store)
        self.shard_layouts_in_place = path is not None and path.suffix != ".zip"
        self.only_this_process = isinstance(store, ZipStore)


class LocalDirectory(Destination):
    """A local directory: built in a staging directory beside ``path``, renamed into
    place over nothing but what was there at the start (:mod:`~zarrext.jobs.outputs.local`).
    The staging directory holds no ``zarr.json``, so in a group it is no member: a
    reader walking the group finds no array there, and consolidated metadata never
    lists it; its name says whose it is, so that a rerun can remove it once that
    process is gone."""

    shard_layouts_in_place = True
    _zipped = False

    def __init__(self, output: Any, path: Path, *, overwrite: bool) -> None:
        super().__init__(output, overwrite=overwrite)
        self.path = path

    def _resolved(self) -> Path:
        return self.path.parent.resolve() / self.path.name  # the groups above, by path

    def _format_2_group_above(self, path: Path) -> str | None:
        return local.format_2_group_above(path)

    def refuse_taken(self) -> None:
        path = self._resolved()
        refuse_inside_format_2(self.output, self._format_2_group_above(path))
        local.refuse_existing(self.output, path, overwrite=self.overwrite)

    @contextlib.contextmanager
    def staged(self) -> Iterator[Any]:
        path = self._resolved()
        refuse_inside_format_2(self.output, self._format_2_group_above(path))
        leftovers.clear_leftovers(path)
        local.refuse_existing(self.output, path, overwrite=self.overwrite)
        as_store = isinstance(self.output, LocalStore)
        with local.built_then_published(path, zipped=self._zipped,
                                        as_store=as_store) as target:
            yield target


class LocalZip(LocalDirectory):
    """A local zip archive: built as a directory (a job writes some objects twice,
    which a zip cannot replace), archived whole, then published as a directory is.
    It is no member of a group: no group above is consolidated again."""

    shard_layouts_in_place = False
    only_this_process = True
    _zipped = True

    def _format_2_group_above(self, path: Path) -> str | None:
        return None


class RemoteStore(Destination):
    """An object store or fsspec store (or its URL, opened with ``storage_options``
    for each step: read-only to refuse, writable to stage): claimed by an
    :data:`~zarrext.jobs.outputs.remote.UNFINISHED` marker, written in place, its ``zarr.json`` last
    (:mod:`~zarrext.jobs.outputs.remote`); an existing output is never replaced."""

    def __init__(self, output: Any, *, overwrite: bool,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(output, overwrite=overwrite)
        self.storage_options = storage_options

    def _store(self, mode: str) -> Store:
        if isinstance(self.output, Store):
            return self.output
        return stores.open_store(self.output, mode=mode, storage_options=self.storage_options)

    def refuse_taken(self) -> None:
        store = self._store("r")
        refuse_inside_format_2(store, remote.format_2_group_above(store))
        keys = set(sync(remote.listed_keys(store)))
        if UNFINISHED in keys:
            found = sync(store.get(UNFINISHED, default_buffer_prototype()))
            if found is not None:
                remote.refuse_live_owner(store, found.to_bytes())
            if "zarr.json" not in keys:
                return  # a killed job's own leftovers: replaced
        remote.refuse_existing(store, keys - {UNFINISHED}, overwrite=self.overwrite)

    @contextlib.contextmanager
    def staged(self) -> Iterator[Any]:
        """:meth:`Destination.staged`; the store yielded is a
        :class:`~zarrext.jobs.outputs.metadata_last.MetadataLastStore`."""
        store = self._store("w")
        refuse_inside_format_2(store, remote.format_2_group_above(store))
        with remote.staged(store, overwrite=self.overwrite) as target:
            yield target

    def left_after_failure(self) -> str:
        """The objects its clean-up could not delete (the network gone, say), marked
        as a killed job's (:data:`~zarrext.jobs.outputs.remote.UNFINISHED`: a rerun
        replaces them, ``zarrext check`` on the group above lists them), or nothing."""
        nothing = super().left_after_failure()
        try:
            keys = set(sync(remote.listed_keys(self._store("r"))))
        except Exception:  # the store cannot be read now: what is there is unknown
            return (f"objects may be left at {self.output} (it could not be listed after "
                    f"the failure); a rerun replaces what a zarrext job left there")
        if not keys:
            return nothing
        marked = (f", marked by {UNFINISHED} as an unfinished job's: nothing opens there, "
                  "a rerun replaces them" if UNFINISHED in keys else "")
        return (f"{len(keys)} objects left at {self.output} (its clean-up failed){marked}; "
                "`zarrext check` on the group above lists them; delete them to write there "
                "again")


class IcechunkSession(Destination):
    """A path in an icechunk session (its store, or a ``StorePath`` on it): its own
    staging area, written in place; readers see nothing of it until the caller
    commits, and a failed job's changes are never committed."""

    def __init__(self, output: Any, store: Any, path: str, *, overwrite: bool) -> None:
        super().__init__(output, overwrite=overwrite)
        self.store = store
        self.path = path

    def path_within(self, source: Any) -> str | None:
        session = _in_session(source)
        if session is None or session[0] != self.store:
            return None
        inside = f"{session[1]}/" if session[1] else ""
        if self.path == session[1] or not self.path.startswith(inside):
            return None
        return self.path[len(inside):]

    def refuse_taken(self) -> None:
        _refuse_existing_in_session(self.store, self.path, overwrite=self.overwrite)

    @contextlib.contextmanager
    def staged(self) -> Iterator[Any]:
        _refuse_existing_in_session(self.store, self.path, overwrite=self.overwrite)
        yield self.output
        remote.consolidate_again(self._consolidated_above())  # committed with the output

    def _consolidated_above(self) -> list[tuple[Any, str]]:
        """(store, path) of the groups above the path that hold consolidated metadata,
        innermost first, up to the top of the hierarchy."""
        parts = self.path.split("/") if self.path else []
        candidates = [(self.store, "/".join(parts[:n])) for n in range(len(parts) - 1, -1, -1)]
        return [g for g in remote.below_the_top(candidates) if is_consolidated(*g)]


def resolve_destination(
    output: Any, *, overwrite: bool, storage_options: Mapping[str, Any] | None = None
) -> Destination:
    """The :class:`Destination` of ``output``: a local path or URL (opened with
    ``storage_options`` when used), or a zarr store (local, zip, object store,
    fsspec, an icechunk session's, or another, written in place). A
    :class:`Destination` is returned as it is. Nothing is read or written."""
    if isinstance(output, Destination):
        return output
    if isinstance(output, str) and local_path(output) is None:
        return RemoteStore(output, overwrite=overwrite, storage_options=storage_options)
    if isinstance(output, Store) and _remote(output) is not None:
        return RemoteStore(output, overwrite=overwrite)
    session = _in_session(output)
    if session is not None:
        return IcechunkSession(output, *session, overwrite=overwrite)
    path = local_path(output)
    if path is None:
        return InPlace(output, overwrite=overwrite)
    if path.suffix == ".zip":
        return LocalZip(output, path, overwrite=overwrite)
    return LocalDirectory(output, path, overwrite=overwrite)


def _remote(store_like: Any) -> tuple[str, str] | None:
    """(scheme, path) of an object store, fsspec store or URL, to compare two of them."""
    if isinstance(store_like, Store):
        return stores.remote_location(unwrapped_store(store_like))
    if isinstance(store_like, str) and stores.local_path(store_like) is None:
        scheme, _, rest = store_like.partition("://")
        return scheme, rest.strip("/")
    return None


def _in_session(store_like: Any) -> tuple[Any, str] | None:
    """(store, path) of an icechunk session's store or a ``StorePath`` on one."""
    from zarrext.jobs.transactions import is_session_store

    store, path = (
        (store_like.store, store_like.path) if isinstance(store_like, StorePath)
        else (store_like, "")
    )
    return (store, path.strip("/")) if is_session_store(store) else None


def _place(store_like: Any) -> tuple[tuple[Any, ...], Path] | None:
    """Where ``store_like`` is, to compare two: (its space, its path there), the space
    an icechunk session's store, the local file system, or an object store's scheme."""
    session = _in_session(store_like)
    if session is not None:
        return ("session", session[0]), Path("/", session[1])
    path = local_path(store_like)
    if path is not None:
        return ("local",), path  # resolved when compared with another local path
    found = _remote(store_like)
    if found is not None:
        return ("remote", found[0]), Path("/", found[1])
    return None


def _refuse_existing_in_session(store: Store, path: str, *, overwrite: bool) -> None:
    # Every key of an icechunk repository belongs to an array or group: a path holds
    # something exactly when it holds a zarr.json.
    if sync(store.exists(f"{path}/zarr.json" if path else "zarr.json")) and not overwrite:
        raise OutputConflictError(
            f"{path or '/'} already exists in the icechunk session (pass --overwrite to "
            "replace it)"
        )


@contextlib.contextmanager
def staged_output(
    output: Any, *, overwrite: bool, storage_options: Mapping[str, Any] | None = None
) -> Iterator[Any]:
    """Yield where to build ``output`` (:meth:`Destination.staged` of its
    :func:`resolve_destination`); it opens at ``output`` only on success."""
    destination = resolve_destination(output, overwrite=overwrite,
                                      storage_options=storage_options)
    with destination.staged() as target:
        yield target
