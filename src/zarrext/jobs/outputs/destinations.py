"""Where a job's output goes, by the kind of store: each kind staged, refused and
published as :mod:`zarrext.jobs.outputs` describes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

from zarrext import stores
from zarrext._zarr_compat import unwrapped_store
from zarrext.jobs.group_metadata import is_consolidated
from zarrext.jobs.outputs import leftovers, local, remote
from zarrext.jobs.outputs.conflicts import OutputConflictError, refuse_inside_format_2
from zarrext.jobs.outputs.remote import UNFINISHED
from zarrext.stores import local_path

__all__ = [
    "check_disjoint",
    "in_session",
    "left_after_failure",
    "refuse_taken",
    "run_staged",
    "staged_output",
]


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
        refuse_inside_format_2(output, remote.format_2_group_above(output))
        with remote.staged(output, overwrite=overwrite) as target:
            yield target
        return
    session = in_session(output)
    if session is not None:
        # An icechunk session is its own staging area: readers see nothing of it
        # until the caller commits, and a failed job's changes are never committed.
        _refuse_existing_in_session(*session, output=output, overwrite=overwrite)
        yield output
        remote.consolidate_again(_consolidated_in_session(output))  # committed with it
        return
    path = local_path(output)
    if path is None:
        yield output
        return
    with _staged_local(output, path, overwrite=overwrite) as target:
        yield target


@contextlib.contextmanager
def _staged_local(output: Any, path: Path, *, overwrite: bool) -> Iterator[Any]:
    """:func:`staged_output` for a local directory or zip archive.

    The output is built inside a staging directory beside ``path``
    (``.NAME.zarrext-tmp-<pid>-<host>-<id>/output``). The staging directory holds
    no ``zarr.json``, so in a group it is no member: a reader walking the group
    finds no array there, and consolidated metadata never lists it; its name says
    whose it is, so that a rerun can remove it once that process is gone. What
    sits at ``path`` at the start (its identity, :func:`local.identity`) is the only
    thing the publication may replace.
    """
    path = path.parent.resolve() / path.name  # the groups above are found by path
    refuse_inside_format_2(output, local.format_2_group_above(path))
    leftovers.clear_leftovers(path)
    local.refuse_existing(output, path, overwrite=overwrite)
    with local.built_then_published(path, as_store=isinstance(output, LocalStore)) as target:
        yield target


def _refuse_existing_in_session(store: Store, path: str, *, output: Any, overwrite: bool) -> None:
    # Every key of an icechunk repository belongs to an array or group: a path holds
    # something exactly when it holds a zarr.json.
    if sync(store.exists(f"{path}/zarr.json" if path else "zarr.json")) and not overwrite:
        raise OutputConflictError(
            f"{path or '/'} already exists in the icechunk session (pass --overwrite to "
            "replace it)"
        )


def _consolidated_in_session(output: Any) -> list[tuple[Any, str]]:
    """(store, path) of the groups above a path in an icechunk session that hold
    consolidated metadata, innermost first, up to the top of the hierarchy."""
    session = in_session(output)
    assert session is not None
    store, inner = session
    parts = inner.split("/") if inner else []
    candidates = [(store, "/".join(parts[:n])) for n in range(len(parts) - 1, -1, -1)]
    return [g for g in remote.below_the_top(candidates) if is_consolidated(*g)]


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
        refuse_inside_format_2(output, remote.format_2_group_above(output))
        keys = set(sync(remote.listed_keys(output)))
        if UNFINISHED in keys:
            found = sync(output.get(UNFINISHED, default_buffer_prototype()))
            if found is not None:
                remote.refuse_live_owner(output, found.to_bytes())
            if "zarr.json" not in keys:
                return  # a killed job's own leftovers: replaced
        remote.refuse_existing(output, keys - {UNFINISHED}, overwrite=overwrite)
        return
    session = in_session(output)
    if session is not None:
        _refuse_existing_in_session(*session, output=output, overwrite=overwrite)
        return
    path = local_path(output)
    if path is not None:
        path = path.parent.resolve() / path.name
        refuse_inside_format_2(output, local.format_2_group_above(path))
        local.refuse_existing(output, path, overwrite=overwrite)


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
        if not isinstance(store, Store) or _remote(store) is None:
            return nothing
        keys = set(sync(remote.listed_keys(store)))
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
