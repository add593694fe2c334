"""Picklable descriptions of stores and arrays, for jobs that run on a Dask cluster.

A live store holds clients, sockets and an event loop: pickled into a Dask graph it
would carry them (or fail to), and it would bake one process's credentials object
into every task. A job sends a :class:`StoreRef` instead: the store's location
(a local path or URL) and its ``storage_options`` as plain data. Each worker reopens
the store from it with :func:`zarrext.stores.open_store`, and reopens the array
once per job (:meth:`ArrayRef.open`), not once per task.

A store opened from a URL is described by that URL and options. A store object
built elsewhere is described from what it exposes (:func:`store_ref`): a
``LocalStore`` by its directory, an ``FsspecStore`` by its file system's protocol,
path and ``storage_options``, a zarr ``ObjectStore`` by its obstore store's class
and configuration. A store that lives only in this process (``MemoryStore``) has no
description: jobs on it run on local threads.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import zarr
from zarr.abc.store import Store

from zarrext.stores import StoreOpenError, open_store

__all__ = ["ArrayRef", "StoreRef", "array_ref", "store_ref"]

# fsspec keeps these in ``storage_options``; they belong to the opening process.
_PROCESS_OPTIONS = ("asynchronous", "loop", "skip_instance_cache")


@dataclass(frozen=True)
class StoreRef:
    """Where a store is, as plain data a worker can reopen it from.

    Attributes
    ----------
    location : str
        A local path or URL (as :func:`zarrext.stores.open_store` takes it).
    storage_options : mapping, optional
        The URL's options (endpoint, credentials, region...).
    obstore : tuple, optional
        For a zarr ``ObjectStore``: the obstore store's class name, prefix, config,
        client options and retry config; ``location`` then only names it.
    """

    location: str
    storage_options: Mapping[str, Any] | None = field(default=None, compare=False)
    obstore: tuple[str, str | None, dict[str, Any], dict[str, Any], Any] | None = field(
        default=None, compare=False
    )

    def open(self, mode: str = "r") -> Store:
        """A new store object for this location (in the calling process)."""
        if self.obstore is not None:
            return _open_obstore(self.obstore, read_only=mode == "r")
        return open_store(self.location, mode=mode, storage_options=self.storage_options)


def _open_obstore(
    described: tuple[str, str | None, dict[str, Any], dict[str, Any], Any], read_only: bool
) -> Store:
    import obstore.store
    from zarr.storage import ObjectStore

    name, prefix, config, client_options, retry_config = described
    kind = getattr(obstore.store, name)
    inner = kind(
        prefix=prefix, config=config, client_options=client_options, retry_config=retry_config
    )
    return ObjectStore(inner, read_only=read_only)


def store_ref(store: Store | str, storage_options: Mapping[str, Any] | None = None) -> StoreRef:
    """The description of ``store`` (a store object, or a path or URL).

    Raises
    ------
    StoreOpenError
        For a store that exists only in this process (e.g. ``MemoryStore``) or of a
        kind zarrext cannot describe.
    """
    if isinstance(store, str):
        return StoreRef(store, dict(storage_options) if storage_options else None)
    from zarr.storage import FsspecStore, LocalStore

    if isinstance(store, LocalStore):
        return StoreRef(str(store.root))
    if isinstance(store, FsspecStore):
        protocol = store.fs.protocol
        scheme = protocol if isinstance(protocol, str) else protocol[0]
        if scheme == "memory":
            raise StoreOpenError(
                "a memory:// store lives in one process; Dask workers cannot open it"
            )
        options = {
            k: v for k, v in store.fs.storage_options.items() if k not in _PROCESS_OPTIONS
        }
        return StoreRef(f"{scheme}://{store.path}", options or None)
    inner = getattr(store, "store", None)
    config = getattr(inner, "config", None)
    if type(store).__name__ == "ObjectStore" and isinstance(config, dict):
        described = (
            type(inner).__name__,
            getattr(inner, "prefix", None),
            dict(config),
            dict(getattr(inner, "client_options", None) or {}),
            getattr(inner, "retry_config", None),
        )
        return StoreRef(f"obstore:{inner!r}", obstore=described)
    raise StoreOpenError(
        f"a {type(store).__name__} cannot be described for Dask workers to reopen; "
        "give the array as a local path or URL (with storage_options)"
    )


@dataclass(frozen=True)
class ArrayRef:
    """An array as a worker reopens it: its store's description and path.

    Equal (and hashed) by ``token`` alone, one per job: each worker process opens
    the array once per job (:meth:`open`) and reuses it for every task of it.
    """

    store: StoreRef = field(compare=False)
    path: str = field(compare=False)
    mode: str = field(default="r+", compare=False)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def open(self) -> zarr.Array:
        """The array, opened with zarr-python (runtime settings are the job's to add)."""
        with _OPEN_LOCK:  # threads of one worker: the first opens, the others wait for it
            return _open_once(self)


def array_ref(array: zarr.Array, mode: str = "r+") -> ArrayRef:
    """The description of ``array`` (see :func:`store_ref`)."""
    store_path = array.store_path
    return ArrayRef(store_ref(store_path.store), store_path.path, mode)


_OPEN_LOCK = threading.Lock()


@functools.lru_cache(maxsize=4)
def _open_once(ref: ArrayRef) -> zarr.Array:
    return zarr.open_array(ref.store.open(ref.mode), path=ref.path, mode=ref.mode)
