"""An object-store output's claim and publication: an :data:`UNFINISHED` marker
written where none is (a conditional create) or taken over from a killed job (a write
conditional on its ETag), the output written in place through a
:class:`~zarrext.jobs.outputs.metadata_last.MetadataLastStore`, its root ``zarr.json``
where none is, the groups above consolidated again, the marker deleted last."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from zarrext import stores
from zarrext._zarr_compat import unwrapped_store
from zarrext.jobs.group_metadata import (
    STAGING_MARKER,
    consolidate,
    group_document,
    is_consolidated,
)
from zarrext.jobs.outputs.conflicts import OutputConflictError, UnconditionalStoreWarning
from zarrext.jobs.outputs.metadata_last import MetadataLastStore, RootTakenError

__all__ = [
    "UNFINISHED",
    "consolidate_again",
    "consolidated_above",
    "format_2_group_above",
    "listed_keys",
    "location",
    "refuse_existing",
    "refuse_live_owner",
    "staged",
]


UNFINISHED = f"{STAGING_MARKER}unfinished"
"""The key, at an object-store output's root, of the object saying a job is writing
there: written before the first chunk, deleted after the last ``zarr.json``."""


def format_2_group_above(output: Store) -> str | None:
    """:func:`zarrext.jobs.outputs.local.format_2_group_above` for an object-store or
    fsspec output."""
    remote = location(output)
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


@contextlib.contextmanager
def staged(output: Store, *, overwrite: bool) -> Iterator[Store]:
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
    remote = location(output)
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


def refuse_live_owner(output: Store, marker: bytes) -> None:
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

    The marker is read back once written (:func:`_refuse_unless_held`): where a
    server's conditional writes are not atomic (two at once can both succeed, as on
    the loopback S3 test server), the job whose marker is no longer there is
    refused. That narrows the race to a write landing after the other job's read;
    S3, GCS and Azure make the condition and the write one step.

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
            _refuse_unless_held(output, marker)
            keys = set(sync(listed_keys(output))) - {UNFINISHED}
            if keys:
                sync(output.delete(UNFINISHED))
                refuse_existing(output, keys, overwrite=overwrite)
            return marker
        found = stores.read_object(output, UNFINISHED)
        if found is None:
            continue
        refuse_live_owner(output, found[0])
        if not stores.replace_object(output, UNFINISHED, marker, found[1]):
            raise OutputConflictError(
                f"another zarrext job took over {_where(output)} as this one started: "
                "wait for it to finish, or write to another prefix"
            )
        _refuse_unless_held(output, marker)
        _take_over(output, overwrite=overwrite)
        return marker
    raise OutputConflictError(f"{_where(output)} is being written by other jobs")


def _refuse_unless_held(output: Store, marker: bytes) -> None:
    """Refuse unless ``output``'s :data:`UNFINISHED` object is ``marker``, just
    written by a conditional request that said it was. Two such requests at once
    can both say so on a server that checks, then writes (the loopback S3 test
    server does): the marker there is then the other job's, and that job goes on."""
    held = stores.read_object(output, UNFINISHED)
    if held is None or held[0] != marker:
        raise OutputConflictError(
            f"another zarrext job is writing {_where(output)} (it claimed it as this one "
            "started): wait for it to finish, or write to another prefix"
        )


def _take_over(output: Store, *, overwrite: bool) -> None:
    """What a killed job left at ``output``, its marker now this job's: complete
    (its root ``zarr.json`` had landed) the groups above are consolidated again
    and the output refused as existing; else its objects go."""
    keys = set(sync(listed_keys(output))) - {UNFINISHED}
    if "zarr.json" in keys:
        consolidate_again(consolidated_above(output))
        sync(output.delete(UNFINISHED))
        refuse_existing(output, keys, overwrite=overwrite)
    sync(_delete_all_but(output, UNFINISHED))


def _claim_unconditionally(output: Store, marker: bytes, *, overwrite: bool,
                           ours: bool = False) -> bytes:
    """:func:`_claim` on a store without conditional writes: read, then write."""
    keys = set(sync(listed_keys(output)))
    if UNFINISHED in keys and not ours:
        found = sync(output.get(UNFINISHED, default_buffer_prototype()))
        if found is not None:
            refuse_live_owner(output, found.to_bytes())
        _take_over(output, overwrite=overwrite)
        keys = set()
    if keys - {UNFINISHED}:
        if ours:
            sync(output.delete(UNFINISHED))
        refuse_existing(output, keys - {UNFINISHED}, overwrite=overwrite)
    if not ours:
        sync(output.set(UNFINISHED, default_buffer_prototype().buffer.from_bytes(marker)))
    return marker


async def _delete_all_but(store: Store, kept: str) -> None:
    keys = [k async for k in store.list() if k != kept]
    await asyncio.gather(*(store.delete(k) for k in keys))


def refuse_existing(output: Store, keys: set[str], *, overwrite: bool) -> None:
    remote = location(output)
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
    consolidate_again(consolidated_above(output))
    sync(output.delete(UNFINISHED))


async def listed_keys(store: Store) -> list[str]:
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
    root = location(output)[1]
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


def location(store: Store) -> tuple[str, str]:
    """(scheme, path) of an object store or fsspec store."""
    found = stores.remote_location(unwrapped_store(store))
    assert found is not None
    return found


def groups_above(output: Store) -> list[tuple[Any, str]]:
    """(store, path) of the groups above an object-store output, innermost first, up
    to the top of the hierarchy."""
    parts = location(output)[1].split("/")
    candidates = [
        (stores.remote_store_at(unwrapped_store(output), "/".join(parts[:n])), "")
        for n in range(len(parts) - 1, 0, -1)
    ]
    return below_the_top(candidates)


def below_the_top(candidates: list[tuple[Any, str]]) -> list[tuple[Any, str]]:
    """The leading ``candidates`` (store, path), innermost first, that are groups: the
    walk up stops at the first that is none (the top of the hierarchy was passed)."""
    found = []
    for store, path in candidates:
        if group_document(store, path) is None:
            break
        found.append((store, path))
    return found


def consolidated_above(output: Store) -> list[tuple[Any, str]]:
    """The groups above an object-store output that hold consolidated metadata."""
    return [group for group in groups_above(output) if is_consolidated(*group)]


def consolidate_again(groups: list[tuple[Any, str]]) -> None:
    for store, path in groups:  # innermost first
        consolidate(store, path)
