"""Outputs of whole-store jobs: never over their input, never seen half-built.

A job that writes a new array (``zarrext quantize --out``) builds it under a
temporary sibling name and moves it into place only when it is complete, so an
interrupted job (Ctrl-C, an error, kill -9) never leaves something that opens as a
finished array:

- a local directory or zip archive is built beside the output and renamed;
- on an object store (no rename) the output is built under a temporary sibling
  prefix, then its objects are copied to the output, ``zarr.json`` files last, and
  the temporary prefix is deleted; until the last ``zarr.json`` lands, nothing
  opens at the output.

The old output, if the caller asked to replace one, is moved aside (local) or
deleted (object store, ``zarr.json`` first) before the new one lands.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, ZipStore

from zarrext import stores

__all__ = [
    "OutputConflictError",
    "STAGING_MARKER",
    "check_disjoint",
    "local_path",
    "staged_output",
]

# Temporary outputs carry this in their name; ``check`` recognises leftovers by it.
STAGING_MARKER = ".zarrext-tmp-"


class OutputConflictError(ValueError):
    """An output that would overwrite or overlap what the job must not touch."""


def local_path(store_like: Any) -> Path | None:
    """The local directory or zip file a store-like names, or None for other stores."""
    if isinstance(store_like, str | os.PathLike):
        return stores.local_path(store_like)
    if isinstance(store_like, LocalStore):
        return Path(store_like.root)
    if isinstance(store_like, ZipStore) and isinstance(store_like.path, str | Path):
        return Path(store_like.path)
    return None


def _remote(store_like: Any) -> tuple[str, str] | None:
    """(scheme, path) of an object store, fsspec store or URL, to compare two of them."""
    if isinstance(store_like, Store):
        return stores.remote_location(store_like)
    if isinstance(store_like, str) and stores.local_path(store_like) is None:
        scheme, _, rest = store_like.partition("://")
        return scheme, rest.strip("/")
    return None


def _in_session(store_like: Any) -> tuple[Any, str] | None:
    """(store, path) of an icechunk session's store or a ``StorePath`` on one."""
    from zarr.storage import StorePath

    from zarrext.transactions import is_session_store

    store, path = (
        (store_like.store, store_like.path) if isinstance(store_like, StorePath)
        else (store_like, "")
    )
    return (store, path.strip("/")) if is_session_store(store) else None


def check_disjoint(source: Any, output: Any) -> None:
    """Refuse an output equal to, inside, or containing the source."""
    src, out = local_path(source), local_path(output)
    ss, so = _in_session(source), _in_session(output)
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
def staged_output(output: Any, *, overwrite: bool) -> Iterator[Any]:
    """Yield where to build ``output``; it appears at ``output`` only on success.

    ``output`` is a local path or URL, or a zarr store (local, zip, object store, fsspec). On any
    exception (KeyboardInterrupt included) the temporary copy is removed and
    nothing at ``output`` changes. Stores of other kinds (e.g. a ``MemoryStore``)
    are written in place.

    Raises
    ------
    OutputConflictError
        If ``output`` exists and ``overwrite`` is false, or it exists and is not a
        Zarr array or group (never replaced, whatever ``overwrite`` says).
    """
    if isinstance(output, str) and local_path(output) is None:
        output = stores.open_store(output, mode="w")
    if isinstance(output, Store) and stores.remote_location(output) is not None:
        with _staged_remote(output, overwrite=overwrite) as remote:
            yield remote
        return
    session = _in_session(output)
    if session is not None:
        # An icechunk session is its own staging area: readers see nothing of it
        # until the caller commits, and a failed job's changes are never committed.
        _refuse_existing_in_session(*session, output=output, overwrite=overwrite)
        yield output
        return
    path = local_path(output)
    if path is None:
        yield output
        return
    if path.exists():
        if not overwrite:
            raise OutputConflictError(f"{output} already exists (pass --overwrite to replace it)")
        if not _is_zarr_node(path):
            raise OutputConflictError(
                f"{output} exists and is not a Zarr array or group; refusing to replace it"
            )
    token = uuid.uuid4().hex[:12]
    temp = path.with_name(f".{path.name}{STAGING_MARKER}{token}")
    zipped = path.suffix == ".zip"
    target: Any = temp
    if zipped:
        target = ZipStore(temp, mode="w")
    elif isinstance(output, LocalStore):
        target = LocalStore(temp)
    try:
        yield target
        if zipped:
            target.close()
    except BaseException:
        if zipped:
            with contextlib.suppress(Exception):
                target.close()
            temp.unlink(missing_ok=True)
        shutil.rmtree(temp, ignore_errors=True)
        raise
    old = path.with_name(f".{path.name}{STAGING_MARKER}old-{token}")
    if path.exists():
        os.replace(path, old)
    os.replace(temp, path)
    if old.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink(missing_ok=True)


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


@contextlib.contextmanager
def _staged_remote(output: Store, *, overwrite: bool) -> Iterator[Store]:
    remote = _remote(output)
    assert remote is not None
    root = remote[1]
    where = f"{remote[0]}://{root}"
    old_keys = sync(_keys(output))
    if old_keys:
        if not overwrite:
            raise OutputConflictError(f"{where} already exists (pass --overwrite to replace it)")
        if "zarr.json" not in old_keys:
            raise OutputConflictError(
                f"{where} exists and is not a Zarr array or group; refusing to replace it"
            )
    parent, _, name = root.rpartition("/")
    temp = stores.remote_store_at(
        output, f"{parent}/.{name}{STAGING_MARKER}{uuid.uuid4().hex[:12]}"
    )
    try:
        yield temp
    except BaseException:
        with contextlib.suppress(Exception):
            sync(temp.delete_dir(""))
        raise
    if old_keys:  # the old output stops opening first, then goes
        sync(output.delete("zarr.json"))
        sync(output.delete_dir(""))
    prototype = default_buffer_prototype()
    keys = sync(_keys(temp))
    # zarr.json files last, the root's at the very end: until it lands, nothing opens.
    keys.sort(key=lambda k: (k.endswith("zarr.json"), -k.count("/"), k))
    for key in keys:
        value = sync(temp.get(key, prototype))
        if value is not None:
            sync(output.set(key, value))
    sync(temp.delete_dir(""))
